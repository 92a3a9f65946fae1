"""`traceinsight report PATH`: read a run, analyze it, write HTML / JSON / Markdown, gate CI.

A thin layer over the Python API (`traceinsight.api.analyze` and its `Report`): the command adds the
progress bar, `--fail-on` and the exit code.

The module imports only what its options need: pandas, the readers and the analyses (0.3-0.5 s) are imported in
`run`, once the options are checked, so that `--help` and a bad option answer at once; a Kineto file of tens of
MB is read meanwhile by a process of its own (`readers.early`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from traceinsight.commands.options import (
    absolute_url,
    add_fault_options,
    add_gate_options,
    positive_float,
    positive_int,
)
from traceinsight.errors import TraceError
from traceinsight.gating import evaluate, parse_threshold
from traceinsight.parallel import default_jobs
from traceinsight.readers.early import early_read
from traceinsight.render.output import Staged, finish, preflight_outputs, removed_on_interrupt
from traceinsight.rules import DEFAULT_SMALL_KERNEL_US

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis
    from traceinsight.findings import Findings
    from traceinsight.result import RunReport
    from traceinsight.workflow import OnAnalyzed

DEFAULT_HTML = "traceinsight-report.html"


class ReportCommand:
    name = "report"
    help = "Analyze the traces under PATH and write a report."

    @staticmethod
    def prepare_parser(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "path", type=Path, metavar="PATH", help="trace file, profile run folder or TensorBoard logdir"
        )
        parser.add_argument(
            "-o", "--output", type=Path, default=Path(DEFAULT_HTML), help=f"HTML report (default {DEFAULT_HTML})"
        )
        parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON report")
        parser.add_argument(
            "--markdown", type=Path, metavar="FILE", help="also write a Markdown summary (CI step summary)"
        )
        parser.add_argument(
            "--html-url",
            type=absolute_url,
            metavar="URL",
            help="the Markdown summary links the HTML report at this absolute URL (a CI artifact's); without it, "
            "it names the file (a relative link breaks in a CI step summary)",
        )
        parser.add_argument("--run", metavar="NAME", help="which run of a logdir (default: the newest)")
        parser.add_argument(
            "--step-range",
            metavar="NAME",
            help="the host ranges of this name (an NVTX range, a user annotation) mark the training steps, "
            "in place of ProfilerStep#N",
        )
        parser.add_argument(
            "--small-kernel-us",
            type=positive_float,
            default=DEFAULT_SMALL_KERNEL_US,
            metavar="US",
            help=f"small-kernel threshold (default {DEFAULT_SMALL_KERNEL_US:g} us)",
        )
        add_gate_options(
            parser,
            "exit 1 when crossed: 'PATH OP NUMBER' over the JSON (totals.idle_fraction>0.3) or 'bottleneck=ID'",
        )
        parser.add_argument(
            "--jobs",
            type=positive_int,
            metavar="N",
            help=f"read N trace files at a time, one process each (default: the idle cores, {default_jobs()})",
        )
        parser.add_argument(
            "--scheduler",
            metavar="ADDRESS",
            help="read the files on a Dask cluster: its scheduler address (tcp://host:8786), or 'local'",
        )
        parser.add_argument(
            "--trace-out",
            type=Path,
            metavar="FILE",
            help="also write an annotated timeline (Chrome trace JSON[.gz]) to open in Perfetto",
        )
        parser.add_argument(
            "--steps", type=_steps, metavar="A:B", help="--trace-out keeps steps A to B (default: all, or the longest)"
        )
        add_fault_options(parser)
        parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success, draw no progress bar")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.steps is not None and args.trace_out is None:
            raise TraceError("--steps", "it chooses the steps --trace-out writes: give --trace-out FILE too")
        outputs = [args.output, args.json, args.markdown, args.trace_out]
        preflight_outputs(outputs, [args.path])
        jobs = default_jobs() if args.jobs is None else args.jobs
        # A file of tens of MB is read by a process of its own while the imports below take their 0.3 s; not on a
        # cluster, nor under a memory limit, which the read here checks as it goes.
        early_jobs = jobs if args.scheduler is None and args.max_memory is None else 1
        early_path = _lone_trace(args.path) if args.path.is_dir() else args.path
        with removed_on_interrupt(outputs), early_read(early_path, early_jobs):
            return ReportCommand._report(args, jobs)

    @staticmethod
    def _report(args: argparse.Namespace, jobs: int) -> int:
        from traceinsight.api import analyze
        from traceinsight.load import progress_stream
        from traceinsight.workflow import refuse_partial

        # Checked before any trace is read, once the rules that name the bottlenecks are imported (with the analysis).
        thresholds = [parse_threshold(t) for t in args.fail_on]

        trace_warnings: list[str] = []
        staged: list[Staged] = []  # the timeline, renamed into place with the other outputs
        export = _trace_export(args, trace_warnings, staged) if args.trace_out else None
        report = analyze(
            args.path,
            args.small_kernel_us,
            args.run,
            jobs,
            scheduler=args.scheduler,
            progress=progress_stream(args.quiet),
            on_analyzed=export,
            max_memory=args.max_memory,
            step_range=args.step_range,
        )
        report.record_invocation(_command_line(args), _options(args))
        if args.strict:
            refuse_partial(report.result)
        outputs: dict[Path, str | Staged] = {args.output: report.to_html()}
        gate = evaluate(thresholds, report.result, on_missing=args.fail_on_missing)
        if args.json:
            outputs[args.json] = report.to_json() + "\n"
        if args.markdown:
            outputs[args.markdown] = report.to_markdown(html_file=str(args.output), html_url=args.html_url)
        summary = None if args.quiet else report.to_text(color=sys.stdout.isatty())
        for warning in trace_warnings:
            print(f"traceinsight: {args.trace_out}: {warning}", file=sys.stderr)
        outputs.update((item.path, item) for item in staged)
        return finish(outputs, report.files, summary, gate, "Report")


def _lone_trace(folder: Path) -> Path | None:
    """A folder's one trace file, for its early read (`discover.lone_trace`: discovery imported only for a folder,
    0.02 s before the early read's process can start)."""
    from traceinsight.discover import lone_trace

    return lone_trace(folder)


def _steps(text: str) -> tuple[int, int]:
    """``--steps A:B`` (or one id) as `write_annotated_trace` takes it; a usage error otherwise."""
    from traceinsight.render.trace_export import parse_steps  # only with --steps

    try:
        return parse_steps(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _trace_export(args: argparse.Namespace, warnings: list[str], staged: list[Staged]) -> OnAnalyzed:
    """Write the annotated timeline while the analysis still has its event table, to a temporary file put in
    `staged` (renamed with the other outputs at the end); its warnings go to `warnings`.
    A step range the run does not have is bad input (exit 2), and so is, under --strict, a trace cut short:
    refused before the timeline is written."""
    from traceinsight.render.trace_export import stage_annotated_trace  # only with --trace-out
    from traceinsight.workflow import refuse_partial

    def export(analysis: Analysis, findings: Findings, report: RunReport, files: tuple[Path, ...]) -> None:
        if args.strict:
            refuse_partial(report)
        try:
            trace, trace_warnings = stage_annotated_trace(
                analysis, findings, args.trace_out, args.steps, protected=files
            )
            staged.append(trace)
            warnings.extend(trace_warnings)
        except ValueError as err:
            raise TraceError(args.trace_out, str(err)) from None

    return export


def _command_line(args: argparse.Namespace) -> list[str]:
    """The command line as run (`cli.main` records it), else rebuilt from the options."""
    return list(getattr(args, "command_line", None) or ["traceinsight", "report", str(args.path)])


def _options(args: argparse.Namespace) -> dict[str, object]:
    """The options that shape the report (not how many processes read it)."""
    return {
        "output": str(args.output),
        "json": None if args.json is None else str(args.json),
        "markdown": None if args.markdown is None else str(args.markdown),
        "html_url": args.html_url,
        "run": args.run,
        "step_range": args.step_range,
        "small_kernel_us": args.small_kernel_us,
        "fail_on": list(args.fail_on),
        "fail_on_missing": args.fail_on_missing,
        "trace_out": None if args.trace_out is None else str(args.trace_out),
        "steps": None if args.steps is None else f"{args.steps[0]}:{args.steps[1]}",
    }
