"""Compute efficiency: what the busy time achieves. FLOPs and bytes per op, kernel classes on the roofline, MFU.

GPU-Util counts the time some kernel runs, so a device can be 95 % busy and do a fifth of the work it could.
Here the kernels' work is counted from what the trace holds (`flops.py`: the ops' shapes, or the profiler's own
counts), each kernel is given its share of its op's FLOPs and bytes (by its duration among the op's kernels), and:

* **kernel classes** (`kernel_classes.py`, by name; a kernel of a counted matmul, conv or attention op takes the
  op's class): time, share of kernel time, achieved TFLOP/s and TB/s over the kernels whose work is counted, and
  compute- or memory-bound by the roofline against the device's published peaks (`hardware.py`);
* **MFU per step**: counted FLOPs / (step time x peak of the dtype that carries most FLOPs x devices), over
  the device-side window of each step where the trace has one (Kineto's `ProfilerStep#N` on the device, which
  starts when the device starts the step's work, not when the host does), else the step itself, so the kernels
  counted are the kernels timed. Its decomposition multiplies out exactly:
  MFU = GPU-Util (kernel busy / window) x compute share (matmul, conv and attention kernel time, and that of any
  other kernel with counted FLOPs, / kernel busy) x their efficiency (FLOPs / (that time x peak));
* **time above the roofline** per step: each counted op's kernel time minus the time its FLOPs and bytes need
  at the device's peaks (the `low_compute_efficiency` fix, bounded by the roofline).

A device the hardware table does not know gets figures without a peak ratio; a trace without FLOPs gets a note
saying how to record them, never a made-up MFU.

Every figure says how much of the time it judges it could read: `flop_coverage` is the kernel time of the
compute-class kernels (matmul, conv, attention, and any kernel with counted FLOPs) whose FLOPs are counted over
all their kernel time, `precision_coverage` the share of that time whose precision is known (by the op's dtype or
the kernel's name). MFU counts only what is counted, so under `rules.MFU_EXACT_COVERAGE` it is a lower bound; the
compute kernels without counted FLOPs are listed by why (`not_counted_kernel_ns`: an op with no shapes, an op with
no formula, a graph node whose capture is not in the trace, a kernel no op launched).
"""

from __future__ import annotations

from typing import TypedDict

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.devices import DeviceUsage
from traceinsight.analysis.flops import NESTED, NO_FORMULA, op_costs
from traceinsight.analysis.graphs import NOT_REPLAYED, replay_nodes
from traceinsight.analysis.hardware import DevicePeaks, device_peaks
from traceinsight.analysis.kernel_classes import kernel_classes
from traceinsight.analysis.op_kernels import kernel_ops, kernel_owners, replay_owners
from traceinsight.analysis.steps import Steps
from traceinsight.analysis.tensor_cores import classify_kernel_names
from traceinsight.events import Profile, concat_op_tables, kind_mask
from traceinsight.intervals import union
from traceinsight.result import ComputeClass, ComputeEfficiency, ComputeStep, RooflineOp
from traceinsight.rules import (
    COMPUTE_CLASSES,
    FLOPS_HOW_TO,
    HLO_DTYPES,
    HLO_RESULT_TYPE,
    KERNEL_CLASSES,
    MFU_EXACT_COVERAGE,
    PROFILER_STEP_PATTERN,
    ROOFLINE_OPS,
    TPU_MATMUL_DTYPE,
)


class _Rates(TypedDict):
    tflops: float | None
    tbps: float | None
    intensity: float | None
    bound: str | None
    roofline_fraction: float | None


class Compute(msgspec.Struct, frozen=True):
    """The report's figures (`summary`) and, per step of the run, the kernel time above the roofline (ns): what
    `low_compute_efficiency`'s fix removes."""

    summary: ComputeEfficiency
    over_roofline_ns: np.ndarray
    ops: list[RooflineOp]  # every counted op (by name, class and dtype), longest first: the summary lists the first


class _Kernels(msgspec.Struct, frozen=True):
    """The kernel rows: where they ran, their class, and the FLOPs, bytes and roofline time of their work."""

    rows: np.ndarray
    device: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    # The time its work is rated over: its duration, except for an XSpace op, timed by the device itself
    # (`device_duration_ps`, as XProf rates it; the event's span can be longer).
    work_ns: np.ndarray
    kernel_class: np.ndarray  # index into KERNEL_CLASSES
    owner: np.ndarray  # counted op (position in the op table), -1
    op_dtype: np.ndarray  # per op of the table: its compute dtype (`_op_dtypes`), TF32 where FP32 ran on Tensor Cores
    flops: np.ndarray  # the kernel's share of its op's FLOPs, 0 where not counted
    precision_known: np.ndarray  # its op's dtype or its own name tells its precision
    bytes: np.ndarray  # NaN where not known
    roofline_ns: np.ndarray  # the time its share of the work needs at the peaks (its duration where not counted)


def compute_efficiency(
    profile: Profile, usages: list[DeviceUsage], steps: Steps, capture: Profile | None = None
) -> Compute:
    """The run's compute efficiency (module docstring); `profile.events` is the analyzed (steady) part. `capture`:
    the graph capture pass beside a replay, whose launches give the replayed kernels their ops."""
    events, ops, costs, owner = _owned(profile, capture)
    peaks = _peaks(profile, usages)
    kernels = _kernels(events, ops, costs, peaks, owner)
    flops_source = _source(ops, costs, kernels)
    dtype = _dtype(ops, costs, kernels, peaks)
    peak = _op_peak(peaks, dtype)
    points = _op_points(ops, costs, kernels, peaks)
    windows, window_kind = _windows(events, steps)
    in_step = _step_of(kernels.start, windows)
    flop_coverage, precision_coverage = _coverage(kernels, in_step >= 0)
    summary_steps, mfu, util, share, efficiency = _steps(kernels, in_step, windows, steps, peak)
    over = np.zeros(len(windows[0]))
    np.add.at(over, in_step[in_step >= 0], (kernels.work_ns - kernels.roofline_ns)[in_step >= 0])
    summary = ComputeEfficiency(
        flops_source=flops_source,
        note=None if flops_source != "none" else _note(profile),
        device=None if not peaks else peaks[0].name,
        peak_source=None if not peaks else peaks[0].source,
        dtype=dtype,
        peak_tflops=None if peak is None else round(peak / 1e3, 3),
        memory_tbps=None if not peaks else peaks[0].memory_tbps,
        counted_ops=int(np.isfinite(costs["flops"].to_numpy()).sum()) if costs is not None else 0,
        not_counted=_not_counted(ops, costs),
        not_counted_kernel_ns=_not_counted_kernels(events, ops, costs, kernels, in_step >= 0),
        flop_coverage=flop_coverage,
        precision_coverage=precision_coverage,
        mfu_is_lower_bound=mfu is not None and (flop_coverage or 0.0) < MFU_EXACT_COVERAGE,
        flops=float(kernels.flops.sum()),
        classes=_classes(kernels, peaks, dtype),
        ops=points[:ROOFLINE_OPS],
        window=window_kind,
        steps=summary_steps,
        mfu=mfu,
        gpu_util=util,
        compute_share=share,
        compute_efficiency=efficiency,
    )
    return Compute(summary, np.clip(over, 0, None), points)


def _peaks(profile: Profile, usages: list[DeviceUsage]) -> list[DevicePeaks]:
    """Each device's entry of the hardware table; empty when one is unknown (no peak ratio is then given). A trace
    that describes one device only while its kernels ran on one other id (ROCm servers: properties for device 0,
    kernels on the physical id) is taken to describe that device."""
    described = [info for info in profile.devices.values() if info.name or info.compute_capability]
    found = [device_peaks(info) if (info := profile.devices.get(u.id)) else None for u in usages]
    if len(usages) == 1 and found == [None] and len(described) == 1:
        found = [device_peaks(described[0])]
    return [] if not found or any(p is None for p in found) else [p for p in found if p is not None]


def _op_dtypes(ops: pd.DataFrame, costs: pd.DataFrame | None) -> np.ndarray:
    """Per op: the hardware table's dtype name of its compute (Kineto: its inputs'; XSpace: the HLO result type)."""
    if costs is None:
        return np.zeros(0, dtype=object)
    dtypes = np.array(costs["dtype"].astype(object).to_numpy(), dtype=object)
    device_ops = ops["device"].cat.codes.to_numpy() >= 0
    if device_ops.any():
        names = ops["name"].astype(str).to_numpy()[device_ops]
        found = [HLO_RESULT_TYPE.search(n) for n in names]
        dtypes[device_ops] = [HLO_DTYPES.get(m.group(1)) if m else None for m in found]
    return dtypes


def _tensor_core_fp32(dtypes: np.ndarray, kernel_names: np.ndarray, owner: np.ndarray) -> None:
    """FP32 ops whose kernels ran on Tensor Cores computed in TF32 (Ampere's default for convolutions, and for
    matmuls where allowed; `cutlass_80_tensorop_s1688gemm` is one): their peak is TF32's, in place."""
    mine = owner >= 0
    if not mine.any():
        return
    names = pd.Series(kernel_names[mine]).astype("category")
    on_tensor_cores = classify_kernel_names(names)["tensor_core"].to_numpy(bool)
    ran = np.unique(owner[mine][on_tensor_cores])
    dtypes[ran[dtypes[ran] == "fp32"]] = "tf32"


def _op_peak(peaks: list[DevicePeaks], dtype: str | None) -> float | None:
    """One device's peak (FLOP per ns) for `dtype`: a TPU's bf16 for its f32 work."""
    if not peaks:
        return None
    part = peaks[0]
    tflops = part.peak(dtype) if dtype else None
    if tflops is None and part.vendor == "google":
        tflops = part.peak(TPU_MATMUL_DTYPE)
    return None if tflops is None else tflops * 1e3  # TFLOP/s = 1e3 FLOP per ns


def _owned(
    profile: Profile, capture: Profile | None
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None, np.ndarray]:
    """The events, the op table and its costs (the capture pass's ops after the run's own, where one is given),
    and per event row the counted op whose work it is (-1: none): launched by it or nested in it, an XSpace op's
    own kernel, or a replayed node of a graph whose capture launched it from that op."""
    events, ops = profile.events, profile.ops
    costs = op_costs(ops) if len(ops) else None
    owner = np.full(len(events), -1, np.int64) if costs is None else kernel_owners(events, ops, costs)
    if capture is None or not len(capture.ops):
        return events, ops, costs, owner
    captured = op_costs(capture.ops)
    counted = np.flatnonzero(np.isfinite(captured["flops"].to_numpy()))
    replayed = replay_owners(events, capture.events, capture.ops, counted)
    fill = (owner < 0) & (replayed >= 0)
    owner[fill] = replayed[fill] + len(ops)
    both = concat_op_tables([ops, capture.ops])
    costs = pd.concat([c for c in (costs, captured) if c is not None], ignore_index=True)
    return events, both, costs, owner


def _kernels(
    events: pd.DataFrame, ops: pd.DataFrame, costs: pd.DataFrame | None, peaks: list[DevicePeaks], owners: np.ndarray
) -> _Kernels:
    rows = np.flatnonzero(kind_mask(events, "kernel") & (events["device"].cat.codes.to_numpy() >= 0))
    dur = events["dur_ns"].to_numpy()[rows].astype(np.float64)
    classes = kernel_classes(events).codes[rows].astype(np.int64)
    classes[classes < 0] = KERNEL_CLASSES.index("other")
    owner = np.full(len(rows), -1, np.int64)
    flops, nbytes, roofline, work = np.zeros(len(rows)), np.full(len(rows), np.nan), dur.copy(), dur.copy()
    dtypes = np.full(len(ops), None, dtype=object)
    # The kernels' own names only (the table's categories hold every host name too), as `kernels.flagged_kernels`.
    names = events["name"].iloc[rows].cat.remove_unused_categories()
    precision_known = np.array(classify_kernel_names(names)["precision"].notna(), bool)
    if costs is not None and len(rows):
        owner = owners[rows]
        mine = owner >= 0
        device_op = mine & (ops["thread"].to_numpy()[np.where(mine, owner, 0)] < 0)
        work[device_op] = ops["dur_ns"].to_numpy()[owner[device_op]]
        op_ns = np.zeros(len(ops))
        np.add.at(op_ns, owner[mine], work[mine])
        op_total = op_ns[np.where(mine, owner, 0)]
        share = np.divide(work, op_total, out=np.zeros(len(rows)), where=mine & (op_total > 0))
        op_flops = costs["flops"].to_numpy()
        traced_bytes = ops["bytes_accessed"].to_numpy()
        op_bytes = np.where(np.isfinite(traced_bytes), traced_bytes, costs["bytes"].to_numpy())
        at = np.where(mine, owner, 0)
        flops = np.where(mine, op_flops[at] * share, 0.0)
        nbytes = np.where(mine, op_bytes[at] * share, np.nan)
        dtypes = _op_dtypes(ops, costs)
        _tensor_core_fp32(dtypes, events["name"].to_numpy()[rows], owner)
        # A peak per distinct dtype (a handful), not a call per op (23,628 on resnet50).
        kinds, kind_of = np.unique(np.where(pd.isna(dtypes), "", dtypes).astype(str), return_inverse=True)
        op_peak = np.array([_op_peak(peaks, kind or None) or np.nan for kind in kinds], np.float64)[kind_of]
        bandwidth = peaks[0].memory_tbps * 1e3 if peaks else np.nan  # TB/s = 1e3 bytes per ns
        need = np.fmax(flops / op_peak[at], np.where(np.isfinite(nbytes), nbytes, 0.0) / bandwidth)
        roofline = np.where(mine & np.isfinite(need), np.minimum(need, work), work)
        # Copies and collectives are bound by a link (PCIe, host memory, the network), not by the device's memory:
        # no time above the device's roofline is claimed for them.
        linked = np.isin(classes, [KERNEL_CLASSES.index("copy"), KERNEL_CLASSES.index("communication")])
        roofline[linked] = work[linked]
        # A counted op's kernels do its kind of work whatever their names (cuDNN runs convolutions as `sgemm`
        # kernels): they take the op's class, so a class's rate is its ops' work over their kernels' time.
        op_class = costs["op_class"].astype(str).to_numpy()[at]
        for name in COMPUTE_CLASSES:
            classes[mine & (op_class == name)] = KERNEL_CLASSES.index(name)
        precision_known |= mine & pd.notna(dtypes[at])
    return _Kernels(
        rows=rows,
        device=events["device"].cat.codes.to_numpy()[rows],
        start=events["ts_ns"].to_numpy()[rows],
        dur=dur,
        work_ns=work,
        kernel_class=classes,
        owner=owner,
        op_dtype=dtypes,
        flops=np.nan_to_num(flops),
        precision_known=precision_known,
        bytes=nbytes,
        roofline_ns=roofline,
    )


def _source(ops: pd.DataFrame, costs: pd.DataFrame | None, kernels: _Kernels) -> str:
    """Where the FLOPs come from: "profiler" (the trace's own counts), "shapes" (our formulas), or "none"."""
    if costs is None or not (kernels.owner >= 0).any():
        return "none"
    counted = kernels.owner[kernels.owner >= 0]
    return "profiler" if np.isfinite(ops["flops"].to_numpy()[counted]).any() else "shapes"


def _dtype(ops: pd.DataFrame, costs: pd.DataFrame | None, kernels: _Kernels, peaks: list[DevicePeaks]) -> str | None:
    """The dtype that carries most of the counted FLOPs (a TPU's f32 counts as its bf16)."""
    mine = kernels.owner >= 0
    if costs is None or not mine.any():
        return None
    dtypes = pd.Series(kernels.op_dtype[kernels.owner[mine]], dtype=object).fillna("unknown")
    by = pd.Series(kernels.flops[mine]).groupby(dtypes.to_numpy()).sum()
    top = str(by.idxmax()) if len(by) and by.max() > 0 else None
    if top in (None, "unknown"):
        return TPU_MATMUL_DTYPE if peaks and peaks[0].vendor == "google" else None
    if peaks and peaks[0].vendor == "google" and peaks[0].peak(top) is None:
        return TPU_MATMUL_DTYPE
    return top


def _windows(events: pd.DataFrame, steps: Steps) -> tuple[tuple[np.ndarray, np.ndarray], str]:
    """Each step's window: its device-side range (the device annotations of the same `ProfilerStep#N`, first start
    to last end over the devices) where the trace has one for every step, else the step itself."""
    starts, ends = steps.bounds()
    on_device = kind_mask(events, "annotation") & (events["device"].cat.codes.to_numpy() >= 0)
    if not on_device.any() or not len(starts):
        return (starts, ends), "step"
    names = events["name"].to_numpy()[on_device].astype(str)
    ids = pd.Series(names).str.extract(PROFILER_STEP_PATTERN, expand=False)
    marked = ids.notna().to_numpy()
    if not marked.any():
        return (starts, ends), "step"
    table = pd.DataFrame(
        {
            "id": ids[marked].astype(np.int64).to_numpy(),
            "start": events["ts_ns"].to_numpy()[on_device][marked],
            "end": (events["ts_ns"] + events["dur_ns"]).to_numpy()[on_device][marked],
        }
    ).groupby("id")
    first, last = table["start"].min(), table["end"].max()
    wanted = [s.id for s in steps.items]
    if not all(i in first.index for i in wanted):
        return (starts, ends), "step"
    return (first.loc[wanted].to_numpy(np.int64), last.loc[wanted].to_numpy(np.int64)), "device step"


def _step_of(starts: np.ndarray, windows: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per kernel: the step whose window holds its start, -1 for none (windows do not overlap)."""
    begin, end = windows
    order = np.argsort(begin, kind="stable")
    at = np.searchsorted(begin[order], starts, side="right") - 1
    inside = (at >= 0) & (starts < end[order][np.clip(at, 0, None)])
    return np.where(inside, order[np.clip(at, 0, None)], -1)


def _steps(
    kernels: _Kernels,
    in_step: np.ndarray,
    windows: tuple[np.ndarray, np.ndarray],
    steps: Steps,
    peak: float | None,
) -> tuple[list[ComputeStep], float | None, float | None, float | None, float | None]:
    """Per step: its window, counted FLOPs and MFU; and over all steps the MFU with its three factors. `peak` is one
    device's (FLOP per ns); every device that ran a kernel counts once in the windows."""
    begin, end = windows
    n = len(begin)
    flops = np.zeros(n)
    np.add.at(flops, in_step[in_step >= 0], kernels.flops[in_step >= 0])
    compute = _arithmetic(kernels) & (in_step >= 0)
    compute_ns = float(kernels.dur[compute].sum())
    devices = max(len(np.unique(kernels.device)), 1)
    busy = 0.0
    for code in np.unique(kernels.device):
        mine = kernels.device == code
        busy += float(
            union(kernels.start[mine], kernels.start[mine] + kernels.dur[mine].astype(np.int64))
            .covered_between(begin, end)
            .sum()
        )
    window_ns = float((end - begin).sum()) * devices
    counted = float(flops.sum())
    per_step = [
        ComputeStep(
            id=s.id,
            start_ns=int(b),
            dur_ns=int(e - b),
            flops=float(f),
            mfu=_ratio(f, (e - b) * devices * peak) if peak else None,
        )
        for s, b, e, f in zip(steps.items, begin.tolist(), end.tolist(), flops.tolist(), strict=True)
    ]
    if counted <= 0 or window_ns <= 0:
        return per_step, None, None, None, None
    util = _ratio(busy, window_ns)
    share = _ratio(compute_ns, busy)
    efficiency = _ratio(counted, compute_ns * peak) if peak else None
    mfu = _ratio(counted, window_ns * peak) if peak else None
    return per_step, mfu, util, share, efficiency


def _arithmetic(kernels: _Kernels) -> np.ndarray:
    """The kernels that do the model's arithmetic: the matmul, conv and attention classes, and any other kernel
    whose op's FLOPs are counted (an XLA fusion on a TPU), so that every counted FLOP is in their time."""
    compute_class = np.isin(kernels.kernel_class, [KERNEL_CLASSES.index(c) for c in COMPUTE_CLASSES])
    return compute_class | (kernels.flops > 0)


def _coverage(kernels: _Kernels, in_steps: np.ndarray) -> tuple[float | None, float | None]:
    """The shares of the arithmetic kernels' time in the steps' windows whose FLOPs are counted and whose precision
    is known (None without such kernels): how much of what MFU and the efficiency estimates judge the trace lets
    them read."""
    arithmetic = _arithmetic(kernels) & in_steps
    total = float(kernels.dur[arithmetic].sum())
    if total <= 0:
        return None, None
    counted = float(kernels.dur[arithmetic & (kernels.flops > 0)].sum())
    known = float(kernels.dur[arithmetic & kernels.precision_known].sum())
    return round(counted / total, 4), round(known / total, 4)


def _not_counted_kernels(
    events: pd.DataFrame, ops: pd.DataFrame, costs: pd.DataFrame | None, kernels: _Kernels, in_steps: np.ndarray
) -> dict[str, int]:
    """The arithmetic kernels in the steps' windows without counted FLOPs, kernel time (ns) by why: their launching
    op's reason (no shapes recorded, no formula for the op), a graph replay's node whose capture the trace does not
    hold, or a kernel no op in the trace launched."""
    missing = _arithmetic(kernels) & (kernels.flops <= 0) & in_steps
    if not missing.any():
        return {}
    rows = kernels.rows[missing]
    reasons = np.full(len(rows), "no op in the trace launched it", dtype=object)
    replayed = replay_nodes(events, events.iloc[rows]) != NOT_REPLAYED
    reasons[replayed] = "graph node without op (its capture is not in the trace)"
    if costs is not None and len(ops):
        launcher = kernel_ops(events, ops)[rows]
        found = (launcher >= 0) & (launcher < len(costs))
        why = costs["not_counted"].astype(object).to_numpy()[launcher[found]]
        reasons[found] = [_KERNEL_REASONS.get(w, w) if isinstance(w, str) else "op counted as 0 FLOPs" for w in why]
    table = pd.Series(kernels.dur[missing]).groupby(reasons).sum().sort_values(ascending=False, kind="stable")
    return {str(k): int(v) for k, v in table.items()}


# The op's reason as a kernel's: an op without a formula is an op we do not know the work of.
_KERNEL_REASONS = {NO_FORMULA: "unknown op (no FLOP formula)", NESTED: "nested op not counted"}


def _ratio(numerator: float, denominator: float | None) -> float | None:
    """The ratio to 6 significant digits (an MFU of 0.2 % keeps its precision), None without a denominator."""
    return float(f"{numerator / denominator:.6g}") if denominator else None


def _classes(kernels: _Kernels, peaks: list[DevicePeaks], dtype: str | None) -> list[ComputeClass]:
    """Time, share, achieved rates and roofline bound of each kernel class that ran."""
    total = float(kernels.dur.sum())
    peak = _op_peak(peaks, dtype)
    bandwidth = peaks[0].memory_tbps * 1e3 if peaks else None
    out = []
    for code, name in enumerate(KERNEL_CLASSES):
        mine = kernels.kernel_class == code
        if not mine.any():
            continue
        counted = mine & (kernels.owner >= 0)
        counted_ns = float(kernels.work_ns[counted].sum())
        flops = float(kernels.flops[counted].sum())
        known_bytes = counted & np.isfinite(kernels.bytes)
        nbytes = float(kernels.bytes[known_bytes].sum()) if known_bytes.any() else None
        out.append(
            ComputeClass(
                name=name,
                count=int(mine.sum()),
                time_ns=int(kernels.dur[mine].sum()),
                share=round(float(kernels.dur[mine].sum()) / total, 4) if total else 0.0,
                counted_ns=int(counted_ns),
                flops=flops,
                bytes=nbytes,
                **_rates(flops, nbytes, counted_ns, peak, bandwidth),
            )
        )
    return out


def _rates(flops: float, nbytes: float | None, ns: float, peak: float | None, bandwidth: float | None) -> _Rates:
    """Achieved TFLOP/s and TB/s over `ns`, arithmetic intensity, the roofline's bound and the share of it reached."""
    if ns <= 0 or flops <= 0 and not nbytes:
        return {"tflops": None, "tbps": None, "intensity": None, "bound": None, "roofline_fraction": None}
    intensity = flops / nbytes if nbytes else None
    # Without the bytes moved, the roofline's knee is unknown: the share is of the compute peak and no bound is said.
    attainable, bound = peak, None
    if peak and bandwidth and intensity is not None:
        attainable = min(peak, intensity * bandwidth)
        bound = "compute" if intensity * bandwidth >= peak else "memory"
    return {
        "tflops": round(flops / ns / 1e3, 4),
        "tbps": None if not nbytes else round(nbytes / ns / 1e3, 4),
        "intensity": None if intensity is None else round(intensity, 2),
        "bound": bound,
        "roofline_fraction": None if not attainable else round(flops / ns / attainable, 4),
    }


def _op_points(
    ops: pd.DataFrame, costs: pd.DataFrame | None, kernels: _Kernels, peaks: list[DevicePeaks]
) -> list[RooflineOp]:
    """The counted ops grouped by name, class and dtype, longest kernel time first: the roofline's points."""
    mine = kernels.owner >= 0
    if costs is None or not mine.any():
        return []
    owner = kernels.owner[mine]
    names = ops["name"].astype(str).to_numpy()[owner]
    names = np.array([n.split(" = ", 1)[0].lstrip("%") for n in names], dtype=object)  # an HLO op by its name
    dtypes = pd.Series(kernels.op_dtype[owner], dtype=object).fillna("unknown").to_numpy()
    table = pd.DataFrame(
        {
            "name": names,
            "op_class": costs["op_class"].astype(str).to_numpy()[owner],
            "dtype": dtypes,
            "owner": owner,
            "dur": kernels.work_ns[mine],
            "flops": kernels.flops[mine],
            "bytes": kernels.bytes[mine],
        }
    )
    grouped = table.groupby(["name", "op_class", "dtype"], sort=False).agg(
        calls=("owner", "nunique"), time_ns=("dur", "sum"), flops=("flops", "sum"), bytes=("bytes", "sum")
    )
    bandwidth = peaks[0].memory_tbps * 1e3 if peaks else None
    points = []
    for (name, op_class, dtype), row in grouped.sort_values("time_ns", ascending=False, kind="stable").iterrows():
        nbytes = float(row["bytes"]) if row["bytes"] > 0 else None
        points.append(
            RooflineOp(
                name=str(name),
                op_class=str(op_class),
                dtype=None if dtype == "unknown" else str(dtype),
                calls=int(row["calls"]),
                time_ns=int(row["time_ns"]),
                flops=float(row["flops"]),
                bytes=nbytes,
                **_rates(float(row["flops"]), nbytes, float(row["time_ns"]), _op_peak(peaks, str(dtype)), bandwidth),
            )
        )
    return points


def _not_counted(ops: pd.DataFrame, costs: pd.DataFrame | None) -> dict[str, int]:
    """Ops of a FLOP-carrying kind whose FLOPs the trace does not tell, by why (ops with no formula, and outer ops
    whose work a nested op counts, are not missing anything)."""
    if costs is None:
        return {}
    reasons = costs["not_counted"].astype(object)
    missing = reasons.notna() & ~reasons.isin([NESTED, NO_FORMULA]) & (costs["op_class"].astype(str) != "other")
    return {str(k): int(v) for k, v in reasons[missing].value_counts().items()}


def _note(profile: Profile) -> str:
    how = FLOPS_HOW_TO.get(profile.framework, FLOPS_HOW_TO["unknown"])
    return f"FLOPs not in the trace: {how}"
