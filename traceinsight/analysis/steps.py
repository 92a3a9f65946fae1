"""Training steps and where each step's time went.

Steps come from markers when the trace has them (PyTorch ``ProfilerStep#N``,
TensorFlow ``train``/``Profiled batch`` with ``step_num``, an XSpace ``Steps``
line). Without markers ("No step marker observed" leaves XProf's pages empty) they
are inferred: first from a host event that repeats back to back and covers most
of the trace (``multi_step_on_iterator``, a training-loop range), then from bursts
of device activity separated by long idle gaps. Inferred steps must repeat at one
scale (`_one_scale`: never microsecond "steps" beside a 493 ms one); without such a
structure the span of device activity (the whole window on a host-only run) is one step: a capture that starts
long before the first kernel does not dilute the device's figures. The result always says which source was used.

Each step's time is split by priority, so the parts sum to the step time: an
instant counts once, for the highest category active at it (as XProf and the
PyTorch plugin do):
device_compute > device_copy > host_runtime > input_wait > host_compute > idle.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec
import numpy as np
import pandas as pd
from msgspec import field

from traceinsight.events import DEVICE_WORK_KINDS, kind_mask, rows_of_input
from traceinsight.intervals import EMPTY, Intervals, union, union_of, union_of_rows
from traceinsight.rules import (
    BREAKDOWN,
    INFERRED_STEP_MIN_SHARE,
    LAST_INFERRED_STEP_MIN_SHARE,
    MIN_INFERRED_STEPS,
    MIN_REPEATING_COVERAGE,
    MIN_REPEATS,
    MIN_STEP_GAP_NS,
)

# Python functions repeat per layer, not per step (with_stack traces), so they are not candidates.
_REPEATING_KINDS = ("cpu_op", "annotation", "other")


class Step(msgspec.Struct, frozen=True):
    id: int
    start_ns: int
    dur_ns: int
    breakdown: dict[str, int]


class Steps(msgspec.Struct, frozen=True):
    source: str  # "marker" | "inferred" | "none"
    marker: str  # what exactly the steps were taken from, for people
    input_id: int
    items: list[Step]
    device: str | None = None  # the device whose Steps line gave them, when one did
    # Mean step per device of the step input that has a Steps line of its own (XSpace): devices of one
    # data-parallel job step at different speeds, and the spread says by how much.
    per_device: dict[str, int] = field(default_factory=dict)

    @property
    def device_spread_ns(self) -> int | None:
        """Slowest minus fastest device's mean step (None with fewer than two devices' Steps lines)."""
        means = list(self.per_device.values())
        return max(means) - min(means) if len(means) > 1 else None

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def total_ns(self) -> int:
        return sum(s.dur_ns for s in self.items)

    @property
    def mean_ns(self) -> int | None:
        return int(np.mean([s.dur_ns for s in self.items])) if self.items else None

    @property
    def median_ns(self) -> int | None:
        return int(np.median([s.dur_ns for s in self.items])) if self.items else None

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The steps' starts and ends (ns), in their order: the windows every per-step figure is taken over."""
        starts = np.array([s.start_ns for s in self.items], np.int64)
        return starts, starts + np.array([s.dur_ns for s in self.items], np.int64)

    def breakdown_total(self) -> dict[str, int]:
        return {cat: sum(s.breakdown[cat] for s in self.items) for cat in BREAKDOWN}


def step_bounds(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts, ends and step ids of step rows, in time order."""
    rows = rows.sort_values("ts_ns", kind="stable")
    starts = rows["ts_ns"].to_numpy()
    return starts, starts + rows["dur_ns"].to_numpy(), rows["step_id"].to_numpy()


def device_line_label(device: str) -> str:
    """How steps taken from a device's Steps line say so."""
    return f"Steps line of {device}"


def _marker_steps(
    events: pd.DataFrame,
) -> tuple[int, str, str | None, np.ndarray, np.ndarray, np.ndarray] | None:
    """Host step markers (first input that has them), else a device Steps line (and that device)."""
    steps = events[(events["kind"] == "step").to_numpy()]
    host = steps[steps["device"].isna().to_numpy()]
    if not host.empty:
        input_id = int(host["input_id"].min())
        mine = host[host["input_id"].to_numpy() == input_id].drop_duplicates("step_id")
        names = mine["name"].astype(str)
        label = "ProfilerStep#N" if names.str.startswith("ProfilerStep").all() else f"step marker '{names.iloc[0]}'"
        return (input_id, label, None, *step_bounds(mine))
    device = steps[steps["device"].notna().to_numpy()]
    if not device.empty:
        first = device["device"].astype(str).min()
        mine = device[(device["device"] == first).to_numpy()].drop_duplicates("step_id")
        return (int(mine["input_id"].iloc[0]), device_line_label(first), first, *step_bounds(mine))
    return None


def _repeating_host_event(host: pd.DataFrame, window_ns: int) -> tuple[str, np.ndarray, np.ndarray] | None:
    """A host event name repeating back to back that covers much of the window."""
    cand = host[host["kind"].isin(_REPEATING_KINDS).to_numpy()]
    if cand.empty or window_ns <= 0:
        return None
    agg = cand.groupby("name", observed=True)["dur_ns"].agg(["size", "sum"])
    agg = agg[(agg["size"] >= MIN_REPEATS) & (agg["sum"] >= MIN_REPEATING_COVERAGE * window_ns)]
    for name in agg.sort_values("sum", ascending=False).index[:5]:
        rows = cand[(cand["name"] == name).to_numpy()].sort_values("ts_ns")
        starts = rows["ts_ns"].to_numpy()
        ends = starts + rows["dur_ns"].to_numpy()
        if (starts[1:] >= ends[:-1]).all():
            return str(name), starts, ends
    return None


def _activity_bursts(device_busy: Intervals) -> tuple[np.ndarray, np.ndarray] | None:
    """Bursts of device activity separated by long idle gaps."""
    gaps = device_busy.gaps()
    if len(gaps) == 0:
        return None
    length = gaps.ends - gaps.starts
    big = length >= max(MIN_STEP_GAP_NS, int(0.5 * length.max()))
    if not big.any():
        return None
    bounds = np.concatenate(([device_busy.starts[0]], gaps.ends[big], [device_busy.ends[-1]]))
    return bounds[:-1], bounds[1:]


Bounds = TypeVar("Bounds", tuple[np.ndarray, np.ndarray], tuple[str, np.ndarray, np.ndarray])


def _one_scale(found: Bounds | None) -> Bounds | None:
    """Inferred steps only where they repeat at one scale (`MIN_INFERRED_STEPS` or more, none shorter than
    `INFERRED_STEP_MIN_SHARE` of the longest but the last, cut at its burst's end: `LAST_INFERRED_STEP_MIN_SHARE`):
    one 493 ms burst beside microsecond ones is no step structure."""
    if found is None:
        return None
    starts, ends = found[-2], found[-1]
    lengths = ends - starts
    if len(lengths) < MIN_INFERRED_STEPS:
        return None
    longest = lengths.max()
    if lengths[:-1].min() < INFERRED_STEP_MIN_SHARE * longest or lengths[-1] < LAST_INFERRED_STEP_MIN_SHARE * longest:
        return None
    return found


def _category_unions(events: pd.DataFrame) -> list[Intervals]:
    """Unions of each breakdown category (all but idle) for one input's events."""
    host = events["device"].isna().to_numpy()
    starts, durations = events["ts_ns"].to_numpy(), events["dur_ns"].to_numpy()
    masks = [
        kind_mask(events, "kernel") & ~host,
        kind_mask(events, "memcpy", "memset") & ~host,
        kind_mask(events, "runtime", "sync") & host,
        kind_mask(events, "input_wait") & host,
        kind_mask(events, "cpu_op") & host,
    ]
    return [union_of_rows(starts, durations, m) for m in masks]


def breakdown(events: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> list[dict[str, int]]:
    """Per window, ns of each category by priority; the parts sum to the window length."""
    covered_so_far = np.zeros(len(starts), np.int64)
    cumulative = EMPTY
    parts: dict[str, np.ndarray] = {}
    for cat, cat_union in zip(BREAKDOWN[:-1], _category_unions(events), strict=True):
        cumulative = union_of(cumulative, cat_union)
        covered = cumulative.covered_between(starts, ends)
        parts[cat] = covered - covered_so_far
        covered_so_far = covered
    parts["idle"] = (ends - starts) - covered_so_far
    return [{cat: int(parts[cat][i]) for cat in BREAKDOWN} for i in range(len(starts))]


def find_steps(events: pd.DataFrame) -> Steps:
    """Steps of the run with their breakdowns; never empty when there are events."""
    if events.empty:
        return Steps("none", "no events", 0, [])
    marked = _marker_steps(events)
    device = None
    if marked is not None:
        input_id, label, device, starts, ends, ids = marked
        source = "marker"
    else:
        input_id = int(events["input_id"].min())
        mine = rows_of_input(events, input_id)
        window_start = int(mine["ts_ns"].min())
        window_end = int((mine["ts_ns"] + mine["dur_ns"]).max())
        source = "inferred"
        work = mine[kind_mask(mine, *DEVICE_WORK_KINDS) & mine["device"].notna().to_numpy()]
        repeating = _one_scale(_repeating_host_event(mine[mine["device"].isna().to_numpy()], window_end - window_start))
        bursts = (
            None if repeating else _one_scale(_activity_bursts(union(work["ts_ns"], work["ts_ns"] + work["dur_ns"])))
        )
        if repeating:
            name, starts, ends = repeating
            label = f"repeating host event '{name}'"
        elif bursts:
            starts, ends = bursts
            label = "device activity bursts"
        elif len(work):
            starts = np.array([int(work["ts_ns"].min())])
            ends = np.array([int((work["ts_ns"] + work["dur_ns"]).max())])
            label = "one step: the device activity span (no markers, no repeating structure at one scale)"
        else:
            starts, ends = np.array([window_start]), np.array([window_end])
            label = "whole window (no markers, no repeating pattern)"
        ids = np.arange(len(starts))
    parts = breakdown(rows_of_input(events, input_id, ["ts_ns", "dur_ns", "kind", "device"]), starts, ends)
    items = [Step(int(ids[i]), int(starts[i]), int(ends[i] - starts[i]), parts[i]) for i in range(len(starts))]
    return Steps(source, label, input_id, items, device, _device_step_means(events, input_id))


def _device_step_means(events: pd.DataFrame, input_id: int) -> dict[str, int]:
    """Mean step of each device of the input that has its own Steps line."""
    mine = rows_of_input(events, input_id, ["kind", "device", "dur_ns", "step_id"])
    lines = mine[kind_mask(mine, "step") & mine["device"].notna().to_numpy()]
    if lines.empty:
        return {}
    lines = lines.drop_duplicates(["device", "step_id"])
    means = lines.groupby("device", observed=True)["dur_ns"].mean()
    return {str(device): int(mean) for device, mean in means.items()}
