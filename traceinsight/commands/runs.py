"""`traceinsight runs PATH`: every run under PATH in one table, newest first, under the names `--run` takes.

Each run is analysed as `traceinsight report PATH --run NAME` analyses it, N at a time, and its report kept in the
cache (`traceinsight.listing.ReportCache`), so a second listing analyses only the runs whose files changed. A run that
cannot be analysed is a row with its error; only a PATH without any run is bad input (exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from traceinsight.commands.options import positive_int
from traceinsight.parallel import default_jobs

if TYPE_CHECKING:
    from traceinsight.listing import ReportCache
    from traceinsight.result import RunSummary

RUNS_SCHEMA = "traceinsight.listing/1"
_HEADERS = (
    "run",
    "format",
    "framework",
    "files",
    "size",
    "hosts/ranks",
    "capture",
    "captured (UTC)",
    "steps",
    "mean step",
    "GPU-Util",
    "MFU",
    "top bottleneck",
    "step after fix",
)
_RIGHT = {"files", "size", "steps", "mean step", "GPU-Util", "MFU", "step after fix"}


class RunsCommand:
    name = "runs"
    help = "List every run under PATH, newest first, with its headline figures (each run analysed once, then cached)."

    @staticmethod
    def prepare_parser(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "path", type=Path, metavar="PATH", help="trace file, profile run folder or TensorBoard logdir"
        )
        parser.add_argument("--json", type=Path, metavar="FILE", help="write the rows as JSON instead of the table")
        parser.add_argument(
            "--jobs",
            type=positive_int,
            default=default_jobs(),
            metavar="N",
            help=f"analyse N runs at a time, one process each (default: the idle cores, {default_jobs()})",
        )
        parser.add_argument("-q", "--quiet", action="store_true", help="list the names only, analysing nothing")
        parser.add_argument("--no-cache", action="store_true", help="analyse every run, and keep no report")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from traceinsight.discover import ordering
        from traceinsight.limits import MemoryLimit
        from traceinsight.listing import ReportCache, list_runs, summaries, summarize
        from traceinsight.render.format import escape_control
        from traceinsight.render.json import dumps
        from traceinsight.render.output import preflight_outputs, removed_on_interrupt, write_outputs

        preflight_outputs([args.json], [args.path])
        runs = list_runs(args.path)
        cache = None if args.no_cache else ReportCache()
        with removed_on_interrupt([args.json]):
            if args.quiet:
                rows = [summarize(run) for run in runs]
            else:
                rows = summaries(args.path, runs, args.jobs, cache, MemoryLimit.of(None))
            if args.json:
                document = {"schema": RUNS_SCHEMA, "path": str(args.path), "runs": rows}
                write_outputs({args.json: dumps(document) + "\n"}, tuple(f for run in runs for f in run.files))
        if args.quiet:
            print("\n".join(escape_control(row.name) for row in rows))
        elif not args.json:
            print(render_table(rows))
            print(f"\n{_footer(rows, cache, ordering(runs))}")
        return 0


def _hosts_ranks(row: RunSummary) -> str:
    from traceinsight.render.format import plural

    parts = [plural(n, noun) for n, noun in ((row.hosts, "host"), (row.ranks, "rank")) if n]
    return ", ".join(parts) or "-"


def _cells(row: RunSummary) -> list[str]:
    """The row's cells, as `_HEADERS` names them; an error row's end in its error."""
    from traceinsight.render.format import fmt_bytes, fmt_count, fmt_iso, fmt_ns, fmt_pct

    cells = [
        row.name,
        row.format or "-",
        row.framework or "-",
        fmt_count(row.files),
        fmt_bytes(row.bytes),
        _hosts_ranks(row),
    ]
    if row.error is not None:
        return [*cells, f"error: {row.error}"]
    top = f"{row.top_bottleneck} ({row.top_severity})" if row.top_bottleneck else "-"
    return [
        *cells,
        row.capture_kind or "-",
        fmt_iso(row.capture_time).removesuffix(" UTC"),
        fmt_count(row.steps),
        fmt_ns(row.mean_step_ns),
        fmt_pct(row.gpu_util),
        fmt_pct(row.mfu),
        top,
        fmt_ns(row.top_step_ns_after),
    ]


def render_table(rows: list[RunSummary]) -> str:
    """The rows as a plain-text table, one line each, columns aligned (an error runs to the end of its line). Every
    cell is escaped (`escape_control`): names, errors and cached figures come from traces and the cache."""
    from traceinsight.render.format import escape_control

    table = [list(_HEADERS), *([escape_control(cell) for cell in _cells(row)] for row in rows)]
    widths = [max(len(line[i]) for line in table if i < len(line)) for i in range(len(_HEADERS))]
    lines = []
    for line in table:
        last = len(line) - 1
        padded = [
            cell if i == last else cell.rjust(widths[i]) if _HEADERS[i] in _RIGHT else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def _footer(rows: list[RunSummary], cache: ReportCache | None, order: str) -> str:
    """How many runs, in what order (`discover.ordering`), and how many were analysed now: the cache at work,
    said where it lives."""
    from traceinsight.render.format import escape_control, plural

    failed = sum(row.error is not None for row in rows)
    errors = f", {plural(failed, 'error')}" if failed else ""
    if cache is None:
        return escape_control(f"{plural(len(rows), 'run')}, newest first {order}: all analysed now (no cache){errors}")
    return escape_control(  # `order` names runs, and the folder is the user's
        f"{plural(len(rows), 'run')}, newest first {order}: {cache.misses} analysed now, {cache.hits} from the "
        f"cache ({cache.directory}){errors}"
    )
