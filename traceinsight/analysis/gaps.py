"""Idle gaps on each device and why they happened.

A gap is a hole between busy intervals of a device. The whole gap gets one cause:
whatever drained the device's queue also costs the time the host then needs to
refill it. "The launch" is the host call that launched the op ending the gap; the
first rule that holds wins:

``graph_internal`` the gap lies between nodes of one CUDA / HIP graph replay: the graph's own
                dependencies, which no launch or host fix shortens (`graphs.py`);
``other``       the launch had ended before the gap began: the work was queued and the device
                waited on something else (a dependency, another stream, its own latency);
``input_wait``  the host was inside a data wait during the gap (tf.data GetNext, DataLoader
                ``__next__``);
``sync``        the host was blocked in a synchronisation during the gap (``cuda*Synchronize``,
                ``hip*Synchronize``, ``aten::item``, a blocking ``cudaMemcpy`` / ``hipMemcpyWithStream``:
                `events.blocking_mask`), or the device itself recorded a sync wait;
``host_launch`` the launch ended after the gap began: the host could not keep up. (HTA's
                host-wait rule compares the launch *start*; a launch call that started just
                before the device drained but was still running is the same problem.)
``other``       no launch is known for the op and nothing above applies.

Gaps no longer than the device's timestamp resolution (`timestamp_resolution`) are timestamp rounding,
not idle time worth a count: they are left out of the count, total, percentiles, histogram and
longest list. Their few ns stay in the ledger's idle parts (`gap_intervals`), so every ns of a step
is still in one part.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd
from msgspec import field
from msgspec.structs import replace

from traceinsight.analysis.devices import DeviceUsage, device_work
from traceinsight.analysis.graphs import LATER_NODE
from traceinsight.analysis.histogram import Bin, duration_histogram
from traceinsight.events import blocking_mask, kind_mask, rows_of_input
from traceinsight.intervals import Intervals, union, union_of, union_of_rows
from traceinsight.rules import TIMESTAMP_RESOLUTION_MAX_NS

CAUSES = ("input_wait", "sync", "host_launch", "other", "graph_internal")
HISTOGRAM_EDGES_NS = (0, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)
LONGEST_GAPS = 10
_HOST_COLUMNS = ["ts_ns", "dur_ns", "kind", "device", "name", "correlation"]
# Host kinds worth naming when saying what the host did during a gap.
_ACTIVITY_KINDS = ("cpu_op", "runtime", "sync", "input_wait", "annotation", "python", "other")


class Gap(msgspec.Struct, frozen=True):
    device: str
    start_ns: int
    dur_ns: int
    cause: str
    host_activity: list[str] = field(default_factory=list)


class DeviceGaps(msgspec.Struct, frozen=True):
    device: str
    count: int
    total_ns: int
    p50_ns: int | None
    p90_ns: int | None
    max_ns: int | None
    by_cause: dict[str, int]
    histogram: list[Bin]
    longest: list[Gap]
    durations_ns: np.ndarray  # the counted gaps' (those longer than the resolution)
    starts_ns: np.ndarray  # every counted gap's start, in time order
    causes: np.ndarray  # every counted gap's cause, an index into CAUSES (int8)
    resolution_ns: int = 1  # the device's timestamp resolution (`timestamp_resolution`)
    below_resolution: int = 0  # gaps no longer than it: rounding, not counted
    # Every gap's time by cause, the sub-resolution ones too: the ledger's idle parts (`gap_intervals`).
    idle_by_cause: dict[str, Intervals] = field(default_factory=dict)


def timestamp_resolution(starts: np.ndarray, ends: np.ndarray) -> int:
    """The resolution of a device's timestamps, ns: the largest power of ten (at most
    `TIMESTAMP_RESOLUTION_MAX_NS`) that divides every start and end (their offsets from the first, whose gcd
    the epoch's size does not change). 1 with no two distinct timestamps."""
    stamps = np.concatenate([starts, ends]).astype(np.int64)
    step = int(np.gcd.reduce(stamps - stamps.min())) if len(stamps) else 0
    resolution = 1
    while step and resolution * 10 <= TIMESTAMP_RESOLUTION_MAX_NS and step % (resolution * 10) == 0:
        resolution *= 10
    return resolution


def gap_intervals(gaps: DeviceGaps) -> dict[str, Intervals]:
    """A device's gaps by cause (`CAUSES`), as intervals, sub-resolution ones included: the idle time the ledger
    splits (sorted: the gaps are in time order)."""
    return gaps.idle_by_cause or _by_cause(gaps.starts_ns, gaps.durations_ns, gaps.causes)


def _by_cause(starts: np.ndarray, durations: np.ndarray, causes: np.ndarray) -> dict[str, Intervals]:
    return {
        cause: Intervals(starts[causes == i], starts[causes == i] + durations[causes == i])
        for i, cause in enumerate(CAUSES)
    }


class HostContext(msgspec.Struct, frozen=True):
    """What the host of one input was doing, as unions, plus launch ends by correlation.

    `rows` is the input's part of the event table (not a copy) and `activity` marks
    its host rows worth naming; names are looked up only for the longest gaps.
    """

    input_id: int
    input_wait: Intervals
    sync: Intervals
    launch_end: pd.Series  # correlation -> end of the launch call (ns)
    rows: pd.DataFrame
    activity: np.ndarray
    blocking: np.ndarray  # the rows that block on the device (named first: they say why the device waited)


def host_context(events: pd.DataFrame, input_id: int) -> HostContext:
    """Collect the host-side facts gap causes are judged by, for one input (once, for all its devices).

    Masks over the input's columns, not selected copies of its host rows: those are most of a trace.
    """
    mine = rows_of_input(events, input_id, _HOST_COLUMNS)
    host = mine["device"].isna().to_numpy()
    starts, durations = mine["ts_ns"].to_numpy(), mine["dur_ns"].to_numpy()
    correlation = mine["correlation"].to_numpy()
    wait = host & kind_mask(mine, "input_wait")
    sync = blocking_mask(mine)
    launch = host & kind_mask(mine, "runtime", "sync") & (correlation >= 0)
    launch_end = pd.Series(starts[launch] + durations[launch], index=correlation[launch])
    return HostContext(
        input_id,
        union_of_rows(starts, durations, wait),
        union_of_rows(starts, durations, sync),
        launch_end[~launch_end.index.duplicated()],  # the first launch of a correlation id
        mine,
        host & kind_mask(mine, *_ACTIVITY_KINDS),
        sync,
    )


def _with_device_waits(context: HostContext, device_syncs: pd.DataFrame, device: str) -> HostContext:
    """The host context plus the sync waits the device itself recorded (``Stream Wait Event``, ...)."""
    waits = device_syncs[(device_syncs["device"] == device).to_numpy()]
    if waits.empty:
        return context
    starts = waits["ts_ns"].to_numpy()
    return replace(context, sync=union_of(context.sync, union(starts, starts + waits["dur_ns"].to_numpy())))


def gap_causes(
    gaps: Intervals, next_correlation: np.ndarray, context: HostContext, in_replay: np.ndarray | None = None
) -> np.ndarray:
    """The cause of each gap as an index into `CAUSES` (int8; see the module docstring for the rules);
    `in_replay`: the gaps between nodes of one graph replay."""
    launch = context.launch_end.index.get_indexer(next_correlation)  # -1 where no launch is known
    known = launch >= 0
    launch_ends = np.append(context.launch_end.to_numpy(), np.iinfo(np.int64).max)  # index -1: never ended
    queued_in_time = launch_ends[launch] <= gaps.starts  # int64 ns: epoch times exceed a double's precision
    waited = context.input_wait.covered_between(gaps.starts, gaps.ends) > 0
    synced = context.sync.covered_between(gaps.starts, gaps.ends) > 0
    code = CAUSES.index
    internal = np.zeros(len(gaps), bool) if in_replay is None else in_replay
    return np.select(
        [internal, queued_in_time, waited, synced, known],
        [code("graph_internal"), code("other"), code("input_wait"), code("sync"), code("host_launch")],
        default=code("other"),
    ).astype(np.int8)


def _host_activity(context: HostContext, starts: np.ndarray, ends: np.ndarray, top: int = 3) -> list[list[str]]:
    """For each of a few disjoint windows, the host events that overlapped it most (blocking calls first, then
    innermost first on ties), as 'name (x ms)'."""
    if not len(starts):
        return []
    rows = context.rows
    row_starts = rows["ts_ns"].to_numpy()
    row_ends = row_starts + rows["dur_ns"].to_numpy()
    hit = np.zeros(len(rows), dtype=bool)
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):  # a few windows: masks, not indices
        hit |= (row_starts < end) & (row_ends > start)
    hit &= (context.activity | context.blocking) & (rows["name"].cat.codes.to_numpy() >= 0)
    rows_hit = np.flatnonzero(hit)
    s, e, codes = row_starts[rows_hit], row_ends[rows_hit], rows["name"].cat.codes.to_numpy()[rows_hit]
    free = ~context.blocking[rows_hit]
    names = rows["name"].cat.categories
    result = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        overlap = np.minimum(e, end) - np.maximum(s, start)
        inside = np.flatnonzero(overlap > 0)
        ranked = inside[np.lexsort(((e - s)[inside], -overlap[inside], free[inside]))]  # blocking, overlap, short
        _, first = np.unique(codes[ranked], return_index=True)  # each name's best row
        best = ranked[np.sort(first)[:top]]
        result.append([f"{names[codes[i]]} ({overlap[i] / 1e6:.2f} ms)" for i in best.tolist()])
    return result


def idle_gaps(events: pd.DataFrame, usages: list[DeviceUsage], work: pd.DataFrame | None = None) -> list[DeviceGaps]:
    """Gaps, their causes and their distribution, per device (`work`: `device_work(events)`, if known)."""
    work = device_work(events) if work is None else work
    device_syncs = events[kind_mask(events, "sync") & events["device"].notna().to_numpy()]
    shared: HostContext | None = None  # the current input's (an input's devices come one after another)
    results = []
    for usage in usages:
        rows = work[(work["device"] == usage.id).to_numpy()]
        gaps = usage.busy.gaps()
        if shared is None or shared.input_id != usage.input_id:
            shared = host_context(events, usage.input_id)
        context = _with_device_waits(shared, device_syncs, usage.id)
        ts = rows["ts_ns"].to_numpy()
        first_after = np.clip(np.searchsorted(ts, gaps.ends, side="left"), 0, max(len(ts) - 1, 0))
        last_before = np.clip(np.searchsorted(ts, gaps.starts, side="left") - 1, 0, None)
        correlation = rows["correlation"].to_numpy()
        next_corr = correlation[first_after] if len(ts) else np.zeros(0, np.int64)
        # Between nodes of one replay: the next row is a later node of the replay the row before it belongs to.
        later = rows["replay"].to_numpy()[first_after] == LATER_NODE if len(ts) else np.zeros(0, bool)
        in_replay = later & (correlation[last_before] == next_corr) if len(ts) else later
        causes = gap_causes(gaps, next_corr, context, in_replay)
        resolution = timestamp_resolution(ts, ts + rows["dur_ns"].to_numpy())
        results.append(_summarise(usage.id, gaps, causes, context, resolution))
    return results


def _summarise(
    device: str, every: Intervals, every_cause: np.ndarray, context: HostContext, resolution: int
) -> DeviceGaps:
    lengths = every.ends - every.starts
    counted = lengths > resolution
    gaps, causes = Intervals(every.starts[counted], every.ends[counted]), every_cause[counted]
    durations = lengths[counted]
    by_cause = {cause: int(durations[causes == i].sum()) for i, cause in enumerate(CAUSES)}
    histogram = duration_histogram(durations, HISTOGRAM_EDGES_NS)
    order = np.argsort(-durations, kind="stable")[:LONGEST_GAPS]
    activity = _host_activity(context, gaps.starts[order], gaps.ends[order])
    longest = [
        Gap(
            device=device,
            start_ns=int(gaps.starts[i]),
            dur_ns=int(durations[i]),
            cause=CAUSES[causes[i]],
            host_activity=names,
        )
        for i, names in zip(order, activity, strict=True)
    ]
    has = len(durations) > 0
    return DeviceGaps(
        device=device,
        count=len(durations),
        total_ns=int(durations.sum()),
        p50_ns=int(np.percentile(durations, 50)) if has else None,
        p90_ns=int(np.percentile(durations, 90)) if has else None,
        max_ns=int(durations.max()) if has else None,
        by_cause=by_cause,
        histogram=histogram,
        longest=longest,
        durations_ns=durations,
        starts_ns=gaps.starts,
        causes=causes,
        resolution_ns=resolution,
        below_resolution=int(len(lengths) - counted.sum()),
        idle_by_cause=_by_cause(every.starts, lengths, every_cause),
    )
