"""Ranked bottlenecks: what keeps the device from being busy, what it costs, what to change.

Each rule is data: an id (fixed by the JSON contract), a title, where its
threshold comes from, a check over an `Analysis` (the evidence that triggered it
and the `Fix`: what it removes from each step) and advice per framework.

Every bottleneck carries a projection: the mean step once that one fix is applied
on the step model (`analysis/step_model.py`). Measured stalls (the device waits:
input, host, launch, sync, exposed copies and collectives, unexplained idle time)
remove time the trace shows; efficiency rules (`fp32_compute`, `low_occupancy`)
rest on estimates grounded in the hardware and say their assumption. Stalls rank
first, by the step time they win back, unless the device is busy >= 90 % of the
step (then making busy time faster is what is left). Severity is the saving as a
share of the step: >= 20 % high, >= 5 % medium, >= 1 % low (XProf's input-bound
thresholds, applied to every cause); `input_bound`'s severity is the input
verdict's, as both read the same measure; estimates are never above medium.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinsight.analysis import Analysis
from traceinsight.analysis.copies import copy_totals
from traceinsight.analysis.hardware import mixed_precision_speedup, parse_compute_capability
from traceinsight.analysis.input_pipeline import HIGH_INPUT_FRACTION, MODERATE_INPUT_FRACTION
from traceinsight.analysis.step_model import Fix, Projection, StepModel, fix, project

SEVERITIES = ("low", "medium", "high")
HIGH_SEVERITY = HIGH_INPUT_FRACTION  # XProf: >= 20 % of the step
MEDIUM_SEVERITY = MODERATE_INPUT_FRACTION  # XProf: >= 5 %
LOW_SEVERITY = 0.01
# Share of kernels below the small-kernel threshold that makes host-side gaps "launch-bound" rather than "host-bound".
SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND = 0.5
# A drained launch queue: kernels start this soon after their launch returns. Longer median delays mean the host
# is ahead of the device (a deep queue), which is not launch-bound whatever the kernel sizes.
DRAINED_QUEUE_LAUNCH_DELAY_NS = 50_000
# Tensor Cores count as unused when they run less than this share of eligible kernel time.
TENSOR_CORE_UNUSED_SHARE = 0.1
# From this median device-busy share of the step on, efficiency estimates rank before stalls.
BUSY_SHARE_EFFICIENCY_FIRST = 0.9
# The headline applies at most this many fixes.
HEADLINE_FIXES = 3
VERDICT_SEVERITY = {"high": "high", "moderate": "medium"}
# How many times faster the first input fix makes the pipeline produce a batch. tf.data's AUTOTUNE caps a parallel
# map / interleave near the host's core count (2x on the 2-core hosts of our pairs, which is the smallest host
# the projection assumes); `num_workers=4` more DataLoader worker processes load 4x as fast (4.0-4.2x on our pairs).
# A cache removes the work instead: `step_ns_after_hidden` in the evidence is the step once input is fully hidden.
INPUT_FIX_PARALLELISM = {"DataLoader": 4.0, "DataPipe": 4.0}
DEFAULT_INPUT_FIX_PARALLELISM = 2.0
STALL, EFFICIENCY = "stall", "efficiency"


@dataclass(frozen=True)
class BottleneckProjection(Projection):
    """The step after this one fix."""

    basis: str = "measured"  # "measured" | "estimated"
    assumption: str | None = None  # what an estimate rests on


@dataclass(frozen=True)
class Bottleneck:
    id: str
    rank: int
    severity: str
    time_ns: int
    fraction: float
    title: str
    evidence: dict[str, Any]
    recommendations: list[str]
    kind: str  # "stall" | "efficiency"
    projection: BottleneckProjection


@dataclass(frozen=True)
class RunProjection(Projection):
    """The headline what-if: the top fixes applied one after another on the same steps."""

    basis: str = "measured"
    applied: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """What a rule's check found: its evidence and what fixing it removes from each step."""

    evidence: dict[str, Any]
    fix: Fix
    assumption: str | None = None
    severity: str | None = None  # set by rules whose severity is defined elsewhere (input_bound: the verdict)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    basis: str
    check: Callable[[Analysis], Finding | None]
    advice: dict[str, tuple[str, ...]]
    kind: str = STALL
    max_severity: str = "high"


def _mean_stall(m: StepModel, stall: str) -> int:
    return m.mean(m.stalls[stall])


def _input_bound(a: Analysis) -> Finding | None:
    ip = a.input_pipeline
    m = a.step_model
    if ip.verdict == "unknown" or not ip.wait_ns:
        return None
    evidence: dict[str, Any] = {
        "input_fraction": ip.fraction,
        "verdict": ip.verdict,
        "source": ip.source,
        "waits": ip.wait_count,
        "input_wait_per_step_ns": _mean_stall(m, "input_wait"),
    }
    if ip.stages:
        evidence["slowest_stage"] = ip.stages[0].name
        evidence["slowest_stage_self_ns"] = ip.stages[0].self_ns
    wait = m.stalls["input_wait"]
    # The loop waited `wait` for each batch: a k-fold faster pipeline delivers one every wait / k, so the step
    # becomes max(step - wait, wait / k) (the time the loop still waits is at least 0).
    parallelism = INPUT_FIX_PARALLELISM.get(ip.source or "", DEFAULT_INPUT_FIX_PARALLELISM)
    still_waiting = np.maximum(wait / parallelism - (m.step_ns - wait), 0.0)
    evidence["parallelism_assumed"] = parallelism
    evidence["step_ns_after_hidden"] = project(m, [fix(m, idle_ns=wait)]).step_ns_after
    return Finding(evidence, fix(m, idle_ns=wait - still_waiting), severity=VERDICT_SEVERITY.get(ip.verdict))


def _small_kernel_share(a: Analysis) -> float:
    count = sum(k.count for k in a.kernels)
    return sum(k.small_count for k in a.kernels) / count if count else 0.0


def _launch_delay_p50(a: Analysis) -> int | None:
    delays = [k.launch_delay_p50_ns for k in a.kernels if k.launch_delay_p50_ns is not None]
    return int(np.median(delays)) if delays else None


def _host_gap_evidence(a: Analysis) -> dict[str, Any]:
    shorter = [k.shorter_than_launch_count for k in a.kernels if k.shorter_than_launch_count is not None]
    return {
        "host_launch_gap_per_step_ns": _mean_stall(a.step_model, "host_launch"),
        "kernel_count": sum(k.count for k in a.kernels),
        "small_kernel_count": sum(k.small_count for k in a.kernels),
        "small_kernel_share": round(_small_kernel_share(a), 4),
        "small_threshold_ns": a.kernels[0].small_threshold_ns if a.kernels else None,
        "shorter_than_launch_count": sum(shorter) if shorter else None,
        "launch_delay_p50_ns": _launch_delay_p50(a),
    }


def _drained_queue(a: Analysis) -> bool:
    """Kernels start right after their launch: the host, not the device, sets the pace."""
    delay = _launch_delay_p50(a)
    return delay is not None and delay <= DRAINED_QUEUE_LAUNCH_DELAY_NS


def _host_fix(a: Analysis) -> Fix:
    """Less host work per step (fused ops, graphs): the host-launch gaps close and the host does less."""
    m = a.step_model
    stall = m.stalls["host_launch"]
    return fix(m, idle_ns=stall, host_ns=stall)


def _launch_bound(a: Analysis) -> Finding | None:
    if a.step_model.mean(a.step_model.stalls["host_launch"]) <= 0:
        return None
    if _small_kernel_share(a) < SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND or not _drained_queue(a):
        return None
    return Finding(_host_gap_evidence(a), _host_fix(a))


def _host_bound(a: Analysis) -> Finding | None:
    if a.step_model.mean(a.step_model.stalls["host_launch"]) <= 0:
        return None
    if _small_kernel_share(a) >= SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND and _drained_queue(a):
        return None
    return Finding(_host_gap_evidence(a), _host_fix(a))


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
            "exposed_per_step_ns": _mean_stall(m, "h2d_exposed"),
            "bytes": h2d.bytes,
            "pageable_count": h2d.pageable_count,
            "bandwidth_gbps": round(h2d.bandwidth_gbps, 3) if h2d.bandwidth_gbps is not None else None,
        },
        fix(m, device_ns=m.stalls["h2d_exposed"]),
    )


def _d2h_sync(a: Analysis) -> Finding | None:
    m = a.step_model
    return Finding(
        {"sync_gap_per_step_ns": _mean_stall(m, "sync"), "d2h_exposed_per_step_ns": _mean_stall(m, "d2h_exposed")},
        fix(m, idle_ns=m.stalls["sync"], device_ns=m.stalls["d2h_exposed"]),
    )


def _low_occupancy(a: Analysis) -> Finding | None:
    m = a.step_model
    waste = m.kernel_ns["low_blocks_waste"]
    return Finding(
        {
            "kernels_under_one_block_per_sm_ns": sum(k.low_blocks_ns for k in a.kernels),
            "occupancy_mean_pct": [k.occupancy_mean_pct for k in a.kernels],
        },
        fix(m, device_ns=waste, kernel_ns=waste),
        assumption="kernels with fewer blocks than SMs leave (1 - blocks/SM) of the GPU idle; a batch that fills "
        "every SM does the same work in blocks/SM of their time",
    )


def _compute_capability(a: Analysis) -> tuple[int, int] | None:
    caps = [parse_compute_capability(d.compute_capability) for d in a.profile.devices.values()]
    known = [c for c in caps if c is not None]
    return min(known) if known else None


def _fp32_compute(a: Analysis) -> Finding | None:
    eligible = sum(k.tensor_core_eligible_ns for k in a.kernels)
    tc = sum(k.tensor_core_ns for k in a.kernels)
    if eligible <= 0 or tc >= TENSOR_CORE_UNUSED_SHARE * eligible:
        return None
    cc = _compute_capability(a)
    speedup = mixed_precision_speedup(cc)
    if speedup is None:
        return None
    ratio, words = speedup
    m = a.step_model
    saved = m.kernel_ns["fp32_eligible"] * (1.0 - 1.0 / ratio)
    return Finding(
        {
            "eligible_kernel_ns": eligible,
            "tensor_core_kernel_ns": tc,
            "fp32_eligible_per_step_ns": m.mean(m.kernel_ns["fp32_eligible"]),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "peak_speedup": round(ratio, 2),
        },
        fix(m, device_ns=saved, kernel_ns=saved),
        assumption=words,
    )


def _communication(a: Analysis) -> Finding | None:
    m = a.step_model
    return Finding(
        {
            "communication_kernel_ns": sum(k.communication_ns for k in a.kernels),
            "exposed_ns": sum(k.communication_exposed_ns for k in a.kernels),
            "exposed_per_step_ns": _mean_stall(m, "communication_exposed"),
        },
        fix(m, device_ns=m.stalls["communication_exposed"], kernel_ns=m.stalls["communication_exposed"]),
    )


def _idle_other(a: Analysis) -> Finding | None:
    m = a.step_model
    return Finding(
        {"other_gap_per_step_ns": _mean_stall(m, "other"), "gap_count": sum(g.count for g in a.gaps)},
        fix(m, idle_ns=m.stalls["other"]),
    )


_PT_LOADER = "DataLoader(dataset, batch_size=..., num_workers=8, pin_memory=True, persistent_workers=True)"
RULES: tuple[Rule, ...] = (
    Rule(
        "input_bound",
        "Waiting for input data",
        "XProf input-bound thresholds (20/5 %); PyTorch plugin DataLoader rule (> 5 % of step)",
        _input_bound,
        {
            "pytorch": (
                f"Load batches in worker processes: `{_PT_LOADER}` (start near the number of CPU cores).",
                "Keep workers alive between epochs (`persistent_workers=True`) and let them run ahead "
                "(`prefetch_factor=4`).",
                "Move heavy decoding/augmentation out of `__getitem__` (pre-process once, or augment on the GPU).",
            ),
            "tensorflow": (
                "Overlap input with compute: end the pipeline with `ds = ds.prefetch(tf.data.AUTOTUNE)`.",
                "Parallelise the map: `ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`.",
                "Cache what does not change between epochs: `ds = ds.cache()` after the expensive map.",
                "Read files in parallel: `ds = files.interleave(tf.data.TFRecordDataset, "
                "num_parallel_calls=tf.data.AUTOTUNE)`.",
                "Vectorise: `ds.batch(n).map(fn)` runs the function once per batch instead of once per element.",
            ),
            "jax": (
                "Feed from a parallel loader (grain with `worker_count > 0`, or tf.data with `prefetch` and "
                "`num_parallel_calls=tf.data.AUTOTUNE`).",
                "Put the next batch on the device while this step runs (`jax.device_put` ahead of time).",
            ),
        },
    ),
    Rule(
        "launch_bound",
        "Launch-bound: many small kernels, the host cannot launch them fast enough",
        "HTA host-wait rule (launch ended after the GPU went idle), most kernels under the small-kernel threshold "
        "and a drained launch queue (median launch delay <= 50 us)",
        _launch_bound,
        {
            "pytorch": (
                'Fuse small ops: `model = torch.compile(model)`; `mode="reduce-overhead"` also uses CUDA graphs.',
                "Capture the step in a CUDA graph (`torch.cuda.make_graphed_callables` or `torch.cuda.CUDAGraph`) "
                "so hundreds of kernels launch with one call.",
                "Use a bigger batch so each kernel does more work per launch.",
            ),
            "tensorflow": (
                "Run the step as a graph: `@tf.function` on the train step (no per-op Python dispatch).",
                "Fuse kernels with XLA: `@tf.function(jit_compile=True)` or `model.compile(..., jit_compile=True)`.",
                "Run several steps per call: `model.compile(..., steps_per_execution=32)`.",
                "Use a bigger batch so each kernel does more work per launch.",
            ),
            "jax": (
                "`jax.jit` the whole train step, not its pieces, so XLA fuses it into few kernels.",
                "Run several steps per call with `jax.lax.scan`, and use a bigger batch.",
            ),
        },
    ),
    Rule(
        "host_bound",
        "Host-bound: Python / CPU work between launches keeps the GPU waiting",
        "HTA host-wait rule (launch ended after the GPU went idle), kernels mostly above the small-kernel threshold "
        "or a deep launch queue",
        _host_bound,
        {
            "pytorch": (
                "Look at the host activity in the longest gaps below and move that work out of the step.",
                "Remove Python overhead with `torch.compile(model)`; avoid per-step `.item()`, `.cpu()`, logging.",
            ),
            "tensorflow": (
                "Wrap the step in `@tf.function` (with `jit_compile=True` where it compiles) and avoid Python-side "
                "work per step.",
                "Run several steps per call: `model.compile(..., steps_per_execution=32)`.",
            ),
            "jax": ("`jax.jit` the whole step and keep Python-side bookkeeping out of the loop.",),
        },
    ),
    Rule(
        "h2d_copy",
        "Host-to-device copies the GPU waits for",
        "Exposed copy time (not overlapped by kernels); Nsight's pageable-memory rule",
        _h2d_copy,
        {
            "pytorch": (
                "Pin host memory and copy asynchronously: `DataLoader(..., pin_memory=True)` and "
                '`x = x.to("cuda", non_blocking=True)`.',
                "Keep tensors on the GPU across steps: create constants, masks and buffers on the device once.",
                "Send compact data (uint8 images) and convert/normalise on the GPU.",
            ),
            "tensorflow": (
                "Stage batches on the GPU ahead of time: `ds = ds.apply(tf.data.experimental.prefetch_to_device("
                '"/gpu:0"))` as the last stage.',
                "Keep variables and constants on the device; send compact dtypes (uint8) and cast on the GPU.",
            ),
            "jax": (
                "`jax.device_put` the next batch ahead of time and keep parameters on the device.",
                "Send compact dtypes and convert on the device.",
            ),
        },
    ),
    Rule(
        "d2h_sync",
        "Device-to-host copies and synchronisations stall the pipeline",
        "Idle time while the host blocked in a sync or blocking copy (Nsight cuda_api_sync / memcpy_sync rules)",
        _d2h_sync,
        {
            "pytorch": (
                "Remove `.item()`, `.cpu()`, `.numpy()`, `print(loss)` from the step: accumulate metrics on the GPU "
                "and read them every N steps.",
                "Drop `torch.cuda.synchronize()` from the loop (keep it only around timing code).",
                "Copy results back with `non_blocking=True` into pinned buffers.",
            ),
            "tensorflow": (
                "Avoid `.numpy()` and Python conditionals on tensors inside the loop; log metrics every N steps.",
            ),
            "jax": ("Avoid `block_until_ready()`, `float(x)` or `np.asarray(x)` every step; log every N steps.",),
        },
    ),
    Rule(
        "low_occupancy",
        "Kernels too small to fill the GPU",
        "Kernels with fewer blocks than SMs (PyTorch plugin's SM-efficiency estimate)",
        _low_occupancy,
        {
            "any": (
                "Use a bigger batch (if memory allows) so kernels launch enough blocks to fill every SM.",
                "Fuse small ops (torch.compile, XLA `jit_compile=True`) so fewer, larger kernels run.",
            ),
        },
        kind=EFFICIENCY,
        max_severity="medium",
    ),
    Rule(
        "fp32_compute",
        "Matmul/convolution work runs without Tensor Cores",
        "PyTorch plugin / XProf Tensor Core rule: matmul/conv/attention kernels, < 10 % of their time on Tensor "
        "Cores, CC >= 7.0; gain from the GPU's published FP16 Tensor Core / FP32 peak ratio",
        _fp32_compute,
        {
            "pytorch": (
                'Enable mixed precision: `with torch.autocast("cuda", dtype=torch.float16):` around the forward '
                "pass with `scaler = torch.amp.GradScaler()` for the loss (Volta/Turing); on Ampere and newer use "
                "`dtype=torch.bfloat16`, which needs no scaler.",
                "Allow TF32 on Ampere and newer: `torch.backends.cuda.matmul.allow_tf32 = True` and "
                "`torch.backends.cudnn.allow_tf32 = True`.",
            ),
            "tensorflow": (
                'Enable mixed precision: `tf.keras.mixed_precision.set_global_policy("mixed_float16")` '
                '(or "mixed_bfloat16").',
            ),
            "jax": ("Compute in bfloat16: cast parameters and inputs to `jnp.bfloat16` (keep an fp32 master copy).",),
        },
        kind=EFFICIENCY,
        max_severity="medium",
    ),
    Rule(
        "communication",
        "Communication not overlapped with compute",
        "Collective kernel time not hidden under compute kernels (PyTorch plugin: comm > 10 % of step)",
        _communication,
        {
            "pytorch": (
                "Let DDP overlap all-reduce with backward: tune `bucket_cap_mb`, use `gradient_as_bucket_view=True`, "
                "avoid `find_unused_parameters=True`.",
                "Communicate less often: gradient accumulation with `model.no_sync()`, or a bigger batch.",
            ),
            "tensorflow": ("Use NCCL all-reduce (`MultiWorkerMirroredStrategy`) and a bigger per-replica batch.",),
            "jax": ("Shard so collectives overlap compute (`jax.jit` with shardings); use a bigger batch.",),
        },
    ),
    Rule(
        "idle_other",
        "Idle time without an attributable cause",
        "Idle gaps whose next op was launched in time and no host wait or sync covers them",
        _idle_other,
        {
            "any": (
                "Read the host activity of the longest gaps below: it shows what the device waited for.",
                'Name suspect code in the trace (`torch.profiler.record_function("...")`, '
                '`tf.profiler.experimental.Trace("...")`, `jax.named_scope`) and profile again.',
                "Profile more steps to separate warm-up from the steady state.",
            ),
        },
    ),
)


def _advice(rule: Rule, framework: str) -> list[str]:
    if framework in rule.advice:
        return list(rule.advice[framework])
    if "any" in rule.advice:
        return list(rule.advice["any"])
    return [f"{fw}: {tip}" for fw, tips in rule.advice.items() for tip in tips[:1]]


def severity_for(fraction: float) -> str | None:
    if fraction >= HIGH_SEVERITY:
        return "high"
    if fraction >= MEDIUM_SEVERITY:
        return "medium"
    if fraction >= LOW_SEVERITY:
        return "low"
    return None


def _projection(a: Analysis, finding: Finding, rule: Rule) -> BottleneckProjection:
    basis = "measured" if rule.kind == STALL else "estimated"
    return BottleneckProjection(
        **vars(project(a.step_model, [finding.fix])), basis=basis, assumption=finding.assumption
    )


def _severity(rule: Rule, finding: Finding, fraction: float) -> str | None:
    severity = finding.severity or severity_for(fraction)
    if severity is not None and SEVERITIES.index(severity) > SEVERITIES.index(rule.max_severity):
        return rule.max_severity
    return severity


def _efficiency_first(a: Analysis) -> bool:
    return a.step_model.busy_share >= BUSY_SHARE_EFFICIENCY_FIRST


def _found(analysis: Analysis) -> list[tuple[Rule, Finding, BottleneckProjection, str]]:
    """Every rule that fires with a saving worth reporting, in ranking order."""
    found = []
    for rule in RULES:
        finding = rule.check(analysis)
        if finding is None:
            continue
        projection = _projection(analysis, finding, rule)
        fraction = projection.saving_ns / projection.step_ns_before if projection.step_ns_before > 0 else 0.0
        severity = _severity(rule, finding, fraction)
        if severity is not None and projection.saving_ns > 0:
            found.append((rule, finding, projection, severity))
    lead = EFFICIENCY if _efficiency_first(analysis) else STALL
    found.sort(key=lambda f: (f[0].kind != lead, -f[2].saving_ns))
    return found


def find_bottlenecks(analysis: Analysis) -> list[Bottleneck]:
    """Every rule that fires, ranked (see the module docstring)."""
    steps = analysis.step_model.count
    return [
        Bottleneck(
            id=rule.id,
            rank=i + 1,
            severity=severity,
            time_ns=projection.saving_ns * steps,
            fraction=round(projection.saving_ns / projection.step_ns_before, 4),
            title=rule.title,
            evidence={**finding.evidence, "basis": rule.basis},
            recommendations=_advice(rule, analysis.profile.framework),
            kind=rule.kind,
            projection=projection,
        )
        for i, (rule, finding, projection, severity) in enumerate(_found(analysis))
    ]


def headline_projection(analysis: Analysis) -> RunProjection | None:
    """The top fixes applied one after another on the same step model (their savings never simply add up).

    Measured stalls of medium or high severity are applied (the first one whatever its severity), at most
    `HEADLINE_FIXES`; an estimate is applied only where efficiency leads, so a guess never inflates the
    measured figure. None when nothing fires.
    """
    found = _found(analysis)
    if not found:
        return None
    lead_kind = found[0][0].kind
    chosen = [f for f in found if f[0].kind == lead_kind]
    chosen = [chosen[0]] + [f for f in chosen[1:] if f[3] != "low"]
    chosen = chosen[:HEADLINE_FIXES]
    return RunProjection(
        **vars(project(analysis.step_model, [f[1].fix for f in chosen])),
        basis="measured" if lead_kind == STALL else "estimated",
        applied=tuple(f[0].id for f in chosen),
    )
