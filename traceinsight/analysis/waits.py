"""Blocking waits: host calls that block on the device for far longer than their own device work.

A blocking copy (``cudaMemcpy``, ``hipMemcpyWithStream``) or sync (``*Synchronize``, ``aten::item``) first waits
for every earlier launch it depends on, then does its own work (the copy with its correlation id). When it
lasts `rules.WAIT_OWN_WORK_RATIO` times its own work and at least `rules.WAIT_MIN_NS`, its time is a *wait*; its
idle gap has the cause ``sync`` (`gaps.py`). What it waited for is the device work that ran during it (kernels on
other streams, an event). When the device shows (almost) nothing running during the wait, what it waited for is
not in the trace: work queued before the capture window began, or another process or rank. No fix inside the
trace removes such a wait, so the step model keeps it apart (`step_model`'s ``sync_outside``) and no speedup is
projected from it (`findings.external_wait`).
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.devices import DeviceUsage
from traceinsight.events import blocking_mask, rows_of_input
from traceinsight.intervals import EMPTY, Intervals, union, union_of
from traceinsight.result import Wait
from traceinsight.rules import WAIT_MIN_NS, WAIT_OWN_WORK_RATIO, WAIT_SEEN_MIN_SHARE

# Waits described one by one (the totals cover all of them).
LISTED_WAITS = 10
# What a wait names of the device work it waited for.
WAITED_FOR_NAMES = 3
_COLUMNS = ["ts_ns", "dur_ns", "kind", "device", "name", "correlation", "stream", "input_id"]


class Waits(msgspec.Struct, frozen=True):
    count: int
    total_ns: int
    outside_count: int
    outside_ns: int
    items: list[Wait]  # the longest first, `LISTED_WAITS` of them
    outside: dict[int, Intervals]  # per input: the waits whose work is not in the trace

    def outside_of(self, input_id: int) -> Intervals:
        return self.outside.get(input_id, EMPTY)


NO_WAITS = Waits(0, 0, 0, 0, [], {})


def blocking_waits(events: pd.DataFrame, usages: list[DeviceUsage], work: pd.DataFrame, inputs: int) -> Waits:
    """The waits of every input (see the module docstring); `work`: `devices.device_work(events)`."""
    found: list[tuple[Wait, ...]] = []
    outside: dict[int, Intervals] = {}
    for input_id in range(max(inputs, 1)):
        waits = _input_waits(events, usages, work, input_id)
        found.append(waits)
        gone = [w for w in waits if w.outside_trace]
        if gone:
            starts = np.array([w.start_ns for w in gone], np.int64)
            outside[input_id] = union(starts, starts + np.array([w.dur_ns for w in gone], np.int64))
    every = sorted((w for waits in found for w in waits), key=lambda w: -w.dur_ns)
    gone_all = [w for w in every if w.outside_trace]
    return Waits(
        count=len(every),
        total_ns=sum(w.dur_ns for w in every),
        outside_count=len(gone_all),
        outside_ns=sum(w.dur_ns for w in gone_all),
        items=every[:LISTED_WAITS],
        outside=outside,
    )


def _input_waits(
    events: pd.DataFrame, usages: list[DeviceUsage], work: pd.DataFrame, input_id: int
) -> tuple[Wait, ...]:
    mine = rows_of_input(events, input_id, _COLUMNS)
    long_calls = blocking_mask(mine) & (mine["dur_ns"].to_numpy() >= WAIT_MIN_NS)
    if not long_calls.any():
        return ()
    calls = mine[long_calls]
    device_rows = work[(work["input_id"] == input_id).to_numpy()]
    correlation = calls["correlation"].to_numpy()
    device_corr = device_rows["correlation"].to_numpy()
    theirs = np.isin(device_corr, correlation[correlation >= 0])  # the calls' own copies, grouped alone
    own = pd.Series(device_rows["dur_ns"].to_numpy()[theirs]).groupby(device_corr[theirs]).sum()
    own_ns = own.reindex(correlation).fillna(0).to_numpy(np.int64)
    dur = calls["dur_ns"].to_numpy()
    is_wait = dur >= WAIT_OWN_WORK_RATIO * own_ns
    if not is_wait.any():
        return ()
    busy = union_of(*(u.busy for u in usages if u.input_id == input_id)) if usages else EMPTY
    starts = calls["ts_ns"].to_numpy()[is_wait]
    ends = starts + dur[is_wait]
    seen = np.clip(busy.covered_between(starts, ends) - own_ns[is_wait], 0, None)
    names = calls["name"].astype(str).to_numpy()[is_wait]
    outside = seen < WAIT_SEEN_MIN_SHARE * (ends - starts - own_ns[is_wait])
    # What a wait waited for is named only for the longest, which the report lists: each is a pass over the rows.
    device = _DeviceRows.of(device_rows)
    named = np.zeros(len(starts), bool)
    named[np.argsort(starts - ends, kind="stable")[:LISTED_WAITS]] = True
    return tuple(
        Wait(
            name=str(name),
            input_id=input_id,
            start_ns=int(start),
            dur_ns=int(end - start),
            own_device_ns=int(own_w),
            seen_device_ns=int(seen_w),
            outside_trace=bool(gone),
            waited_for=_waited_for(device, int(start), int(end), int(corr)) if listed and not gone else [],
        )
        for name, start, end, own_w, seen_w, gone, corr, listed in zip(
            names, starts, ends, own_ns[is_wait], seen, outside, correlation[is_wait], named, strict=True
        )  # one per wait of a millisecond or more
    )


class _DeviceRows(msgspec.Struct, frozen=True):
    """The device rows' columns a wait's `_waited_for` reads, taken out of the table once for all the waits."""

    ts: np.ndarray
    end: np.ndarray
    correlation: np.ndarray
    stream: np.ndarray
    name_code: np.ndarray
    names: np.ndarray  # the name categories, then "nan" for a row without one (as ``astype(str)`` writes it)

    @classmethod
    def of(cls, rows: pd.DataFrame) -> _DeviceRows:
        ts = rows["ts_ns"].to_numpy()
        names = np.append(np.asarray(rows["name"].cat.categories, dtype=object), "nan")
        return cls(
            ts=ts,
            end=ts + rows["dur_ns"].to_numpy(),
            correlation=rows["correlation"].to_numpy(),
            stream=rows["stream"].to_numpy(),
            name_code=rows["name"].cat.codes.to_numpy(),
            names=names,
        )


def _waited_for(rows: _DeviceRows, start: int, end: int, correlation: int) -> list[str]:
    """The device work (not the call's own) that overlapped [start, end) most, as 'name (stream N, x ms)'."""
    overlap = np.minimum(rows.end, end) - np.maximum(rows.ts, start)
    hit = (overlap > 0) & (rows.correlation != correlation)
    if not hit.any():
        return []
    frame = pd.DataFrame({"name": rows.names[rows.name_code[hit]], "stream": rows.stream[hit], "ns": overlap[hit]})
    top = frame.groupby(["name", "stream"])["ns"].sum().sort_values(ascending=False).head(WAITED_FOR_NAMES)
    return [f"{name} (stream {stream}, {ns / 1e6:.2f} ms)" for (name, stream), ns in top.items()]
