"""Kernel statistics per device: counts, small kernels, launch cost, Tensor Cores, occupancy.

Small kernels are those shorter than a threshold (default 10 us): at that size
launch overhead, not the GPU, sets the pace. Kernels are joined to their host
launch call on the correlation id to get the launch delay (launch end -> kernel
start) and HTA's "shorter than its own launch" count. Tensor Core use and
eligibility are judged from kernel names by the rule table of `tensor_cores`, as
no trace records them directly.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.devices import DeviceUsage, device_work
from traceinsight.analysis.graphs import LATER_NODE, NOT_REPLAYED
from traceinsight.analysis.grouped import groups_of, ranked
from traceinsight.analysis.histogram import Bin, duration_histogram
from traceinsight.analysis.kernel_classes import class_of_name
from traceinsight.analysis.tensor_cores import classify_kernel_names
from traceinsight.events import kind_mask, rows_of_input
from traceinsight.intervals import exposed, union
from traceinsight.result import TopKernel
from traceinsight.rules import COMMUNICATION_PATTERN, COMPUTE_CLASSES, DEFAULT_SMALL_KERNEL_NS

TOP_KERNELS = 15
# The small-kernel threshold is added as an edge, so the bins below it are exactly the small kernels.
KERNEL_HISTOGRAM_EDGES_NS = (0, 2_000, 5_000, 10_000, 50_000, 100_000, 1_000_000, 10_000_000)


class KernelStats(msgspec.Struct, frozen=True):
    device: str
    count: int
    total_ns: int
    small_count: int
    small_threshold_ns: int
    small_total_ns: int
    median_ns: int | None
    shorter_than_launch_count: int | None
    launched_count: int  # kernels matched to their own launch call (a graph replay: its first node only)
    replayed_count: int  # kernels replayed from a CUDA / HIP graph
    replayed_small_count: int  # of them, under the small-kernel threshold
    launch_delay_p50_ns: int | None
    launch_delay_p90_ns: int | None
    launch_delay_max_ns: int | None
    tensor_core_ns: int
    tensor_core_eligible_ns: int
    # Of the eligible time, the kernels whose Tensor Core use (hence precision) the name leaves untold.
    tensor_core_unknown_ns: int
    communication_ns: int
    communication_exposed_ns: int
    occupancy_mean_pct: float | None
    # Kernels other than collectives (which run on a few SMs by design): their time, the part of it whose launch
    # shape (blocks per SM) the trace gives, and of that the kernels with fewer blocks than SMs and their idle SMs.
    shaped_kernel_ns: int
    launch_shape_ns: int
    low_blocks_ns: int
    low_blocks_waste_ns: int
    top: list[TopKernel]
    histogram: list[Bin]
    durations_ns: np.ndarray


def _name_flags(names: pd.Series, pattern: re.Pattern[str]) -> np.ndarray:
    """Regex match per row, evaluated once per distinct name (names are categorical)."""
    cats = pd.Series(names.cat.categories)
    flags = cats.str.contains(pattern).to_numpy(bool)
    codes = names.cat.codes.to_numpy()
    return np.where(codes >= 0, flags[np.clip(codes, 0, None)] if len(flags) else False, False)


class Launches(msgspec.Struct, frozen=True):
    """One input's host launch calls (runtime events with a correlation id), indexed by correlation: start,
    duration, and `op` (an index into `op_names`, -1 unknown): the framework op that made the call, the host op
    with the launch's External id (Kineto links them so)."""

    table: pd.DataFrame
    op_names: np.ndarray


def _launches(events: pd.DataFrame, input_id: int) -> Launches:
    mine = rows_of_input(events, input_id, ["ts_ns", "dur_ns", "kind", "correlation", "external_id", "name", "device"])
    correlation = mine["correlation"].to_numpy()
    is_launch = kind_mask(mine, "runtime") & (correlation >= 0)
    external = mine["external_id"].to_numpy()
    is_op = kind_mask(mine, "cpu_op") & mine["device"].isna().to_numpy() & (external >= 0)
    ops = pd.Series(mine["name"].to_numpy(dtype=object)[is_op], index=external[is_op])
    ops = ops[~ops.index.duplicated()]
    table = pd.DataFrame(
        {
            "launch_ts": mine["ts_ns"].to_numpy()[is_launch],
            "launch_dur": mine["dur_ns"].to_numpy()[is_launch],
            "op": ops.index.get_indexer(external[is_launch]),
        },
        index=correlation[is_launch],
    )
    return Launches(table[~table.index.duplicated()], ops.to_numpy())  # the first call of a correlation id


def flagged_kernels(work: pd.DataFrame) -> pd.DataFrame:
    """The kernel rows of `device_work`, with the name rules' flags as columns, evaluated once per distinct name:
    `tensor_core`, `eligible` (matmul/conv/attention work), `tensor_core_known` (False for matrix work whose name
    tells neither Tensor Core use nor its precision: eligible ones, and those of a compute class by name, such as
    a Triton attention kernel), `fp32` (eligible, not on Tensor Cores, and positively FP32 by its name: `sgemm`,
    `scudnn`, SIMT; never a kernel of untold precision) and `communication`."""
    kernels = work[(work["kind"] == "kernel").to_numpy()]
    names = kernels["name"].cat.remove_unused_categories()
    classes = classify_kernel_names(names)
    tc = classes["tensor_core"].to_numpy()
    eligible = classes["eligible"].to_numpy()
    compute_named = _by_category(names, [class_of_name(n) in COMPUTE_CLASSES for n in names.cat.categories])
    return kernels.assign(
        tensor_core=tc,
        eligible=eligible,
        tensor_core_known=classes["tensor_core_known"].to_numpy() & (eligible | tc | ~compute_named),
        fp32=eligible & ~tc & (classes["precision"].to_numpy() == "fp32"),
        communication=_name_flags(names, COMMUNICATION_PATTERN),
    )


def _by_category(names: pd.Series, per_category: list[bool]) -> np.ndarray:
    """A per-category flag spread over the rows (False for a row without name)."""
    codes = names.cat.codes.to_numpy()
    flags = np.append(np.array(per_category, bool), False)
    return flags[np.where(codes >= 0, codes, len(per_category))]


def kernel_stats(
    events: pd.DataFrame,
    usages: list[DeviceUsage],
    small_threshold_ns: int = DEFAULT_SMALL_KERNEL_NS,
    kernels_all: pd.DataFrame | None = None,
) -> list[KernelStats]:
    """Kernel statistics for each device in `usages` (`kernels_all`: `flagged_kernels(device_work(events))`, if
    known)."""
    kernels_all = flagged_kernels(device_work(events)) if kernels_all is None else kernels_all
    launches: dict[int, Launches] = {}  # once per input, for all its devices
    results = []
    for usage in usages:
        if usage.input_id not in launches:
            launches = {usage.input_id: _launches(events, usage.input_id)}  # an input's devices come together
        kernels = kernels_all[(kernels_all["device"] == usage.id).to_numpy()]
        results.append(_device_kernel_stats(usage.id, kernels, launches[usage.input_id], small_threshold_ns))
    return results


def _device_kernel_stats(
    device: str, kernels: pd.DataFrame, known_launches: Launches, small_threshold_ns: int
) -> KernelStats:
    launches = known_launches.table
    dur = kernels["dur_ns"].to_numpy()
    small = dur < small_threshold_ns
    launch = launches.index.get_indexer(kernels["correlation"].to_numpy())  # -1 where no launch is known
    replay = kernels["replay"].to_numpy()
    launch[replay == LATER_NODE] = -1  # a graph replay is one launch: its first node's
    replayed = replay != NOT_REPLAYED
    matched = launch >= 0
    launch_dur = launches["launch_dur"].to_numpy()[launch[matched]]
    launch_end = launches["launch_ts"].to_numpy()[launch[matched]] + launch_dur  # int64: epoch ns exceed a double
    delay = np.clip(kernels["ts_ns"].to_numpy()[matched] - launch_end, 0, None)
    shorter = int((dur[matched] < launch_dur).sum())
    tc = kernels["tensor_core"].to_numpy()
    eligible = kernels["eligible"].to_numpy()
    known = kernels["tensor_core_known"].to_numpy()
    comm = kernels["communication"].to_numpy()
    occ = kernels["occupancy_pct"].to_numpy()
    has_occ = ~np.isnan(occ)
    bps = kernels["blocks_per_sm"].to_numpy()
    shaped = ~np.isnan(bps) & ~comm
    low_blocks = shaped & (bps < 1.0)
    return KernelStats(
        device=device,
        count=len(dur),
        total_ns=int(dur.sum()),
        small_count=int(small.sum()),
        small_threshold_ns=small_threshold_ns,
        small_total_ns=int(dur[small].sum()),
        median_ns=int(np.median(dur)) if len(dur) else None,
        shorter_than_launch_count=shorter if matched.any() else None,
        launched_count=int(matched.sum()),
        replayed_count=int(replayed.sum()),
        replayed_small_count=int((replayed & small).sum()),
        launch_delay_p50_ns=int(np.percentile(delay, 50)) if len(delay) else None,
        launch_delay_p90_ns=int(np.percentile(delay, 90)) if len(delay) else None,
        launch_delay_max_ns=int(delay.max()) if len(delay) else None,
        tensor_core_ns=int(dur[tc].sum()),
        tensor_core_eligible_ns=int(dur[eligible].sum()),
        tensor_core_unknown_ns=int(dur[eligible & ~known].sum()),
        communication_ns=int(dur[comm].sum()),
        communication_exposed_ns=_exposed_communication(kernels, comm),
        occupancy_mean_pct=float(np.average(occ[has_occ], weights=np.maximum(dur[has_occ], 1)))
        if has_occ.any()
        else None,
        shaped_kernel_ns=int(dur[~comm].sum()),
        launch_shape_ns=int(dur[shaped].sum()),
        low_blocks_ns=int(dur[low_blocks].sum()),
        low_blocks_waste_ns=int((dur[low_blocks] * (1.0 - bps[low_blocks])).sum()),
        top=_top_kernels(kernels, np.where(known, tc, np.nan), *_kernel_ops(kernels, launch, known_launches)),
        histogram=duration_histogram(dur, (*KERNEL_HISTOGRAM_EDGES_NS, small_threshold_ns)),
        durations_ns=dur,
    )


def _exposed_communication(kernels: pd.DataFrame, comm: np.ndarray) -> int:
    """Collective kernel time not overlapped by any compute kernel."""
    starts = kernels["ts_ns"].to_numpy()
    ends = starts + kernels["dur_ns"].to_numpy()
    return exposed(union(starts[comm], ends[comm]), union(starts[~comm], ends[~comm]))


def _kernel_ops(kernels: pd.DataFrame, launch: np.ndarray, launches: Launches) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel, an index into the returned op names (-1 unknown): the framework op that launched it, as the
    kernel event names it (the `op` column: XSpace) or else as its launch links it (Kineto)."""
    named = kernels["op"].cat.codes.to_numpy().astype(np.int64)
    named_ops = kernels["op"].cat.categories.to_numpy(dtype=object)
    linked = np.append(launches.table["op"].to_numpy(), -1)[launch]  # launch -1 (none known) finds -1
    codes = np.where(named >= 0, named, np.where(linked >= 0, linked + len(named_ops), -1))
    return codes, np.concatenate([named_ops, launches.op_names.astype(object)])


def _launching_op(names: np.ndarray, codes: np.ndarray) -> str | None:
    """The framework op that launched most of one kernel's calls (None when the trace does not link them)."""
    known = codes[codes >= 0]
    return str(names[np.bincount(known).argmax()]) if len(known) else None


def _top_kernels(kernels: pd.DataFrame, tc: np.ndarray, ops: np.ndarray, op_names: np.ndarray) -> list[TopKernel]:
    """The longest kernels by total time; `tc`: per row 1 / 0 for Tensor Cores used / not, NaN where unknown."""
    if kernels.empty:
        return []
    groups = groups_of(kernels["name"].cat.codes.to_numpy())
    count, total, used = groups.count, groups.sum(kernels["dur_ns"].to_numpy()), groups.max(tc)
    categories = kernels["name"].cat.categories
    return [
        TopKernel(
            str(categories[groups.codes[g]]),
            int(count[g]),
            int(total[g]),
            int(total[g] // count[g]),
            None if np.isnan(used[g]) else bool(used[g]),
            _launching_op(op_names, ops[groups.of_row == g]),
        )
        for g in ranked(total, TOP_KERNELS).tolist()
    ]
