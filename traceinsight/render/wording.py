"""Sentences several renderers say alike (terminal, Markdown, HTML, the notebook view), from the report.

Each renderer escapes them its own way (terminal control characters, Markdown cells, HTML autoescape);
the wording and the figures are the same everywhere.
"""

from __future__ import annotations

import msgspec

from traceinsight.errors import is_truncation_warning
from traceinsight.render.format import fmt_flop, fmt_ns, fmt_pct, fmt_rate, fmt_step_change, plural
from traceinsight.result import (
    BOTTLENECK_PARTS,
    GAP_CAUSE_PARTS,
    PART_WORDS,
    PATH_WAIT_PARTS,
    Bottleneck,
    ComputeEfficiency,
    LongGap,
    PathItem,
    Projection,
    RunReport,
)
from traceinsight.rules import (
    AMD_DEVICE,
    AT_LIMIT_FRACTION,
    DEVICE_EVENTS_CUT,
    DEVICE_NOT_RECORDED,
    HEADLINE_PROJECTION,
    MIN_STEADY_STEPS,
    PATHS_AGREE_WITHIN,
)

# The bottleneck list's heading, everywhere it is shown.
BOTTLENECKS_HEADING = "Bottlenecks: by severity, measured before estimated, each with the step it leaves"
# What each device-memory warning (`analysis/device_memory.py`) means, in words.
MEMORY_WARNINGS = {
    "at_limit": "the memory is at the limit: OOM risk; a larger batch needs activation checkpointing or mixed "
    f"precision (peak reserved > {AT_LIMIT_FRACTION * 100:g} % of the device)",
    "slack": "reserved far exceeds allocated: fragmentation or caching-allocator slack (`expandable_segments`, "
    "`empty_cache` misuse)",
}
# The critical-path line names the groups with at least this share of the path (smaller ones are noise in one line).
PATH_SENTENCE_MIN_SHARE = 0.01


def run_header(report: RunReport) -> list[str]:
    """The run in a few parts ('framework pytorch', '1 input', '1 device', '6 steps (marker: ProfilerStep#N)',
    'mean step 175 ms'), which each renderer joins its own way."""
    steps = report.steps
    return [
        f"framework {report.framework}",
        plural(len(report.inputs), "input"),
        plural(report.totals.device_count, "device"),
        f"{plural(steps.count, 'step')} ({steps.source}: {steps.marker})",
        f"mean step {fmt_ns(steps.mean_ns)}",
    ]


def input_verdict(report: RunReport) -> str:
    """'high: 28.0 % of step time waiting for input', or why it is unknown."""
    ip = report.input_pipeline
    if ip.verdict == "unknown":
        return "unknown: the trace has no input-pipeline events (no tf.data iterator, no DataLoader wait)"
    return f"{ip.verdict}: {fmt_pct(ip.fraction)} of step time waiting for input"


class DeviceWords(msgspec.Struct, frozen=True):
    """What the devices' own vendor calls the share of time a kernel runs and the matrix units: the one home of
    these words, for every renderer and chart."""

    util: str  # GPU-Util (as `nvidia-smi` and `rocm-smi` name it), TPU-Util on TPUs
    matrix_units: str  # NVIDIA's Tensor Cores, AMD's Matrix Cores, a TPU's MXUs
    matrix_unit: str  # the same, one of them ("Tensor Core time")


NVIDIA_WORDS = DeviceWords("GPU-Util", "Tensor Cores", "Tensor Core")
AMD_WORDS = DeviceWords("GPU-Util", "Matrix Cores", "Matrix Core")
TPU_WORDS = DeviceWords("TPU-Util", "MXUs", "MXU")


def device_words(report: RunReport) -> DeviceWords:
    """The words of the report's devices: TPU's when every device is a TPU, AMD's when the trace names an AMD part
    (`rules.AMD_DEVICE`: a device's vendor or name, or the hardware table's part the devices were matched to),
    NVIDIA's otherwise (and when nothing tells)."""
    ids = [d.id for d in report.devices]
    if ids and all("TPU" in d for d in ids):
        return TPU_WORDS
    names = [n for info in report.device_info for n in (info.vendor, info.name) if n]
    if any(AMD_DEVICE.search(n) for n in [*names, report.compute.device or ""]):
        return AMD_WORDS
    return NVIDIA_WORDS


def util_label(report: RunReport) -> str:
    """The devices' word for GPU-Util (`device_words`)."""
    return device_words(report).util


def bottleneck_name(bottleneck: Bottleneck) -> str:
    """What a bottleneck is called where it is shown: a wait by its ledger part's words ('wait outside the trace',
    the name the step table, the gap list and the glossary give it), any other by its id."""
    part = BOTTLENECK_PARTS.get(bottleneck.id)
    return PART_WORDS[part] if part else bottleneck.id


def gap_cause_words(gap: LongGap) -> str:
    """A gap's cause in the words of the ledger part that holds its time ('sync' is 'blocking wait', or 'wait
    outside the trace' where what it waited for is not in the trace)."""
    cause = "wait_outside_trace" if gap.outside_trace else gap.cause
    part = GAP_CAUSE_PARTS.get(cause)
    return PART_WORDS[part] if part else cause.replace("_", " ")


def culprit_text(bottleneck: Bottleneck) -> str | None:
    """The call, op, kernel or stage that costs the bottleneck most, with its time: 'the call hipMemcpyWithStream:
    1 call, 463 ms in all' (over the capture, beside the bottleneck's cost a step); None where the evidence names
    none."""
    c = bottleneck.culprit
    if c is None:
        return None
    if c.within is not None:
        return f"the {c.what} {c.name}: {fmt_ns(c.ns)} of its own time {c.within}, in {plural(c.count, 'call')}"
    return f"the {c.what} {c.name}: {plural(c.count, 'call')}, {fmt_ns(c.ns)} in all"


def verdict_sentence(report: RunReport) -> str:
    """The top bottleneck and what it costs a step, or that nothing stands out; figures over the steps, for
    the devices that ran kernels, and a warning when too few steps were captured to trust them."""
    top = report.bottlenecks[:1]
    totals = report.totals
    cut = report.warnings.get(DEVICE_EVENTS_CUT)
    if cut and not report.devices:
        lead = (
            "The device events are missing: the host called the GPU (or the file was cut short) but the trace holds "
            "no device work, so this is not judged a CPU-only run; profile with the device's activity "
            "(`ProfilerActivity.CUDA`) and check the file is whole"
        )
    elif cut:
        lead = (
            f"{util_label(report)} {fmt_pct(totals.gpu_util)} of step time, from partial device events (the host "
            f"launched {plural(cut, 'kernel')} the trace does not hold)"
        )
    elif report.warnings.get(DEVICE_NOT_RECORDED):
        lead = (
            "No device activity recorded: the trace holds host spans alone, with no framework op or device call, so "
            "whether an accelerator ran it does not say"
        )
    elif not report.devices:
        lead = "No accelerator activity in this trace"
    else:
        util, idle = fmt_pct(totals.gpu_util), fmt_pct(totals.idle_fraction)
        lead = f"{util_label(report)} {util} of step time (devices idle {idle} of it)"
    if not top:
        sentence = f"{lead}." if cut and not report.devices else f"{lead}; no bottleneck worth fixing found."
    else:
        b = top[0]
        p = b.projection
        if b.id == "warmup_in_window" or p is None:
            cost = f"{fmt_ns(b.time_ns)} ({fmt_pct(b.fraction)} of the window)"
        else:
            cost = f"{fmt_ns(b.fraction * p.step_ns_before)} a step ({fmt_pct(b.fraction)} of the step)"
        basis = {"measured": "", "none": ", with no fix projected"}.get(p.basis if p else "none", ", estimated")
        culprit = culprit_text(b)
        cause = f": {culprit}" if culprit else ""
        sentence = f"{lead}; the main bottleneck is {bottleneck_name(b)} ({b.title}){cause}, costing {cost}{basis}."
    few = report.warnings.get("few_steps")
    if few is not None:
        sentence += f" Only {plural(few, 'step')} captured: profile at least {MIN_STEADY_STEPS} steps."
    return sentence


def projection_sentence(report: RunReport) -> str | None:
    """The headline what-if: 'Fixing the top 2 (input wait, host_bound): step 174.8 -> 99.7 ms (1.75x), GPU-Util
    54.9 % -> 96.2 %.' (each fix named as the headline names it, `bottleneck_name`). None when nothing fires."""
    p = report.projection
    if not p:
        return None
    named = {b.id: bottleneck_name(b) for b in report.bottlenecks}
    applied = [named.get(i, i) for i in p.applied]
    which = f"the top {len(applied)} ({', '.join(applied)})" if len(applied) > 1 else applied[0]
    util = ""
    if p.gpu_util_before is not None and p.gpu_util_after is not None:
        util = f", {util_label(report)} in the steps {fmt_pct(p.gpu_util_before)} \u2192 {fmt_pct(p.gpu_util_after)}"
    estimate = " (estimated)" if p.basis == "estimated" else ""
    change = fmt_step_change(p.step_ns_before, p.step_ns_after, p.speedup)
    return f"Fixing {which}{estimate}: step {change}{util} ({projection_source(p)})."


# The projections' names, as `rules.HEADLINE_PROJECTION` spells them.
PROJECTION_NAMES = {"step_model": "the step model", "critical_path": "the critical path"}


def path_disagrees(p: Projection) -> bool:
    """The critical path's step after the same fixes differs from the step model's (`rules.PATHS_AGREE_WITHIN`)."""
    path = p.path_step_ns_after
    return path is not None and abs(path - p.step_ns_after) > PATHS_AGREE_WITHIN * max(p.step_ns_after, 1)


def path_change(p: Projection) -> str:
    """The critical path's step before and after, and how much of the fix's time lies on it: 'on the critical path
    174.8 -> 174.8 ms (1.00x): none of the time it removes lies on the path'."""
    path = p.path_step_ns_after or 0
    change = fmt_step_change(p.step_ns_before, path, p.path_speedup)
    how_much = "none" if path >= p.step_ns_before else "only part"
    return f"on the critical path {change}: {how_much} of the time it removes lies on the path"


def projection_source(p: Projection) -> str:
    """Which projection the step after is (`rules.HEADLINE_PROJECTION`), and the critical path's where it says
    otherwise: 'by the step model; the critical path agrees', or '...; on the critical path ...' (`path_change`)."""
    source = f"by {PROJECTION_NAMES[HEADLINE_PROJECTION]}"
    if p.path_step_ns_after is None:
        return f"{source}; the critical path cannot make this edit"
    return f"{source}; {path_change(p)}" if path_disagrees(p) else f"{source}; the critical path agrees"


NO_PROJECTION = "no speedup projected"


def step_after_fix(bottleneck: Bottleneck) -> str:
    """The step before and after fixing this one bottleneck alone: '174.8 -> 115.6 ms (1.51x)', or that none is
    projected (unexplained idle time, a wait for work outside the trace, a warm-up window)."""
    p = bottleneck.projection
    if p is None or p.basis == "none":
        return NO_PROJECTION
    return fmt_step_change(p.step_ns_before, p.step_ns_after, p.speedup)


def capture_sentence(report: RunReport) -> str | None:
    """What kind of capture this is and why, and what that means for the rest of the report ('Capture:
    graph_capture ... profile the replay'); None for a report without a capture section (an older report)."""
    c = report.capture
    if not c:
        return None
    why = "; ".join(c.evidence)
    who = f" ({c.server})" if c.server else ""
    sentence = f"Capture: {c.kind}{who}: {why}."
    if c.kind == "graph_capture":
        sentence += " A capture pass records kernels once; it is no steady state: profile the replay instead."
    elif c.kind == "microbenchmark":
        sentence += " Figures are per op; no claim about a training or serving step is made."
    elif c.kind == "warmup" and c.steady_steps:
        sentence += f" Analyzed: the {plural(c.steady_steps, 'step')} after the one-time costs."
    elif c.kind == "warmup":
        sentence += " No steady step follows them: profile after warm-up (see warmup_in_window)."
    return sentence


def partial_notes(report: RunReport) -> list[str]:
    """One sentence per input cut short (its truncation warning, verbatim): the report covers only the events
    read before the cut, which every page must say where it is seen first."""
    return [
        f"Partial report: {warning}. Only the events before the cut are counted."
        for warning in report.warnings
        if is_truncation_warning(warning)
    ]


def other_warnings(report: RunReport) -> dict[str, int]:
    """The report's warnings that `partial_notes` does not say."""
    return {k: v for k, v in report.warnings.items() if not is_truncation_warning(k)}


def compute_sentence(report: RunReport) -> str | None:
    """What the busy time achieves, in one line: 'Compute: MFU 16.7 % of the H100 SXM's bf16 peak = GPU-Util 91.0 %
    x compute share 36.5 % x their efficiency 50.3 %; matmul 28.2 % of kernel time at 622.6 TFLOP/s, elementwise
    57.0 %.', or why there is no MFU; None for a run without devices."""
    c = report.compute
    if not report.devices:
        return None
    if c.note:
        return f"Compute: {c.note}."
    classes = sorted(c.classes, key=lambda k: -k.share)[:3]
    held = ", ".join(
        f"{k.name} {fmt_pct(k.share)}" + (f" at {fmt_rate(k.tflops)} TFLOP/s" if k.tflops else "") for k in classes
    )
    if c.mfu is None:
        lead = f"{fmt_flop(c.flops)} counted; no MFU: the device is not in the hardware table"
    else:
        lead = (
            f"MFU {mfu_text(c)} of the {c.device}'s {c.dtype} peak = {util_label(report)} {fmt_pct(c.gpu_util)} x "
            "compute share "
            f"{fmt_pct(c.compute_share)} x their efficiency {fmt_pct(c.compute_efficiency)}"
        )
    coverage = f" ({coverage_text(c)})" if c.flop_coverage is not None else ""
    return f"Compute: {lead}{coverage}; kernel time: {held}."


def mfu_text(c: ComputeEfficiency) -> str:
    """MFU as a figure, '≥ 5.1 %' where it counts too little of the compute kernels' time to be more than a floor."""
    return f"≥ {fmt_pct(c.mfu)}" if c.mfu_is_lower_bound else fmt_pct(c.mfu)


def coverage_text(c: ComputeEfficiency) -> str:
    """What the compute figures could read: 'FLOPs counted for 13.7 % of the compute kernels' time, precision known
    for 91.9 %'."""
    text = f"FLOPs counted for {fmt_pct(c.flop_coverage)} of the compute kernels' time"
    return text + (f", precision known for {fmt_pct(c.precision_coverage)}" if c.precision_coverage is not None else "")


def collectives_sentence(report: RunReport) -> str | None:
    """Who waits for whom, in one line: the straggler's message, or that no rank is one, or what a single rank's
    trace can say; None without collectives."""
    c = report.collectives
    if c.scope == "none":
        return None
    if c.wait_per_step_ns is not None and c.transfer_per_step_ns is not None:
        split = (
            f"a step: waiting {fmt_ns(c.wait_per_step_ns)}, transfer {fmt_ns(c.transfer_per_step_ns)}; "
            f"{plural(c.count, 'collective')} in the capture"
        )
    else:
        split = f"waiting {fmt_ns(c.wait_ns)}, transfer {fmt_ns(c.transfer_ns)} over {plural(c.count, 'collective')}"
    if c.straggler is not None:
        return f"Collectives ({split}): {c.straggler.message}."
    return f"Collectives ({split}): {c.note}."


def input_label(report: RunReport, input_id: int) -> str | None:
    """The input's name in a run of several ('rank 1', else its host or file: `analysis.ranks`); None with one."""
    if report.ranks is None:
        return None
    return next((r.label for r in report.ranks.items if r.input == input_id), f"input {input_id}")


def path_item_text(report: RunReport, item: PathItem) -> str:
    """'data on rank 1: 30.0 ms a step' (no rank with a single input); a wait for work the trace does not hold
    says so, as the headline and the ledger call it ('… (wait outside the trace): 463 ms a step')."""
    where = input_label(report, item.input)
    wait = PATH_WAIT_PARTS.get(item.part)
    what = f" ({PART_WORDS[wait]})" if wait else ""
    return f"{item.name}{f' on {where}' if where else ''}{what}: {fmt_ns(item.ns_per_step)} a step"


def critical_path_sentence(report: RunReport) -> str | None:
    """What the steps' critical path is made of, in one line: 'Critical path: 87 % cpu (data on rank 1: 30.0 ms a
    step), 13 % collective.', the groups with at least `PATH_SENTENCE_MIN_SHARE` of it, largest first, the dominant
    one with its longest item; None without steps."""
    cp = report.critical_path
    if not cp.steps or cp.dominant is None:
        return None
    shown = sorted((g for g, s in cp.shares.items() if s >= PATH_SENTENCE_MIN_SHARE), key=lambda g: -cp.shares[g])
    shown = shown or [cp.dominant]
    top = next((i for i in cp.top if i.group == cp.dominant), None)
    parts = [
        f"{fmt_pct(cp.shares[g], 0)} {g}" + (f" ({path_item_text(report, top)})" if top and g == cp.dominant else "")
        for g in shown
    ]
    return f"Critical path: {', '.join(parts)}."
