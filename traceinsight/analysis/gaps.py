"""Idle gaps on each device and why they happened.

A gap is a hole between busy intervals of a device. The whole gap gets one cause:
whatever drained the device's queue also costs the time the host then needs to
refill it. "The launch" is the host call that launched the op ending the gap; the
first rule that holds wins:

``other``       the launch had ended before the gap began: the work was queued and the device
                waited on something else (a dependency, another stream, its own latency);
``input_wait``  the host was inside a data wait during the gap (tf.data GetNext, DataLoader
                ``__next__``);
``sync``        the host was blocked in a synchronisation during the gap (``cuda*Synchronize``,
                ``cuCtxSynchronize``, ``aten::item`` / ``aten::_local_scalar_dense``, a blocking
                ``cudaMemcpy``), or the device itself recorded a sync wait;
``host_launch`` the launch ended after the gap began: the host could not keep up. (HTA's
                host-wait rule compares the launch *start*; a launch call that started just
                before the device drained but was still running is the same problem.)
``other``       no launch is known for the op and nothing above applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from traceinsight.analysis.devices import DeviceUsage, device_work
from traceinsight.analysis.histogram import Bin, duration_histogram
from traceinsight.analysis.intervals import Intervals, union, union_of
from traceinsight.model import rows_of_input

CAUSES = ("input_wait", "sync", "host_launch", "other")
# Host calls that block until the device is done, beyond the `sync` kind.
BLOCKING_HOST_OPS = frozenset(
    {"aten::item", "aten::_local_scalar_dense", "cudaMemcpy", "cuMemcpyDtoH_v2", "cuMemcpyDtoH", "hipMemcpy"}
)
HISTOGRAM_EDGES_NS = (0, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)
LONGEST_GAPS = 10
_HOST_COLUMNS = ["ts_ns", "dur_ns", "kind", "name", "correlation"]
# Host kinds worth naming when saying what the host did during a gap.
_ACTIVITY_KINDS = ("cpu_op", "runtime", "sync", "input_wait", "annotation", "python", "other")


@dataclass(frozen=True)
class Gap:
    device: str
    start_ns: int
    dur_ns: int
    cause: str
    host_activity: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DeviceGaps:
    device: str
    count: int
    total_ns: int
    p50_ns: int | None
    p90_ns: int | None
    max_ns: int | None
    by_cause: dict[str, int]
    histogram: list[Bin]
    longest: list[Gap]
    durations_ns: np.ndarray


@dataclass(frozen=True)
class HostContext:
    """What the host of one input was doing, as unions, plus launch times by correlation."""

    input_wait: Intervals
    sync: Intervals
    launch_end: pd.Series  # correlation -> end of the launch call (ns)
    activity: pd.DataFrame  # host rows worth naming


def host_context(events: pd.DataFrame, input_id: int) -> HostContext:
    """Collect the host-side facts gap causes are judged by, for one input (once, for all its devices)."""
    mine = rows_of_input(events, input_id)
    host = mine.loc[mine["device"].isna().to_numpy(), _HOST_COLUMNS]  # only the columns used: a smaller copy
    kind = host["kind"]
    starts = host["ts_ns"].to_numpy()
    ends = starts + host["dur_ns"].to_numpy()
    wait_mask = (kind == "input_wait").to_numpy()
    sync_mask = ((kind == "sync") | host["name"].isin(BLOCKING_HOST_OPS)).to_numpy()
    launches = host[(kind.isin(("runtime", "sync")).to_numpy()) & (host["correlation"].to_numpy() >= 0)]
    launches = launches.drop_duplicates("correlation").set_index("correlation")
    activity = host.loc[kind.isin(_ACTIVITY_KINDS).to_numpy(), ["ts_ns", "dur_ns", "name"]]
    return HostContext(
        union(starts[wait_mask], ends[wait_mask]),
        union(starts[sync_mask], ends[sync_mask]),
        launches["ts_ns"] + launches["dur_ns"],
        activity,
    )


def _with_device_waits(context: HostContext, device_syncs: pd.DataFrame, device: str) -> HostContext:
    """The host context plus the sync waits the device itself recorded (``Stream Wait Event``, ...)."""
    waits = device_syncs[(device_syncs["device"] == device).to_numpy()]
    if waits.empty:
        return context
    starts = waits["ts_ns"].to_numpy()
    return replace(context, sync=union_of(context.sync, union(starts, starts + waits["dur_ns"].to_numpy())))


def gap_causes(gaps: Intervals, next_correlation: np.ndarray, context: HostContext) -> np.ndarray:
    """The cause of each gap (see the module docstring for the rules)."""
    launch_end = context.launch_end.reindex(next_correlation).to_numpy(dtype=float, na_value=np.nan)
    known = ~np.isnan(launch_end)
    queued_in_time = known & (launch_end <= gaps.starts)
    waited = context.input_wait.covered_between(gaps.starts, gaps.ends) > 0
    synced = context.sync.covered_between(gaps.starts, gaps.ends) > 0
    return np.select(
        [queued_in_time, waited, synced, known],
        ["other", "input_wait", "sync", "host_launch"],
        default="other",
    )


def _host_activity(context: HostContext, start: int, end: int, top: int = 3) -> list[str]:
    """The host events that overlapped a gap most (innermost first on ties), as 'name (x ms)'."""
    act = context.activity
    s = act["ts_ns"].to_numpy()
    e = s + act["dur_ns"].to_numpy()
    overlap = np.minimum(e, end) - np.maximum(s, start)
    hit = overlap > 0
    if not hit.any():
        return []
    rows = pd.DataFrame({"name": act["name"].to_numpy()[hit], "overlap": overlap[hit], "dur": (e - s)[hit]})
    best = rows.sort_values(["overlap", "dur"], ascending=[False, True]).drop_duplicates("name").head(top)
    return [f"{name} ({ov / 1e6:.2f} ms)" for name, ov in zip(best["name"], best["overlap"], strict=True)]


def idle_gaps(events: pd.DataFrame, usages: list[DeviceUsage]) -> list[DeviceGaps]:
    """Gaps, their causes and their distribution, per device."""
    work = device_work(events)
    device_syncs = events[((events["kind"] == "sync") & events["device"].notna()).to_numpy()]
    contexts: dict[int, HostContext] = {}
    results = []
    for usage in usages:
        rows = work[(work["device"] == usage.id).to_numpy()]
        gaps = usage.busy.gaps()
        if usage.input_id not in contexts:
            contexts[usage.input_id] = host_context(events, usage.input_id)
        context = _with_device_waits(contexts[usage.input_id], device_syncs, usage.id)
        ts = rows["ts_ns"].to_numpy()
        first_after = np.clip(np.searchsorted(ts, gaps.ends, side="left"), 0, max(len(ts) - 1, 0))
        next_corr = rows["correlation"].to_numpy()[first_after] if len(ts) else np.zeros(0, np.int64)
        causes = gap_causes(gaps, next_corr, context)
        results.append(_summarise(usage.id, gaps, causes, context))
    return results


def _summarise(device: str, gaps: Intervals, causes: np.ndarray, context: HostContext) -> DeviceGaps:
    durations = gaps.ends - gaps.starts
    by_cause = {cause: int(durations[causes == cause].sum()) for cause in CAUSES}
    histogram = duration_histogram(durations, HISTOGRAM_EDGES_NS)
    order = np.argsort(-durations, kind="stable")[:LONGEST_GAPS]
    longest = [
        Gap(
            device=device,
            start_ns=int(gaps.starts[i]),
            dur_ns=int(durations[i]),
            cause=str(causes[i]),
            host_activity=_host_activity(context, int(gaps.starts[i]), int(gaps.ends[i])),
        )
        for i in order
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
    )
