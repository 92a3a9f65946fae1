"""Launch queue depth per device stream: how many launches are outstanding over time.

A launch (a kernel, graph, async copy or memset launch call on the host, joined to its device rows by the
correlation id) is outstanding from the start of its call until its device work ends, so depth 0 means the stream
has nothing queued or running: the device waits on the host. HTA's queue length
(`TraceCounters._get_queue_length_time_series_for_rank`) counts the same launches but drops them when their device
work starts; ours is HTA's plus 1 while the stream runs a launch's work, so a drained queue is an idle stream.

Figures are time-weighted over the steps of the launches' input (its whole window when it has no steps).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.steps import Steps
from traceinsight.events import DEVICE_WORK_KINDS, kind_mask, names_matching
from traceinsight.intervals import Intervals, union
from traceinsight.ordering import dense_codes, lexsort, tuple_codes
from traceinsight.rules import (
    ASYNC_COPY_LAUNCH,
    GRAPH_LAUNCH,
    KERNEL_LAUNCH,
    LAUNCH_QUEUE_LIMIT,
    QUEUE_FULL_FOUND_DEPTH,
    QUEUE_SERIES_POINTS,
)

_QUEUED_LAUNCH = re.compile("|".join(p.pattern.pattern for p in (KERNEL_LAUNCH, GRAPH_LAUNCH, ASYNC_COPY_LAUNCH)))


class StreamQueue(msgspec.Struct, frozen=True):
    """One stream's launch queue over its input's steps; `device_total` (stream -1): all of a device's streams
    together, whose depth 0 is the device drained."""

    device: str
    stream: int
    launches: int  # launches joined to this stream's device work (in the steps or not)
    mean_depth: float  # time-weighted over the steps
    max_depth: int
    drained_share: float  # share of step time with nothing queued or running
    full_share: float  # share of step time at `LAUNCH_QUEUE_LIMIT` or more (the host's next launch blocks)
    # The median of what each launch in the steps found queued or running on its own stream when its call began: a
    # shallow queue means the device runs each launch about as soon as the host issues it (the host sets the pace).
    found_depth_p50: float | None
    series_ts_ns: np.ndarray  # the deepest queue per bin from each bin's start (at most QUEUE_SERIES_POINTS)
    series_depth: np.ndarray


class QueueDepth(msgspec.Struct, frozen=True):
    streams: list[StreamQueue]
    devices: list[StreamQueue]  # per device, its streams' depths summed (stream -1)
    limit: int = LAUNCH_QUEUE_LIMIT

    def drained_share(self, devices: Sequence[str]) -> float | None:
        """The launch-weighted mean of these devices' drained shares; None when none has launches."""
        return self._weighted(devices, "drained_share")

    def found_depth_p50(self, devices: Sequence[str]) -> float | None:
        """The launch-weighted mean of these devices' median depth found by a launch; None when none is known."""
        return self._weighted(devices, "found_depth_p50")

    def _weighted(self, devices: Sequence[str], figure: str) -> float | None:
        known = [(d.launches, getattr(d, figure)) for d in self.devices if d.device in devices and d.launches]
        known = [(n, v) for n, v in known if v is not None]
        total = sum(n for n, _ in known)
        return sum(n * v for n, v in known) / total if total else None


NO_QUEUES = QueueDepth([], [])


def launched_work(events: pd.DataFrame) -> pd.DataFrame:
    """One row per launch and stream it put work on: `input_id`, `device`, `stream`, `correlation`, `launch_row`
    (the call's row in `events`), `launch_ts`, `launch_dur`, `thread`, and `work_start` / `work_end` (its device
    rows' first start and last end). Launches with no device row, and device rows with no launch, are left out."""
    host = events["device"].isna().to_numpy()
    correlation = events["correlation"].to_numpy()
    calls = np.flatnonzero(names_matching(events, _QUEUED_LAUNCH, host & (correlation >= 0)))
    device_rows = np.flatnonzero(~host & kind_mask(events, *DEVICE_WORK_KINDS) & (correlation >= 0))
    columns = ["input_id", "device", "stream", "correlation", "launch_row", "launch_ts", "launch_dur", "thread"]
    if not len(calls) or not len(device_rows):
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in [*columns, "work_start", "work_end"]})
    inputs = events["input_id"].to_numpy()
    starts = events["ts_ns"].to_numpy()
    # (input, correlation) of the calls and the device rows as one code; the first call of each.
    pair, _ = tuple_codes(inputs[both := np.concatenate([calls, device_rows])], correlation[both])
    call_pair, work_pair = pair[: len(calls)], pair[len(calls) :]
    first_call = tuple_codes(call_pair)[1]
    launch_of_pair = np.full(int(pair.max()) + 1, -1, np.int64)
    launch_of_pair[call_pair[first_call]] = calls[first_call]
    # A group a (pair, device, stream), numbered in the order of its first row (`groupby(sort=False)`'s order).
    device = events["device"].cat.codes.to_numpy()[device_rows]
    stream = events["stream"].to_numpy()[device_rows]
    group, first = tuple_codes(work_pair, device, stream)
    count = len(first)
    work_start = np.full(count, np.iinfo(np.int64).max)
    np.minimum.at(work_start, group, starts[device_rows])
    work_end = np.full(count, np.iinfo(np.int64).min)
    np.maximum.at(work_end, group, starts[device_rows] + events["dur_ns"].to_numpy()[device_rows])
    launch = launch_of_pair[work_pair[first]]
    matched = launch >= 0  # work whose launch call is not in the trace is left out
    first, launch = first[matched], launch[matched]
    return pd.DataFrame(
        {
            "input_id": inputs[device_rows[first]],
            "device": pd.Categorical.from_codes(device[first], events["device"].cat.categories),
            "stream": stream[first],
            "correlation": correlation[device_rows[first]],
            "launch_row": launch,
            "launch_ts": starts[launch],
            "launch_dur": events["dur_ns"].to_numpy()[launch],
            "thread": events["thread"].to_numpy()[launch],
            "work_start": work_start[matched],
            "work_end": work_end[matched],
        }
    )


def queue_depth(launched: pd.DataFrame, input_steps: Sequence[Steps]) -> QueueDepth:
    """Queue depth per stream and per device from `launched_work`, each over the steps of its input (`input_steps`,
    by input id; an input without steps: the span of its launches)."""
    if launched.empty:
        return NO_QUEUES
    device_codes = launched["device"].cat.codes.to_numpy().astype(np.int64)
    streams = launched["stream"].to_numpy()
    stream_codes = pd.factorize(streams)[0]
    pair = device_codes * (int(stream_codes.max()) + 1) + stream_codes
    names = launched["device"].cat.categories.astype(str).to_numpy()
    steps = {s.input_id: s for s in input_steps}
    per_stream: list[StreamQueue] = []
    per_device: list[StreamQueue] = []
    # One pass per input (a run has a few): its steps are the windows; all its streams are done at once.
    for input_id, rows in launched.groupby("input_id", sort=True).indices.items():
        start = launched["launch_ts"].to_numpy()[rows]
        end = np.maximum(launched["work_end"].to_numpy()[rows], start)
        own = steps.get(int(input_id))
        windows = (
            union(*own.bounds())
            if own is not None and own.count
            else Intervals(np.array([start.min()]), np.array([end.max()]))
        )
        devices = names[device_codes[rows]]
        streams_found, found = _queues(pair[rows], devices, streams[rows], start, end, windows)
        devices_found = _queues(device_codes[rows], devices, np.full(len(rows), -1), start, end, windows, found)[0]
        # In (device, stream) order: the codes above follow first appearance, which differs between a run read
        # whole and its inputs read apart (`--jobs`), and the JSON must not.
        per_stream += sorted(streams_found, key=lambda q: (q.device, q.stream))
        per_device += sorted(devices_found, key=lambda q: q.device)
    return QueueDepth(per_stream, per_device)


def _queues(
    keys: np.ndarray,
    devices: np.ndarray,
    streams: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    windows: Intervals,
    found: np.ndarray | None = None,
) -> tuple[list[StreamQueue], np.ndarray]:
    """One record per distinct key: +1 at each launch's start, -1 at its work's end, sorted and summed. Also what
    each launch found queued when it began (under these keys), which `found` (per launch) replaces in the records."""
    groups, group, time, delta, owner, depth, found_here = _running_depth(keys, start, end)
    found = found_here if found is None else found
    in_steps = windows.covered_between(start, start + 1) > 0
    found_p50 = pd.Series(found[in_steps]).groupby(group[in_steps]).median()
    last = np.r_[owner[1:] != owner[:-1], True]  # a group's last change: depth 0 from there on
    following = np.r_[time[1:], time[-1:]]
    seg_end = np.where(last, time, following)
    covered = windows.covered_between(time, seg_end)
    total = max(windows.total, 1)
    count = len(groups)
    weighted = np.bincount(owner, covered * depth, count)
    busy = np.bincount(owner, covered * (depth > 0), count)
    full = np.bincount(owner, covered * (depth >= LAUNCH_QUEUE_LIMIT), count)
    inside = covered > 0
    peak = np.zeros(count, np.int64)
    np.maximum.at(peak, owner[inside], depth[inside])
    launches = np.bincount(group, minlength=count)
    first = np.unique(group, return_index=True)[1]
    bounds = np.r_[0, np.cumsum(np.bincount(owner, minlength=count))]
    records = []
    for g in range(count):  # a few streams
        series_ts, series_depth = _series(time[bounds[g] : bounds[g + 1]], depth[bounds[g] : bounds[g + 1]], windows)
        records.append(
            StreamQueue(
                device=str(devices[first[g]]),
                stream=int(streams[first[g]]),
                launches=int(launches[g]),
                mean_depth=float(weighted[g] / total),
                max_depth=int(peak[g]),
                drained_share=float(1.0 - busy[g] / total),
                full_share=float(full[g] / total),
                found_depth_p50=float(found_p50[g]) if g in found_p50.index else None,
                series_ts_ns=series_ts,
                series_depth=series_depth,
            )
        )
    return records, found


def _running_depth(
    keys: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct key, the queue's depth after each change: +1 at each launch's start, -1 at its work's end,
    sorted by key then time (the distinct keys, each launch's key index, and the sorted times, changes, their keys
    and depths); and what each launch found queued or running under its key when it began."""
    groups, group = dense_codes(keys)
    n = len(start)
    time = np.concatenate([start, end])
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    owner = np.concatenate([group, group])
    order = lexsort((delta, time, owner))  # by group, then time; at one instant ends before starts
    time, delta, owner = time[order], delta[order], owner[order]
    # Every group's +1s and -1s cancel, so the running sum over all groups is each group's own.
    depth = np.cumsum(delta)
    found = np.empty(n, np.int64)
    found[order[delta > 0]] = depth[delta > 0] - 1  # the launches are the first n of the unsorted arrays
    return groups, group, time, delta, owner, depth, found


def blocked_launch_rows(launched: pd.DataFrame, rows: int) -> np.ndarray:
    """Per row of the event table `launched` (`launched_work`) was made from (`rows` of them), whether it is a
    launch call that found its stream's queue full (`QUEUE_FULL_FOUND_DEPTH` launches outstanding): the call blocks
    until the device frees a slot, so it waits for the device like a sync."""
    blocked = np.zeros(rows, bool)
    if launched.empty:
        return blocked
    streams = [launched["input_id"].to_numpy(), launched["device"].cat.codes.to_numpy(), launched["stream"].to_numpy()]
    keys = tuple_codes(*streams)[0]  # which stream: the codes' order does not matter here
    start = launched["launch_ts"].to_numpy()
    found = _running_depth(keys, start, np.maximum(launched["work_end"].to_numpy(), start))[6]
    blocked[launched["launch_row"].to_numpy()[found >= QUEUE_FULL_FOUND_DEPTH]] = True
    return blocked


def _series(time: np.ndarray, depth: np.ndarray, windows: Intervals) -> tuple[np.ndarray, np.ndarray]:
    """The step function over the steps' span, in at most `QUEUE_SERIES_POINTS` equal bins, each the deepest queue
    in it (peaks survive the downsampling)."""
    lo, hi = int(windows.starts[0]), int(windows.ends[-1])
    bins = min(QUEUE_SERIES_POINTS, max(hi - lo, 1))
    edges = lo + (np.arange(bins + 1) * (hi - lo)) // bins
    at_start = np.searchsorted(time, edges[:-1], side="right") - 1
    carried = np.where(at_start >= 0, depth[np.clip(at_start, 0, None)], 0)
    inside = (time >= lo) & (time < hi)
    peak = carried.copy()
    np.maximum.at(peak, np.searchsorted(edges, time[inside], side="right") - 1, depth[inside])
    return edges[:-1].astype(np.int64), peak.astype(np.int64)
