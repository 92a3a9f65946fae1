"""The result model: one run's report as typed records, built once (`traceinsight.assemble`) and read by every
output.

The `--json` report is this model serialised (`render/json.py`): each class here is one object of the contract
(../shared/notes/report-json.md), each field one key, so a field renamed here is renamed in the JSON, and
mypy finds every reader that still uses the old name. HTML, Markdown, the terminal, `diff`, `--fail-on`, the
API and the TensorBoard tab read these attributes; `--fail-on` paths resolve against them (`gating.lookup`).

The analyses build the records that are theirs (a kernel of the top list, a memory series, a wait): those classes
live here so this module needs nothing but msgspec: a saved `--json` report is read back into these classes
(`from_document`) without analysing anything. The records are `msgspec.Struct`s, as every record of the tool is:
msgspec writes them to and reads them from JSON values natively, and defines one in microseconds, where the tool's
150 dataclasses took 0.1 s at every start.

Maps keyed by data (gap causes, step-breakdown stalls, evidence, warnings, versions) stay dicts: their keys are
names from the trace or from `rules.py`, not fields of the contract.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import msgspec
from msgspec import field

SCHEMA = "traceinsight.report/2"
# Saved reports of these schemas are read too (`from_document` brings them to this one).
OLDER_SCHEMAS = ("traceinsight.report/1",)

# --------------------------------------------------------------------------- records the analyses build


class Bin(msgspec.Struct, frozen=True):
    """One bin of a duration histogram (gaps, kernels)."""

    label: str
    lower_ns: int
    upper_ns: int | None  # None: open-ended
    count: int
    total_ns: int


class TopKernel(msgspec.Struct, frozen=True):
    name: str
    count: int
    total_ns: int
    mean_ns: int
    tensor_core: bool | None  # None: the name tells neither Tensor Core use nor the precision
    op: str | None = None  # the framework op that launched most of its calls, where the trace links them


class HostOp(msgspec.Struct, frozen=True):
    name: str
    function: str  # the user-facing name: a TF op's scope/name before ':Type', else the name
    calls: int
    total_ns: int
    self_ns: int
    holds_gil: bool


class Stage(msgspec.Struct, frozen=True):
    """One tf.data stage (or DataLoader part) of the input pipeline."""

    name: str
    count: int
    total_ns: int
    self_ns: int


class OneTimeCost(msgspec.Struct, frozen=True):
    what: str  # the kind of cost, for people
    example: str  # the longest event of it
    ns: int  # the union of its events in the window


class Wait(msgspec.Struct, frozen=True):
    name: str
    input_id: int
    start_ns: int
    dur_ns: int
    own_device_ns: int  # the call's own device work (its copy)
    seen_device_ns: int  # other device work of its input during the wait (union over devices)
    outside_trace: bool  # the device shows (almost) nothing during it: what it waited for is not in the trace
    waited_for: list[str]  # the device work it waited for, as 'name (stream N, x ms)'


class MemorySeries(msgspec.Struct, frozen=True):
    ts_ns: list[int]
    allocated: list[int]
    reserved: list[int] | None  # None where the trace does not say


class StepMemory(msgspec.Struct, frozen=True):
    id: int
    static_bytes: int  # the lower level of the step's two boundaries
    peak_bytes: int
    transient_bytes: int  # peak - static


class OpMemory(msgspec.Struct, frozen=True):
    op: str
    bytes: int  # allocated by this op and live at the peak


class Projection(msgspec.Struct, frozen=True):
    """A step before and after fixes, as means over the steps (GPU-Util over the steps; None on host-only runs)."""

    step_ns_before: int
    step_ns_after: int
    saving_ns: int
    speedup: float
    gpu_util_before: float | None = None
    gpu_util_after: float | None = None
    # The same fixes as edits of each step's critical path (`analysis/path_projection.py`): the mean step after, or
    # None where the path cannot say (no edit for the fix, or a path mostly of time the trace does not hold).
    path_step_ns_after: int | None = None
    path_speedup: float | None = None


class BottleneckProjection(Projection, frozen=True):
    """The step after this one fix."""

    basis: str = "measured"  # "measured" | "estimated" | "none"
    assumption: str | None = None  # what an estimate rests on


class RunProjection(Projection, frozen=True):
    """The headline what-if: the top fixes applied one after another on the same steps."""

    basis: str = "measured"
    applied: tuple[str, ...] = ()


class Culprit(msgspec.Struct, frozen=True):
    """The one call, op, kernel or input stage that contributes most to a bottleneck's cost, from its finding's
    evidence: what the first screen names, so the cause is read there and not found mid-page."""

    what: str  # "call" | "op" | "kernel" | "input stage" | "input function"
    name: str
    ns: int  # its time over the capture (or only `within` it)
    count: int  # its calls over the capture (or those `within` it)
    # Where its time is counted when not over the whole capture: host_bound's op, by its own time "while the device
    # waited for the host's next launch" (the ops table beside holds its time over the capture).
    within: str | None = None


class Bottleneck(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    rank: int
    severity: str
    time_ns: int
    fraction: float
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    recommendations: list[str] = field(default_factory=list)
    kind: str = "stall"  # "stall" | "efficiency"
    projection: BottleneckProjection | None = None  # None only in a saved report from before projections
    culprit: Culprit | None = None  # None where no single call, op or kernel stands out in the evidence


class DeviceInfo(msgspec.Struct):
    """What the trace says about one accelerator (fields the trace lacks are None)."""

    id: str
    name: str | None = None
    vendor: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    clock_khz: int | None = None
    memory_bandwidth_bps: float | None = None


# --------------------------------------------------------------------------- the report's sections


class ComputeClass(msgspec.Struct, frozen=True, kw_only=True):
    """One kernel class (`analysis/kernel_classes.py`): its time, and what the kernels whose work is counted
    achieve against the roofline."""

    name: str  # matmul, conv, attention, elementwise, communication, copy, other
    count: int
    time_ns: int
    share: float  # of all kernel time
    counted_ns: int  # time of its kernels whose op's FLOPs are counted
    flops: float
    bytes: float | None
    tflops: float | None  # achieved over counted_ns
    tbps: float | None
    intensity: float | None  # FLOP per byte
    bound: str | None  # "compute" | "memory" by the roofline; None without the device's peaks
    roofline_fraction: float | None  # achieved / attainable at this intensity


class RooflineOp(msgspec.Struct, frozen=True, kw_only=True):
    """One counted op (its calls summed) as a point of the roofline."""

    name: str
    op_class: str  # matmul, conv, attention, other
    dtype: str | None
    calls: int
    time_ns: int  # its kernels' time
    flops: float
    bytes: float | None
    tflops: float | None
    tbps: float | None
    intensity: float | None
    bound: str | None
    roofline_fraction: float | None


class ComputeStep(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    start_ns: int  # the step's window: device-side where the trace has one (`ComputeEfficiency.window`)
    dur_ns: int
    flops: float  # counted FLOPs of the kernels that start in it
    mfu: float | None


class ComputeEfficiency(msgspec.Struct, frozen=True, kw_only=True):
    """What the busy time achieves (`analysis/compute.py`): FLOPs from the trace, kernel classes on the roofline,
    MFU per step and its decomposition, MFU = gpu_util x compute_share x compute_efficiency."""

    flops_source: str = "none"  # "shapes" (our formulas), "profiler" (the trace's own counts), "none"
    note: str | None = None  # why there is no MFU, and how to get one
    device: str | None = None  # the hardware table's entry for the device (None: unknown, no peak ratio)
    peak_source: str | None = None
    dtype: str | None = None  # the dtype that carries most of the counted FLOPs
    peak_tflops: float | None = None  # one device's dense peak in that dtype
    memory_tbps: float | None = None
    counted_ops: int = 0
    not_counted: dict[str, int] = field(default_factory=dict)  # FLOP-carrying ops the trace does not tell, by why
    # Matmul, conv and attention kernels without counted FLOPs: their kernel time (ns) by why.
    not_counted_kernel_ns: dict[str, int] = field(default_factory=dict)
    # Of the matmul, conv and attention kernel time (and any other kernel with counted FLOPs): the share whose FLOPs
    # are counted, and the share whose precision is known (None: no such kernels). MFU reads only the first.
    flop_coverage: float | None = None
    precision_coverage: float | None = None
    mfu_is_lower_bound: bool = False  # FLOP coverage under rules.MFU_EXACT_COVERAGE: the MFU counts only part
    flops: float = 0.0  # counted FLOPs of the analyzed kernels
    classes: list[ComputeClass] = field(default_factory=list)
    ops: list[RooflineOp] = field(default_factory=list)
    window: str = "step"  # "device step" (the steps' device-side ranges) or "step"
    steps: list[ComputeStep] = field(default_factory=list)
    mfu: float | None = None
    gpu_util: float | None = None  # kernel busy / step windows
    compute_share: float | None = None  # matmul, conv, attention (and other counted) kernel time / kernel busy
    compute_efficiency: float | None = None  # counted FLOPs / (that time x peak)


class Input(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    format: str
    host: str | None = None
    rank: int | None = None
    events: int = 0


class Window(msgspec.Struct, frozen=True, kw_only=True):
    start_ns: int | None
    end_ns: int | None

    @property
    def dur_ns(self) -> int | None:
        return None if self.start_ns is None or self.end_ns is None else self.end_ns - self.start_ns


class Step(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    start_ns: int
    dur_ns: int
    breakdown: dict[str, int] = field(default_factory=dict)  # stall name (`step_model.Stall`) -> ns, summing to dur_ns


class StepPart(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # a stall of the step breakdown (`step_model.Stall`)
    total_ns: int
    per_step_ns: float | None
    share: float | None  # of step time


class StepSpread(msgspec.Struct, frozen=True, kw_only=True):
    stdev_ns: int
    min_ns: int
    max_ns: int


class Steps(msgspec.Struct, frozen=True, kw_only=True):
    source: str = "none"  # "marker" | "inferred" | "none"
    marker: str | None = None
    count: int = 0
    mean_ns: int | None = None
    median_ns: int | None = None
    total_ns: int = 0
    breakdown_total: dict[str, int] = field(default_factory=dict)
    per_device_mean_ns: dict[str, int] = field(default_factory=dict)
    device_spread_ns: int | None = None
    items: list[Step] = field(default_factory=list)

    @property
    def parts(self) -> list[StepPart]:
        """Where the steps' time went, part by part (those with any time): total, a step, share of step time."""
        return [
            StepPart(
                name=name,
                total_ns=ns,
                per_step_ns=ns / self.count if self.count else None,
                share=ns / self.total_ns if self.total_ns else None,
            )
            for name, ns in self.breakdown_total.items()
            if ns
        ]

    @property
    def spread(self) -> StepSpread | None:
        """Standard deviation, shortest and longest of the steps (None with fewer than two)."""
        if len(self.items) < 2:
            return None
        durations = [s.dur_ns for s in self.items]
        return StepSpread(stdev_ns=round(statistics.pstdev(durations)), min_ns=min(durations), max_ns=max(durations))


class LongGap(msgspec.Struct, frozen=True, kw_only=True):
    start_ns: int
    dur_ns: int
    cause: str
    host_activity: list[str]
    # A sync gap in which a blocking call waited for device work the trace does not hold (shown as that wait).
    outside_trace: bool = False


class Gaps(msgspec.Struct, frozen=True, kw_only=True):
    count: int = 0
    total_ns: int = 0
    p50_ns: int | None = None
    p90_ns: int | None = None
    max_ns: int | None = None
    # Whole gaps over the capture, each under the cause of the op that ended it (`analysis/gaps.py`): what the gap
    # list and the timeline's gap slices say; the idle time of the steps by cause is the ledger's.
    by_cause: dict[str, int] = field(default_factory=dict)
    histogram: list[Bin] = field(default_factory=list)
    longest: list[LongGap] = field(default_factory=list)
    # Gaps no longer than the device's timestamp resolution are rounding, not gaps: none of the figures above
    # counts them (`analysis/gaps.py`, `rules.TIMESTAMP_RESOLUTION_MAX_NS`).
    resolution_ns: int = 1
    below_resolution: int = 0


class LaunchDelay(msgspec.Struct, frozen=True, kw_only=True):
    p50_ns: int | None
    p90_ns: int | None
    max_ns: int | None


class Kernels(msgspec.Struct, frozen=True, kw_only=True):
    count: int = 0
    total_ns: int = 0
    median_ns: int | None = None
    small_count: int = 0
    small_threshold_ns: int = 0
    small_total_ns: int = 0
    shorter_than_launch_count: int | None = None
    launched_count: int | None = None
    replayed_count: int = 0
    launch_delay: LaunchDelay = field(default_factory=lambda: LaunchDelay(p50_ns=None, p90_ns=None, max_ns=None))
    tensor_core_ns: int | None = None
    tensor_core_eligible_ns: int | None = None
    communication_ns: int = 0
    communication_exposed_ns: int = 0
    occupancy_mean_pct: float | None = None
    histogram: list[Bin] = field(default_factory=list)
    top: list[TopKernel] = field(default_factory=list)


class Copies(msgspec.Struct, frozen=True, kw_only=True):
    """Copies of one direction on one device (or over the run)."""

    count: int = 0
    total_ns: int = 0
    bytes: int | None = None  # None: no copy says its size
    pageable_count: int = 0
    exposed_ns: int = 0
    bandwidth_gbps: float | None = None


class Memset(msgspec.Struct, frozen=True, kw_only=True):
    count: int = 0
    total_ns: int = 0


class Memory(msgspec.Struct, frozen=True, kw_only=True):
    """A device's memory over the window (`analysis/device_memory.py`)."""

    peak_allocated_bytes: int
    peak_in_use_bytes: int
    peak_reserved_bytes: int | None = None
    capacity_bytes: int | None = None
    allocator_limit_bytes: int | None = None
    absolute: bool = True
    headroom_fraction: float | None = None
    fragmentation_max: float | None = None
    batch_headroom_factor: float | None = None
    static_bytes: int | None = None
    transient_bytes: int | None = None
    peak_ns: int = 0
    peak_step: int | None = None
    slack_bytes: int | None = None
    events: int = 0
    warnings: list[str] = field(default_factory=list)
    top_ops_at_peak: list[OpMemory] = field(default_factory=list)
    steps: list[StepMemory] = field(default_factory=list)
    series: MemorySeries = field(default_factory=lambda: MemorySeries([], [], None))


# Words for people, one per ledger part (`analysis/ledger.py`), used by every renderer.
PART_WORDS = {
    "compute": "compute",
    "collective_wait": "collective: waiting",
    "collective_transfer": "collective: transfer",
    "copy_h2d": "copy H2D",
    "copy_d2h": "copy D2H",
    "copy_d2d": "copy D2D",
    "copy_other": "copy/memset other",
    "input_wait": "input wait",
    "graph_internal": "inside graph replays",
    "wait_outside_trace": "wait outside the trace",
    "blocking_wait": "blocking wait",
    "host_launch": "host launch",
    "unexplained": "unexplained idle",
}


# One name per kind of wait, on every page and in every section: a gap's cause (`analysis/gaps.py`; a sync gap
# whose work is outside the trace, `LongGap.outside_trace`, is `wait_outside_trace`) and a bottleneck that is the
# cost of one kind of wait are shown by the words of the ledger part that holds that wait's time.
GAP_CAUSE_PARTS = {
    "input_wait": "input_wait",
    "graph_internal": "graph_internal",
    "wait_outside_trace": "wait_outside_trace",
    "sync": "blocking_wait",
    "host_launch": "host_launch",
    "other": "unexplained",
}
# The critical path's waits for what the trace does not hold (`analysis/critical_path.PARTS`).
PATH_WAIT_PARTS = {"queued": "wait_outside_trace", "blocked": "wait_outside_trace"}
BOTTLENECK_PARTS = {
    "input_bound": "input_wait",
    "external_wait": "wait_outside_trace",
    "d2h_sync": "blocking_wait",
    "collective_wait": "collective_wait",
    "idle_other": "unexplained",
}


# What each ledger part is, for the page's glossary.
PART_MEANINGS = {
    "compute": "a kernel that is not a collective runs",
    "collective_wait": "only collective kernels run, waiting for the last rank to arrive",
    "collective_transfer": "only collective kernels run, moving data",
    "copy_h2d": "only a host-to-device copy runs",
    "copy_d2h": "only a device-to-host copy runs",
    "copy_d2d": "only a device-to-device copy runs",
    "copy_other": "only a peer-to-peer copy, a memset or a copy of unknown direction runs",
    "input_wait": "nothing runs; the host waits for input data",
    "graph_internal": "nothing runs, between nodes of one graph replay",
    "wait_outside_trace": "nothing runs; a blocking call waits for device work the trace does not hold",
    "blocking_wait": "nothing runs; the host is in a sync or blocking copy",
    "host_launch": "nothing runs; the next op was launched late",
    "unexplained": "nothing runs, and the trace names no cause",
}


class LedgerDevice(msgspec.Struct, frozen=True, kw_only=True):
    """One device's ledger over its input's steps: ns in each part (`analysis/ledger.py`), and the two shares read
    from it (GPU-Util: a kernel runs; idle: nothing runs)."""

    id: str
    parts: dict[str, int]
    gpu_util: float | None
    idle_fraction: float | None


class Ledger(msgspec.Struct, frozen=True, kw_only=True):
    """Every nanosecond of the run's steps on each device in exactly one part: the source of every per-step
    figure (GPU-Util, idle, the step table, the idle causes, what findings claim). `parts`: the parts in order,
    busy ones first; `per_step`: each part's ns in each step, the mean over the step input's devices."""

    window: str = "steps"
    parts: list[str] = field(default_factory=list)
    idle_parts: list[str] = field(default_factory=list)
    step_ns: list[int] = field(default_factory=list)
    per_step: dict[str, list[int]] = field(default_factory=dict)
    devices: list[LedgerDevice] = field(default_factory=list)  # every device, each over its own input's steps

    @property
    def total(self) -> dict[str, int]:
        return {part: sum(values) for part, values in self.per_step.items()}

    def device(self, device_id: str) -> LedgerDevice | None:
        """The ledger of one device (None for a device without steps on its input)."""
        return next((d for d in self.devices if d.id == device_id), None)


class Device(msgspec.Struct, frozen=True, kw_only=True):
    """A device: its span (first to last work of the device, the whole capture) and, over its input's steps, its
    GPU-Util and idle share (`Ledger`)."""

    id: str
    name: str | None = None
    span_ns: int | None = None
    busy_ns: int | None = None  # over the span
    idle_ns: int | None = None  # span less busy (over the span)
    idle_fraction: float | None = None  # over the steps of its input (null: no steps on it)
    gpu_util: float | None = None  # over the steps of its input (null: no steps on it)
    gaps: Gaps = field(default_factory=Gaps)
    kernels: Kernels = field(default_factory=Kernels)
    copies: dict[str, Copies] = field(default_factory=dict)  # copy kind ("h2d", "d2h", "d2d") -> its copies
    memset: Memset = field(default_factory=Memset)
    memory: Memory | None = None


class Totals(msgspec.Struct, frozen=True, kw_only=True):
    device_count: int = 0
    idle_fraction: float | None = None  # over the steps: the ledger's idle parts (the mean over the devices)
    gpu_util: float | None = None  # over the steps: the ledger's kernel parts
    step_gpu_util: float | None = None  # the same figure (kept for saved reports and `--fail-on` paths)
    step_idle_fraction: float | None = None  # the same figure
    kernel_count: int = 0
    small_kernel_count: int = 0
    h2d_count: int = 0
    h2d_ns: int = 0
    h2d_bytes: int | None = None
    h2d_exposed_ns: int = 0
    h2d_pageable_count: int = 0
    d2h_count: int = 0
    d2h_ns: int = 0
    d2h_bytes: int | None = None


class Capture(msgspec.Struct, frozen=True, kw_only=True):
    """What kind of capture the trace is (`analysis/capture.py`), the evidence, and whether its steps project."""

    kind: str
    evidence: list[str]
    server: str | None = None
    workload: str = "unknown"  # training, inference, server or unknown: what the advice is chosen for
    one_time_ns: int = 0
    one_time_share: float = 0.0
    one_time: list[OneTimeCost] = field(default_factory=list)
    steady_from_ns: int | None = None
    steady_steps: int = 0
    projects: bool = True


class InputPipeline(msgspec.Struct, frozen=True, kw_only=True):
    wait_ns: int | None = None
    fraction: float | None = None
    verdict: str = "unknown"
    idle_fraction: float | None = None
    source: str | None = None
    wait_count: int = 0
    stages: list[Stage] = field(default_factory=list)
    seen: dict[str, Any] = field(default_factory=dict)  # the input settings the trace shows (analysis/settings.py)
    slowest_function: HostOp | None = None  # the input pipeline's own slowest user function


class Replay(msgspec.Struct, frozen=True):
    """One CUDA / HIP graph replay (`analysis/graphs.py`): its launch and the nodes it ran."""

    device: str
    launch_start_ns: int
    launch_ns: int  # the launch call on the host
    nodes: int
    first_node_delay_ns: int  # first node start - launch call end (0 when it starts before the call returns)
    span_ns: int  # first node start to last node end
    busy_ns: int  # union of the nodes within the span


class ListedReplay(Replay, frozen=True, kw_only=True):
    """One of the replays the report lists, with its host cost per node and busy share as people read them."""

    host_ns_per_node: float
    busy_share: float


class GraphReplays(msgspec.Struct, frozen=True, kw_only=True):
    count: int = 0
    nodes: int = 0
    kernel_ns: int = 0
    kernel_share: float | None = None
    host_ns_per_node_p50: float | None = None
    first_node_delay_p50_ns: int | None = None
    busy_share_p50: float | None = None
    items: list[ListedReplay] = field(default_factory=list)


class StreamQueue(msgspec.Struct, frozen=True, kw_only=True):
    """One device stream's launch queue over its input's steps (`analysis/queue_depth.py`); stream -1: all of the
    device's streams together (depth 0: the device drained)."""

    device: str
    stream: int
    launches: int
    mean_depth: float
    max_depth: int
    drained_share: float  # share of step time with nothing queued or running: the device waits on the host
    full_share: float  # share of step time at the launch queue's limit (`QueueDepth.limit`)
    found_depth_p50: float | None = None  # the median depth a launch found on its stream when it began
    series_ts_ns: list[int] = field(default_factory=list)  # the deepest queue in each bin, from its start
    series_depth: list[int] = field(default_factory=list)


class QueueDepth(msgspec.Struct, frozen=True, kw_only=True):
    limit: int = 0  # pending launches a stream holds before the host blocks (0: a report from before)
    devices: list[StreamQueue] = field(default_factory=list)
    streams: list[StreamQueue] = field(default_factory=list)


class KernelSequence(msgspec.Struct, frozen=True, kw_only=True):
    """Small kernels that run in this order in every step (`analysis/kernel_sequences.py`): a fusion or CUDA graph
    candidate."""

    names: list[str]
    device: str
    stream: int
    count: int
    per_step: float
    kernel_ns: int
    launch_ns: int
    op_stack: list[str] = field(default_factory=list)  # host ops around the first kernel's launch, outermost first


class KernelSequences(msgspec.Struct, frozen=True, kw_only=True):
    steps: int = 0
    small_threshold_ns: int = 0
    items: list[KernelSequence] = field(default_factory=list)


class PathItem(msgspec.Struct, frozen=True, kw_only=True):
    """An op, a call or a kernel on the critical path, with its time there (`analysis/critical_path.py`)."""

    name: str
    part: str  # `critical_path.PARTS`: cpu_op, launch, compute, copy, collective_transfer, sync, ...
    group: str  # the part's group (`critical_path.GROUPS`): cpu, launch, gpu_compute, copy, collective, ...
    input: int  # the input (rank) it ran on
    kernel_class: str | None = None
    ns_per_step: int


class PathStep(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    step_ns: int  # the step, and the path's length (equal by construction, checked by the tests)
    groups: dict[str, int]  # ns on the path by group: cpu, launch, gpu_compute, copy, collective, rank_wait, ...
    crossings: int  # times the path moved to another rank


class CriticalPathSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The chain of work, across threads, streams and ranks, each step could not have ended sooner than."""

    steps: list[PathStep] = field(default_factory=list)
    shares: dict[str, float] = field(default_factory=dict)  # each group's share of the steps' time
    dominant: str | None = None  # the group with the most path time (None without steps)
    per_step_ns: dict[str, int] = field(default_factory=dict)  # mean ns a step by part
    compute_by_class_ns: dict[str, int] = field(default_factory=dict)  # mean ns a step of kernels, by class
    crossings: int = 0  # moves to another rank, in all
    top: list[PathItem] = field(default_factory=list)


class Waits(msgspec.Struct, frozen=True, kw_only=True):
    count: int = 0
    total_ns: int = 0
    outside_trace_count: int = 0
    outside_trace_ns: int = 0
    items: list[Wait] = field(default_factory=list)


class RankSteps(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    count: int
    mean_ns: int | None
    median_ns: int | None
    total_ns: int


class Rank(msgspec.Struct, frozen=True, kw_only=True):
    input: int
    label: str
    path: str
    rank: int | None
    host: str | None
    device_count: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    idle_fraction: float | None
    steps: RankSteps
    # Its collectives (`analysis/collectives.py`); None where the run has none matched across ranks.
    wait_ns: int | None = None  # waiting inside collectives for later ranks (a union)
    transfer_ns: int | None = None  # the collectives' transfers (the shortest duration of each across ranks)
    late_ns: int | None = None  # how late it arrives at collectives, after the first rank (a union)
    wait_per_step_ns: int | None = None
    transfer_per_step_ns: int | None = None
    late_per_step_ns: int | None = None
    last_count: int | None = None  # collectives at which it arrived last
    phases: dict[str, int] = field(default_factory=dict)  # mean ns a step per phase, its collective waits out


class CollectiveGroup(msgspec.Struct, frozen=True, kw_only=True):
    """The instances of one collective and message size: how long the transfer takes and how long ranks wait."""

    collective: str  # all_reduce, all_gather, reduce_scatter, all_to_all, ...
    bytes: int | None
    count: int
    transfer_ns: int  # the shortest instance's transfer (single-rank: the shortest duration)
    dur_max_ns: int  # the longest a rank spent in one: its wait and the transfer
    wait_ns: int  # waiting summed over instances and ranks
    busbw_gbps: float | None  # at the shortest transfer (nccl-tests' bus bandwidth)
    link_peak_gbps: float | None  # the device's NVLink a direction, where known


class StragglerRank(msgspec.Struct, frozen=True, kw_only=True):
    """The rank the others wait for, and where its step loses the time."""

    rank: int
    label: str
    last_share: float  # of the instances with any spread, the share at which it arrived last
    late_per_step_ns: int
    phase: str | None  # the phase where it spends most more than the median of the other ranks
    phase_excess_ns: int | None
    phases: list[tuple[str, int]] = field(default_factory=list)
    message: str = ""


class CollectivesSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Who waits for whom (`analysis/collectives.py`): collectives matched across ranks, split into waiting and
    transfer; the straggler."""

    scope: str = "none"  # "matched" (2+ ranks in the trace), "single_rank", "none"
    side: str = ""  # "device" (NCCL / RCCL kernels) or "host" (a backend's host ranges: gloo)
    note: str = ""
    phase_source: str = "none"
    count: int = 0  # instances
    unmatched: int = 0
    wait_ns: int = 0  # waiting, summed over ranks (single-rank: beyond the shortest of the same kind and size)
    transfer_ns: int = 0  # transfer, summed over ranks
    # The step input's, a step: the union of its waits / transfers inside the steps (several in flight count once).
    wait_per_step_ns: int | None = None
    transfer_per_step_ns: int | None = None
    groups: list[CollectiveGroup] = field(default_factory=list)
    straggler: StragglerRank | None = None


class Ranks(msgspec.Struct, frozen=True, kw_only=True):
    """The cross-rank view (`analysis/ranks.py`) of a run of several inputs."""

    count: int
    items: list[Rank]
    step_mean_min_ns: int | None
    step_mean_max_ns: int | None
    step_mean_spread_ns: int | None
    step_mean_spread_fraction: float | None
    slowest: Rank | None

    def behind_fastest(self, rank: Rank) -> float | None:
        """How much longer `rank`'s mean step is than the fastest rank's, as a share of it."""
        mean, fastest = rank.steps.mean_ns, self.step_mean_min_ns
        return None if mean is None or not fastest else (mean - fastest) / fastest


class HostOps(msgspec.Struct, frozen=True, kw_only=True):
    top: list[HostOp] = field(default_factory=list)
    input_functions: list[HostOp] = field(default_factory=list)


class RunListed(msgspec.Struct, frozen=True, kw_only=True):
    """One run found under the PATH given (`meta.runs`)."""

    name: str
    files: int
    bytes: int
    selected: bool
    capture_pass: bool | None  # null when not looked at
    captured: str | None = None  # ISO 8601 UTC start on the traces' own clock; null: none (ordered by file time)
    grouping: str | None = None  # why these files are one run, or apart from the others in their folder


class Meta(msgspec.Struct, kw_only=True):
    """Where the report came from: what the traces say (capture date, versions), what the PATH held (`runs`,
    `run_choice`) and what only the command knows (time, command line, options, input): `render/meta.py`."""

    generated_at: str | None = None
    command: list[str] | None = None
    options: dict[str, Any] | None = None
    input: str | None = None
    capture_date: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    runs: list[RunListed] | None = None
    run_choice: str | None = None


class RunReport(msgspec.Struct, kw_only=True):
    """One run's report: the object of the `--json` contract."""

    schema: str = SCHEMA
    version: str = "unknown"
    run: str
    inputs: list[Input]
    framework: str = "unknown"
    window: Window = field(default_factory=lambda: Window(start_ns=None, end_ns=None))
    device_info: list[DeviceInfo] = field(default_factory=list)
    steps: Steps
    devices: list[Device]
    totals: Totals
    capture: Capture | None = None  # None: a report from before capture kinds
    input_pipeline: InputPipeline
    graph_replays: GraphReplays = field(default_factory=GraphReplays)
    queue_depth: QueueDepth = field(default_factory=QueueDepth)
    kernel_sequences: KernelSequences = field(default_factory=KernelSequences)
    critical_path: CriticalPathSummary = field(default_factory=CriticalPathSummary)
    waits: Waits = field(default_factory=Waits)
    ranks: Ranks | None = None  # None with a single input
    compute: ComputeEfficiency = field(default_factory=ComputeEfficiency)
    collectives: CollectivesSummary = field(default_factory=CollectivesSummary)
    ledger: Ledger = field(default_factory=Ledger)
    projection: RunProjection | None = None  # None when nothing fires
    host_ops: HostOps = field(default_factory=HostOps)
    bottlenecks: list[Bottleneck]
    warnings: dict[str, int] = field(default_factory=dict)  # what was skipped or repaired, by reason
    meta: Meta = field(default_factory=Meta)


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One run in a line (`traceinsight runs`, the `trend` page, `ti.runs`, the TensorBoard tab's first view): what
    it is and its headline figures, from its report (`listing.summarize`)."""

    name: str  # as `--run` takes it (a saved report: its file name)
    format: str | None = None  # xspace, kineto, chrome (several: joined by "+")
    framework: str | None = None
    files: int = 0
    bytes: int = 0
    hosts: int = 0
    ranks: int = 0
    capture_kind: str | None = None
    capture_time: str | None = None  # ISO 8601 UTC on the trace's own clock (copied files share modification times)
    modified: float | None = None  # the newest file's modification time (s since the epoch)
    steps: int = 0
    mean_step_ns: int | None = None
    gpu_util: float | None = None  # over the steps (`totals.step_gpu_util`)
    mfu: float | None = None
    input_wait_fraction: float | None = None  # `input_pipeline.fraction`
    top_bottleneck: str | None = None
    top_severity: str | None = None
    top_step_ns_after: int | None = None  # the mean step once the top bottleneck is fixed (None: nothing projected)
    error: str | None = None  # why the run could not be analysed (its figures are then empty)


def to_document(report: RunReport) -> dict[str, Any]:
    """The report as plain JSON values (what `--json` writes): each record a dict of its fields, in order."""
    return as_dict(report)


def is_record(value: Any) -> bool:
    """Whether `value` is a record of this model, or a record class."""
    return isinstance(value, msgspec.Struct) or (isinstance(value, type) and issubclass(value, msgspec.Struct))


def field_names(record: Any) -> tuple[str, ...]:
    """A record's (or a record class's) field names, in declaration order: the keys of its JSON object."""
    return record.__struct_fields__  # type: ignore[no-any-return]


def as_dict(record: Any) -> dict[str, Any]:
    """A record as plain JSON values: a dict of its fields, in order, with the records inside it dicts too, and
    numpy figures Python numbers."""
    return msgspec.to_builtins(record, enc_hook=_plain)  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    """A value msgspec does not know, as JSON values: a numpy scalar or array by its `tolist()`."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise NotImplementedError(f"{type(value).__name__} is not a JSON value")


def from_document(doc: dict[str, Any]) -> RunReport:
    """A report read back from its JSON (`workflow.read_saved_report`); raises `ValueError` naming what is
    missing or of the wrong type."""
    _check_numbers(doc)
    try:
        return msgspec.convert(_current(doc), RunReport, strict=False)
    except msgspec.ValidationError as error:
        raise ValueError(str(error)) from None


# The largest whole number a saved report may hold: every figure we write (nanoseconds since the epoch, bytes,
# counts, FLOPs) is far below it, and the difference of two such figures (`diff`, `trend`) still fits the 64 bits
# JSON writers and numpy take.
MAX_SAVED_INT = 2**62


def _check_numbers(doc: Any) -> None:
    """Raise ValueError naming the first whole number in `doc` beyond ±`MAX_SAVED_INT`, and the first float that
    is not finite (a hand-edited or hostile report: a diff of it would overflow). Walked without recursion."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, bool):
            continue
        elif (isinstance(value, int) and abs(value) > MAX_SAVED_INT) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise ValueError(f"{where} = {value} is out of range (a saved figure is within ±2^62)")


def _current(doc: dict[str, Any]) -> dict[str, Any]:
    """A saved report in this schema. Version 1 measured GPU-Util and idle over the devices' spans and named the
    step-window figures `step_*`; now both words mean the step window, so a `/1` report's step figures move into
    them where it has them (its per-device figures stay the span's: the only ones it holds)."""
    if doc.get("schema") not in OLDER_SCHEMAS:
        return doc
    totals = dict(doc.get("totals") or {})
    for word in ("gpu_util", "idle_fraction"):
        if totals.get(f"step_{word}") is not None:
            totals[word] = totals[f"step_{word}"]
    return {**doc, "schema": SCHEMA, "totals": totals}


def schema_outline() -> str:
    """The JSON report's fields as an indented outline generated from the model (`name: type`, `name[]` for a
    list of objects, `name{}` for a map of them): docs/json.md's schema section is this text, checked by a test."""
    import types
    import typing

    def type_name(kind: Any) -> str:
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if origin in (typing.Union, types.UnionType):
            return " | ".join("null" if a is type(None) else type_name(a) for a in args)
        if origin in (list, tuple):
            return f"list[{type_name(args[0])}]"
        if origin is dict:
            return f"map[{type_name(args[0])}, {type_name(args[1])}]"
        if kind is Any:
            return "any"
        return {str: "str", int: "int", float: "float", bool: "bool"}.get(kind, getattr(kind, "__name__", str(kind)))

    def record(kind: Any) -> tuple[Any, str] | None:
        """The record class `kind` holds (itself, in a list, a map or an optional) and the suffix its field gets."""
        origin, args = typing.get_origin(kind), [a for a in typing.get_args(kind) if a is not type(None)]
        if origin in (typing.Union, types.UnionType) and len(args) == 1:
            found = record(args[0])
            return None if found is None else (found[0], found[1] + "?")
        if origin in (list, tuple) and args and is_record(args[0]):
            return args[0], "[]"
        if origin is dict and is_record(args[1]):
            return args[1], "{}"
        return (kind, "") if is_record(kind) else None

    lines: list[str] = []

    def walk(cls: Any, depth: int) -> None:
        hints = typing.get_type_hints(cls)
        for name in field_names(cls):
            found = record(hints[name])
            if found is None:
                lines.append(f"{'  ' * depth}{name}: {type_name(hints[name])}")
            else:
                lines.append(f"{'  ' * depth}{name}{found[1]}: {found[0].__name__}")
                walk(found[0], depth + 1)

    walk(RunReport, 0)
    return "\n".join(lines)
