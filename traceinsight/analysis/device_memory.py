"""Device memory per accelerator: peaks, headroom, what a step keeps and what it needs on top of that.

Reads the memory side table (`Profile.memory`, events.py): the allocator's levels
after each allocation and free. On each device:

* **Peaks.** ``peak_allocated_bytes`` = the highest live-bytes level (Kineto ``Total
  Allocated``; XSpace ``bytes_allocated``, XProf's peak); ``peak_reserved_bytes`` the
  highest ``Total Reserved`` (Kineto only: the BFC allocator does not say how much it
  holds). In the 2021 Kineto schema (``absolute`` False) levels are running sums from 0
  at the first event, so peaks and static levels are relative; only differences
  (transients) mean what they say.
* **Capacity.** The device's memory (``totalGlobalMem``, the plane's ``memory_size``),
  else, as XProf does, the allocator's limit. ``allocator_limit_bytes`` (XSpace) is
  allocated + available + stack reserved: what the allocator may use (XLA preallocates
  75 % of a GPU by default, TensorFlow nearly all of it). Headroom is
  ``1 - peak / capacity`` (absolute levels only). The usable memory, against which
  ``at_limit`` and the batch factor are measured, is the allocator's limit where known,
  else the capacity.
* **Steps.** A step's static level is the lower of the levels at its two boundaries
  (what lives across steps: weights, optimizer state); its transient is its peak minus
  that (activations, workspaces). ``batch_headroom_factor`` = min over steps of
  ``(0.9 * usable - static) / transient``: how many times the batch could grow if the
  transient grows with it, keeping 10 % spare (>= 1: room; < 1: already too close).
  Without steps, the whole series is taken as one step.
* **Top ops at the peak.** The allocations live at the peak (allocated before it, not
  freed by then: a free is matched to its allocation by address), summed by op
  (XSpace ``tf_op``; Kineto: the outermost CPU op on the allocating thread).
* **Warnings.** ``at_limit``: the peak memory held (reserved where known, else in use)
  above 90 % of the usable memory. ``slack``: the allocator held far more than was ever
  live at once (peak reserved - peak allocated above 20 % of peak reserved and above
  1 GiB: cached blocks the workload could not reuse; fragmentation or changing shapes).
* **Series.** Allocated (and reserved) over time, at most ``max_points`` points per device:
  per time bucket the lowest and the highest row, so every peak and trough is drawn.

A level includes XSpace's stack reservation (``stack_reserved``, 0 on GPUs) when known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.steps import Step
from traceinsight.events import Profile
from traceinsight.result import MemorySeries, OpMemory, StepMemory
from traceinsight.rules import AT_LIMIT_FRACTION, BATCH_SPARE_FRACTION, SLACK_FRACTION, SLACK_MIN_BYTES

SERIES_POINTS = 500
TOP_OPS = 5
_NUMBER = re.compile(r"(\d+)")


class DeviceMemory(msgspec.Struct, frozen=True):
    device: str
    input_id: int
    events: int  # memory events read for this device
    absolute: bool  # False: levels are running sums from the first event (Kineto 2021 schema)
    peak_allocated_bytes: int
    peak_in_use_bytes: int  # allocated + stack reserved (XSpace; XProf's peak); = peak_allocated_bytes elsewhere
    peak_ns: int  # when the in-use level first peaked
    peak_reserved_bytes: int | None
    capacity_bytes: int | None
    allocator_limit_bytes: int | None
    headroom_fraction: float | None
    fragmentation_max: float | None
    slack_bytes: int | None  # peak reserved - peak allocated
    steps: list[StepMemory]
    peak_step: int | None  # id of the step in which the peak falls
    static_bytes: int | None  # of the step that limits the batch factor
    transient_bytes: int | None
    batch_headroom_factor: float | None
    top_ops_at_peak: list[OpMemory]
    warnings: list[str]  # "at_limit", "slack"
    series: MemorySeries


def profile_memory(profile: Profile, steps: Sequence[Step] = (), max_points: int = SERIES_POINTS) -> list[DeviceMemory]:
    """`device_memory` of a profile: its memory table, `steps` (`Steps.items`), its devices' capacities."""
    return device_memory(
        profile.memory,
        [(s.start_ns, s.start_ns + s.dur_ns) for s in steps],
        [s.id for s in steps],
        {device: info.memory_bytes for device, info in profile.devices.items()},
        max_points,
    )


def device_memory(
    memory: pd.DataFrame,
    steps: Sequence[tuple[int, int]] = (),
    step_ids: Sequence[int] | None = None,
    capacities: Mapping[str, int | None] | None = None,
    max_points: int = SERIES_POINTS,
) -> list[DeviceMemory]:
    """Memory figures of every device in the memory table (module docstring), in input and device order.

    `steps`: (start_ns, end_ns) of each step on the table's clock, with their ids
    (`step_ids`, else 0, 1, ...). `capacities`: the device's memory in bytes by
    device id (`DeviceInfo.memory_bytes`), None or absent where unknown.
    """
    if memory.empty:
        return []
    ids = list(step_ids) if step_ids is not None else list(range(len(steps)))
    bounds = np.array(steps, np.int64).reshape(-1, 2)
    codes = memory["device"].cat.codes.to_numpy()
    labels = memory["device"].cat.categories
    results = []
    for code in np.unique(codes[codes >= 0]).tolist():
        rows = memory.iloc[np.flatnonzero(codes == code)]
        device = str(labels[code])
        capacity = (capacities or {}).get(device)
        results.append(_device(device, rows, bounds, ids, capacity, max_points))
    return sorted(results, key=lambda m: (m.input_id, _natural(m.device)))


def _natural(device: str) -> list[str | int]:
    """Sort key that puts GPU:2 before GPU:10."""
    return [int(part) if part.isdigit() else part for part in _NUMBER.split(device)]


def _device(
    device: str, rows: pd.DataFrame, bounds: np.ndarray, step_ids: list[int], capacity: int | None, max_points: int
) -> DeviceMemory:
    ts = rows["ts_ns"].to_numpy()
    allocated = rows["allocated"].to_numpy()
    level = allocated + np.maximum(rows["stack_reserved"].to_numpy(), 0)
    reserved = rows["reserved"].to_numpy()
    absolute = bool(rows["absolute"].to_numpy().all())
    peak_at = int(np.argmax(level))
    has_reserved = bool((reserved >= 0).any())
    peak_reserved = int(reserved.max()) if has_reserved else None
    limit = _allocator_limit(rows, level)
    capacity = capacity or limit
    usable = limit or capacity
    initial = int(level[0] - rows["delta"].to_numpy()[0])  # before the first event (0 for running sums)
    step_rows = _steps(ts, level, initial, bounds, step_ids)
    # Without steps the whole series is one.
    limiting = step_rows or _steps(ts, level, initial, np.array([[ts[0], ts[-1] + 1]], np.int64), [-1])
    factor, static, transient = _batch_factor(limiting, usable if absolute else None)
    slack = peak_reserved - int(allocated.max()) if peak_reserved is not None else None
    warnings = []
    held = peak_reserved if peak_reserved is not None else int(level[peak_at])
    if absolute and usable and held > AT_LIMIT_FRACTION * usable:
        warnings.append("at_limit")
    if slack is not None and peak_reserved and slack > SLACK_FRACTION * peak_reserved and slack > SLACK_MIN_BYTES:
        warnings.append("slack")
    fragmentation = rows["fragmentation"].to_numpy()
    return DeviceMemory(
        device=device,
        input_id=int(rows["input_id"].to_numpy()[0]),
        events=len(rows),
        absolute=absolute,
        peak_allocated_bytes=int(allocated.max()),
        peak_in_use_bytes=int(level[peak_at]),
        peak_ns=int(ts[peak_at]),
        peak_reserved_bytes=peak_reserved,
        capacity_bytes=capacity,
        allocator_limit_bytes=limit,
        headroom_fraction=1 - int(level[peak_at]) / capacity if absolute and capacity else None,
        fragmentation_max=float(np.nanmax(fragmentation)) if not np.isnan(fragmentation).all() else None,
        slack_bytes=slack,
        steps=step_rows,
        peak_step=_step_of(ts[peak_at], bounds, step_ids),
        static_bytes=static,
        transient_bytes=transient,
        batch_headroom_factor=factor,
        top_ops_at_peak=_live_ops(rows, peak_at),
        warnings=warnings,
        series=_series(ts, allocated, reserved if has_reserved else None, max_points),
    )


def _allocator_limit(rows: pd.DataFrame, level: np.ndarray) -> int | None:
    """allocated + stack reserved + available (XSpace BFC), the highest seen; None where not recorded."""
    available = rows["available"].to_numpy()
    known = available >= 0
    return int((level[known] + available[known]).max()) if known.any() else None


def _levels_before(ts: np.ndarray, level: np.ndarray, initial: int, at: np.ndarray) -> np.ndarray:
    """The level in effect at each instant of `at`, before the events at that very instant."""
    before = np.searchsorted(ts, at, side="left") - 1
    return np.where(before >= 0, level[np.maximum(before, 0)], initial)


def _steps(
    ts: np.ndarray, level: np.ndarray, initial: int, bounds: np.ndarray, step_ids: list[int]
) -> list[StepMemory]:
    """Static level, peak and transient of each step [start, end) (its events: start <= ts < end)."""
    if not len(bounds):
        return []
    start_level = _levels_before(ts, level, initial, bounds[:, 0])
    end_level = _levels_before(ts, level, initial, bounds[:, 1])
    first = np.searchsorted(ts, bounds[:, 0], side="left")
    last = np.searchsorted(ts, bounds[:, 1], side="left")
    inside = np.full(len(bounds), np.iinfo(np.int64).min)
    some = first < last
    if some.any():  # max of level[first:last], one reduceat over (first, last) pairs; odd results unused
        pairs = np.column_stack((first[some], last[some])).ravel()
        inside[some] = np.maximum.reduceat(np.append(level, 0), pairs)[::2]
    static = np.minimum(start_level, end_level)
    peak = np.maximum(start_level, inside)
    return [
        StepMemory(id=int(i), static_bytes=int(s), peak_bytes=int(p), transient_bytes=int(p - s))
        for i, s, p in zip(step_ids, static.tolist(), peak.tolist(), strict=True)
    ]


def _batch_factor(steps: list[StepMemory], usable: int | None) -> tuple[float | None, int | None, int | None]:
    """``(0.9 * usable - static) / transient`` of the step where it is lowest, with that step's static and
    transient; None without absolute levels, usable memory or a step that allocates."""
    growing = [s for s in steps if s.transient_bytes > 0]
    if not growing:
        return None, None, None
    if usable is None:
        worst = max(growing, key=lambda s: s.transient_bytes)
        return None, worst.static_bytes, worst.transient_bytes
    spare = (1 - BATCH_SPARE_FRACTION) * usable
    factors = [max(0.0, (spare - s.static_bytes) / s.transient_bytes) for s in growing]
    worst_at = int(np.argmin(factors))
    return factors[worst_at], growing[worst_at].static_bytes, growing[worst_at].transient_bytes


def _step_of(ts: int, bounds: np.ndarray, step_ids: list[int]) -> int | None:
    """Id of the first step [start, end) holding `ts`."""
    holding = np.flatnonzero((bounds[:, 0] <= ts) & (ts < bounds[:, 1]))
    return int(step_ids[holding[0]]) if len(holding) else None


def _live_ops(rows: pd.DataFrame, peak_at: int) -> list[OpMemory]:
    """The ops whose allocations are live at row `peak_at`, most bytes first, then by name (`TOP_OPS` of them).

    An allocation ends at the next event on its address (its free); allocations
    without an address or an op are left out.
    """
    delta = rows["delta"].to_numpy()
    addr = rows["addr"].to_numpy()
    op = rows["op"].cat.codes.to_numpy()
    position = np.arange(len(rows))
    order = np.lexsort((position, addr))
    following = np.full(len(rows), len(rows), np.int64)  # the next event on the same address, by position
    same = addr[order][1:] == addr[order][:-1]
    following[order[:-1][same]] = order[1:][same]
    live = (delta > 0) & (addr >= 0) & (op >= 0) & (position <= peak_at) & (following > peak_at)
    if not live.any():
        return []
    totals = np.bincount(op[live], weights=delta[live].astype(np.float64))
    names = rows["op"].cat.categories
    found = sorted((-int(totals[c]), str(names[c])) for c in np.flatnonzero(totals).tolist())
    return [OpMemory(op=name, bytes=-negative) for negative, name in found[:TOP_OPS]]


def _series(ts: np.ndarray, allocated: np.ndarray, reserved: np.ndarray | None, max_points: int) -> MemorySeries:
    """At most `max_points` rows: the first, the last, and the lowest and highest of each time bucket."""
    n = len(ts)
    if n <= max_points:
        keep = np.arange(n)
    else:
        buckets = max(1, (max_points - 2) // 2)
        span = float(ts[-1] - ts[0]) or 1.0
        bucket = np.minimum(((ts - ts[0]) / span * buckets).astype(np.int64), buckets - 1)
        order = np.lexsort((allocated, bucket))  # by bucket, then level: a bucket's first is its lowest
        starts = np.flatnonzero(np.r_[True, bucket[order][1:] != bucket[order][:-1]])
        ends = np.r_[starts[1:], n] - 1
        keep = np.unique(np.concatenate(([0, n - 1], order[starts], order[ends])))
    return MemorySeries(
        ts_ns=ts[keep].tolist(),
        allocated=allocated[keep].tolist(),
        reserved=None if reserved is None else reserved[keep].tolist(),
    )
