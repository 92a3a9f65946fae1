"""The step model: what a step is made of, so a fix's effect on the step can be projected.

Per step of the run's step input (one value per step in each array), over the
devices of that input that ran kernels (their mean, as data-parallel devices idle
side by side):

* ``step_ns``: the step's length;
* ``device_busy_ns``: time some kernel, copy or memset runs;
* ``kernel_busy_ns``: time some kernel runs (GPU-Util's numerator);
* ``host_floor_ns``: host work that is not waiting (framework ops and runtime calls
  outside input waits and synchronisations): no fix to the device makes the step
  shorter than this;
* ``stalls``: the exposed time of each measured stall (``STALLS``), i.e. time the
  device did no useful work because of it; ``sync_outside`` is the part of ``sync`` spent in
  waits for work the trace does not hold (`waits.py`), which no fix in the trace removes;
* ``kernel_ns``: kernel time of the kernel classes efficiency estimates act on (FP32 matmul/conv,
  kernels under one block per SM, kernels under the small-kernel threshold);
* ``small_host_op_ns``: host framework ops under that threshold (a CPU-only run's tiny ops);
* ``batch_work_ns``: self time of host ops long enough to compute that are not optimizer
  updates (a CPU-only run's work that grows with the batch; the rest of the step is
  per-step fixed cost).
* ``eager_dispatch_ns``: of the host floor, the eager runtime's own cost of running ops one
  by one (TF eager ops, each up to what an op that computes nothing takes here), which a
  graph does not pay.

A fix removes idle time (a stall the device waited through) and/or device time
(exposed copies, exposed communication, faster kernels). `project` applies fixes one
after another on the same steps and recomputes each step as

    after = max(step - idle removed - device time removed,   # the same schedule, shorter
                device busy - device time removed,            # the device's remaining work
                host floor)                                   # the host's remaining work

so savings never add up past what the step holds, and removing a stall of a
host-bound step wins only down to the host's own work.
"""

from __future__ import annotations

from enum import Enum

import msgspec
import numpy as np
import pandas as pd
from msgspec import field
from msgspec.structs import replace

from traceinsight.analysis.devices import DeviceUsage, device_work
from traceinsight.analysis.gaps import DeviceGaps, gap_intervals
from traceinsight.analysis.host_ops import HostOpRows, host_op_rows
from traceinsight.analysis.kernels import flagged_kernels
from traceinsight.analysis.ledger import BUSY_PARTS, DeviceLedger, Ledger, device_ledger
from traceinsight.analysis.steps import Steps, step_bounds
from traceinsight.events import COPY_KINDS, blocking_mask, kind_mask, names_matching, rows_of_input
from traceinsight.intervals import EMPTY, Intervals, difference, union, union_of, union_of_rows
from traceinsight.result import Projection
from traceinsight.rules import (
    BATCH_WORK_MIN_NS,
    COMMUNICATION_PATTERN,
    DEFAULT_SMALL_KERNEL_NS,
    EAGER_NO_COMPUTE_OPS,
    EAGER_OP_RUN_PATTERN,
    OPTIMIZER_UPDATE_PATTERN,
    TF_EAGER_OP,
)


class Stall(str, Enum):
    """A measured stall of the step model: idle-gap causes, the step breakdown's exposed input wait, and device time
    that is exposed (copies and collectives not hidden under compute). A rule's fix names the stalls it removes by
    these, so a name without a figure cannot exist (each is computed by `_device_figures` or `step_model`)."""

    INPUT_WAIT = "input_wait"
    HOST_LAUNCH = "host_launch"
    SYNC = "sync"
    OTHER = "other"
    SYNC_OUTSIDE = "sync_outside"  # the part of SYNC waiting for work the trace does not hold
    H2D_EXPOSED = "h2d_exposed"
    D2H_EXPOSED = "d2h_exposed"
    COMMUNICATION_EXPOSED = "communication_exposed"


class KernelClass(str, Enum):
    """Kernel time of the classes efficiency estimates act on."""

    FP32_ELIGIBLE = "fp32_eligible"
    LOW_BLOCKS_WASTE = "low_blocks_waste"
    SMALL_KERNELS = "small_kernels"
    # Every kernel's duration, summed (not their union): what an estimate's summed kernel time is a share of.
    ALL = "all"


STALLS = tuple(Stall)

# The eager execution of an op that computes nothing (`_eager_dispatch`).
_NO_COMPUTE_EXECUTE = "^EagerLocalExecute: (?:" + "|".join(EAGER_NO_COMPUTE_OPS) + ")$"
KERNEL_CLASSES = tuple(KernelClass)


class StepModel(msgspec.Struct, frozen=True):
    step_ns: np.ndarray
    device_busy_ns: np.ndarray
    kernel_busy_ns: np.ndarray
    host_floor_ns: np.ndarray
    stalls: dict[Stall, np.ndarray]
    kernel_ns: dict[KernelClass, np.ndarray]
    device_count: int  # devices the per-step means are over (0: a host-only run)
    small_host_op_ns: np.ndarray  # host framework ops under the small threshold (CPU-only runs' small ops)
    batch_work_ns: np.ndarray  # self time of computing host ops that are not optimizer updates (grows with batch)
    eager_dispatch_ns: np.ndarray  # of the host floor, the eager runtime's per-op cost (a graph does not pay it)
    host_op_count: int = 0  # host ops and runtime calls (the host floor's rows) that start inside the steps
    # Of the host floor, the work done inside host-launch gaps: what a fix of launch overhead can take away.
    host_in_launch_gaps_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # Every nanosecond of each step on each device in one part: what the stalls above are read from.
    ledger: Ledger = field(default_factory=lambda: Ledger(np.zeros(0), []))

    @property
    def count(self) -> int:
        return len(self.step_ns)

    def mean(self, values: np.ndarray) -> int:
        return int(round(float(np.mean(values)))) if len(values) else 0

    @property
    def gpu_util(self) -> float | None:
        """Share of step time some kernel runs (None on a host-only run)."""
        total = float(self.step_ns.sum())
        return float(self.kernel_busy_ns.sum()) / total if self.device_count and total > 0 else None

    @property
    def idle_fraction(self) -> float | None:
        """Share of step time no kernel, copy or memset runs (None on a host-only run)."""
        total = float(self.step_ns.sum())
        return 1.0 - float(self.device_busy_ns.sum()) / total if self.device_count and total > 0 else None

    @property
    def busy_share(self) -> float:
        """Median share of a step the device is busy (0 without devices)."""
        if not self.device_count or not self.count:
            return 0.0
        return float(np.median(self.device_busy_ns / np.maximum(self.step_ns, 1)))


class Fix(msgspec.Struct, frozen=True):
    """What one fix removes from each step (ns per step)."""

    idle_ns: np.ndarray  # device idle time (a stall waited through)
    device_ns: np.ndarray  # device busy time (exposed copies, collectives, faster kernels)
    kernel_ns: np.ndarray  # of `device_ns`, the kernel time (GPU-Util)
    host_ns: np.ndarray  # host work the fix takes away (fused ops, graphs): lowers the host floor
    # Faster kernels (an efficiency estimate): their time shrinks, it never goes. Such fixes compose by what each
    # leaves of the kernel time (two that each take half leave a quarter), so no set of them empties a busy device.
    shrinks: bool = False


def speedup(before_ns: int, after_ns: int) -> float:
    """`before / after` of the mean steps a projection states, so the two always agree (1.0 without a step)."""
    return round(before_ns / after_ns, 3) if after_ns > 0 else 1.0


def fix(
    model: StepModel,
    idle_ns: np.ndarray | None = None,
    device_ns: np.ndarray | None = None,
    kernel_ns: np.ndarray | None = None,
    host_ns: np.ndarray | None = None,
) -> Fix:
    """A `Fix` with zeros where nothing is removed."""

    def per_step(values: np.ndarray | None) -> np.ndarray:
        return np.zeros(model.count, np.float64) if values is None else np.asarray(values, np.float64)

    return Fix(per_step(idle_ns), per_step(device_ns), per_step(kernel_ns), per_step(host_ns))


def faster_kernels(model: StepModel, saved_ns: np.ndarray) -> Fix:
    """The fix of an efficiency estimate that saves `saved_ns` of summed kernel durations a step: kernels on
    several streams overlap, so the saving is taken as that share of the summed durations (`KernelClass.ALL`)
    of the kernel busy time, and it shrinks the kernels (`Fix.shrinks`)."""
    total = model.kernel_ns[KernelClass.ALL]
    share = np.divide(saved_ns, total, out=np.zeros(model.count), where=total > 0).clip(0.0, 1.0)
    saved = share * model.kernel_busy_ns
    return replace(fix(model, device_ns=saved, kernel_ns=saved), shrinks=True)


def kernel_time_kept(model: StepModel, f: Fix) -> np.ndarray:
    """Of each step's kernel busy time, what a shrinking fix (`Fix.shrinks`) leaves."""
    busy = model.kernel_busy_ns
    return 1.0 - np.divide(f.kernel_ns, busy, out=np.zeros(model.count), where=busy > 0).clip(0.0, 1.0)


def bounded_step(model: StepModel, chain_ns: np.ndarray, device_ns: np.ndarray, host_ns: np.ndarray) -> np.ndarray:
    """Each step once fixes are applied: the longest of `chain_ns` (what they leave of the step's own chain), the
    device's busy time less `device_ns` and the host floor less `host_ns` (neither below 0), never longer than the
    step and never 0 ns. The step model's and the critical path's projections both end here."""
    step = model.step_ns.astype(np.float64)
    busy = model.device_busy_ns.astype(np.float64)
    floor = model.host_floor_ns.astype(np.float64)
    after = np.maximum.reduce([chain_ns, busy - np.minimum(device_ns, busy), floor - np.minimum(host_ns, floor)])
    return np.maximum(np.minimum(after, step), np.minimum(step, 1))


def project(model: StepModel, fixes: list[Fix]) -> Projection:
    """The mean step once every fix is applied, one after another, on the same steps."""
    step = model.step_ns.astype(np.float64)
    busy = model.device_busy_ns.astype(np.float64)
    idle = np.zeros(model.count)
    device = np.zeros(model.count)
    kernel = np.zeros(model.count)
    host = np.zeros(model.count)
    kept = np.ones(model.count)  # of the kernel busy time, what the shrinking fixes leave
    for f in fixes:
        if f.shrinks:
            kept *= kernel_time_kept(model, f)
            continue
        idle = np.minimum(idle + f.idle_ns, step - busy)  # no more idle time than the step has
        device = np.minimum(device + f.device_ns, busy)
        kernel = np.minimum(kernel + f.kernel_ns, model.kernel_busy_ns)
        host = np.minimum(host + f.host_ns, model.host_floor_ns)
    shrunk = model.kernel_busy_ns * (1.0 - kept)
    device = np.minimum(device + shrunk, busy)
    kernel = np.minimum(kernel + shrunk, model.kernel_busy_ns)
    after = bounded_step(model, step - idle - device, device, host)
    before_ns, after_ns = float(step.sum()), float(after.sum())
    n = max(model.count, 1)
    has_device = model.device_count > 0 and before_ns > 0
    step_before, step_after = int(round(before_ns / n)), int(round(after_ns / n))
    return Projection(
        step_ns_before=step_before,
        step_ns_after=step_after,
        saving_ns=step_before - step_after,
        speedup=speedup(step_before, step_after),
        gpu_util_before=round(float(model.kernel_busy_ns.sum()) / before_ns, 4) if has_device else None,
        gpu_util_after=round(min(float((model.kernel_busy_ns - kernel).sum()) / after_ns, 1.0), 4)
        if has_device and after_ns > 0
        else None,
    )


def _in_steps(ts: np.ndarray, values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Sum of `values` per step, each placed in the step its start falls in (steps do not overlap)."""
    idx = np.searchsorted(starts, ts, side="right") - 1
    inside = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    return np.bincount(idx[inside], weights=values[inside], minlength=len(starts))[: len(starts)]


def _exposed_in_steps(work: Intervals, hiding: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length of `work` not under `hiding`, per step: |work ∪ hiding| - |hiding|."""
    return union_of(work, hiding).covered_between(starts, ends) - hiding.covered_between(starts, ends)


def _rows_union(rows: pd.DataFrame, mask: np.ndarray) -> Intervals:
    starts = rows["ts_ns"].to_numpy()[mask]
    return union(starts, starts + rows["dur_ns"].to_numpy()[mask])


def _device_figures(
    rows: pd.DataFrame,
    kernels: pd.DataFrame,
    usage: DeviceUsage,
    gaps: DeviceGaps,
    starts: np.ndarray,
    ends: np.ndarray,
    small_threshold_ns: int,
    outside_waits: Intervals,
    input_wait: Intervals,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One device's ledger (`ledger.device_ledger`) and its per-step figures by name, read from it (a `Stall` or
    `KernelClass` member is its name; see the module docstring); `kernels`: its `flagged_kernels`;
    `outside_waits`: its input's waits for work the trace does not hold; `input_wait`: the step input's input
    waits that no runtime call and no device work of the input covers."""
    memcpy = kind_mask(rows, "memcpy")
    copy_kind = rows["copy_kind"].cat.codes.to_numpy()  # codes index COPY_KINDS
    comm = kernels["communication"].to_numpy()
    k_ts = kernels["ts_ns"].to_numpy()
    k_end = k_ts + kernels["dur_ns"].to_numpy()
    copies = [_rows_union(rows, memcpy & (copy_kind == COPY_KINDS.index(kind))) for kind in ("h2d", "d2h", "d2d")]
    parts = device_ledger(
        starts,
        ends,
        compute=union(k_ts[~comm], k_end[~comm]),
        kernels=union(k_ts, k_end),
        copies=copies,
        busy=usage.busy,
        input_wait=input_wait,
        gaps_by_cause=gap_intervals(gaps),
        outside_waits=outside_waits,
    )
    figures = {
        "device_busy_ns": sum(parts[p] for p in BUSY_PARTS),
        "kernel_busy_ns": parts["compute"] + parts["collective"],
        Stall.H2D_EXPOSED: parts["copy_h2d"],
        Stall.D2H_EXPOSED: parts["copy_d2h"],
        Stall.COMMUNICATION_EXPOSED: parts["collective"],
        Stall.INPUT_WAIT: parts["input_wait"],
        Stall.HOST_LAUNCH: parts["host_launch"],
        Stall.SYNC: parts["blocking_wait"] + parts["wait_outside_trace"],
        Stall.SYNC_OUTSIDE: parts["wait_outside_trace"],
        Stall.OTHER: parts["unexplained"],
    }
    dur = kernels["dur_ns"].to_numpy().astype(np.float64)
    fp32 = kernels["fp32"].to_numpy()
    bps = kernels["blocks_per_sm"].to_numpy()
    low = ~np.isnan(bps) & (bps < 1.0) & ~comm  # collectives run on a few SMs by design
    figures[KernelClass.FP32_ELIGIBLE] = _in_steps(k_ts[fp32], dur[fp32], starts, ends)
    figures[KernelClass.ALL] = _in_steps(k_ts, dur, starts, ends)
    alone = _alone_ns(k_ts, k_end, kernels["stream"].to_numpy(), low)
    figures[KernelClass.LOW_BLOCKS_WASTE] = _in_steps(k_ts[low], alone * (1.0 - bps[low]), starts, ends)
    small = dur < small_threshold_ns
    figures[KernelClass.SMALL_KERNELS] = np.minimum(
        _in_steps(k_ts[small], dur[small], starts, ends), figures["kernel_busy_ns"]
    )
    return parts, {name: np.asarray(v, np.float64) for name, v in figures.items()}


def _alone_ns(starts: np.ndarray, ends: np.ndarray, streams: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Of each kernel in `which` (a mask), the time no kernel of another stream overlaps: the SMs a kernel with
    fewer blocks than SMs leaves free are idle only then (DualPipe-style overlap runs compute on the SMs its
    communication kernels leave). A loop over the streams that hold such kernels, a handful."""
    rows = np.flatnonzero(which)
    alone = (ends[rows] - starts[rows]).astype(np.float64)
    for stream in np.unique(streams[rows]):
        mine = streams[rows] == stream
        others = streams != stream
        if not others.any():
            continue
        covered = union(starts[others], ends[others]).covered_between(starts[rows[mine]], ends[rows[mine]])
        alone[mine] -= covered
    return alone


def _host_op_figures(
    rows: HostOpRows, starts: np.ndarray, ends: np.ndarray, small_threshold_ns: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per step, time in host framework ops shorter than the small threshold (dispatch-bound at that size), and
    the self time of ops long enough to compute (`BATCH_WORK_MIN_NS`) that are not optimizer updates: on a
    CPU-only run, the work a bigger batch makes bigger."""
    ops, own = rows.ops, rows.self_ns
    ts = ops["ts_ns"].to_numpy()
    dur = ops["dur_ns"].to_numpy()
    small = dur < small_threshold_ns
    long_enough = own >= BATCH_WORK_MIN_NS
    computing = long_enough & ~names_matching(ops, OPTIMIZER_UPDATE_PATTERN, long_enough)
    return (
        _in_steps(ts[small], dur[small].astype(np.float64), starts, ends),
        _in_steps(ts[computing], own[computing].astype(np.float64), starts, ends),
    )


def _eager_dispatch(
    mine: pd.DataFrame, runs: np.ndarray, other: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """Per step, the eager runtime's own cost in the TF ops it ran one by one: each eager op's run
    (`runs`, ``KernelAndDevice*::Run`` rows), up to the median run of the ops that compute nothing
    (`EAGER_NO_COMPUTE_OPS`), which is that cost as measured on this run. Zero without such ops.

    A run belongs to the ``EagerLocalExecute: <op>`` row around it on its thread: rows sorted by thread
    and start (an execute before the runs that start with it), the last execute at or before each run."""
    executes = names_matching(mine, TF_EAGER_OP.pattern, other)
    chosen = np.flatnonzero(executes | runs)
    if not runs.any() or not executes.any():
        return np.zeros(len(starts))
    thread = pd.factorize(mine["thread"].to_numpy()[chosen])[0]
    ts = mine["ts_ns"].to_numpy()[chosen]
    end = ts + mine["dur_ns"].to_numpy()[chosen]
    is_execute = executes[chosen]
    order = np.lexsort((~is_execute, ts, thread))
    chosen, thread, ts, end, is_execute = chosen[order], thread[order], ts[order], end[order], is_execute[order]
    last = np.maximum.accumulate(np.where(is_execute, np.arange(len(chosen)), -1))
    run_at = np.flatnonzero(~is_execute & (last >= 0))
    parent = last[run_at]
    inside = (thread[parent] == thread[run_at]) & (end[parent] >= end[run_at])
    run_at, parent = run_at[inside], parent[inside]
    no_compute = names_matching(mine, _NO_COMPUTE_EXECUTE, executes)[chosen[parent]]
    if not no_compute.any():
        return np.zeros(len(starts))
    run_ns = (end - ts)[run_at]
    per_op = float(np.median(run_ns[no_compute]))
    return _in_steps(ts[run_at], np.minimum(run_ns, per_op).astype(np.float64), starts, ends)


def _host_floor(
    events: pd.DataFrame, input_id: int, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, Intervals]:
    """Per step, host framework ops (TF eager ops run as ``KernelAndDevice*::Run``), host collectives and runtime
    calls outside input waits and synchronisations; the count of those rows; `_eager_dispatch`; and the union of
    that host work."""
    mine = rows_of_input(events, input_id, ["ts_ns", "dur_ns", "kind", "device", "name", "thread"])
    host = mine["device"].isna().to_numpy()
    # Eager TF ops, and host collectives (gloo all_reduce, ...): host work, not overhead between ops.
    other = host & ~kind_mask(mine, "cpu_op", "runtime")
    runs = names_matching(mine, f"^(?:{EAGER_OP_RUN_PATTERN})$", other)
    is_host_work = runs.copy()
    is_host_work |= names_matching(mine, COMMUNICATION_PATTERN, other)
    working = host & ~other | is_host_work
    work = _rows_union(mine, working)
    waiting = _rows_union(mine, (host & kind_mask(mine, "input_wait")) | blocking_mask(mine))
    ts = mine["ts_ns"].to_numpy()[working]
    ops = int(_in_steps(ts, np.ones(len(ts)), starts, ends).sum())
    floor = _exposed_in_steps(work, waiting, starts, ends)
    return floor, ops, _eager_dispatch(mine, runs, other, starts, ends), work


def _own_step_bounds(
    device_steps: pd.DataFrame, device: str, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The windows of a device's own steps (`device_steps`: the rows of every device's Steps line) where it has a
    Steps line with as many steps as the run (XSpace: each GPU of a multi-worker job steps on its own clock and at
    its own pace), else the run's (the same arrays): a device is judged over the steps it ran, not another's."""
    mine = device_steps[(device_steps["device"] == device).to_numpy()]
    if mine.empty:
        return starts, ends
    own, own_ends, _ = step_bounds(mine.drop_duplicates("step_id"))
    if len(own) != len(starts) or (own == starts).all():
        return starts, ends
    return own.astype(np.int64), own_ends.astype(np.int64)


def _rescaled(parts: dict[str, np.ndarray], scale: np.ndarray, step_ns: np.ndarray) -> dict[str, np.ndarray]:
    """A device's parts over its own steps, each scaled to the run's step of the same index; the rounding is left
    in the unexplained part, so they still sum to the step exactly."""
    out = {name: np.rint(values * scale).astype(np.int64) for name, values in parts.items()}
    out["unexplained"] += step_ns - sum(out.values())
    return out


def input_ledger(
    events: pd.DataFrame,
    usages: list[DeviceUsage],
    gaps: list[DeviceGaps],
    steps: Steps,
    work: pd.DataFrame,
    kernels: pd.DataFrame,
    outside_waits: Intervals = EMPTY,
) -> Ledger:
    """The ledger of one input's devices over its own `steps`, without the rest of its step model (the host's
    figures): what a run read in one process needs of its inputs other than the step input."""
    starts, ends = steps.bounds()
    small = DEFAULT_SMALL_KERNEL_NS  # the ledger does not depend on it
    _, ledgers, _ = _devices_of_input(events, usages, gaps, steps, small, work, kernels, outside_waits)
    return Ledger(ends - starts, ledgers)


def _devices_of_input(
    events: pd.DataFrame,
    usages: list[DeviceUsage],
    gaps: list[DeviceGaps],
    steps: Steps,
    small_threshold_ns: int,
    work: pd.DataFrame | None,
    kernels: pd.DataFrame | None,
    outside_waits: Intervals,
) -> tuple[list[tuple[DeviceUsage, DeviceGaps]], list[DeviceLedger], list[dict[str, np.ndarray]]]:
    """The devices of the steps' input the step model is over (those that ran kernels, else all), and each one's
    ledger and per-step figures, in the run's step lengths."""
    starts, ends = steps.bounds()
    mine = [(u, g) for u, g in zip(usages, gaps, strict=True) if u.input_id == steps.input_id]
    devices = [(u, g) for u, g in mine if u.kernel_busy_ns > 0] or mine
    if not devices:
        return devices, [], []
    work = device_work(events) if work is None else work
    kernels = flagged_kernels(work) if kernels is None else kernels
    input_wait = input_wait_intervals(events, steps.input_id, [u.busy for u, _ in mine])
    own_steps = events[kind_mask(events, "step") & events["device"].notna().to_numpy()]  # device Steps lines
    ledgers, per_device = [], []
    for usage, device_gaps in devices:
        rows = work[(work["device"] == usage.id).to_numpy()]
        its_kernels = kernels[(kernels["device"] == usage.id).to_numpy()]
        own_starts, own_ends = _own_step_bounds(own_steps, usage.id, starts, ends)
        parts, figures = _device_figures(
            rows, its_kernels, usage, device_gaps, own_starts, own_ends, small_threshold_ns, outside_waits, input_wait
        )
        if own_starts is not starts:  # in the run's step lengths, each part keeping its share of the device's step
            scale = (ends - starts) / np.maximum(own_ends - own_starts, 1)
            parts = _rescaled(parts, scale, ends - starts)
            figures = {name: values * scale for name, values in figures.items()}
        ledgers.append(DeviceLedger(usage.id, parts, ends - starts))
        per_device.append(figures)
    return devices, ledgers, per_device


def input_wait_intervals(events: pd.DataFrame, input_id: int, busy: list[Intervals]) -> Intervals:
    """The input's host input waits that no host runtime call and no device work of the input covers: the step
    breakdown's input wait (`steps.breakdown`), the same instants on every device of the input."""
    mine = rows_of_input(events, input_id, ["ts_ns", "dur_ns", "kind", "device"])
    host = mine["device"].isna().to_numpy()
    starts, durations = mine["ts_ns"].to_numpy(), mine["dur_ns"].to_numpy()
    waits = union_of_rows(starts, durations, host & kind_mask(mine, "input_wait"))
    if len(waits) == 0:
        return EMPTY
    runtime = union_of_rows(starts, durations, host & kind_mask(mine, "runtime", "sync"))
    return difference(waits, union_of(runtime, *busy))


def _overlap_in_steps(a: Intervals, b: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length of `a` ∩ `b` per step: |a| + |b| - |a ∪ b|."""
    return (
        a.covered_between(starts, ends) + b.covered_between(starts, ends) - union_of(a, b).covered_between(starts, ends)
    )


def step_model(
    events: pd.DataFrame,
    usages: list[DeviceUsage],
    gaps: list[DeviceGaps],
    steps: Steps,
    small_threshold_ns: int = DEFAULT_SMALL_KERNEL_NS,
    work: pd.DataFrame | None = None,
    kernels: pd.DataFrame | None = None,
    ops: HostOpRows | None = None,
    outside_waits: Intervals = EMPTY,
) -> StepModel:
    """The step model of the run's steps (see the module docstring). `work` (`device_work(events)`), `kernels`
    (`flagged_kernels(work)`) and `ops` (`host_op_rows` of the steps' input): what the other analyses
    found already, if known. `outside_waits`: the steps' input's waits for work the trace does not hold
    (`waits.Waits.outside_of`)."""
    starts, ends = steps.bounds()
    count = len(starts)
    devices, ledgers, per_device = _devices_of_input(
        events, usages, gaps, steps, small_threshold_ns, work, kernels, outside_waits
    )

    def mean(name: str) -> np.ndarray:
        if not per_device:
            return np.zeros(count, np.float64)
        return np.mean([f[name] for f in per_device], axis=0).astype(np.float64)

    stalls = {name: mean(name) for name in STALLS}
    floor, host_ops, dispatch, host_work = (
        _host_floor(events, steps.input_id, starts, ends) if count else (np.zeros(0), 0, np.zeros(0), EMPTY)
    )
    in_launch_gaps = [_overlap_in_steps(host_work, gap_intervals(g)["host_launch"], starts, ends) for _, g in devices]
    if not per_device:  # a host-only run: the input wait is the step breakdown's (host waiting, nothing else running)
        stalls[Stall.INPUT_WAIT] = np.array([s.breakdown["input_wait"] for s in steps.items], np.float64)
    ops = host_op_rows(events, steps.input_id) if ops is None else ops
    small_ops, batch_work = _host_op_figures(ops, starts, ends, small_threshold_ns)
    return StepModel(
        step_ns=ends - starts,
        device_busy_ns=mean("device_busy_ns"),
        kernel_busy_ns=mean("kernel_busy_ns"),
        host_floor_ns=floor.astype(np.float64),
        host_in_launch_gaps_ns=np.mean(in_launch_gaps, axis=0) if in_launch_gaps and count else np.zeros(count),
        stalls=stalls,
        kernel_ns={name: mean(name) for name in KERNEL_CLASSES},
        device_count=len(per_device),
        small_host_op_ns=small_ops,
        batch_work_ns=batch_work,
        eager_dispatch_ns=np.minimum(dispatch, floor),
        host_op_count=host_ops,
        ledger=Ledger(ends - starts, ledgers),
    )
