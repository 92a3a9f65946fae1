"""Path -> report dict -> files and exit code: the steps every command that reads traces shares.

`analyse_path` runs the one-way pipeline (discover -> load_run -> analyze ->
find_bottlenecks -> build_report). `read_saved_report` lets a command take a
`--json` report written earlier instead of a trace, so CI can keep a small
baseline JSON rather than the trace it came from. `finish` writes a command's
outputs and turns crossed `--fail-on` thresholds into the exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import orjson

from traceinsight.analysis import Analysis, analyze, merge_analyses
from traceinsight.analysis.kernels import DEFAULT_SMALL_KERNEL_NS
from traceinsight.discover import Run, discover
from traceinsight.findings import find_bottlenecks
from traceinsight.load import input_base, load_run, map_run, read_input, reads_in_parallel
from traceinsight.model import TraceError, TraceRead, merge_reads
from traceinsight.report.json import SCHEMA, build_report
from traceinsight.report.output import check_output, write_atomic

# Top-level fields a saved report must have (with these types) to be compared.
_REPORT_FIELDS: dict[str, type] = {
    "run": str,
    "inputs": list,
    "steps": dict,
    "devices": list,
    "totals": dict,
    "input_pipeline": dict,
    "bottlenecks": list,
}
_SCHEMA_PREFIX = b"traceinsight."
_SNIFF_BYTES = 1 << 16
_MAX_REPORT_BYTES = 256 << 20


@dataclass(frozen=True)
class Analysed:
    """One analysed run: its files (never to be overwritten), the analysis (for charts) and the report."""

    run: Run
    analysis: Analysis  # without its event table (`Analysis.without_events`)
    report: dict[str, Any]


def analyse_path(
    path: Path,
    run_name: str | None = None,
    small_kernel_ns: int = DEFAULT_SMALL_KERNEL_NS,
    jobs: int = 1,
    scheduler: str | None = None,
    progress: TextIO | None = None,
    on_loaded: Callable[[], None] | None = None,
) -> Analysed:
    """Find the run under `path`, read and analyse it, and build its report (`load_run` takes `jobs`,
    `scheduler` and `progress`). `on_loaded()` is called before the analyses: once the traces are read
    here, or as the workers that read and analyse the inputs start."""
    if read_saved_report(path) is not None:
        raise TraceError(path, "this is a traceinsight report, not a trace (compare reports with `traceinsight diff`)")
    run = discover(path, run_name)
    if reads_in_parallel(run, jobs, scheduler):
        # Each input is read and analysed where it is read (a process, a Dask worker): only its results
        # travel back, so the run's tables are never all in this process.
        if on_loaded is not None:
            on_loaded()
        read_and_analyse = partial(_read_and_analyse, base=input_base(path), small_kernel_ns=small_kernel_ns)
        parts = map_run(read_and_analyse, run, jobs, scheduler, progress)
        profile = merge_reads([read for read, _ in parts], name=run.name)
        analysis = merge_analyses(profile, [part for _, part in parts])
    else:
        profile = load_run(run, path, jobs, scheduler, progress)
        if on_loaded is not None:
            on_loaded()
        analysis = analyze(profile, small_kernel_ns=small_kernel_ns)
    report = build_report(analysis, find_bottlenecks(analysis))
    # Rendering needs the results only: the event table is let go before matplotlib starts.
    return Analysed(run, analysis.without_events(), report)


def _read_and_analyse(path: Path, base: Path, small_kernel_ns: int) -> tuple[TraceRead, Analysis]:
    """One input read and analysed alone (`merge_analyses` puts the run together), without its event table."""
    read = read_input(path, base)
    analysis = analyze(merge_reads([read]), small_kernel_ns=small_kernel_ns).without_events()
    return replace(read, events=read.events.iloc[:0]), analysis


def read_saved_report(path: Path) -> dict[str, Any] | None:
    """The report in `path` when it is a `--json` report (told by content: its `schema`), else None.

    Only a file that mentions the schema is parsed, so a trace is not read twice for nothing.
    Raises TraceError for another traceinsight document (a diff, a newer report schema) or a
    report missing the fields a comparison needs.
    """
    if not path.is_file() or path.name.lower().endswith((".gz", ".pb")):
        return None
    with path.open("rb") as f:
        head = f.read(_SNIFF_BYTES)
    # A trace names its events near the start; a report is far smaller than a trace worth streaming.
    if b'"traceEvents"' in head or path.stat().st_size > _MAX_REPORT_BYTES:
        return None
    data = path.read_bytes()
    if _SCHEMA_PREFIX not in data:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str) or not schema.startswith("traceinsight."):
        return None
    if schema != SCHEMA:
        raise TraceError(path, f"a {schema} document, not a {SCHEMA} report")
    for field, kind in _REPORT_FIELDS.items():
        if not isinstance(doc.get(field), kind):
            raise TraceError(path, f"not a complete {SCHEMA} report: {field!r} missing or not a {kind.__name__}")
    return doc


def finish(
    outputs: dict[Path, str], protected: tuple[Path, ...], summary: str | None, crossed: list[str], label: str
) -> int:
    """Write every output (atomically, never over an input), print `summary` and where the files went
    (unless quiet: `summary` None), one stderr line per crossed threshold; the exit code (1 when any).
    Every output path is checked before any is written, so a refused one leaves no other behind."""
    for path in outputs:
        check_output(path, protected)
    for path, text in outputs.items():
        write_atomic(path, text, protected=protected)
    if summary is not None:
        print(summary)
        print(f"\n{label}: " + ", ".join(str(p) for p in outputs))
    for msg in crossed:
        print(f"traceinsight: threshold crossed: {msg}", file=sys.stderr)
    return 1 if crossed else 0
