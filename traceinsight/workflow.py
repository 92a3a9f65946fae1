"""Path -> report (`result.RunReport`) -> files and exit code: the one path behind the Python API
(`traceinsight.api`) and every command that reads traces.

`analyze_path` runs the one-way pipeline (discover -> load_run -> analyze ->
findings.evaluate -> assemble), reading and analyzing the inputs in processes
or on a Dask cluster when asked; `analyze_profile` runs its second half on a
profile already loaded (`load_path`). `read_saved_report` lets a command take a
`--json` report written earlier instead of a trace, so CI can keep a small
baseline JSON rather than the trace it came from. (Writing the outputs is
`traceinsight.render.output`'s.)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TextIO

import msgspec
import orjson
from msgspec.structs import replace

from traceinsight.analysis import Analysis, analyze, merge_analyses, with_graph_capture
from traceinsight.analysis.collectives import rows_collectives_read
from traceinsight.assemble import assemble
from traceinsight.discover import Run, RunChoice, capture_pass_beside, choose_run
from traceinsight.errors import TRUNCATED, TraceError, is_truncation_warning
from traceinsight.events import Profile, TraceRead, merge_reads
from traceinsight.findings import Findings, evaluate
from traceinsight.limits import MemoryLimit
from traceinsight.load import input_base, load_run, map_run, read_input, reads_in_parallel, shared_limit
from traceinsight.readers import NSYS_SUFFIXES, SNIFF_BYTES, TRACE_EVENTS_KEY, is_array_of_events
from traceinsight.readers.regular import open_regular
from traceinsight.render.meta import add_run_info, add_runs
from traceinsight.result import OLDER_SCHEMAS, SCHEMA, RunReport, from_document
from traceinsight.rules import DEFAULT_SMALL_KERNEL_NS

_SCHEMA_PREFIX = b"traceinsight."
_MAX_REPORT_BYTES = 256 << 20


# Called with the analysis (event table still in it), its findings, its report and the run's files (never to be
# overwritten).
OnAnalyzed = Callable[[Analysis, Findings, RunReport, tuple[Path, ...]], None]


class Analyzed(msgspec.Struct, frozen=True):
    """One analyzed run: its files (never to be overwritten; None for a profile loaded beforehand), the analysis
    (for charts) and the report."""

    run: Run | None
    analysis: Analysis  # without its event table (`Analysis.without_events`)
    report: RunReport

    @property
    def files(self) -> tuple[Path, ...]:
        """The trace files the report was made from: no output may overwrite them."""
        return () if self.run is None else self.run.files


def find_run(path: Path, run_name: str | None = None, within: Path | None = None) -> RunChoice:
    """The run under `path`, with every run found and why this one (`choose_run`, which takes `within`), refusing a
    saved `--json` report with a hint to compare it instead."""
    if read_saved_report(path) is not None:
        raise TraceError(path, "this is a traceinsight report, not a trace (compare reports with `traceinsight diff`)")
    return choose_run(path, run_name, within)


def load_path(
    path: Path,
    run_name: str | None = None,
    jobs: int = 1,
    limit: MemoryLimit | None = None,
    step_range: str | None = None,
) -> tuple[Run, Profile]:
    """The run under `path` and its inputs read into one profile, as `analyze_path` reads them in this process."""
    run = find_run(path, run_name).run
    return run, load_run(run, path, jobs, limit=limit, step_range=step_range)


def analyze_path(
    path: Path,
    run_name: str | None = None,
    small_kernel_ns: int = DEFAULT_SMALL_KERNEL_NS,
    jobs: int = 1,
    scheduler: str | None = None,
    progress: TextIO | None = None,
    on_analyzed: OnAnalyzed | None = None,
    limit: MemoryLimit | None = None,
    step_range: str | None = None,
    within: Path | None = None,
) -> Analyzed:
    """Find the run under `path`, read and analyze it, and build its report (`load_run` takes `jobs`,
    `scheduler`, `progress`, `limit` and `step_range`). `on_analyzed(analysis, findings, report, files)` is called
    while the analysis still holds the run's event table (an export needs it), so with it the inputs are read here,
    never analyzed apart. `within`: nothing that resolves outside it is read, nor any run that would read there
    found (the run, the capture pass beside it, those `meta.runs` lists: `discover.find_runs`)."""
    choice = find_run(path, run_name, within)
    run = choice.run
    if on_analyzed is None and reads_in_parallel(run, jobs, scheduler):
        # Each input is read and analyzed where it is read (a process, a Dask worker): only its results
        # travel back, so the run's tables are never all in this process.
        each = shared_limit(limit, scheduler, min(jobs, len(run.files)))  # jobs tables at a time
        read_and_analyze = partial(
            _read_and_analyze, base=input_base(path), small_kernel_ns=small_kernel_ns, limit=each, step_range=step_range
        )
        parts = map_run(read_and_analyze, run, jobs, scheduler, progress)
        profile = merge_reads([read for read, _ in parts], name=run.name)
        analysis = merge_analyses(profile, [part for _, part in parts])
    else:
        profile = load_run(run, path, jobs, scheduler, progress, limit, step_range)
        # A process beside the analyses where the read may use one: a core free, on this machine (one of at most
        # `CRITICAL_PATH_MAX_EVENTS` events, whose working set is tens of MB).
        analysis_jobs = jobs if scheduler is None else 1
        analysis = analyze(profile, small_kernel_ns=small_kernel_ns, jobs=analysis_jobs)
        analysis = _with_capture(analysis, choice, path, limit)
    return _reported(analysis, choice, path, on_analyzed)


def _with_capture(analysis: Analysis, choice: RunChoice, path: Path, limit: MemoryLimit | None) -> Analysis:
    """A graph replay's analysis with its kernels' work counted through the capture pass beside it, when there is
    one (its launches name the ops the replay's nodes ran for); the analysis as it is otherwise."""
    if not analysis.graphs.count or not (capture := capture_pass_beside(choice)):
        return analysis
    return with_graph_capture(analysis, load_run(capture, path, limit=limit))


def analyze_profile(profile: Profile, small_kernel_ns: int = DEFAULT_SMALL_KERNEL_NS) -> Analyzed:
    """The report of a profile already loaded (`load_path`): the second half of `analyze_path`."""
    return _reported(analyze(profile, small_kernel_ns=small_kernel_ns), None, None)


def _reported(
    analysis: Analysis, choice: RunChoice | None, path: Path | None, on_analyzed: OnAnalyzed | None = None
) -> Analyzed:
    """The report of an analysis (when it came from `path`: with the versions a `run_info.json` beside the run
    lists, every run found there and why this one), and the analysis without its event table (after
    `on_analyzed` saw it with the table)."""
    findings = evaluate(analysis)
    report = assemble(analysis, findings)
    run = None if choice is None else choice.run
    if choice is not None and path is not None:
        add_run_info(report, path, choice.run.root)
        add_runs(report, choice)
    if run is not None and run.unreadable:  # folders of the logdir that could not be listed, skipped
        report.warnings["unreadable_folders"] = len(run.unreadable)
    if run is not None and run.not_traces:  # JSON files under the path that are no traces, skipped
        report.warnings["not_a_trace"] = run.not_traces
    if run is not None and run.not_regular:  # FIFOs, sockets, devices, dangling links named like traces, skipped
        report.warnings["not_a_regular_file"] = run.not_regular
    if on_analyzed is not None:
        on_analyzed(analysis, findings, report, () if run is None else run.files)
    # Rendering needs the results only: the event table is let go before matplotlib starts.
    return Analyzed(run, analysis.without_events(), report)


def _read_and_analyze(
    path: Path, base: Path, small_kernel_ns: int, limit: MemoryLimit | None, step_range: str | None = None
) -> tuple[TraceRead, Analysis]:
    """One input read and analyzed alone (`merge_analyses` puts the run together), without its event table but for
    the rows the cross-rank view reads."""
    read = read_input(path, base, limit=limit, step_range=step_range)
    analysis = analyze(merge_reads([read]), small_kernel_ns=small_kernel_ns, alone=False).without_events()
    # What goes back is the results and the few rows the cross-rank view of collectives reads, not the table.
    kept = rows_collectives_read(read.events, 1)
    return replace(read, events=read.events[kept].reset_index(drop=True)), analysis


def refuse_partial(report: RunReport) -> None:
    """``--strict``: a report made from part of a file (a trace cut short: its truncation warning) is bad input,
    a `TraceError` naming the file and how much of it was read."""
    for warning in report.warnings:
        if is_truncation_warning(warning):
            raise TraceError(warning.removeprefix(f"{TRUNCATED}: "), "--strict refuses a report from part of a file")


def read_saved_report(path: Path) -> RunReport | None:
    """The report in `path` when it is a `--json` report (told by content: its `schema`), else None.

    Only a file that mentions the schema is parsed, so a trace is not read twice for nothing.
    Raises TraceError for another traceinsight document (a diff, a newer report schema) or a
    report missing the fields a comparison needs.
    """
    if not path.is_file() or path.name.lower().endswith((".gz", ".pb", *NSYS_SUFFIXES)):
        return None
    with open_regular(path) as f:
        head = f.read(SNIFF_BYTES)
    # A trace names its events near the start; a report is far smaller than a trace worth streaming.
    if TRACE_EVENTS_KEY in head or is_array_of_events(head) or path.stat().st_size > _MAX_REPORT_BYTES:
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
    if schema != SCHEMA and schema not in OLDER_SCHEMAS:
        raise TraceError(path, f"a {schema} document, not a {SCHEMA} report")
    try:
        return from_document(doc)
    except ValueError as error:
        raise TraceError(path, f"not a complete {SCHEMA} report: {error}") from None
