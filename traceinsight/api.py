"""The Python API: traceinsight's front door (the CLI is a thin layer over it).

    import traceinsight as ti

    r = ti.analyze("runs/profile")  # a trace file, a profile run folder or a TensorBoard logdir
    r.bottlenecks  # one row per bottleneck, in rank order, with what fixing it would do to the step
    r.gaps.groupby("cause").dur_ns.sum()  # every idle gap of every device, with its cause
    r  # in a notebook: the headline, the bottleneck cards and the timeline

`load` reads a run into a `Profile` (its event table as a pandas DataFrame, one row per
timed event: the columns are documented in `traceinsight.events`). `analyze` reads and
analyses a run, or analyses a `Profile` already loaded, into a `Report`: DataFrames of
its results, `to_dict()` (the CLI's ``--json`` document), `to_html()`, `to_markdown()`
and `save()`. Both find and read traces exactly as ``traceinsight report`` does; bad
input raises `TraceError`, one message naming the file and the problem (the CLI's exit
code 2). All times are integer nanoseconds on the trace's own clock.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson
import pandas as pd

from traceinsight.analysis import Analysis
from traceinsight.analysis.critical_path import GROUPS as PATH_GROUPS
from traceinsight.analysis.gaps import CAUSES
from traceinsight.errors import TraceError
from traceinsight.events import Profile
from traceinsight.limits import MemoryLimit
from traceinsight.listing import ReportCache, list_runs, summaries
from traceinsight.render.format import plural
from traceinsight.render.html import render_html, render_notebook
from traceinsight.render.json import dumps
from traceinsight.render.markdown import render_markdown
from traceinsight.render.meta import add_invocation
from traceinsight.render.output import write_outputs
from traceinsight.render.terminal import render_terminal
from traceinsight.render.wording import input_label, projection_sentence, verdict_sentence
from traceinsight.result import (
    Bottleneck,
    BottleneckProjection,
    ComputeClass,
    RooflineOp,
    RunReport,
    RunSummary,
    as_dict,
    field_names,
)
from traceinsight.rules import BREAKDOWN, DEFAULT_SMALL_KERNEL_US
from traceinsight.workflow import (
    Analyzed,
    OnAnalyzed,
    analyze_path,
    analyze_profile,
    load_path,
)

__all__ = ["Profile", "Report", "TraceError", "analyze", "load", "runs"]

PathLike = str | os.PathLike[str]
# The JSON's invocation fields in `meta`: how the CLI was asked (`Report.record_invocation`), never in `to_dict()`.
INVOCATION_FIELDS = ("generated_at", "command", "options", "input")
_PROJECTION_COLUMNS = field_names(BottleneckProjection)
_BOTTLENECK_FIRST = ("rank", "id", "severity", "title", "kind", "time_ns", "fraction")
_BOTTLENECK_LAST = ("recommendations", "evidence")
_BOTTLENECK_COLUMNS = (
    *_BOTTLENECK_FIRST,
    *_PROJECTION_COLUMNS,
    *_BOTTLENECK_LAST,
    *(f for f in field_names(Bottleneck) if f not in {*_BOTTLENECK_FIRST, *_BOTTLENECK_LAST, "projection"}),
)
_DEVICE_COLUMNS = ("device", "name", "span_ns", "busy_ns", "idle_ns", "idle_fraction", "gpu_util")
_GAP_COLUMNS = ("device", "start_ns", "dur_ns", "cause", "host_activity")
_KERNEL_COLUMNS = ("device", "rank", "name", "count", "total_ns", "mean_ns", "tensor_core")
_HOST_OP_COLUMNS = ("name", "function", "calls", "total_ns", "self_ns", "holds_gil", "input_function")
_REPLAY_COLUMNS = (
    "device",
    "launch_start_ns",
    "launch_ns",
    "nodes",
    "host_ns_per_node",
    "first_node_delay_ns",
    "span_ns",
    "busy_ns",
    "busy_share",
)
_WAIT_COLUMNS = ("name", "start_ns", "dur_ns", "own_device_ns", "seen_device_ns", "outside_trace", "waited_for")
_CLASS_COLUMNS = field_names(ComputeClass)
_COLLECTIVE_COLUMNS = (
    *("key", "collective", "group", "step_id", "bytes", "group_size", "rank", "arrival_ns", "dur_ns", "wait_ns"),
    *("late_ns", "transfer_ns", "algbw_gbps", "busbw_gbps", "link_peak_gbps", "last_rank"),
)
_OP_COLUMNS = field_names(RooflineOp)
_RUN_COLUMNS = field_names(RunSummary)
_PATH_COLUMNS = (
    *("step", "start_ns", "end_ns", "dur_ns", "part", "group", "kernel_class", "name", "input_id", "input"),
    "resource",
)


def load(
    path: PathLike,
    run: str | None = None,
    *,
    jobs: int = 1,
    max_memory: str | int | None = None,
    step_range: str | None = None,
) -> Profile:
    """Read the run under `path` (a trace file, a profile run folder or a TensorBoard logdir) into one `Profile`.

    Files in one folder are one run (several hosts' ``.xplane.pb``, several ranks' ``.pt.trace.json.gz``);
    with several runs the newest is read, or the one `run` names (as ``--run``). `jobs`: processes that
    decode one large Kineto file. `max_memory`: the most memory the events may take (``--max-memory``: bytes
    or a size such as ``"2GB"``; default 75 % of the memory available, `traceinsight.limits`). The profile's
    `.events` is the event table (`traceinsight.events` documents its columns), `.inputs` the files read and
    `.framework` the framework that wrote them. A trace cut short (a killed job's) is read as far as it goes,
    and a truncation warning in `.warnings` says so. `step_range`: the name of the host ranges (NVTX, user
    annotations) that mark the training steps (``--step-range``), where the trace has no ``ProfilerStep#N``.

    Raises `TraceError` for a path without traces, an unknown run, a saved report, a file that is not
    a trace it can read, or a run whose events would pass `max_memory`.
    """
    _check_jobs(jobs)
    _, profile = load_path(Path(path), run, jobs, MemoryLimit.of(max_memory), step_range)
    return profile


def analyze(
    path_or_profile: PathLike | Profile,
    small_kernel_us: float = DEFAULT_SMALL_KERNEL_US,
    run: str | None = None,
    jobs: int = 1,
    *,
    scheduler: str | None = None,
    progress: TextIO | None = None,
    on_analyzed: OnAnalyzed | None = None,
    max_memory: str | int | None = None,
    step_range: str | None = None,
    within: PathLike | None = None,
) -> Report:
    """Read and analyze the run under a path (as ``traceinsight report`` does), or analyze a `Profile` from
    `load`; the `Report` of it.

    `small_kernel_us`: kernels shorter than this count as small (``--small-kernel-us``). `run`: which run
    under the path (``--run``). `jobs`: read and analyze that many files at a time, one process each
    (``--jobs``); `scheduler`: read them on a Dask cluster instead, its address or ``"local"``
    (``--scheduler``). `progress`: a stream (a terminal) to draw a progress bar on while a large run is read.
    `on_analyzed(analysis, findings, report, files)` sees the analysis while it still holds the event table (the CLI's
    ``--trace-out`` export); the inputs are then read in this process. `max_memory` and `step_range`: as for
    `load`. `within`: a folder nothing is read outside of, links resolved (the TensorBoard tab's logdir): runs that
    would read there are not found, so neither analyzed, nor read beside the run, nor listed in `meta.runs`.

    Raises `TraceError` for bad input, as `load` does.
    """
    if not small_kernel_us > 0:
        raise ValueError(f"small_kernel_us must be a positive number, not {small_kernel_us!r}")
    _check_jobs(jobs)
    small_kernel_ns = int(round(small_kernel_us * 1000))
    if isinstance(path_or_profile, Profile):
        if run is not None or step_range is not None:
            raise ValueError("`run` and `step_range` are for reading a path; a Profile is read already")
        return Report(analyze_profile(path_or_profile, small_kernel_ns))
    path = Path(path_or_profile)
    limit = MemoryLimit.of(max_memory)
    folder = None if within is None else Path(within)
    analyzed = analyze_path(
        path, run, small_kernel_ns, jobs, scheduler, progress, on_analyzed, limit, step_range, within=folder
    )
    return Report(analyzed, path)


def runs(path: PathLike, jobs: int = 1, *, cache: bool = True, max_memory: str | int | None = None) -> pd.DataFrame:
    """One row per run under `path` (a trace file, a profile run folder or a TensorBoard logdir), newest first and
    named as `run` takes them: the rows of ``traceinsight runs PATH --json``, its `RunSummary` fields as columns
    (`traceinsight.result.RunSummary` says what each holds). `jobs` runs are analysed at a time, one process each;
    with `cache`, a run whose files have not changed since it was last analysed is not analysed again (its report
    is kept under ``$TRACEINSIGHT_CACHE``, else ``~/.cache/traceinsight/reports``). A run that cannot be analysed is
    a row with its `error`; a path without any run raises `TraceError`. `max_memory`: as for `load`, split among
    the runs analysed at once."""
    _check_jobs(jobs)
    path = Path(path)
    found = list_runs(path)
    rows = summaries(path, found, jobs, ReportCache() if cache else None, MemoryLimit.of(max_memory))
    return _frame([as_dict(row) for row in rows], _RUN_COLUMNS)


def _check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs!r}")


class Report:
    """The analysis of one run: its results as DataFrames, the JSON document, and the pages.

    Made by `analyze`. The DataFrames are built on each access (change them freely); times are integer ns.
    In a notebook a `Report` shows itself (`_repr_html_`): the headline, the bottleneck cards and the timeline.
    """

    def __init__(self, analyzed: Analyzed, path: Path | None = None) -> None:
        self._analyzed = analyzed
        self._path = path

    # ----------------------------------------------------------------------------------------- what it is of

    @property
    def run(self) -> str:
        """The run's name (``<logdir>/<run>``, a folder or a file name)."""
        return self._analyzed.report.run

    @property
    def result(self) -> RunReport:
        """The report itself, typed (`traceinsight.result.RunReport`): what the JSON, the pages and the
        DataFrames below are made from. Read it, do not change it."""
        return self._analyzed.report

    @property
    def files(self) -> tuple[Path, ...]:
        """The trace files read (empty for a report of a `Profile` passed in): `save` never writes over them."""
        return self._analyzed.files

    @property
    def analysis(self) -> Analysis:
        """Every analysis' own result (`traceinsight.analysis.Analysis`), without the event table."""
        return self._analyzed.analysis

    @property
    def headline(self) -> str:
        """The page's headline: GPU-Util over the steps and the main bottleneck with its cost a step (the
        report's first sentence, the Markdown's bold line)."""
        return verdict_sentence(self._analyzed.report)

    @property
    def projection(self) -> str | None:
        """The page's projection under the headline: what fixing the top bottlenecks together would do to the
        step; None when none fires."""
        return projection_sentence(self._analyzed.report)

    # ----------------------------------------------------------------------------------------- DataFrames

    @property
    def bottlenecks(self) -> pd.DataFrame:
        """One row per bottleneck, in rank order: `rank`, `id`, `severity`, `title`, `kind` (stall or
        efficiency), `time_ns` and `fraction` (its cost: time in all, share of the step), then what fixing it
        alone does to the mean step (`step_ns_before`, `step_ns_after`, `saving_ns`, `speedup`,
        `gpu_util_before`, `gpu_util_after`, `basis`: measured or estimated, `assumption`), then
        `recommendations` (a list of fixes) and `evidence` (a dict of figures)."""
        rows = [
            {
                **{k: v for k, v in as_dict(b).items() if k != "projection"},
                **(as_dict(b.projection) if b.projection else {}),
            }
            for b in self._analyzed.report.bottlenecks
        ]
        return _frame(rows, _BOTTLENECK_COLUMNS)

    @property
    def devices(self) -> pd.DataFrame:
        """One row per device: `device`, `name`, `span_ns`, `busy_ns`, `idle_ns`, `idle_fraction`, `gpu_util`,
        then the JSON's other per-device figures with nested names joined by ``_`` (`gaps_total_ns` is
        ``devices[].gaps.total_ns``, `kernels_small_count`, `copies_h2d_bytes`, `memset_count`, ...). The
        histograms and lists are left out: `gaps` and `kernels` have them."""
        rows = []
        for d in self._analyzed.report.devices:
            row = {"device": d.id, **{k: v for k, v in as_dict(d).items() if k != "id"}}
            rows.append(dict(_flattened(row)))
        return _frame(rows, _DEVICE_COLUMNS)

    @property
    def gaps(self) -> pd.DataFrame:
        """Every idle gap of every device, in time order per device: `device`, `start_ns`, `dur_ns`, `cause`
        (input_wait, sync, host_launch or other: see `traceinsight.analysis.gaps`) and, for the
        longest gaps of each device (those the JSON lists), `host_activity`: what the host was doing
        ('name (x ms)' joined by '; '), NaN elsewhere. Per device, `dur_ns` sums to the JSON's
        ``devices[].gaps.total_ns``."""
        causes = np.asarray(CAUSES, dtype=object)
        parts = []
        for g in self.analysis.gaps:
            starts = np.asarray(g.starts_ns, dtype=np.int64)
            activity = np.full(len(starts), np.nan, dtype=object)
            for gap in g.longest:
                at = int(np.searchsorted(starts, gap.start_ns))
                if at < len(starts) and starts[at] == gap.start_ns:
                    activity[at] = "; ".join(gap.host_activity)
            parts.append(
                pd.DataFrame(
                    {
                        "device": np.full(len(starts), g.device, dtype=object),
                        "start_ns": starts,
                        "dur_ns": np.asarray(g.durations_ns, dtype=np.int64),
                        "cause": causes[np.asarray(g.causes, dtype=np.intp)],
                        "host_activity": activity,
                    }
                )
            )
        if not parts:
            return pd.DataFrame(
                {column: np.zeros(0, np.int64 if column.endswith("_ns") else object) for column in _GAP_COLUMNS}
            )
        return pd.concat(parts, ignore_index=True)

    @property
    def kernels(self) -> pd.DataFrame:
        """The top kernels of each device by total time (the JSON's ``devices[].kernels.top``): `device`, `rank`
        (1 = most time), `name`, `count`, `total_ns`, `mean_ns`, `tensor_core`."""
        rows = [
            {"device": d.id, "rank": rank, **as_dict(top)}
            for d in self._analyzed.report.devices
            for rank, top in enumerate(d.kernels.top, start=1)
        ]
        return _frame(rows, _KERNEL_COLUMNS)

    @property
    def steps(self) -> pd.DataFrame:
        """One row per step of the run: `id`, `start_ns`, `dur_ns`, and where its time went, one column per
        part, which sum to `dur_ns`: the ledger's parts (`report.ledger.parts`) on a run with devices, else the
        host's breakdown (device_compute, device_copy, host_runtime, input_wait, host_compute, idle)."""
        items = self._analyzed.report.steps.items
        rows = [{"id": s.id, "start_ns": s.start_ns, "dur_ns": s.dur_ns, **s.breakdown} for s in items]
        parts = list(items[0].breakdown) if items else list(BREAKDOWN)
        return _frame(rows, ("id", "start_ns", "dur_ns", *parts))

    @property
    def host_ops(self) -> pd.DataFrame:
        """The framework ops on the host of the step input: the top ones by self time, then the input
        pipeline's own functions (ops that run mostly inside input waits) not among them: `name`, `function`
        (the name people know), `calls`, `total_ns`, `self_ns`, `holds_gil`, `input_function`."""
        ops = self._analyzed.report.host_ops
        inputs = {op.name for op in ops.input_functions}
        top = {op.name for op in ops.top}
        rows = [{**as_dict(op), "input_function": op.name in inputs} for op in ops.top]
        rows += [{**as_dict(op), "input_function": True} for op in ops.input_functions if op.name not in top]
        return _frame(rows, _HOST_OP_COLUMNS)

    @property
    def capture(self) -> dict[str, Any]:
        """What kind of capture the trace is (the JSON's ``capture``): `kind` (training, inference, graph_capture,
        warmup, microbenchmark, unknown), the `evidence` that decided it, the serving framework (`server`), the
        one-time costs, and how many steps after them were analyzed (`steady_steps`)."""
        capture = self._analyzed.report.capture
        return {} if capture is None else as_dict(capture)

    @property
    def graph_replays(self) -> pd.DataFrame:
        """Every CUDA / HIP graph replay, in time order: `device`, `launch_start_ns`, `launch_ns`, `nodes`,
        `host_ns_per_node`, `first_node_delay_ns`, `span_ns`, `busy_ns`, `busy_share` (the JSON lists the first
        ones; this frame has them all)."""
        rows = [
            {**as_dict(r), "host_ns_per_node": r.host_ns_per_node, "busy_share": r.busy_share}
            for r in self.analysis.graphs.items
        ]
        return _frame(rows, _REPLAY_COLUMNS)

    @property
    def waits(self) -> pd.DataFrame:
        """The longest blocking waits (the JSON's ``waits.items``): `name`, `start_ns`, `dur_ns`, `own_device_ns`,
        `seen_device_ns`, `outside_trace` (what it waited for is not in the trace), `waited_for` ('; '-joined)."""
        rows = [{**as_dict(w), "waited_for": "; ".join(w.waited_for)} for w in self._analyzed.report.waits.items]
        return _frame(rows, _WAIT_COLUMNS)

    @property
    def collectives(self) -> pd.DataFrame:
        """One row per collective instance per rank (`traceinsight.analysis.collectives`): `key` (how it was
        matched), `collective`, `group`, `step_id`, `bytes`, `group_size`, `rank`, `arrival_ns`, `dur_ns`, `wait_ns`
        (latest arrival - this rank's; one rank in the trace: its duration beyond the shortest of its kind and
        size), `late_ns`, `transfer_ns` (the shortest duration across ranks), `algbw_gbps`, `busbw_gbps`,
        `link_peak_gbps`, `last_rank`."""
        rows = [
            {
                **{k: v for k, v in as_dict(i).items() if k != "arrivals"},
                **{k: v for k, v in as_dict(x).items() if k != "input_id"},
            }
            for i in self.analysis.collectives.instances
            for x in i.arrivals
        ]
        return _frame(rows, _COLLECTIVE_COLUMNS)

    @property
    def kernel_classes(self) -> pd.DataFrame:
        """One row per kernel class that ran (the JSON's ``compute.classes``): `name` (matmul, conv, attention,
        elementwise, communication, copy, other), `count`, `time_ns`, `share` (of kernel time), `counted_ns` (time of
        kernels whose FLOPs are counted), `flops`, `bytes`, `tflops`, `tbps`, `intensity` (FLOP/byte), `bound`
        (compute or memory, by the roofline), `roofline_fraction`."""
        return _frame([as_dict(k) for k in self._analyzed.report.compute.classes], _CLASS_COLUMNS)

    @property
    def ops(self) -> pd.DataFrame:
        """Every op whose FLOPs the trace tells, its calls summed by `name`, `op_class` and `dtype`, longest kernel
        time first (the JSON's ``compute.ops`` lists the first ones): `calls`, `time_ns` (its kernels'), `flops`,
        `bytes`, `tflops`, `tbps`, `intensity`, `bound`, `roofline_fraction`."""
        return _frame([as_dict(o) for o in self.analysis.compute.ops], _OP_COLUMNS)

    @property
    def critical_path(self) -> pd.DataFrame:
        """The steps' critical paths (`traceinsight.analysis.critical_path`), one row per stretch, in step order and
        latest first within a step: `step` (its id), `start_ns`, `end_ns`, `dur_ns`, `part` (cpu_op, launch,
        compute, copy, collective_transfer, sync, kernel_gap, ...), `group` (the breakdown's: cpu, launch,
        gpu_compute, copy, collective, rank_wait, input, idle), `kernel_class` (compute stretches), `name` (the op,
        call or kernel; NaN where nothing traced runs), `input_id` and `input` (its label: 'rank 1', None with one
        input), `resource` ('thread N', 'stream N', None for idle time). Per step, `dur_ns` sums to the step's
        `dur_ns` in `steps`."""
        report = self._analyzed.report
        if not report.critical_path.steps:
            return _frame([], _PATH_COLUMNS)
        path = self.analysis.critical_path
        segments = path.segments
        ids = np.asarray(path.step_ids, dtype=np.int64)
        resource = segments["resource"].to_numpy()
        input_ids = segments["input_id"].to_numpy()
        labels = {i: input_label(report, i) for i in np.unique(input_ids).tolist()}
        frame = segments.assign(
            step=ids[segments["step"].to_numpy()],
            dur_ns=segments["end_ns"] - segments["start_ns"],
            input=[labels[i] for i in input_ids.tolist()],
            resource=np.select(  # type: ignore[call-overload]
                [resource >= 0, resource <= -2],
                ["thread " + resource.astype(str), "stream " + (-resource - 2).astype(str)],
                None,
            ),
        )
        return frame[list(_PATH_COLUMNS)].reset_index(drop=True)

    @property
    def critical_path_breakdown(self) -> pd.DataFrame:
        """One row per step: `id`, `step_ns`, `crossings` (moves to another rank), then ns on the critical path by
        group (cpu, launch, gpu_compute, copy, collective, rank_wait, input, idle), which sum to `step_ns`."""
        rows = [
            {"id": s.id, "step_ns": s.step_ns, "crossings": s.crossings, **{g: s.groups.get(g, 0) for g in PATH_GROUPS}}
            for s in self._analyzed.report.critical_path.steps
        ]
        return _frame(rows, ("id", "step_ns", "crossings", *PATH_GROUPS))

    # ----------------------------------------------------------------------------------------- documents

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (schema ``traceinsight.report/1``) as plain JSON values, a copy. Its `meta`
        holds the capture date and versions; the fields that say how the CLI was run (`INVOCATION_FIELDS`)
        are null unless `record_invocation` filled them."""
        return dict(orjson.loads(self.to_json()))

    def to_json(self) -> str:
        """The ``--json`` document as text, as the CLI writes it (sorted keys, two-space indent)."""
        return dumps(self._analyzed.report)

    def to_html(self) -> str:
        """The full page, one self-contained file (no network requests), as ``traceinsight report -o`` writes
        it."""
        return render_html(self._analyzed.report, self.analysis)

    def to_markdown(self, html_file: str | None = None, html_url: str | None = None) -> str:
        """The short Markdown summary for CI (``--markdown``): it names `html_file` (the HTML page), and links
        it only at `html_url`, an absolute URL (a relative link breaks in a CI step summary)."""
        return render_markdown(self._analyzed.report, html_file, html_url)

    def to_text(self, color: bool = False) -> str:
        """The summary the CLI prints (ANSI colours when `color`)."""
        return render_terminal(self._analyzed.report, color=color)

    def save(
        self, html: PathLike | None = None, json: PathLike | None = None, markdown: PathLike | None = None
    ) -> None:
        """Write the HTML page, the JSON document and the Markdown summary (those given) as the CLI does: each
        atomically (a temporary file renamed into place), never over a trace read, none when one path is
        refused (`TraceError`). The Markdown names the HTML page when both are written."""
        outputs: dict[Path, str] = {}
        if html is not None:
            outputs[Path(html)] = self.to_html()
        if json is not None:
            outputs[Path(json)] = self.to_json() + "\n"
        if markdown is not None:
            outputs[Path(markdown)] = self.to_markdown(html_file=None if html is None else str(html))
        write_outputs(outputs, self.files)

    def record_invocation(self, command: Sequence[str], options: Mapping[str, Any]) -> None:
        """Fill `meta`'s invocation fields (time, command line, options, the path analyzed), as the CLI does
        before it writes its files."""
        add_invocation(self._analyzed.report, command, options, self._path)

    # ----------------------------------------------------------------------------------------- display

    def _repr_html_(self) -> str:
        """The notebook view: the headline, the bottleneck cards and the timeline chart. One HTML fragment
        with its own scoped style: no script, no network request, well under 1 MB; text from the trace is
        escaped."""
        return render_notebook(self._analyzed.report, self.analysis)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        report = self._analyzed.report
        top = report.bottlenecks[0].id if report.bottlenecks else "none"
        return (
            f"<traceinsight.Report {self.run!r}: {plural(report.totals.device_count, 'device')}, "
            f"{plural(report.steps.count, 'step')}, top bottleneck {top}>"
        )


def _flattened(row: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """`row`'s scalar fields, nested dicts' fields named by their path joined by '_'; lists left out."""
    for key, value in row.items():
        if isinstance(value, Mapping):
            yield from _flattened(value, f"{prefix}{key}_")
        elif not isinstance(value, list):
            yield f"{prefix}{key}", value


def _frame(rows: list[dict[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """`rows` as a DataFrame, `columns` first (and present without rows), any others after them."""
    if not rows:
        return pd.DataFrame(columns=list(columns))
    frame = pd.DataFrame(rows)
    first = [c for c in columns if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]
