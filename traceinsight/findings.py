"""Ranked bottlenecks: what keeps the device from being busy, what it costs, what to change.

Each rule is data: an id (fixed by the JSON contract), a title, where its
threshold comes from, a cost function over an `Analysis` (the time fixing it could
win back, plus the evidence that triggered it) and advice per framework. Costs of
idle-gap causes are the mean over devices: devices of a data-parallel job idle
side by side, so that is what the job loses in wall time.

Severity is the cost as a share of the run: >= 20 % high, >= 5 % medium,
>= 1 % low (XProf's input-bound thresholds, applied to every cause); smaller
costs are not reported. Rules about how efficiently busy time is used
(`fp32_compute`, `low_occupancy`) rest on estimates, not measured idle time, so
they are never rated above medium: a busy GPU is never "severely" idle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinsight.analysis import Analysis
from traceinsight.analysis.copies import copy_totals

SEVERITIES = ("low", "medium", "high")
HIGH_SEVERITY = 0.20
MEDIUM_SEVERITY = 0.05
LOW_SEVERITY = 0.01
# Share of kernels below the small-kernel threshold that makes host-side gaps "launch-bound" rather than "host-bound".
SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND = 0.5
# Tensor Cores count as unused when they run less than this share of eligible kernel time.
TENSOR_CORE_UNUSED_SHARE = 0.1
# Mixed precision roughly halves matmul/convolution time: the estimate of what it wins back.
MIXED_PRECISION_SAVING = 0.5
# Tensor Cores exist from compute capability 7.0 (Volta).
MIN_TENSOR_CORE_CC = 7.0


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


Cost = tuple[int, dict[str, Any]] | None


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    basis: str
    cost: Callable[[Analysis], Cost]
    advice: dict[str, tuple[str, ...]]
    max_severity: str = "high"


def _mean_gap_cause(analysis: Analysis, cause: str) -> int:
    if not analysis.gaps:
        return 0
    return int(np.mean([g.by_cause[cause] for g in analysis.gaps]))


def _mean_over_devices(values: list[int]) -> int:
    return int(np.mean(values)) if values else 0


def _input_bound(a: Analysis) -> Cost:
    ip = a.input_pipeline
    time = _mean_gap_cause(a, "input_wait") if a.devices else ip.wait_ns
    if time <= 0:
        return None
    evidence: dict[str, Any] = {
        "input_fraction": ip.fraction,
        "verdict": ip.verdict,
        "source": ip.source,
        "waits": ip.wait_count,
        "input_wait_gap_ns": _mean_gap_cause(a, "input_wait") if a.devices else None,
    }
    if ip.stages:
        evidence["slowest_stage"] = ip.stages[0].name
        evidence["slowest_stage_self_ns"] = ip.stages[0].self_ns
    return time, evidence


def _small_kernel_share(a: Analysis) -> float:
    count = sum(k.count for k in a.kernels)
    return sum(k.small_count for k in a.kernels) / count if count else 0.0


def _host_gap_evidence(a: Analysis) -> dict[str, Any]:
    delays = [k.launch_delay_p50_ns for k in a.kernels if k.launch_delay_p50_ns is not None]
    shorter = [k.shorter_than_launch_count for k in a.kernels if k.shorter_than_launch_count is not None]
    return {
        "host_launch_gap_ns": _mean_gap_cause(a, "host_launch"),
        "kernel_count": sum(k.count for k in a.kernels),
        "small_kernel_count": sum(k.small_count for k in a.kernels),
        "small_kernel_share": round(_small_kernel_share(a), 4),
        "small_threshold_ns": a.kernels[0].small_threshold_ns if a.kernels else None,
        "shorter_than_launch_count": sum(shorter) if shorter else None,
        "launch_delay_p50_ns": int(np.median(delays)) if delays else None,
    }


def _launch_bound(a: Analysis) -> Cost:
    time = _mean_gap_cause(a, "host_launch")
    if time <= 0 or _small_kernel_share(a) < SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND:
        return None
    return time, _host_gap_evidence(a)


def _host_bound(a: Analysis) -> Cost:
    time = _mean_gap_cause(a, "host_launch")
    if time <= 0 or _small_kernel_share(a) >= SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND:
        return None
    return time, _host_gap_evidence(a)


def _h2d_copy(a: Analysis) -> Cost:
    h2d = copy_totals(a.copies, "h2d") if a.copies else None
    if not h2d or h2d.count == 0:
        return None
    time = _mean_over_devices([c.copies["h2d"].exposed_ns for c in a.copies])
    return time, {
        "count": h2d.count,
        "total_ns": h2d.total_ns,
        "exposed_ns": h2d.exposed_ns,
        "bytes": h2d.bytes,
        "pageable_count": h2d.pageable_count,
        "bandwidth_gbps": round(h2d.bandwidth_gbps, 3) if h2d.bandwidth_gbps is not None else None,
    }


def _d2h_sync(a: Analysis) -> Cost:
    sync = _mean_gap_cause(a, "sync")
    d2h = _mean_over_devices([c.copies["d2h"].exposed_ns for c in a.copies])
    if sync + d2h <= 0:
        return None
    return sync + d2h, {"sync_gap_ns": sync, "d2h_exposed_ns": d2h}


def _low_occupancy(a: Analysis) -> Cost:
    waste = _mean_over_devices([k.low_blocks_waste_ns for k in a.kernels])
    if waste <= 0:
        return None
    return waste, {
        "kernels_under_one_block_per_sm_ns": sum(k.low_blocks_ns for k in a.kernels),
        "occupancy_mean_pct": [k.occupancy_mean_pct for k in a.kernels],
    }


def _compute_capability(a: Analysis) -> float | None:
    caps = [d.compute_capability for d in a.profile.devices.values() if d.compute_capability]
    try:
        return min(float(c) for c in caps) if caps else None
    except ValueError:
        return None


def _fp32_compute(a: Analysis) -> Cost:
    eligible = sum(k.tensor_core_eligible_ns for k in a.kernels)
    tc = sum(k.tensor_core_ns for k in a.kernels)
    cc = _compute_capability(a)
    if eligible <= 0 or tc >= TENSOR_CORE_UNUSED_SHARE * eligible or (cc is not None and cc < MIN_TENSOR_CORE_CC):
        return None
    non_tc = (eligible - tc) / max(len(a.kernels), 1)
    return int(non_tc * MIXED_PRECISION_SAVING), {
        "eligible_kernel_ns": eligible,
        "tensor_core_kernel_ns": tc,
        "compute_capability": cc,
    }


def _communication(a: Analysis) -> Cost:
    time = _mean_over_devices([k.communication_exposed_ns for k in a.kernels])
    if time <= 0:
        return None
    return time, {
        "communication_kernel_ns": sum(k.communication_ns for k in a.kernels),
        "exposed_ns": sum(k.communication_exposed_ns for k in a.kernels),
    }


def _idle_other(a: Analysis) -> Cost:
    time = _mean_gap_cause(a, "other")
    if time <= 0:
        return None
    return time, {"other_gap_ns": time, "gap_count": sum(g.count for g in a.gaps)}


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
        "HTA host-wait rule (launch started after the GPU went idle), most kernels under the small-kernel threshold",
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
        "HTA host-wait rule (launch started after the GPU went idle), kernels mostly above the small-kernel threshold",
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
        max_severity="medium",
    ),
    Rule(
        "fp32_compute",
        "Matmul/convolution work runs without Tensor Cores",
        "PyTorch plugin / XProf Tensor Core rule: eligible kernels, < 10 % of their time on Tensor Cores, CC >= 7.0",
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


def reference_time_ns(analysis: Analysis) -> int:
    """What bottleneck fractions are relative to: total step time when marked steps cover most
    of the span the costs were measured over, else that span. Gap costs are per-device means,
    so with devices that span is the mean device span (a capture that starts long before the
    first kernel does not dilute them); without devices it is the window."""
    steps = analysis.steps
    span = int(np.mean([u.span_ns for u in analysis.devices])) if analysis.devices else analysis.window_ns
    if steps.source == "marker" and steps.total_ns >= 0.5 * span:
        return steps.total_ns
    return span


def find_bottlenecks(analysis: Analysis) -> list[Bottleneck]:
    """Every rule that fires, most costly first."""
    reference = reference_time_ns(analysis)
    if reference <= 0:
        return []
    found = []
    for rule in RULES:
        cost = rule.cost(analysis)
        if cost is None:
            continue
        time_ns, evidence = cost
        fraction = min(time_ns / reference, 1.0)
        severity = severity_for(fraction)
        if severity is None:
            continue
        if SEVERITIES.index(severity) > SEVERITIES.index(rule.max_severity):
            severity = rule.max_severity
        found.append((time_ns, fraction, severity, rule, evidence))
    found.sort(key=lambda f: -f[0])
    return [
        Bottleneck(
            id=rule.id,
            rank=i + 1,
            severity=severity,
            time_ns=int(time_ns),
            fraction=round(fraction, 4),
            title=rule.title,
            evidence={**evidence, "basis": rule.basis},
            recommendations=_advice(rule, analysis.profile.framework),
        )
        for i, (time_ns, fraction, severity, rule, evidence) in enumerate(found)
    ]
