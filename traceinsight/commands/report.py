"""`traceinsight report PATH`: read a run, analyse it, write HTML / JSON / Markdown, gate CI."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from traceinsight.gating import parse_threshold
from traceinsight.load import progress_stream
from traceinsight.parallel import default_jobs
from traceinsight.pipeline import analyse_path, finish
from traceinsight.report.html import render_html
from traceinsight.report.json import dumps
from traceinsight.report.markdown import render_markdown
from traceinsight.report.meta import add_invocation
from traceinsight.report.painter import ChartPainter
from traceinsight.report.terminal import render_terminal

DEFAULT_HTML = "traceinsight-report.html"


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


class ReportCommand:
    name = "report"
    help = "Analyse the traces under PATH and write a report."

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
        parser.add_argument("--run", metavar="NAME", help="which run of a logdir (default: the newest)")
        parser.add_argument(
            "--small-kernel-us",
            type=positive_float,
            default=10.0,
            metavar="US",
            help="small-kernel threshold (default 10 us)",
        )
        parser.add_argument(
            "--fail-on",
            action="append",
            default=[],
            metavar="EXPR",
            help="exit 1 when crossed: 'PATH OP NUMBER' over the JSON (totals.idle_fraction>0.3) or 'bottleneck=ID'",
        )
        parser.add_argument(
            "--jobs",
            type=positive_int,
            default=default_jobs(),
            metavar="N",
            help=f"read N trace files at a time, one process each (default: the cores, {default_jobs()})",
        )
        parser.add_argument(
            "--scheduler",
            metavar="ADDRESS",
            help="read the files on a Dask cluster: its scheduler address (tcp://host:8786), or 'local'",
        )
        parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success, draw no progress bar")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        thresholds = [parse_threshold(t) for t in args.fail_on]
        with ChartPainter(parallel=args.jobs > 1) as painter:
            analysed = analyse_path(
                args.path,
                args.run,
                small_kernel_ns=int(round(args.small_kernel_us * 1000)),
                jobs=args.jobs,
                scheduler=args.scheduler,
                progress=progress_stream(args.quiet),
                on_loaded=painter.warm_up,
            )
            report = analysed.report
            add_invocation(report, _command_line(args), _options(args), args.path, analysed.run.root)
            outputs = {args.output: render_html(report, analysed.analysis, painter)}
        crossed = [msg for t in thresholds if (msg := t.check(report))]
        if args.json:
            outputs[args.json] = dumps(report) + "\n"
        if args.markdown:
            outputs[args.markdown] = render_markdown(report, html_link=_relative_link(args.output, args.markdown))
        summary = None if args.quiet else render_terminal(report, color=sys.stdout.isatty())
        return finish(outputs, analysed.run.files, summary, crossed, "Report")


def _command_line(args: argparse.Namespace) -> list[str]:
    """The command line as run (`cli.main` records it), else rebuilt from the options."""
    return list(getattr(args, "command_line", None) or ["traceinsight", "report", str(args.path)])


def _options(args: argparse.Namespace) -> dict[str, object]:
    """The options that shape the report (not how many processes read it)."""
    return {
        "output": str(args.output),
        "json": None if args.json is None else str(args.json),
        "markdown": None if args.markdown is None else str(args.markdown),
        "run": args.run,
        "small_kernel_us": args.small_kernel_us,
        "fail_on": list(args.fail_on),
    }


def _relative_link(target: Path, page: Path) -> str:
    """`target` as a link from `page`'s folder (both are written side by side in most CI jobs)."""
    try:
        return Path(os.path.relpath(target.absolute(), page.absolute().parent)).as_posix()
    except ValueError:  # another drive (Windows)
        return target.absolute().as_posix()
