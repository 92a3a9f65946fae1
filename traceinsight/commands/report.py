"""`traceinsight report PATH`: read a run, analyse it, write HTML / JSON / Markdown, gate CI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from traceinsight.analysis import analyze
from traceinsight.discover import discover
from traceinsight.findings import find_bottlenecks
from traceinsight.gating import parse_threshold
from traceinsight.load import load_run
from traceinsight.report.html import render_html
from traceinsight.report.json import build_report, dumps
from traceinsight.report.markdown import render_markdown
from traceinsight.report.output import write_atomic
from traceinsight.report.terminal import render_terminal

DEFAULT_HTML = "traceinsight-report.html"


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
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
            type=_positive_float,
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
        parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        thresholds = [parse_threshold(t) for t in args.fail_on]
        run = discover(args.path, args.run)
        profile = load_run(run, args.path)
        analysis = analyze(profile, small_kernel_ns=int(round(args.small_kernel_us * 1000)))
        report = build_report(analysis, find_bottlenecks(analysis))
        crossed = [msg for t in thresholds if (msg := t.check(report))]
        outputs = {args.output: render_html(report, analysis)}
        if args.json:
            outputs[args.json] = dumps(report) + "\n"
        if args.markdown:
            outputs[args.markdown] = render_markdown(report)
        for path, text in outputs.items():
            write_atomic(path, text, protected=run.files)
        if not args.quiet:
            print(render_terminal(report, color=sys.stdout.isatty()))
            print(f"\nReport: {args.output}" + "".join(f", {p}" for p in list(outputs)[1:]))
        for msg in crossed:
            print(f"traceinsight: threshold crossed: {msg}", file=sys.stderr)
        return 1 if crossed else 0
