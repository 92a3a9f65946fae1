"""`traceinsight trend INPUT...`: many runs' figures in one order (a CI history, a logdir), gated on the last run.

INPUT is a saved `--json` report, a folder of them (a CI history, searched to any depth: downloaded artifacts sit
in a folder each), or a trace path whose every run is analysed (`listing.list_runs` / `listing.analyze_runs`, oldest
first, each run's report cached). A folder that holds saved reports is a history; only one without them is read
for traces. `--fail-on` compares the last run with the median of the `--window` runs before it
(`gating.Threshold.check_window`), so one noisy run in the history does not fail a build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from traceinsight.commands.options import add_gate_options, add_page_outputs, positive_int
from traceinsight.errors import TraceError
from traceinsight.gating import Threshold, parse_threshold
from traceinsight.parallel import default_jobs
from traceinsight.render.output import finish, preflight_outputs, removed_on_interrupt
from traceinsight.render.trend import META_PREFIX, ORDER_GIVEN, ORDER_TIME, TrendRun, natural_key

DEFAULT_HTML = "traceinsight-trend.html"
DEFAULT_WINDOW = 5


def order_option(text: str) -> str:
    """``--order``: given, time or meta.KEY."""
    if text in (ORDER_GIVEN, ORDER_TIME) or (text.startswith(META_PREFIX) and len(text) > len(META_PREFIX)):
        return text
    raise argparse.ArgumentTypeError(f"expected given, time or meta.KEY (meta.generated_at), not {text!r}")


def _saved(path: Path, name: str, given: Path) -> TrendRun | None:
    """The saved report at `path` as a trend run named `name`, else None (not a report)."""
    from traceinsight.discover import Run
    from traceinsight.listing import summarize
    from traceinsight.workflow import read_saved_report

    report = read_saved_report(path)
    if report is None:
        return None
    row = summarize(Run(name=name, root=path.parent, files=(path,)), report)
    return TrendRun(row, report, "report", str(given))


def _history(folder: Path, outputs: set[Path]) -> tuple[list[TrendRun], list[Path]]:
    """The saved reports anywhere under `folder`, by path with numbers as numbers, and their files. Another
    traceinsight document there is bad input, unless it is one of this command's `outputs` (a trend kept in the
    history folder by the run before); a report there stays an input, which no output may overwrite."""
    from traceinsight.discover import walk  # a loop, however deep the folder

    runs, files = [], []
    found = [Path(e.path) for _, entries in walk(folder) for e in entries if e.name.endswith(".json")]
    for path in sorted(found, key=lambda p: natural_key(p.relative_to(folder).as_posix())):
        try:
            run = _saved(path, path.relative_to(folder).as_posix(), folder)
        except TraceError:
            if path.resolve() in outputs:
                continue
            raise
        if run is not None:
            runs.append(run)
            files.append(path)
    return runs, files


def _traced(path: Path, jobs: int) -> tuple[list[TrendRun], list[Path]]:
    """Every run under a trace path, oldest first, and the files read; a run that cannot be analysed is TraceError:
    a trend with a hole would gate the wrong run."""
    from traceinsight.listing import ReportCache, analyze_runs, list_runs, summarize

    runs = list(reversed(list_runs(path)))
    found = []
    for run, outcome in zip(runs, analyze_runs(path, runs, jobs=jobs, cache=ReportCache()), strict=True):
        if isinstance(outcome, TraceError):
            raise outcome
        found.append(TrendRun(summarize(run, outcome), outcome, "trace", str(path)))
    return found, [f for run in runs for f in run.files]


def _collect(args: argparse.Namespace) -> tuple[list[TrendRun], tuple[Path, ...]]:
    """Every INPUT's runs, in the order given, and the files no output may overwrite."""
    outputs = {p.resolve() for p in (args.output, args.json, args.markdown) if p is not None}
    runs: list[TrendRun] = []
    protected: list[Path] = []
    for given in args.inputs:
        if not given.exists():
            raise TraceError(given, "no such file or folder")
        if given.is_file() and (saved := _saved(given, given.name, given)):
            runs.append(saved)
            protected.append(given)
        elif given.is_dir() and (history := _history(given, outputs))[0]:
            runs += history[0]
            protected += history[1]
        else:
            traced, files = _traced(given, args.jobs)
            runs += traced
            protected += files
    return runs, tuple(protected)


class TrendCommand:
    name = "trend"
    help = "Figures across runs (saved --json reports, or every run under a logdir), gated on the last run."

    @staticmethod
    def prepare_parser(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "inputs",
            type=Path,
            nargs="+",
            metavar="INPUT",
            help="a saved --json report, a folder of them (a CI history), or a trace path (every run under it)",
        )
        add_page_outputs(parser, DEFAULT_HTML, "trend")
        parser.add_argument(
            "--order",
            type=order_option,
            default=ORDER_GIVEN,
            metavar="given|time|meta.KEY",
            help="the runs' order: as given (default; a folder's by path, a logdir's oldest first), by capture "
            "time, or by a key of the reports' meta (meta.generated_at, meta.versions.build)",
        )
        parser.add_argument(
            "--window",
            type=positive_int,
            default=DEFAULT_WINDOW,
            metavar="K",
            help=f"--fail-on compares the last run with the median of the K runs before it (default {DEFAULT_WINDOW})",
        )
        add_gate_options(
            parser,
            "exit 1 when crossed by the last run: a change from the window's median 'steps.mean_ns>+10%%' "
            "(also '>+X', '<-X', '<-X%%'), 'PATH OP NUMBER' on the last run, or 'bottleneck=ID' (new in the "
            "last run, or medium/high there)",
        )
        parser.add_argument(
            "--jobs",
            type=positive_int,
            default=default_jobs(),
            metavar="N",
            help=f"analyse N runs of a trace path at a time (default: the idle cores, {default_jobs()})",
        )
        parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        thresholds = [parse_threshold(t, allow_change=True) for t in args.fail_on]
        preflight_outputs([args.output, args.json, args.markdown], args.inputs)
        with removed_on_interrupt([args.output, args.json, args.markdown]):
            return TrendCommand._trend(args, thresholds)

    @staticmethod
    def _trend(args: argparse.Namespace, thresholds: list[Threshold]) -> int:
        from traceinsight.render.json import dumps
        from traceinsight.render.trend import (
            build_trend,
            order_runs,
            render_trend_html,
            render_trend_markdown,
            render_trend_terminal,
            trend_gate,
        )

        runs, protected = _collect(args)
        document = build_trend(order_runs(runs, args.order), args.order, args.window, thresholds, args.fail_on_missing)
        outputs = {args.output: render_trend_html(document)}
        if args.json:
            outputs[args.json] = dumps(document) + "\n"
        if args.markdown:
            outputs[args.markdown] = render_trend_markdown(document)
        summary = None if args.quiet else render_trend_terminal(document, color=sys.stdout.isatty())
        return finish(outputs, protected, summary, trend_gate(document), "Trend")
