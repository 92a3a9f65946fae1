"""`traceinsight diff BASE NEW`: compare two runs (traces or saved `--json` reports) and gate CI on regressions.

It imports pandas and the analyses only when a side is a trace to read (`_reports`); the CLI imports this module
only when `diff` runs (cli.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from traceinsight.commands.options import add_fault_options, add_gate_options, add_page_outputs, positive_float
from traceinsight.diff import build_diff
from traceinsight.gating import Threshold, evaluate, parse_threshold
from traceinsight.render.diff_render import render_diff_html, render_diff_markdown, render_diff_terminal
from traceinsight.render.output import finish, preflight_outputs, removed_on_interrupt
from traceinsight.result import RunReport
from traceinsight.rules import DEFAULT_SMALL_KERNEL_NS

DEFAULT_HTML = "traceinsight-diff.html"


def _saved_threshold_ns(report: RunReport) -> int | None:
    """The small-kernel threshold a saved report was made with."""
    return report.devices[0].kernels.small_threshold_ns if report.devices else None


def _reports(args: argparse.Namespace) -> tuple[list[RunReport], list[dict[str, str]], tuple[Path, ...]]:
    """Both sides' reports, where each came from, and the input files no output may overwrite.

    Saved reports are read first: a trace on the other side is analyzed with the small-kernel
    threshold they were made with (unless --small-kernel-us says otherwise), so counts compare.
    """
    from traceinsight.api import analyze
    from traceinsight.workflow import read_saved_report, refuse_partial

    paths = (args.base, args.new)
    saved = [read_saved_report(p) for p in paths]
    if args.small_kernel_us is not None:
        small_kernel_ns = int(round(args.small_kernel_us * 1000))
    else:
        found = [t for r in saved if r is not None and (t := _saved_threshold_ns(r)) is not None]
        small_kernel_ns = found[0] if found else DEFAULT_SMALL_KERNEL_NS
    reports: list[RunReport] = []
    origins: list[dict[str, Any]] = []
    protected: list[Path] = []
    for path, report in zip(paths, saved, strict=True):
        if report is None:
            analyzed = analyze(path, small_kernel_us=small_kernel_ns / 1000, max_memory=args.max_memory)
            report, source = analyzed.result, "trace"
            protected += analyzed.files
        else:
            source = "report"
            protected.append(path)
        if args.strict:
            refuse_partial(report)
        reports.append(report)
        origins.append({"path": str(path), "source": source})
    return reports, origins, tuple(protected)


class DiffCommand:
    name = "diff"
    help = "Compare two runs (trace, run folder, logdir or a saved --json report) and gate CI on regressions."

    @staticmethod
    def prepare_parser(parser: argparse.ArgumentParser) -> None:
        for name, what in (("base", "the baseline"), ("new", "the run to check")):
            parser.add_argument(
                name, type=Path, metavar=name.upper(), help=f"{what}: trace, run folder, logdir or --json report"
            )
        add_page_outputs(parser, DEFAULT_HTML, "diff")
        parser.add_argument(
            "--small-kernel-us",
            type=positive_float,
            metavar="US",
            help="small-kernel threshold for traces (default: a saved report's, else 10 us)",
        )
        add_gate_options(
            parser,
            "exit 1 when crossed: a change 'totals.idle_fraction>+0.05', 'steps.mean_ns>+5%%' (also '<-X', "
            "'<-X%%'), 'PATH OP NUMBER' on the new run, or 'bottleneck=ID' (new, or medium/high in NEW)",
        )
        add_fault_options(parser)
        parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        thresholds = [parse_threshold(t, allow_change=True) for t in args.fail_on]
        preflight_outputs([args.output, args.json, args.markdown], [args.base, args.new])
        with removed_on_interrupt([args.output, args.json, args.markdown]):
            return DiffCommand._diff(args, thresholds)

    @staticmethod
    def _diff(args: argparse.Namespace, thresholds: list[Threshold]) -> int:
        from traceinsight.render.json import dumps

        (base, new), origins, protected = _reports(args)
        diff = build_diff(base, new, (origins[0], origins[1]))
        gate = evaluate(thresholds, new, [base], args.fail_on_missing)
        outputs = {args.output: render_diff_html(diff)}
        if args.json:
            outputs[args.json] = dumps(diff) + "\n"
        if args.markdown:
            outputs[args.markdown] = render_diff_markdown(diff)
        summary = None if args.quiet else render_diff_terminal(diff, color=sys.stdout.isatty())
        return finish(outputs, protected, summary, gate, "Diff")
