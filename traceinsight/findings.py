"""Ranked bottlenecks: what keeps the device from being busy, what it costs, what to change.

Each rule is data: an id (fixed by the JSON contract), a title, where its
threshold comes from, a check over an `Analysis` (the evidence that triggered it
and the `Fix`: what it removes from each step). What to change is looked up by the rule's id in
`advice.TABLE`, which keys its tips by rule, framework and workload and drops what the run already does.

Every bottleneck carries a projection: the mean step once that one fix is applied
on the step model (`analysis/step_model.py`). Measured stalls (the device waits:
input, host, launch, sync, exposed copies and collectives, unexplained idle time)
remove time the trace shows; efficiency rules (`fp32_compute`, `low_occupancy`)
rest on estimates grounded in the hardware and say their assumption. Stalls rank
first, by the step time their fix wins back, unless the device is busy >= 90 % of
the step (then making busy time faster is what is left). A bottleneck's cost
(`time_ns`, `fraction`) is what the stall takes from each step; it equals the
fix's saving except for `input_bound`, whose cost is the whole exposed input wait
(the input verdict's measure) while its first fix only parallelises the pipeline
so far. Severity is the cost as a share of the step: >= 20 % high, >= 5 % medium,
>= 1 % low (XProf's input-bound thresholds, applied to every cause);
`input_bound`'s severity is the input verdict's; estimates are never above medium.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import numpy as np
from msgspec import field
from msgspec.structs import replace

from traceinsight.advice import COMPILED_STEP, advise, seen_evidence
from traceinsight.analysis import Analysis
from traceinsight.analysis.copies import copy_totals
from traceinsight.analysis.hardware import MIN_TENSOR_CORE_CC, mixed_precision_speedup, parse_compute_capability
from traceinsight.analysis.ledger import COPY_PARTS, KERNEL_PARTS, SHOWN_BUSY_PARTS
from traceinsight.analysis.path_projection import path_edit, project_on_path
from traceinsight.analysis.step_model import (
    Fix,
    KernelClass,
    Stall,
    StepModel,
    faster_kernels,
    fix,
    project,
    speedup,
)
from traceinsight.result import Bottleneck, BottleneckProjection, Culprit, HostOp, RunProjection, as_dict
from traceinsight.rules import (
    BATCH_SPARE_FRACTION,
    BUSY_SHARE_EFFICIENCY_FIRST,
    CPU_BOUND_MIN_OPS,
    CPU_BOUND_MIN_SHARE,
    DEFAULT_BATCH_FACTOR,
    DEFAULT_INPUT_FIX_PARALLELISM,
    DRAINED_QUEUE_FOUND_DEPTH,
    DRAINED_QUEUE_LAUNCH_DELAY_NS,
    EFFICIENCY_BUSY_MIN,
    EFFICIENCY_MAX_TRANSFER_SHARE,
    ELEMENTWISE_HEAVY_SHARE,
    EVIDENCE_MIN_COVERAGE,
    FUSED_ATTENTION_OPS,
    GEMM_LOW_EFFICIENCY,
    HEADLINE_FIXES,
    HIGH_INPUT_FRACTION,
    HIGH_SEVERITY,
    HOST_BOUND_CULPRIT_MIN_SHARE,
    INPUT_CULPRIT_FUNCTION_SHARE,
    INPUT_FIX_PARALLELISM,
    LISTED_SEQUENCES,
    LOW_MFU_MAX,
    LOW_SEVERITY,
    MAX_BATCH_FACTOR,
    MEDIUM_SEVERITY,
    MIN_BATCH_FACTOR,
    MIN_HOST_OPS_PER_STEP,
    MODERATE_INPUT_FRACTION,
    MOST,
    SMALL_BATCH_FIXED_SHARE,
    SMALL_BATCH_KERNEL_SHARE,
    SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND,
    STRAGGLER_MIN_LAST_SHARE,
    STRAGGLER_MIN_STEP_SHARE,
    TENSOR_CORE_UNUSED_SHARE,
    TRANSFER_BOUND_SHARE,
    UNFUSED_ATTENTION_OPS,
    VERDICT_SEVERITY,
    WAIT_OWN_WORK_RATIO,
    WAIT_SEEN_MIN_SHARE,
    WARMUP_MIN_SHARE,
)

SEVERITIES = ("low", "medium", "high")
ProjectionT = TypeVar("ProjectionT", BottleneckProjection, RunProjection)
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")


def _pct(fraction: float) -> str:
    """A threshold as rule descriptions write it ('20 %'), from the constant itself, so they cannot drift."""
    return f"{fraction * 100:g} %"


# The warm-up finding: first whenever it fires, and the only one on a window without a steady state.
WARMUP_RULE = "warmup_in_window"
# Where host_bound's op is timed: what the devices were doing meanwhile (`Analysis.ops_in_launch_waits`).
LAUNCH_WAIT_WORDS = "while the device waited for the host's next launch"
# The only finding of a run whose device events are missing: the host's own compute (`_cpu_bound_device_unrecorded`).
HOST_BOUND_RULE = "host_bound"
STALL, EFFICIENCY = "stall", "efficiency"


class Finding(msgspec.Struct, frozen=True):
    """What a rule's check found: its evidence and what fixing it removes from each step."""

    evidence: dict[str, Any]
    fix: Fix
    assumption: str | None = None
    severity: str | None = None  # set by rules whose severity is defined elsewhere (input_bound: the verdict)
    title: str | None = None  # instead of the rule's, where the finding is a variant of it (CPU-only runs)
    # What the stall costs when that differs from what its first fix wins back (input_bound: the whole exposed
    # wait, the input verdict's measure, while the fix parallelises the pipeline only so far).
    cost: Fix | None = None
    # A cost over the capture window rather than the steps (a warm-up's one-time costs): its time and share.
    window_cost: tuple[int, float] | None = None
    # The ledger parts (`analysis/ledger.py`; on a host-only run `_host_parts`) the finding says it costs, ns per
    # step: no two findings claim the same part's time (`_claimed`).
    claims: dict[str, np.ndarray] = field(default_factory=dict)
    # The call, op, kernel or stage of the evidence that contributes most to the cost (None: none stands out).
    culprit: Culprit | None = None
    # False for a variant of a projecting rule whose cause no fix in the trace removes (a CPU-only run's own
    # compute): reported with its cost, never with a projected step, like a rule that projects nothing.
    projects: bool = True


class Rule(msgspec.Struct, frozen=True):
    id: str
    title: str
    basis: str
    check: Callable[[Analysis], Finding | None]
    kind: str = STALL
    max_severity: str = "high"
    # False for what the trace shows but no fix in it removes (time with no known cause, waits for work outside the
    # trace, a warm-up window): reported with its cost, never with a projected step.
    projects: bool = True


def _mean_stall(m: StepModel, stall: Stall) -> int:
    return m.mean(m.stalls[stall])


def _input_bound(a: Analysis) -> Finding | None:
    ip = a.input_pipeline
    m = a.step_model
    if ip.verdict not in VERDICT_SEVERITY or not ip.wait_ns:  # XProf: under 5 % of the step is not input-bound
        return None
    evidence: dict[str, Any] = {
        "input_fraction": ip.fraction,
        "verdict": ip.verdict,
        "source": ip.source,
        "waits": ip.wait_count,
        "input_wait_per_step_ns": _mean_stall(m, Stall.INPUT_WAIT),
    }
    if ip.stages:
        evidence["slowest_stage"] = ip.stages[0].name
        evidence["slowest_stage_self_ns"] = ip.stages[0].self_ns
    if a.host_ops.input_functions:
        slowest = a.host_ops.input_functions[0]
        evidence["slowest_function"] = slowest.function
        evidence["slowest_function_calls"] = slowest.calls
        evidence["slowest_function_time_ns"] = slowest.total_ns
        evidence["slowest_function_holds_gil"] = slowest.holds_gil
    wait = m.stalls[Stall.INPUT_WAIT]
    # The loop waited `wait` for each batch: a k-fold faster pipeline delivers one every wait / k, so the step
    # becomes max(step - wait, wait / k) (the time the loop still waits is at least 0).
    parallelism = INPUT_FIX_PARALLELISM.get(ip.source or "", DEFAULT_INPUT_FIX_PARALLELISM)
    still_waiting = np.maximum(wait / parallelism - (m.step_ns - wait), 0.0)
    hidden = fix(m, idle_ns=wait)
    evidence["parallelism_assumed"] = parallelism
    evidence["step_ns_after_hidden"] = project(m, [hidden]).step_ns_after
    if (on_path := _on_path(a, [("input_bound", hidden)])) is not None:
        evidence["path_step_ns_after_hidden"] = on_path
    return Finding(
        evidence,
        fix(m, idle_ns=wait - still_waiting),
        severity=VERDICT_SEVERITY.get(ip.verdict),
        cost=hidden,
        claims={"input_wait": wait},
        culprit=_input_culprit(a),
    )


def _input_culprit(a: Analysis) -> Culprit | None:
    """The slowest input function where it holds most of the input wait (a map function the pipeline runs), else
    the slowest stage (the iterator or `__next__` the loop waits in), else none."""
    ip = a.input_pipeline
    slowest = a.host_ops.input_functions[0] if a.host_ops.input_functions else None
    if slowest is not None and slowest.total_ns >= INPUT_CULPRIT_FUNCTION_SHARE * (ip.wait_ns or 0):
        return Culprit("input function", slowest.function, slowest.total_ns, slowest.calls)
    if ip.stages:
        stage = ip.stages[0]
        return Culprit("input stage", stage.name, stage.self_ns, stage.count)
    return None


def _small_kernel_share(a: Analysis) -> float:
    """Share of the kernels launched one by one (graph replays' nodes aside) under the small-kernel threshold."""
    count = sum(k.count - k.replayed_count for k in a.kernels)
    return sum(k.small_count - k.replayed_small_count for k in a.kernels) / count if count else 0.0


def _graphs_carry_kernels(a: Analysis) -> bool:
    """Graph replays run most of the kernel time: launch overhead is paid once per graph, not per kernel."""
    return (a.graphs.kernel_share or 0.0) >= MOST


def _launch_delay_p50(a: Analysis) -> int | None:
    delays = [k.launch_delay_p50_ns for k in a.kernels if k.launch_delay_p50_ns is not None]
    return int(np.median(delays)) if delays else None


def _host_gap_evidence(a: Analysis) -> dict[str, Any]:
    shorter = [k.shorter_than_launch_count for k in a.kernels if k.shorter_than_launch_count is not None]
    return {
        "host_launch_gap_per_step_ns": _mean_stall(a.step_model, Stall.HOST_LAUNCH),
        "kernel_count": sum(k.count for k in a.kernels),
        "small_kernel_count": sum(k.small_count for k in a.kernels),
        "small_kernel_share": round(_small_kernel_share(a), 4),
        "small_threshold_ns": a.kernels[0].small_threshold_ns if a.kernels else None,
        "shorter_than_launch_count": sum(shorter) if shorter else None,
        "launch_delay_p50_ns": _launch_delay_p50(a),
    }


def _step_devices(a: Analysis) -> list[str]:
    return [u.id for u in a.devices if u.input_id == a.steps.input_id]


def _drained_queue(a: Analysis) -> bool:
    """The device takes each launch as soon as the host makes it: the host, not the device, sets the pace. Judged
    by the depth a launch finds on its stream where launches are joined to their device work, else by the median
    delay from a launch's end to its kernel's start."""
    found = a.queue_depth.found_depth_p50(_step_devices(a))
    if found is not None:
        return found <= DRAINED_QUEUE_FOUND_DEPTH
    delay = _launch_delay_p50(a)
    return delay is not None and delay <= DRAINED_QUEUE_LAUNCH_DELAY_NS


def _short_kernel_name(name: str) -> str:
    """A kernel's function name without its return type, namespaces, template arguments and parameters."""
    bare = name.replace("(anonymous namespace)", "")
    while (stripped := _TEMPLATE_ARGS.sub("", bare)) != bare:  # innermost <...> first: as deep as the nesting
        bare = stripped
    words = bare.split("(", 1)[0].split()
    return words[-1].rsplit("::", 1)[-1] if words else name[:60]


def _sequence_evidence(a: Analysis) -> dict[str, Any]:
    """The launch queue's figures and the small-kernel sequences every step repeats (fusion / graph candidates)."""
    devices = _step_devices(a)
    found = a.kernel_sequences.items[:LISTED_SEQUENCES] if a.kernel_sequences else []
    listed = [
        {
            "kernels": " > ".join(_short_kernel_name(n) for n in s.names),
            "per_step": round(s.per_step, 2),
            "launch_ns": s.launch_ns,
            "kernel_ns": s.kernel_ns,
            "op_stack": " > ".join(s.op_stack) or None,
        }
        for s in found
    ]
    top = listed[0] if listed else None
    drained = a.queue_depth.drained_share(devices)
    return {
        "queue_drained_share": None if drained is None else round(drained, 4),
        "launch_found_depth_p50": a.queue_depth.found_depth_p50(devices),
        "repeated_sequences": listed or None,
        # What the advice names (`advice.py`): the top sequence's kernels, and the ops that issue them.
        "top_sequence": f"{top['kernels']} ({len(found[0].names)} kernels, {top['per_step']:g} times a step)"
        if top
        else None,
        "top_sequence_ops": top["op_stack"] if top else None,
    }


def _host_fix(a: Analysis) -> Fix:
    """Less host work per step (fused ops, graphs): the host-launch gaps close, and the host work done inside them
    goes; the host's work outside them stays, so the step never gets shorter than that."""
    m = a.step_model
    return fix(m, idle_ns=m.stalls[Stall.HOST_LAUNCH], host_ns=m.host_in_launch_gaps_ns)


def _launch_bound(a: Analysis) -> Finding | None:
    if a.step_model.mean(a.step_model.stalls[Stall.HOST_LAUNCH]) <= 0 or _graphs_carry_kernels(a):
        return None
    if _small_kernel_share(a) < SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND or not _drained_queue(a):
        return None
    return Finding({**_host_gap_evidence(a), **_sequence_evidence(a)}, _host_fix(a), claims=_launch_claims(a))


def _launch_claims(a: Analysis) -> dict[str, np.ndarray]:
    return {"host_launch": a.step_model.stalls[Stall.HOST_LAUNCH]}


def _host_loop_traced(a: Analysis) -> bool:
    """A CPU-only training loop whose ops the trace shows: marked steps (or a repeating step found), with at
    least `MIN_HOST_OPS_PER_STEP` framework ops each. Else time between ops may be untraced work, not overhead."""
    steps = a.steps.count
    looped = a.steps.source == "marker" or steps >= 2
    return looped and steps > 0 and a.step_model.host_op_count >= MIN_HOST_OPS_PER_STEP * steps


def _framework_overhead(a: Analysis) -> Finding | None:
    """CPU-only run: the host is the device. Step time outside its ops and input waits is framework and Python
    dispatch overhead, and so is the eager runtime's own cost per op; a compiled step removes both (an estimate:
    the ops' own work is kept)."""
    m = a.step_model
    if not _host_loop_traced(a):
        return None
    overhead = np.clip(m.step_ns - m.stalls[Stall.INPUT_WAIT] - m.host_floor_ns, 0, None)
    if m.mean(overhead) <= 0:
        return None
    dispatch = m.eager_dispatch_ns
    eager = " and, of each op run eagerly, what an op that computes nothing takes to run here" if dispatch.any() else ""
    return Finding(
        {
            "overhead_per_step_ns": m.mean(overhead),
            "op_time_per_step_ns": m.mean(m.host_floor_ns),
            "eager_dispatch_per_step_ns": m.mean(dispatch),
            "input_wait_per_step_ns": m.mean(m.stalls[Stall.INPUT_WAIT]),
        },
        fix(m, idle_ns=overhead + dispatch, host_ns=dispatch),
        claims={"between_ops": overhead, "host_work": dispatch},
        assumption=f"a compiled step ({COMPILED_STEP.get(a.profile.framework, 'tf.function / torch.compile')}) "
        "removes the Python and framework dispatch "
        f"between ops{eager}, and keeps the rest of the ops' time, which graph-mode fusion usually lowers further",
        title="Framework overhead: the step is spent between ops (CPU-only run: the host is the device)",
    )


def _cpu_bound(a: Analysis) -> Finding | None:
    """CPU-only run whose step is the host's own work (its ops, and where the loop is not traced the time between
    them too), at least `CPU_BOUND_MIN_SHARE` of the step, with at least `CPU_BOUND_MIN_OPS` ops in the capture,
    and no framework overhead found: the host is the device and it is busy. Nothing in the trace projects its fix
    (an accelerator, more threads, lower precision change the ops themselves), so it states its cost, the ops' own
    time (the step table's host compute: the time between them stays idle there), and names the op with the most
    self time."""
    m = a.step_model
    if not m.count or a.host_ops.count < CPU_BOUND_MIN_OPS:  # too few ops to say what the window is
        return None
    parts = _host_parts(a)
    busy = parts["host_work"] + parts["between_ops"]
    if float(busy.sum()) < CPU_BOUND_MIN_SHARE * float(m.step_ns.sum()):
        return None
    evidence: dict[str, Any] = {
        "cpu_bound": True,
        "op_time_per_step_ns": m.mean(parts["host_work"]),
        "between_ops_per_step_ns": m.mean(parts["between_ops"]),
        "host_ops": a.host_ops.count,
    }
    title = "CPU-bound: the step is the CPU's own work, and no accelerator ran"
    return _host_work_finding(a, evidence, parts["host_work"], _step_op(a, a.host_ops.top), title)


def _cpu_bound_device_unrecorded(a: Analysis) -> Finding | None:
    """A run whose device events are missing (`device_events_cut`) whose step is still mostly the CPU's own compute:
    ops that gave the device nothing to do (no launch, copy or sync inside them: `unlaunched_work`), at least
    `CPU_BOUND_MIN_SHARE` of the step, with at least `CPU_BOUND_MIN_OPS` ops in the capture. Whatever the device
    did meanwhile, that host work bounds the step. Ops that launch device work are left out: their host time is
    dispatch, whose cost depends on what the unrecorded device did."""
    m = a.step_model
    work = a.unlaunched_work
    if (
        not m.count
        or a.host_ops.count < CPU_BOUND_MIN_OPS
        or float(work.per_step_ns.sum()) < CPU_BOUND_MIN_SHARE * float(m.step_ns.sum())
    ):
        return None
    evidence: dict[str, Any] = {
        "device_unrecorded": True,
        "op_time_per_step_ns": m.mean(work.per_step_ns),
        "host_ops": work.ops,
    }
    title = "CPU-bound: the step is the CPU's own work in ops that gave the device nothing to do"
    return _host_work_finding(a, evidence, work.per_step_ns, _step_op(a, work.top), title)


def _step_op(a: Analysis, ops: list[HostOp]) -> HostOp | None:
    """The first of `ops` (by self time) that is an op of the steps, not a range around them: one whose calls last
    no longer than the longest step on average. A `record_function` range around the whole loop (a legacy trace
    records it as an op) has the most self time when the loop's Python between ops is not traced (gec-with-copying:
    'model_inference', 1 call of 428 ms over 54 steps of 3 ms), and names no work of the step."""
    longest = float(a.step_model.step_ns.max()) if a.step_model.count else 0.0
    return next((op for op in ops if op.total_ns <= longest * op.calls), None)


def _op_culprit(op: HostOp | None, within: str | None = None) -> Culprit | None:
    """A host op as its finding's culprit, by its self time (`within` where that is counted); none with no time."""
    return Culprit("op", op.name, op.self_ns, op.calls, within=within) if op is not None and op.self_ns > 0 else None


def _host_work_finding(
    a: Analysis, evidence: dict[str, Any], work: np.ndarray, top: HostOp | None, title: str
) -> Finding:
    """A finding whose cost is the host's own work (`work`, ns per step): no fix projected, the op with the most
    self time named."""
    m = a.step_model
    if top is not None:
        evidence["top_op"] = top.name
        evidence["top_op_self_ns"] = top.self_ns
    return Finding(
        evidence,
        fix(m),
        cost=fix(m, idle_ns=work, host_ns=work),  # the step table's host compute
        claims={"host_work": work},
        title=title,
        culprit=_op_culprit(top),
        projects=False,
    )


def _host_bound(a: Analysis) -> Finding | None:
    if not a.devices and a.device_events_cut:
        return _cpu_bound_device_unrecorded(a)
    if not a.devices:
        overhead = _framework_overhead(a)
        step = a.step_model.mean(a.step_model.step_ns)
        worth = overhead is not None and overhead.evidence["overhead_per_step_ns"] >= LOW_SEVERITY * step
        return overhead if worth else _cpu_bound(a) or overhead
    if a.step_model.mean(a.step_model.stalls[Stall.HOST_LAUNCH]) <= 0:
        return None
    if (
        _small_kernel_share(a) >= SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND
        and _drained_queue(a)
        and not _graphs_carry_kernels(a)
    ):
        return None
    top = _step_op(a, a.ops_in_launch_waits)
    waits = float(a.step_model.stalls[Stall.HOST_LAUNCH].sum())
    named = top if top is not None and top.self_ns >= HOST_BOUND_CULPRIT_MIN_SHARE * waits else None
    culprit = _op_culprit(named, within=LAUNCH_WAIT_WORDS)
    return Finding(_host_gap_evidence(a), _host_fix(a), claims=_launch_claims(a), culprit=culprit)


def _h2d_copy(a: Analysis) -> Finding | None:
    h2d = copy_totals(a.copies, "h2d") if a.copies else None
    if not h2d or h2d.count == 0:
        return None
    m = a.step_model
    return Finding(
        {
            "count": h2d.count,
            "total_ns": h2d.total_ns,
            "exposed_ns": h2d.exposed_ns,
            "exposed_per_step_ns": _mean_stall(m, Stall.H2D_EXPOSED),
            "bytes": h2d.bytes,
            "pageable_count": h2d.pageable_count,
            "bandwidth_gbps": round(h2d.bandwidth_gbps, 3) if h2d.bandwidth_gbps is not None else None,
        },
        fix(m, device_ns=m.stalls[Stall.H2D_EXPOSED]),
        claims={"copy_h2d": m.stalls[Stall.H2D_EXPOSED]},
    )


def _transfer_bound(a: Analysis) -> Finding | None:
    """The device's busy time in the steps is mostly copies no kernel hides (host offloading, weights or
    activations moved every step): the transfers themselves are the bottleneck, whatever their direction. The fix
    hides or avoids them (the copies go, the kernels stay)."""
    ledger = a.ledger
    if not ledger.devices:
        return None
    copies = {part: ledger.mean(part) for part in COPY_PARTS}
    moved = np.sum(list(copies.values()), axis=0)
    busy = np.sum([ledger.mean(part) for part in SHOWN_BUSY_PARTS], axis=0)
    if busy.sum() <= 0 or moved.sum() < TRANSFER_BOUND_SHARE * busy.sum():
        return None
    m = a.step_model
    return Finding(
        {
            "copy_share_of_busy": round(float(moved.sum() / busy.sum()), 4),
            "copy_per_step_ns": {part: m.mean(ns) for part, ns in copies.items() if ns.any()},
            "compute_per_step_ns": m.mean(ledger.mean("compute")),
        },
        fix(m, device_ns=moved),
        claims=copies,
    )


def _waits_evidence(a: Analysis, outside: bool) -> list[dict[str, Any]]:
    """The longest blocking waits (`analysis/waits.py`) whose work is (not) in the trace, for the evidence."""
    return [
        {"name": w.name, "start_ns": w.start_ns, "dur_ns": w.dur_ns, "waited_for": w.waited_for}
        for w in a.waits.items
        if w.outside_trace == outside
    ][:3]


def _wait_culprit(a: Analysis, outside: bool) -> Culprit | None:
    """The blocking call whose listed waits (`analysis/waits.py`) whose work is (not) in the trace last longest in
    all, with its time and calls."""
    totals: dict[str, list[int]] = {}
    for w in a.waits.items:
        if w.outside_trace == outside:
            ns_calls = totals.setdefault(w.name, [0, 0])
            ns_calls[0] += w.dur_ns
            ns_calls[1] += 1
    if not totals:
        return None
    name, (ns, calls) = max(totals.items(), key=lambda item: item[1][0])
    return Culprit("call", name, ns, calls)


def _d2h_sync(a: Analysis) -> Finding | None:
    """Syncs and blocking copies the device waited through, less the waits for work the trace does not hold."""
    m = a.step_model
    return Finding(
        {
            "sync_gap_per_step_ns": _mean_stall(m, Stall.SYNC) - _mean_stall(m, Stall.SYNC_OUTSIDE),
            "d2h_exposed_per_step_ns": _mean_stall(m, Stall.D2H_EXPOSED),
            "waits": _waits_evidence(a, outside=False),
        },
        fix(m, idle_ns=m.stalls[Stall.SYNC] - m.stalls[Stall.SYNC_OUTSIDE], device_ns=m.stalls[Stall.D2H_EXPOSED]),
        claims={
            "blocking_wait": m.stalls[Stall.SYNC] - m.stalls[Stall.SYNC_OUTSIDE],
            "copy_d2h": m.stalls[Stall.D2H_EXPOSED],
        },
        culprit=_wait_culprit(a, outside=False),
    )


def _external_wait(a: Analysis) -> Finding | None:
    """A blocking call waited while the device ran nothing of this trace: the work is outside it."""
    m = a.step_model
    if m.mean(m.stalls[Stall.SYNC_OUTSIDE]) <= 0:
        return None
    return Finding(
        {"wait_per_step_ns": _mean_stall(m, Stall.SYNC_OUTSIDE), "waits": _waits_evidence(a, outside=True)},
        fix(m),
        cost=fix(m, idle_ns=m.stalls[Stall.SYNC_OUTSIDE]),
        claims={"wait_outside_trace": m.stalls[Stall.SYNC_OUTSIDE]},
        culprit=_wait_culprit(a, outside=True),
    )


def _warmup_in_window(a: Analysis) -> Finding | None:
    """One-time costs fill the window: its figures are the warm-up's, not a steady state's."""
    c = a.capture
    if c.kind != "warmup":
        return None
    m = a.step_model
    return Finding(
        {
            "one_time_ns": c.one_time_ns,
            "one_time_share": c.one_time_share,
            "one_time": [as_dict(cost) for cost in c.one_time],
            "steady_steps_analyzed": c.steady_steps,
        },
        fix(m),
        severity="high",
        window_cost=(c.one_time_ns, c.one_time_share),
    )


def _coverage(read_ns: float, total_ns: float) -> float | None:
    """The share of the time an estimate judges that its evidence covers (None: no such time)."""
    return round(read_ns / total_ns, 4) if total_ns > 0 else None


def _low_occupancy(a: Analysis) -> Finding | None:
    """Kernels with fewer blocks than SMs, judged only where the trace gives the launch shapes of most of the
    kernel time (collectives, which run on a few SMs by design, are not judged)."""
    m = a.step_model
    coverage = _coverage(sum(k.launch_shape_ns for k in a.kernels), sum(k.shaped_kernel_ns for k in a.kernels))
    if coverage is None or coverage < EVIDENCE_MIN_COVERAGE:
        return None
    waste = m.kernel_ns[KernelClass.LOW_BLOCKS_WASTE]
    return Finding(
        {
            "kernels_under_one_block_per_sm_ns": sum(k.low_blocks_ns for k in a.kernels),
            "occupancy_mean_pct": [k.occupancy_mean_pct for k in a.kernels],
            "launch_shape_coverage": coverage,
        },
        (faster := faster_kernels(m, waste)),
        claims={"compute": faster.device_ns},
        assumption="kernels with fewer blocks than SMs leave (1 - blocks/SM) of the GPU idle; a batch that fills "
        "every SM does the same work in blocks/SM of their time",
    )


def _batch_factor(a: Analysis) -> tuple[float, str] | None:
    """How many times larger the batch can get, and why: the device memory's batch headroom factor where the
    trace has memory events (the tightest device; None when it is under 2x: memory, not the batch, is the
    limit), else `DEFAULT_BATCH_FACTOR` while memory allows."""
    factors = [m.batch_headroom_factor for m in a.memory if m.batch_headroom_factor is not None]
    if not factors:
        return DEFAULT_BATCH_FACTOR, f"a {DEFAULT_BATCH_FACTOR:g}x batch (memory use unknown: raise it while it fits)"
    factor = min(factors)
    if factor < MIN_BATCH_FACTOR:
        return None
    k = float(min(int(factor), MAX_BATCH_FACTOR))
    fits = f"the per-step transient memory fits {factor:.1f} times in the free memory"
    return k, f"a {k:g}x batch ({fits}, {_pct(BATCH_SPARE_FRACTION)} spare)"


def _small_batch(a: Analysis) -> Finding | None:
    """The step is made of many short kernels (or tiny ops on a CPU-only run): per-step fixed costs (launches,
    dispatch, the gaps between them) dominate, and a bigger batch spreads them over more samples."""
    m = a.step_model
    if m.count == 0:
        return None
    batch = _batch_factor(a)
    if batch is None:
        return None
    k, why = batch
    spread = 1.0 - 1.0 / k
    if a.devices:
        total = sum(k_.total_ns for k_ in a.kernels)
        small = sum(k_.small_total_ns for k_ in a.kernels)
        if total <= 0 or small < SMALL_BATCH_KERNEL_SHARE * total:
            return None
        evidence: dict[str, Any] = {"small_kernel_time_share": round(small / total, 4)}
        small_ns = m.kernel_ns[KernelClass.SMALL_KERNELS]
        # The per-step fixed costs between kernels: late launches and idle time no other cause explains. Waits for
        # input, syncs, collectives or work outside the trace are their own findings' and do not shrink with it.
        launch, other = m.stalls[Stall.HOST_LAUNCH] * spread, m.stalls[Stall.OTHER] * spread
        fixed = fix(
            m,
            idle_ns=launch + other,
            device_ns=small_ns * spread,
            kernel_ns=small_ns * spread,
            host_ns=m.host_floor_ns * spread,
        )
        claims = {"host_launch": launch, "unexplained": other, "compute": small_ns * spread}
    else:
        if not _host_loop_traced(a):
            return None
        parts = _host_parts(a)
        # The step less its waits for input and for other ranks, which a bigger batch does not spread.
        working = parts["host_work"] + parts["between_ops"]
        # Tiny ops, optimizer updates, the dispatch between ops (host threads compute side by side: clipped at 0).
        per_step = np.clip(working - m.batch_work_ns, 0, None)
        share = float(per_step.sum() / working.sum()) if working.sum() > 0 else 0.0
        if share < SMALL_BATCH_FIXED_SHARE:
            return None
        evidence = {"per_step_cost_share": round(share, 4), "batch_work_per_step_ns": m.mean(m.batch_work_ns)}
        # The part of the host's own work that is fixed (its collectives' waiting aside).
        in_floor = np.clip(parts["host_work"] - m.batch_work_ns, 0, None)
        fixed = fix(m, idle_ns=per_step * spread, host_ns=in_floor * spread)
        between = np.clip(per_step - in_floor, 0, None) * spread
        claims = {"host_work": in_floor * spread, "between_ops": between}
    evidence["batch_factor_assumed"] = k
    return Finding(
        evidence,
        fixed,
        claims=claims,
        assumption=f"{why}; kernels/ops this short are launch- or dispatch-bound, so their time and the gaps between "
        "them stay per step while the samples grow; longer ones grow with the batch. The step shown is per current "
        "batch of samples, an upper bound on the gain",
    )


def _host_parts(a: Analysis) -> dict[str, np.ndarray]:
    """A host-only run's steps in parts, ns per step, for findings to claim: input wait, waiting inside collectives
    (for other ranks), the host's own work less that waiting, and the time between ops (framework overhead)."""
    m = a.step_model
    waits = _collective_waits(a)
    waits = waits if len(waits) == m.count else np.zeros(m.count)
    input_wait = m.stalls[Stall.INPUT_WAIT]
    floor = np.minimum(m.host_floor_ns, np.clip(m.step_ns - input_wait, 0, None))
    waits = np.minimum(waits, floor)  # the waiting happens inside host collectives, which the host floor holds
    return {
        "input_wait": input_wait,
        "collective_wait": waits,
        "host_work": floor - waits,
        "between_ops": np.clip(m.step_ns - input_wait - floor, 0, None),
    }


def _compute_capability(a: Analysis) -> tuple[int, int] | None:
    """The oldest NVIDIA compute capability of the run's GPUs. AMD GPUs report their gfx version in the same field
    (gfx90a as 9.0, gfx942 as 9.4), which the NVIDIA peak tables would misread as a Hopper."""
    nvidia = [d for d in a.profile.devices.values() if (d.vendor or "").lower() != "amd"]
    caps = [parse_compute_capability(d.compute_capability) for d in nvidia]
    known = [c for c in caps if c is not None]
    return min(known) if known else None


def _fp32_compute(a: Analysis) -> Finding | None:
    """Matrix kernels positively known to run in FP32 without Tensor Cores (never those of untold precision),
    judged only where the precision of most of the matrix kernel time is known."""
    eligible = sum(k.tensor_core_eligible_ns for k in a.kernels)
    known = eligible - sum(k.tensor_core_unknown_ns for k in a.kernels)
    tc = sum(k.tensor_core_ns for k in a.kernels)
    coverage = _coverage(known, eligible)
    if coverage is None or coverage < EVIDENCE_MIN_COVERAGE or tc >= TENSOR_CORE_UNUSED_SHARE * known:
        return None
    cc = _compute_capability(a)
    speedup = mixed_precision_speedup(cc)
    if speedup is None:
        return None
    ratio, words = speedup
    m = a.step_model
    saved = m.kernel_ns[KernelClass.FP32_ELIGIBLE] * (1.0 - 1.0 / ratio)
    return Finding(
        {
            "eligible_kernel_ns": eligible,
            "tensor_core_kernel_ns": tc,
            "precision_coverage": coverage,
            "fp32_eligible_per_step_ns": m.mean(m.kernel_ns[KernelClass.FP32_ELIGIBLE]),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "peak_speedup": round(ratio, 2),
        },
        (faster := faster_kernels(m, saved)),
        claims={"compute": faster.device_ns},
        assumption=words,
    )


def _low_compute_efficiency(a: Analysis) -> Finding | None:
    """A busy device whose counted work runs far below the roofline (`analysis/compute.py`): the fix is each
    counted op at the roofline of the device's published peaks, so the saving can never pass what the hardware
    allows; which classes hold the time says what to do. Judged only where the FLOPs of most of the compute
    kernels' time are counted: the rest would be judged by a few small GEMMs that stand for none of it."""
    c, m = a.compute.summary, a.step_model
    over = a.compute.over_roofline_ns
    if c.mfu is None or c.mfu >= LOW_MFU_MAX or (m.gpu_util or 0.0) < EFFICIENCY_BUSY_MIN or len(over) != m.count:
        return None
    if (c.flop_coverage or 0.0) < EVIDENCE_MIN_COVERAGE:
        return None
    classes = {k.name: k for k in c.classes}
    if sum(classes[k].share for k in ("copy", "communication") if k in classes) >= EFFICIENCY_MAX_TRANSFER_SHARE:
        return None
    matmul = classes.get("matmul")
    elementwise_share = classes["elementwise"].share if "elementwise" in classes else 0.0
    attention_ops = set(a.profile.ops["name"].astype(str).unique()) if len(a.profile.ops) else set()
    evidence: dict[str, Any] = {
        "mfu": c.mfu,
        "mfu_is_lower_bound": c.mfu_is_lower_bound,
        "flop_coverage": c.flop_coverage,
        "precision_coverage": c.precision_coverage,
        "gpu_util": c.gpu_util,
        "compute_share": c.compute_share,
        "compute_efficiency": c.compute_efficiency,
        "dtype": c.dtype,
        "peak_tflops": c.peak_tflops,
        "device": c.device,
        "class_shares": {k.name: k.share for k in c.classes},
        "matmul_roofline_fraction": None if matmul is None else matmul.roofline_fraction,
        "above_roofline_per_step_ns": m.mean(over),
        "elementwise_heavy": elementwise_share >= ELEMENTWISE_HEAVY_SHARE,
        "gemm_below_roofline": matmul is not None and (matmul.roofline_fraction or 1.0) < GEMM_LOW_EFFICIENCY,
        "wide_dtype": c.dtype in ("fp32", "tf32"),
        "attention_unfused": bool(attention_ops & set(UNFUSED_ATTENTION_OPS))
        and not any(FUSED_ATTENTION_OPS.search(name) for name in attention_ops),
    }
    return Finding(
        evidence,
        (faster := faster_kernels(m, over)),
        claims={"compute": faster.device_ns},
        culprit=_roofline_culprit(a),
        assumption=f"each counted op runs at the roofline of the {c.device}'s published peaks ({c.peak_source}); "
        "time above it is what faster kernels can win back, no more",
    )


def _roofline_culprit(a: Analysis) -> Culprit | None:
    """The counted op with the most time above its roofline: the biggest part of what faster kernels win back."""
    above = [
        (op.time_ns * (1.0 - op.roofline_fraction), op) for op in a.compute.ops if op.roofline_fraction is not None
    ]
    if not above:
        return None
    _, op = max(above, key=lambda pair: pair[0])
    return Culprit("op", op.name, op.time_ns, op.calls)


def _collective_waits(a: Analysis) -> np.ndarray:
    """The step input's waiting inside collectives in each of the run's steps (ns): for a straggler, or for ranks
    not in the trace; what `straggler` removes and `communication` leaves out."""
    return a.collective_waits.astype(np.float64)


def _straggler(a: Analysis) -> Finding | None:
    """Ranks wait in collectives for one rank that arrives late (`analysis/collectives.py`): the fix is every rank
    at the median rank's pace, so the run's steps lose the wait the step input spends for the straggler."""
    c = a.collectives
    s = c.straggler
    if s is None:
        return None
    m = a.step_model
    wait = _collective_waits(a)
    if len(wait) != m.count:
        return None
    evidence = {
        "straggler": s.label,
        "late_phase": s.phase,
        "phase_excess_per_step_ns": s.phase_excess_ns,
        "late_per_step_ns": s.late_per_step_ns,
        "arrives_last_share": round(s.last_share, 4),
        "wait_per_step_ns": m.mean(wait),
        "message": s.message,
    }
    claims = {"collective_wait": wait}
    if c.side == "device":  # the collective's kernel runs while it waits: device time, not idle
        return Finding(evidence, fix(m, device_ns=wait, kernel_ns=wait), claims=claims)
    return Finding(evidence, fix(m, idle_ns=wait, host_ns=wait), claims=claims)


def _communication(a: Analysis) -> Finding | None:
    """Collective time not hidden under compute, its transfer part only: the waiting part is the straggler's (or,
    with one rank in the trace, waiting for ranks not in it), and overlapping a transfer does not shorten a wait."""
    m = a.step_model
    exposed = m.stalls[Stall.COMMUNICATION_EXPOSED]
    waiting = _collective_waits(a)
    waiting = np.minimum(waiting, exposed) if len(waiting) == len(exposed) else np.zeros(len(exposed))
    transfer = exposed - waiting
    evidence: dict[str, Any] = {
        "communication_kernel_ns": sum(k.communication_ns for k in a.kernels),
        "exposed_ns": sum(k.communication_exposed_ns for k in a.kernels),
        "exposed_per_step_ns": _mean_stall(m, Stall.COMMUNICATION_EXPOSED),
        "exposed_waiting_per_step_ns": m.mean(waiting),
        "exposed_transfer_per_step_ns": m.mean(transfer),
    }
    if a.collectives.scope == "single_rank":
        evidence["waiting"] = a.collectives.note
    return Finding(evidence, fix(m, device_ns=transfer, kernel_ns=transfer), claims={"collective_transfer": transfer})


def _collective_wait(a: Analysis) -> Finding | None:
    """Collective time spent waiting that no straggler in the trace explains (one rank's trace; or ranks that arrive
    last by turns): on the device, the part of `communication` its transfer fix leaves out; on the host (gloo), the
    time the step input's collectives wait. Reported with its cost and projected nowhere, since what ends it is on
    ranks the trace does not show."""
    c = a.collectives
    if c.side not in ("device", "host") or c.straggler is not None:
        return None
    m = a.step_model
    wait = _collective_waits(a)
    if len(wait) != m.count:
        return None
    evidence = {
        "waiting_per_step_ns": m.mean(wait),
        "scope": c.scope,
        "collectives": len(c.instances),
        "why": c.note,
    }
    if c.side == "host":
        if a.devices:  # a host backend beside device work: the device ledger does not hold its waiting
            return None
        return Finding(evidence, fix(m), cost=fix(m, idle_ns=wait, host_ns=wait), claims={"collective_wait": wait})
    exposed = np.minimum(wait, m.stalls[Stall.COMMUNICATION_EXPOSED])  # a wait under compute costs nothing
    evidence["exposed_waiting_per_step_ns"] = m.mean(exposed)
    return Finding(
        evidence, fix(m), cost=fix(m, device_ns=exposed, kernel_ns=exposed), claims={"collective_wait": exposed}
    )


def _idle_other(a: Analysis) -> Finding | None:
    """Idle time with no cause the trace names: unexplained, never a fix worth a speedup."""
    m = a.step_model
    return Finding(
        {"other_gap_per_step_ns": _mean_stall(m, Stall.OTHER), "gap_count": sum(g.count for g in a.gaps)},
        fix(m),
        cost=fix(m, idle_ns=m.stalls[Stall.OTHER]),
        claims={"unexplained": m.stalls[Stall.OTHER]},
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "input_bound",
        "Waiting for input data",
        f"XProf input-bound thresholds ({_pct(HIGH_INPUT_FRACTION)} / {_pct(MODERATE_INPUT_FRACTION)} of the step "
        "waiting for input); the PyTorch plugin's DataLoader rule",
        _input_bound,
    ),
    Rule(
        "launch_bound",
        "Launch-bound: many small kernels, the host cannot launch them fast enough",
        f"HTA host-wait rule (launch ended after the GPU went idle), >= {_pct(SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND)} of "
        "the kernels launched one by one under the small-kernel threshold, a drained launch queue (the median launch "
        f"finds <= {DRAINED_QUEUE_FOUND_DEPTH} launch queued or running on its stream; without launches joined to "
        f"their kernels, median launch delay <= {DRAINED_QUEUE_LAUNCH_DELAY_NS / 1000:g} us), and graph replays "
        f"carrying < {_pct(MOST)} of the kernel time",
        _launch_bound,
    ),
    Rule(
        "host_bound",
        "Host-bound: Python / CPU work between launches keeps the GPU waiting",
        f"HTA host-wait rule (launch ended after the GPU went idle), < {_pct(SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND)} of "
        "the kernels launched one by one under the small-kernel threshold, or a deep launch queue (median launch "
        f"finds > {DRAINED_QUEUE_FOUND_DEPTH} launch queued, else median launch delay > "
        f"{DRAINED_QUEUE_LAUNCH_DELAY_NS / 1000:g} us); with no accelerator, the step outside the host's ops",
        _host_bound,
    ),
    Rule(
        "transfer_bound",
        "The device is busy moving data: copies no kernel hides hold most of its busy time",
        f"The ledger's copy parts >= {_pct(TRANSFER_BOUND_SHARE)} of the device's busy time in the steps (XLA's "
        "copy-start / copy-done of host offloading, CUDA / HIP copies)",
        _transfer_bound,
    ),
    Rule(
        "h2d_copy",
        "Host-to-device copies the GPU waits for",
        "Exposed copy time (not overlapped by kernels); Nsight's pageable-memory rule",
        _h2d_copy,
    ),
    Rule(
        "d2h_sync",
        "Device-to-host copies and synchronisations stall the pipeline",
        "Idle time while the host blocked in a sync or blocking copy (Nsight cuda_api_sync / memcpy_sync rules), "
        "less the waits for work outside the trace (external_wait)",
        _d2h_sync,
    ),
    Rule(
        "low_occupancy",
        "Kernels too small to fill the GPU",
        "Kernels with fewer blocks than SMs (PyTorch plugin's SM-efficiency estimate)",
        _low_occupancy,
        kind=EFFICIENCY,
        max_severity="medium",
    ),
    Rule(
        "fp32_compute",
        "Matmul/convolution work runs without Tensor Cores",
        f"PyTorch plugin / XProf Tensor Core rule: matmul/conv/attention kernels, < {_pct(TENSOR_CORE_UNUSED_SHARE)} "
        f"of their time on Tensor Cores, compute capability >= {MIN_TENSOR_CORE_CC[0]}.{MIN_TENSOR_CORE_CC[1]}; "
        "gain from the GPU's published FP16 Tensor Core / FP32 peak ratio",
        _fp32_compute,
        kind=EFFICIENCY,
        max_severity="medium",
    ),
    Rule(
        "low_compute_efficiency",
        "The device is busy but its work runs far below what it can do",
        f"step GPU-Util >= {_pct(EFFICIENCY_BUSY_MIN)}, MFU < {_pct(LOW_MFU_MAX)} and copies and collectives under "
        f"{_pct(EFFICIENCY_MAX_TRANSFER_SHARE)} of kernel time (FLOPs from the trace, peaks from the device's data "
        "sheet); the win is each counted op's time above its roofline",
        _low_compute_efficiency,
        kind=EFFICIENCY,
        max_severity="medium",
    ),
    Rule(
        "straggler",
        "Ranks wait in collectives for a slower rank",
        "collectives matched across ranks: one rank arrives last at "
        f">= {_pct(STRAGGLER_MIN_LAST_SHARE)} of them, late by >= {_pct(STRAGGLER_MIN_STEP_SHARE)} of the step; the "
        "fix is every rank at the median rank's pace (its wait removed)",
        _straggler,
    ),
    Rule(
        "communication",
        "Communication not overlapped with compute",
        "Collective kernel time not hidden under compute kernels, its transfer part (the waiting part is the "
        "straggler's, or for ranks not in the trace), ranked by its share of the step like every stall",
        _communication,
    ),
    Rule(
        "small_batch",
        "The batch is too small: the step is made of short kernels or tiny ops",
        f"Small kernels (< the small-kernel threshold) carry >= {_pct(SMALL_BATCH_KERNEL_SHARE)} of kernel time, or, "
        "with no accelerator, per-step costs a batch does not grow are "
        f">= {_pct(SMALL_BATCH_FIXED_SHARE)} of the step; "
        f"memory must fit a >= {MIN_BATCH_FACTOR:g}x batch; the PyTorch plugin's GPU-utilisation rule advised a "
        "bigger batch",
        _small_batch,
        kind=EFFICIENCY,
        max_severity="medium",
    ),
    Rule(
        "collective_wait",
        "Ranks wait in collectives for ranks this trace does not explain (no fix is projected from it)",
        "Exposed collective kernel time beyond the latest arrival's (matched ranks), or beyond the shortest instance "
        "of the same collective and size (one rank's trace), where no straggler is named",
        _collective_wait,
        projects=False,
    ),
    Rule(
        "idle_other",
        "Idle time without a known cause (unexplained: no fix is projected from it)",
        "Idle gaps whose next op was launched in time and no host wait or sync covers them",
        _idle_other,
        projects=False,
    ),
    Rule(
        "external_wait",
        "A blocking call waits for device work that is not in the trace",
        "Blocking copies and syncs (CUDA and HIP: rules.BLOCKING_HOST_OPS) lasting "
        f">= {WAIT_OWN_WORK_RATIO:g}x their own device work while the device runs < {_pct(WAIT_SEEN_MIN_SHARE)} "
        "of the wait: the work started before the capture window, or runs in another process or rank",
        _external_wait,
        projects=False,
    ),
    Rule(
        WARMUP_RULE,
        "Warm-up fills the profiled window: one-time costs, not the steady state",
        f"One-time costs (compilation, autotuning, context creation, slow first calls) cover >= "
        f"{_pct(WARMUP_MIN_SHARE)} of the window",
        _warmup_in_window,
        projects=False,
    ),
)


def severity_for(fraction: float) -> str | None:
    if fraction >= HIGH_SEVERITY:
        return "high"
    if fraction >= MEDIUM_SEVERITY:
        return "medium"
    if fraction >= LOW_SEVERITY:
        return "low"
    return None


def _on_path(a: Analysis, fixes: list[tuple[str, Fix]]) -> int | None:
    """The mean step after these rules' fixes as edits of the critical path; None if any has no edit there."""
    edits = [path_edit(rule_id, f) for rule_id, f in fixes]
    if any(e is None for e in edits):
        return None
    return project_on_path(a.critical_path, a.step_model, [e for e in edits if e], a.steps.input_id)


def _with_path(projection: ProjectionT, a: Analysis, fixes: list[tuple[str, Fix]]) -> ProjectionT:
    """The projection with the critical path's step after the same fixes (`_on_path`) beside the step model's."""
    on_path = _on_path(a, fixes)
    path_speedup = None if on_path is None else speedup(projection.step_ns_before, on_path)
    return replace(projection, path_step_ns_after=on_path, path_speedup=path_speedup)


def _projects(rule: Rule, finding: Finding) -> bool:
    return rule.projects and finding.projects


def _projection(a: Analysis, finding: Finding, rule: Rule) -> BottleneckProjection:
    if not _projects(rule, finding):
        return BottleneckProjection(**msgspec.structs.asdict(project(a.step_model, [])), basis="none", assumption=None)
    basis = "measured" if rule.kind == STALL and finding.assumption is None else "estimated"
    return BottleneckProjection(
        **msgspec.structs.asdict(project(a.step_model, [finding.fix])), basis=basis, assumption=finding.assumption
    )


def _nothing_on_path(severity: str, projection: BottleneckProjection) -> bool:
    """A low finding whose fix the critical path says removes nothing from the step: not reported, since its own
    line would say that none of the time it removes lies on the path (deepseek's communication, overlapped with
    compute by design: 1.9 % of the step, which its corpus label reports nothing for). A medium or high one stays,
    the two figures side by side."""
    after = projection.path_step_ns_after
    return severity == "low" and after is not None and after >= projection.step_ns_before


def _severity(rule: Rule, finding: Finding, fraction: float) -> str | None:
    severity = finding.severity or severity_for(fraction)
    if severity is not None and SEVERITIES.index(severity) > SEVERITIES.index(rule.max_severity):
        return rule.max_severity
    return severity


def _efficiency_first(a: Analysis) -> bool:
    return a.step_model.busy_share >= BUSY_SHARE_EFFICIENCY_FIRST


def _cost_ns(analysis: Analysis, finding: Finding, projection: BottleneckProjection) -> int:
    """What the stall costs a step: its fix's saving, or the whole stall where the rule says so."""
    if finding.cost is None:
        return projection.saving_ns
    return projection.step_ns_before - project(analysis.step_model, [finding.cost]).step_ns_after


# Each rule that fires: its entry, its finding, the projection of its fix, its severity and its cost a step.
Found = list[tuple[Rule, Finding, BottleneckProjection, str, int]]


def _found(analysis: Analysis) -> Found:
    """Every rule that fires with a saving (or, for a rule that projects nothing, a cost) worth reporting, in
    ranking order, with its cost a step. A window with no steady state (a graph capture pass, a micro-benchmark, a
    warm-up with no steps after it) gets only the warm-up finding: no claim about a step it does not hold.

    Findings claim disjoint time (`_within_claims`): measured stalls first, by cost, then estimates in the rules'
    order; each gets what the earlier ones left of the ledger parts it names. The list is ordered by severity
    (`severity_for`, the one rule), then the leading kind, then what each wins back."""
    fired = []
    for rule in RULES:
        if not analysis.capture.projects and rule.id != WARMUP_RULE:
            continue
        if analysis.device_not_recorded or (
            analysis.device_events_cut and not analysis.devices and rule.id != HOST_BOUND_RULE
        ):  # no device said: only the host's own compute can be judged (`_cpu_bound_device_unrecorded`)
            continue
        finding = rule.check(analysis)
        if finding is not None:
            fired.append((rule, finding, _cost_ns(analysis, finding, _projection(analysis, finding, rule))))
    fired.sort(key=_claim_order)
    remaining = _claimable(analysis)
    found = []
    for rule, finding, _ in fired:
        finding = _within_claims(finding, remaining, bool(analysis.ledger.devices))
        projection = _projection(analysis, finding, rule)
        if _projects(rule, finding):  # the path's step after the fix as it stands once claimed (only here: final)
            projection = _with_path(projection, analysis, [(rule.id, finding.fix)])
        cost = _cost_ns(analysis, finding, projection)
        fraction = cost / projection.step_ns_before if projection.step_ns_before > 0 else 0.0
        severity = _severity(rule, finding, fraction)
        worth = projection.saving_ns > 0 if _projects(rule, finding) else cost > 0 or finding.window_cost is not None
        if severity is not None and worth and not _nothing_on_path(severity, projection):
            found.append((rule, finding, projection, severity, cost))
    lead = EFFICIENCY if _efficiency_first(analysis) else STALL
    found.sort(
        key=lambda f: (
            f[0].id != WARMUP_RULE,
            -SEVERITIES.index(f[3]),
            f[0].kind != lead,
            not _projects(f[0], f[1]),
            -max(f[2].saving_ns, f[4]),
        )
    )
    return found


_RULE_ORDER = {rule.id: i for i, rule in enumerate(RULES)}


def _claim_order(fired: tuple[Rule, Finding, int]) -> tuple[bool, int]:
    """Who claims first: measured stalls, the costliest first; then estimates in the rules' order (the most specific
    cause first: framework overhead before a batch-size guess)."""
    rule, finding, cost = fired
    estimated = rule.kind != STALL or finding.assumption is not None
    return estimated, _RULE_ORDER[rule.id] if estimated else -cost


def _claimable(a: Analysis) -> dict[str, np.ndarray]:
    """What findings can claim, ns per step by part: the ledger's parts (mean over devices), or a host-only run's."""
    if a.ledger.devices:
        return {part: a.ledger.mean(part) for part in a.ledger.parts}
    return _host_parts(a) if a.step_model.count else {}


# On a host-only run, the parts that are the host's own work: a fix that claims them lowers the host floor too.
_HOST_WORK_PARTS = ("host_work", "collective_wait")


def _within_claims(finding: Finding, remaining: dict[str, np.ndarray], on_devices: bool) -> Finding:
    """The finding less what earlier findings already claimed of its ledger parts (its fix and its cost lose the
    excess: idle parts as idle time, busy parts as device time); `remaining` loses what it keeps."""
    if not finding.claims:
        return finding
    steps = len(next(iter(finding.claims.values())))
    idle, device, kernel, host = (np.zeros(steps) for _ in range(4))
    kept = {}
    for part, claim in finding.claims.items():
        claim = np.clip(np.asarray(claim, np.float64), 0, None)
        have = remaining.get(part, np.zeros(steps))
        kept[part] = np.minimum(claim, have)
        remaining[part] = have - kept[part]
        excess = claim - kept[part]
        if on_devices and part in SHOWN_BUSY_PARTS:
            device += excess
            kernel += excess if part in KERNEL_PARTS else 0.0
        else:
            idle += excess
            host += excess if not on_devices and part in _HOST_WORK_PARTS else 0.0
    if not (idle.any() or device.any()):
        return replace(finding, claims=kept)

    def less(f: Fix) -> Fix:
        return replace(
            f,
            idle_ns=np.clip(f.idle_ns - idle, 0, None),
            device_ns=np.clip(f.device_ns - device, 0, None),
            kernel_ns=np.clip(f.kernel_ns - kernel, 0, None),
            host_ns=np.clip(f.host_ns - host, 0, None),
        )

    return replace(
        finding, fix=less(finding.fix), cost=None if finding.cost is None else less(finding.cost), claims=kept
    )


class Findings(msgspec.Struct, frozen=True):
    """Every rule's verdict on one analysis, made once: the ranked bottlenecks, the headline what-if, and what
    each bottleneck costs each step (for the annotated timeline)."""

    bottlenecks: list[Bottleneck]
    headline: RunProjection | None
    step_costs: dict[str, np.ndarray]


def evaluate(analysis: Analysis) -> Findings:
    """Run every rule once and derive all that follows from them (see the module docstring)."""
    found = _found(analysis)
    return Findings(_bottlenecks(analysis, found), _headline(analysis, found), _step_costs(found))


def find_bottlenecks(analysis: Analysis) -> list[Bottleneck]:
    """Every rule that fires, ranked (see the module docstring)."""
    return _bottlenecks(analysis, _found(analysis))


def headline_projection(analysis: Analysis) -> RunProjection | None:
    """The headline what-if alone (`evaluate`)."""
    return _headline(analysis, _found(analysis))


def _bottlenecks(analysis: Analysis, found: Found) -> list[Bottleneck]:
    steps = analysis.step_model.count
    return [
        Bottleneck(
            id=rule.id,
            rank=i + 1,
            severity=severity,
            time_ns=finding.window_cost[0] if finding.window_cost else cost * steps,
            fraction=finding.window_cost[1] if finding.window_cost else round(cost / projection.step_ns_before, 4),
            title=finding.title or rule.title,
            evidence={**finding.evidence, "basis": rule.basis, **seen_evidence(rule.id, analysis)},
            recommendations=advise(rule.id, analysis, finding.evidence, _compute_capability(analysis)),
            kind=rule.kind,
            projection=projection,
            culprit=finding.culprit,
        )
        for i, (rule, finding, projection, severity, cost) in enumerate(found)
    ]


def _step_costs(found: Found) -> dict[str, np.ndarray]:
    """What each bottleneck that fires costs each step (ns): the idle and device time of what its finding says it
    costs (`Finding.cost`, else its fix), read from the same `Fix` the projection applies, so a rule's cost in
    the annotated timeline (`render/trace_export.py`) follows from its entry and needs no table of its own."""
    costs = {}
    for rule, finding, *_ in found:
        cost = finding.cost or finding.fix
        costs[rule.id] = np.clip(cost.idle_ns + cost.device_ns, 0, None)
    return costs


def _headline(analysis: Analysis, found: Found) -> RunProjection | None:
    """The top fixes applied one after another on the same step model (their savings never simply add up).

    Measured stalls of medium or high severity are applied (the first one whatever its severity), at most
    `HEADLINE_FIXES`; an estimate is applied only where efficiency leads, so a guess never inflates the
    measured figure. None when nothing fires.
    """
    found = [f for f in found if _projects(f[0], f[1])]
    if not found:
        return None
    lead_kind = found[0][0].kind
    chosen = [f for f in found if f[0].kind == lead_kind]
    chosen = [chosen[0]] + [f for f in chosen[1:] if f[3] != "low"]
    chosen = chosen[:HEADLINE_FIXES]
    estimated = any(f[2].basis == "estimated" for f in chosen)
    headline = RunProjection(
        **msgspec.structs.asdict(project(analysis.step_model, [f[1].fix for f in chosen])),
        basis="estimated" if estimated else "measured",
        applied=tuple(f[0].id for f in chosen),
    )
    return _with_path(headline, analysis, [(f[0].id, f[1].fix) for f in chosen])
