"""Compare two runs: the diff object (schema ``traceinsight.diff/2``) built from two reports (`result.RunReport`).

Pure functions over the result model (the `--json` contract, ../shared/notes/report-json.md), so a
baseline report saved by an earlier CI job compares with a fresh trace exactly as two
traces do. Its parts:

* ``step_time`` and ``verdict``: the mean step of each run, BASE / NEW (``speedup``), and "win", "regression" or
  "unchanged" against the step time's noise (`step_time`). Every renderer opens with it.
* ``warnings``: what makes the runs compare as other than like with like (other hardware, framework, capture kind,
  small-kernel threshold: `comparability`), each ``{kind, message}``.
* ``changes``: headline metrics (`RUN_METRICS`) and per-device ones (`DEVICE_METRICS`, devices matched by id),
  each with its JSON path in the report (``metric``) and a plain ``label``, NEW - BASE, the relative change,
  which direction is worse, and its ``noise``: the change it must pass to count, from the runs' own step-to-step
  spread (`Noise`, `rules.NOISE_STANDARD_ERRORS`; ``noise_source`` "steps", "step time" or "fixed"). A change
  inside it is "unchanged". Sums over the steps (``per_step`` true: the step breakdown) are compared a step.
* ``bottlenecks``: added, removed, or changed in severity or in cost a step beyond the noise, by id.
* ``kernels``: the kernels whose total time changed most, matched by a normalised name
  (`normalise_kernel_name`), over the reports' top kernels of every device.
* ``projections``: did BASE's what-if come true? ``{checks: [...], headline: {...} | null}``
  (`projection_checks`, `headline_check`). A check per BASE bottleneck that has a ``projection`` and whose
  cause NEW changed (`cause_change`: gone, or its own evidence a step fell beyond the noise); the headline
  when BASE has a top-level ``projection`` and NEW changed the cause of every bottleneck it applies. Each
  compares what BASE projected with the mean steps both runs measured:
  ``projected_step_ns_before``, ``projected_step_ns_after``, ``projected_saving_ns``, ``projected_speedup``
  (from the projection), ``measured_step_ns_before`` / ``measured_step_ns_after`` (BASE / NEW
  ``steps.mean_ns``), ``measured_saving_ns`` (before - after), ``measured_speedup`` (before / after) and
  ``error`` (projected step after / measured step after - 1: below 0 the projection promised more than
  came), and the critical path's projection of the same fixes, ``path_step_ns_after`` and ``path_error`` (null
  where the path made none). A check adds ``id``, ``basis`` ("measured" | "estimated"), ``status`` ("gone" |
  "shrunk") and ``cause`` (``measure``, ``base``, ``new``, ``noise``, ``status``); the headline adds ``applied``
  (the ids BASE applied), ``addressed`` (all of them), ``projected_gpu_util_after`` and ``measured_gpu_util_before`` /
  ``measured_gpu_util_after`` (``totals.gpu_util``). Anything unknown (no mean step, a zero to divide by) is
  null. Reports from before projections existed give no checks and no headline.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from traceinsight import __version__
from traceinsight.gating import ExpressionError, change, lookup
from traceinsight.result import PART_WORDS, Bottleneck, Device, Projection, RunProjection, RunReport
from traceinsight.rules import (
    BREAKDOWN,
    COMPUTE_CLASSES,
    FALLBACK_RELATIVE_NOISE,
    FINDING_CAUSE_EVIDENCE,
    KERNEL_CLASSES,
    NAME_MATCH_MAX_CHARS,
    NOISE_STANDARD_ERRORS,
)

SCHEMA = "traceinsight.diff/2"
UP, DOWN = "up", "down"
SEVERITY_ORDER = {"low": 0, "medium": 1, "high": 2}
Origin = dict[str, Any] | None  # where one side came from, added to its summary


Samples = Callable[[RunReport], "Sequence[float] | None"]


class Metric(msgspec.Struct, frozen=True):
    """One compared figure: its JSON path, its plain label, the direction that is a regression, how to show it,
    and where its per-step values (its noise) come from."""

    path: str  # dotted path in the report; for DEVICE_METRICS relative to one `devices[]` item
    worse_when: str | None  # UP, DOWN, or None where neither direction is bad in itself
    unit: str  # "ns" | "fraction" | "percent" | "bytes" | "count" | "flop" | "tflops"
    label: str  # what a person reads; the path is shown on hover
    per_step: bool = False  # a sum over the steps, compared a step (value / steps.count): captures of any length
    samples: Samples | None = None  # the figure in each step, in the compared unit; None: no per-step values
    share_of_step: bool = False  # a share of the step time: its fallback noise is in points of the step


def _step_durations(report: RunReport) -> list[float] | None:
    return [s.dur_ns for s in report.steps.items] or None


def _ledger_part(part: str) -> Samples:
    """A ledger part's ns in each step."""
    return lambda report: report.ledger.per_step.get(part) or None


def _ledger_share(parts: Callable[[RunReport], Iterable[str]]) -> Samples:
    """The share of each step spent in `parts` (a function of the report: its idle parts are listed in it)."""

    def share(report: RunReport) -> list[float] | None:
        ledger = report.ledger
        columns = [ledger.per_step[p] for p in parts(report) if p in ledger.per_step]
        if not columns or not ledger.step_ns:
            return None
        return [sum(c[i] for c in columns) / step for i, step in enumerate(ledger.step_ns) if step > 0]

    return share


def _step_mfu(report: RunReport) -> list[float] | None:
    values = [s.mfu for s in report.compute.steps if s.mfu is not None]
    return values if values and len(values) == len(report.compute.steps) else None


_IDLE_SHARE = _ledger_share(lambda r: r.ledger.idle_parts)


def _kernel_parts(_: RunReport) -> tuple[str, ...]:
    """The ledger's kernel parts (imported here: `commands.diff` builds the CLI's parser before pandas loads)."""
    from traceinsight.analysis.ledger import KERNEL_PARTS

    return KERNEL_PARTS


_KERNEL_SHARE = _ledger_share(_kernel_parts)
_INPUT_SHARE = _ledger_share(lambda r: ("input_wait",))
_OLD_PARTS = tuple(part for part in BREAKDOWN[1:] if part not in PART_WORDS)  # saved report/1 step parts

RUN_METRICS: tuple[Metric, ...] = (
    Metric("steps.mean_ns", UP, "ns", "Step time (mean)", samples=_step_durations),
    Metric("steps.median_ns", UP, "ns", "Step time (median)", samples=_step_durations),
    Metric("totals.idle_fraction", UP, "fraction", "Idle share of the step", samples=_IDLE_SHARE, share_of_step=True),
    Metric(
        "input_pipeline.fraction",
        UP,
        "fraction",
        "Input-wait share of the step",
        samples=_INPUT_SHARE,
        share_of_step=True,
    ),
    Metric(
        "input_pipeline.idle_fraction",
        UP,
        "fraction",
        "Share of the step with nothing running (input view)",
        share_of_step=True,
    ),
    Metric("steps.count", None, "count", "Steps captured"),
    Metric("compute.gpu_util", DOWN, "fraction", "GPU-Util over the steps", samples=_KERNEL_SHARE, share_of_step=True),
    Metric("compute.mfu", DOWN, "fraction", "MFU (model FLOPs utilisation)", samples=_step_mfu),
    Metric("compute.compute_share", DOWN, "fraction", "Compute kernels' share of kernel time"),
    Metric("compute.compute_efficiency", DOWN, "fraction", "Compute kernels' share of peak FLOP/s"),
    Metric("compute.flops", None, "flop", "FLOPs counted"),
    *(
        Metric(
            f"steps.breakdown_total.{part}",
            None if part == "compute" else UP,
            "ns",
            f"{words[0].upper()}{words[1:]} a step",
            per_step=True,
            samples=_ledger_part(part),
        )
        for part, words in PART_WORDS.items()
    ),
    *(
        Metric(
            f"steps.breakdown_total.{part}",
            None if part == "device_compute" else UP,
            "ns",
            f"{part.replace('_', ' ').capitalize()} a step (report/1)",
            per_step=True,
        )
        for part in _OLD_PARTS
    ),
    Metric("totals.kernel_count", UP, "count", "Kernels in the capture"),
    Metric("totals.small_kernel_count", UP, "count", "Small kernels in the capture"),
    Metric("totals.h2d_count", UP, "count", "Host-to-device copies"),
    Metric("totals.h2d_ns", UP, "ns", "Host-to-device copy time"),
    Metric("totals.h2d_bytes", UP, "bytes", "Host-to-device bytes"),
    Metric("totals.h2d_exposed_ns", UP, "ns", "Host-to-device copy time no kernel hides"),
    Metric("totals.h2d_pageable_count", UP, "count", "Copies from pageable memory"),
    Metric("totals.d2h_count", UP, "count", "Device-to-host copies"),
    Metric("totals.d2h_ns", UP, "ns", "Device-to-host copy time"),
    Metric("totals.d2h_bytes", UP, "bytes", "Device-to-host bytes"),
    Metric("totals.device_count", None, "count", "Devices"),
    Metric("collectives.wait_ns", UP, "ns", "Collective waiting (all ranks)"),
    Metric("collectives.transfer_ns", UP, "ns", "Collective transfer (all ranks)"),
    *(
        Metric(f"compute.classes.{name}.share", None, "fraction", f"{name.capitalize()} share of kernel time")
        for name in KERNEL_CLASSES
    ),
    *(
        Metric(f"compute.classes.{name}.tflops", DOWN, "tflops", f"{name.capitalize()} kernels' TFLOP/s")
        for name in COMPUTE_CLASSES
    ),
)

DEVICE_METRICS: tuple[Metric, ...] = (
    Metric("idle_fraction", UP, "fraction", "idle share of its steps", share_of_step=True),
    Metric("idle_ns", UP, "ns", "idle time in its span"),
    Metric("busy_ns", None, "ns", "busy time in its span"),
    Metric("span_ns", None, "ns", "span (first to last work)"),
    Metric("gaps.count", UP, "count", "idle gaps"),
    Metric("gaps.max_ns", UP, "ns", "longest idle gap"),
    Metric("kernels.count", UP, "count", "kernels"),
    Metric("kernels.total_ns", None, "ns", "kernel time"),
    Metric("kernels.small_count", UP, "count", "small kernels"),
    Metric("kernels.small_total_ns", UP, "ns", "small-kernel time"),
    Metric("kernels.shorter_than_launch_count", UP, "count", "kernels shorter than their launch"),
    Metric("kernels.launch_delay.p50_ns", UP, "ns", "launch delay (median)"),
    Metric("kernels.occupancy_mean_pct", DOWN, "percent", "mean occupancy"),
    Metric("kernels.tensor_core_ns", None, "ns", "Tensor Core kernel time"),
    Metric("kernels.communication_exposed_ns", UP, "ns", "collective time no kernel hides"),
    Metric("copies.h2d.total_ns", UP, "ns", "host-to-device copy time"),
    Metric("copies.h2d.bytes", UP, "bytes", "host-to-device bytes"),
    Metric("copies.h2d.exposed_ns", UP, "ns", "host-to-device copy time no kernel hides"),
    Metric("copies.d2h.total_ns", UP, "ns", "device-to-host copy time"),
    Metric("copies.d2h.exposed_ns", UP, "ns", "device-to-host copy time no kernel hides"),
    Metric("copies.d2d.total_ns", None, "ns", "device-to-device copy time"),
)


# Kernel-name normalisation, applied in this order (see `normalise_kernel_name`).
_RETURN_TYPE = re.compile(r"^void\s+")
_INNERMOST_GROUP = re.compile(r"<[^<>()]*>|\([^<>()]*\)")
_UNCLOSED_GROUP = re.compile(r"[<(].*$")
# One numbered suffix's token, after its `_` or `.` (`_without_numbered_suffixes` walks them from the end: a
# pattern of repeated suffixes anchored only at `$` is tried from every position, quadratic on a long name).
_SUFFIX_TOKEN = re.compile(r"0x[0-9a-fA-F]+|\d+|(?=[0-9a-f]*\d)[0-9a-f]{8,}")
_SPACES = re.compile(r"\s+")
_EMPTY_SCOPE = re.compile(r"(?:::)+")


def normalise_kernel_name(name: str) -> str:
    """The name a kernel is matched by across runs, so recompiles and re-instantiations still match.

    1. a leading return type ``void`` goes;
    2. template arguments ``<...>`` and argument lists ``(...)`` go, innermost first (so nested and
       mixed groups like ``<4, at::(anonymous namespace)::Op<float>>`` go whole); a group left
       open by a name the profiler truncated is cut to the end;
    3. trailing numbered suffixes go: ``_3``, ``.12``, ``_0x1a2b`` and hex hashes of 8+ characters
       with a digit (``triton_poi_fused_add_3`` -> ``triton_poi_fused_add``, XLA ``fusion.12`` ->
       ``fusion``);
    4. spaces collapse and empty scopes (``a::::b`` left by step 2) close up.

    Tile sizes inside a name (``volta_sgemm_128x64_nt``) stay: they tell different kernels apart.
    Kernels that differ only in what goes are summed together. A name that would become
    empty is kept as it is. Only the first `NAME_MATCH_MAX_CHARS` are looked at, as the readers cut names for
    every pattern (a saved report's names come from anyone).
    """
    name = name[:NAME_MATCH_MAX_CHARS]
    text = _RETURN_TYPE.sub("", name.strip())
    previous = None
    while previous != text:
        previous, text = text, _INNERMOST_GROUP.sub("", text)
    text = _UNCLOSED_GROUP.sub("", text)
    text = _without_numbered_suffixes(text.strip())
    text = _EMPTY_SCOPE.sub("::", _SPACES.sub(" ", text)).strip(" :")
    return text or name


def _without_numbered_suffixes(text: str) -> str:
    """`text` without its trailing run of numbered suffixes (``_3``, ``.12``, ``_0x1a2b``, hex hashes), found
    from the end, token by token: linear in the name."""
    end = len(text)
    while (cut := max(text.rfind("_", 0, end), text.rfind(".", 0, end))) >= 0 and _SUFFIX_TOKEN.fullmatch(
        text, cut + 1, end
    ):
        end = cut
    return text[:end]


def _value(node: Any, path: str) -> Any:
    """The number at `path`, None when this report does not have it."""
    try:
        return lookup(node, path)
    except ExpressionError:
        return None


class Noise(msgspec.Struct, frozen=True):
    """How far a figure moves between two runs by chance: `threshold` in the figure's unit, read from `source`."""

    threshold: float
    source: str  # "steps": its own per-step values; "step time": the step time's, relative; "fixed": no spread


def noise_threshold(base: Sequence[float] | None, new: Sequence[float] | None) -> float | None:
    """`NOISE_STANDARD_ERRORS` standard errors of the difference of the two runs' per-step means (Welch's
    sqrt(var_base / n_base + var_new / n_new), sample variances); None without two steps on each side."""
    if not base or not new or len(base) < 2 or len(new) < 2:
        return None
    return NOISE_STANDARD_ERRORS * math.sqrt(
        statistics.variance(base) / len(base) + statistics.variance(new) / len(new)
    )


class StepNoise(msgspec.Struct, frozen=True):
    """The step time's noise, as a share of the larger mean step: what a figure without per-step values takes."""

    relative: float
    source: str  # "step time" or "fixed"


def step_noise(base: RunReport, new: RunReport) -> StepNoise:
    """The step time's `noise_threshold` over the larger mean step; `FALLBACK_RELATIVE_NOISE` without the steps."""
    threshold = noise_threshold(_step_durations(base), _step_durations(new))
    means = [m for m in (base.steps.mean_ns, new.steps.mean_ns) if m]
    if threshold is None or not means:
        return StepNoise(FALLBACK_RELATIVE_NOISE, "fixed")
    return StepNoise(threshold / max(means), "step time")


def _noise(metric: Metric, sides: tuple[RunReport, RunReport], values: tuple[Any, Any], steps: StepNoise) -> Noise:
    """The figure's own per-step spread where it has one, else the step time's, relative (`StepNoise`)."""
    if metric.samples is not None and (threshold := noise_threshold(*(metric.samples(r) for r in sides))) is not None:
        return Noise(threshold, "steps")
    if metric.share_of_step:
        return Noise(steps.relative, steps.source)
    return Noise(steps.relative * max(abs(v) for v in values), steps.source)


def _verdict(worse_when: str | None, delta: float | None, noise: float) -> str:
    if delta is None:
        return "unknown"
    if abs(delta) <= noise:
        return "unchanged"
    if worse_when is None:
        return "changed"
    return "regression" if (delta > 0) == (worse_when == UP) else "improvement"


def _per_step_value(report: RunReport | None, metric: Metric, path: str) -> Any:
    """The figure at `path`, a step where the metric is a sum over the steps (None without steps)."""
    value = _value(report, path) if report is not None else None
    if value is None or not metric.per_step:
        return value
    return value / report.steps.count if report is not None and report.steps.count else None


def _change(
    path: str, label: str, metric: Metric, sides: tuple[RunReport | None, RunReport | None], steps: StepNoise
) -> dict[str, Any]:
    base, new = (_per_step_value(r, metric, path) for r in sides)
    delta, relative = change(base, new)
    noise = None
    if delta is not None and sides[0] is not None and sides[1] is not None:
        noise = _noise(metric, (sides[0], sides[1]), (base, new), steps)
    return {
        "metric": path,
        "label": label,
        "per_step": metric.per_step,
        "base": base,
        "new": new,
        "delta": delta,
        "relative": relative,
        "worse_when": metric.worse_when,
        "unit": metric.unit,
        "noise": None if noise is None else noise.threshold,
        "noise_source": None if noise is None else noise.source,
        "verdict": _verdict(metric.worse_when, delta, 0.0 if noise is None else noise.threshold),
    }


def _devices_by_id(report: RunReport) -> dict[str, Device]:
    return {d.id: d for d in report.devices}


def metric_changes(base: RunReport, new: RunReport) -> list[dict[str, Any]]:
    """Every metric of both reports, in table order; a device only one run has gets nulls on the other side.

    A change inside its noise (`Noise`) is "unchanged"; the verdict names a direction only beyond it."""
    steps = step_noise(base, new)
    out = [_change(m.path, m.label, m, (base, new), steps) for m in RUN_METRICS]
    base_devices, new_devices = _devices_by_id(base), _devices_by_id(new)
    for device_id in dict.fromkeys([*base_devices, *new_devices]):
        b, n = base_devices.get(device_id), new_devices.get(device_id)
        for m in DEVICE_METRICS:
            sides = (base if b else None, new if n else None)
            out.append(_change(f"devices.{device_id}.{m.path}", f"{device_id}: {m.label}", m, sides, steps))
    return out


def step_time(base: RunReport, new: RunReport) -> dict[str, Any]:
    """The diff's first line: the mean step of each run, BASE / NEW (above 1: NEW is faster), and the verdict:
    "win" or "regression" beyond the step time's noise, "unchanged" inside it, "unknown" without both steps."""
    before, after = base.steps.mean_ns, new.steps.mean_ns
    metric = RUN_METRICS[0]
    noise = None
    if before is not None and after is not None:
        noise = _noise(metric, (base, new), (before, after), step_noise(base, new))
    verdict = "unknown"
    if noise is not None and before is not None and after is not None:
        verdict = "unchanged" if abs(after - before) <= noise.threshold else "win" if after < before else "regression"
    return {
        "base_ns": before,
        "new_ns": after,
        "speedup": _ratio(before, after),
        "noise_ns": None if noise is None else noise.threshold,
        "noise_source": None if noise is None else noise.source,
        "verdict": verdict,
    }


def _hardware(report: RunReport) -> str:
    """The devices that ran the work, by name with their count (``NVIDIA A100 x8``); the host's listed ones where
    the devices carry no name."""
    names = [d.name for d in report.devices if d.name] or [d.name for d in report.device_info if d.name]
    return ", ".join(f"{name} x{count}" if count > 1 else name for name, count in sorted(Counter(names).items()))


def comparability(base: RunReport, new: RunReport) -> list[dict[str, str]]:
    """What makes the two runs compare as other than like with like, each ``{kind, message}``: other hardware,
    another framework, another capture kind (one without a steady state, above all), other small-kernel
    thresholds. The renderers show them before any figure."""
    warnings = []
    hardware = _hardware(base), _hardware(new)
    if all(hardware) and hardware[0] != hardware[1]:
        warnings.append(
            (
                "hardware",
                f"the hardware differs: base ran on {hardware[0]}, new on {hardware[1]}; step time, kernel times "
                "and MFU compare different machines",
            )
        )
    if base.framework != new.framework:
        warnings.append(("framework", f"the frameworks differ: base {base.framework}, new {new.framework}"))
    kinds = tuple(r.capture.kind if r.capture else None for r in (base, new))
    if all(kinds) and kinds[0] != kinds[1]:
        steady = any(r.capture is not None and not r.capture.projects for r in (base, new))
        why = (
            "one holds no steady state (a warm-up, a graph capture pass or a micro-benchmark), so their step "
            "figures don't compare"
            if steady
            else "their step figures measure different work"
        )
        warnings.append(("capture", f"the captures are of different kinds (base {kinds[0]}, new {kinds[1]}) and {why}"))
    thresholds = tuple({d.kernels.small_threshold_ns for d in r.devices} for r in (base, new))
    if all(len(t) == 1 for t in thresholds) and thresholds[0] != thresholds[1]:
        (b,), (n,) = thresholds
        warnings.append(
            (
                "small_kernels",
                f"small-kernel thresholds differ (base {b / 1000:g} us, new {n / 1000:g} us): small-kernel counts "
                "don't compare",
            )
        )
    return [{"kind": kind, "message": message} for kind, message in warnings]


def _projects(b: Bottleneck | None) -> bool:
    return b is None or (b.projection is not None and b.projection.basis != "none")


def _per_step_ns(b: Bottleneck | None, report: RunReport, by_projection: bool) -> int | None:
    """What the bottleneck costs a step: its projection's saving (`by_projection`), else its time over the
    capture's steps (None without steps)."""
    if b is None:
        return None
    if by_projection and b.projection is not None:
        return b.projection.saving_ns
    return round(b.time_ns / report.steps.count) if report.steps.count else None


def _bottleneck_sides(
    b: Bottleneck | None, base: RunReport, n: Bottleneck | None, new: RunReport
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Both sides of one bottleneck, their cost a step read alike: from the projections where every side present
    projects a saving, else from the time over the steps (so an estimate is never set against a measurement)."""
    by_projection = _projects(b) and _projects(n)

    def side(x: Bottleneck | None, report: RunReport) -> dict[str, Any] | None:
        if x is None:
            return None
        return {
            "severity": x.severity,
            "rank": x.rank,
            "time_ns": x.time_ns,
            "fraction": x.fraction,
            "per_step_ns": _per_step_ns(x, report, by_projection),
        }

    return side(b, base), side(n, new)


def _cost(side: dict[str, Any] | None, measure: str) -> int:
    """A bottleneck's cost in `measure`; 0 where the run does not have it."""
    return int(side[measure] or 0) if side else 0


def _bottleneck_status(b: dict[str, Any] | None, n: dict[str, Any] | None, measure: str, relative: float) -> str:
    """Added, removed; else worse or better by severity, then by a change of cost beyond `relative` of the larger
    cost (the step time's noise); else the same."""
    if b is None:
        return "added"
    if n is None:
        return "removed"
    rise = SEVERITY_ORDER.get(n["severity"], 0) - SEVERITY_ORDER.get(b["severity"], 0)
    if not rise:
        costs = _cost(b, measure), _cost(n, measure)
        if abs(costs[1] - costs[0]) > relative * max(costs):
            rise = costs[1] - costs[0]
    return "worse" if rise > 0 else "better" if rise < 0 else "same"


_BOTTLENECK_ORDER = {"added": 0, "worse": 1, "removed": 2, "better": 3, "same": 4}


def bottleneck_changes(base: RunReport, new: RunReport) -> dict[str, Any]:
    """Bottlenecks by id: added (only in NEW), removed (only in BASE), worse / better / same.

    Worse or better goes by severity first, then by a change of cost beyond the step time's noise (`step_noise`):
    a step's (`_per_step_ns`) where both reports know their steps, else the capture's (`time_ns`), which `measure`
    names; regressions come first.
    """
    base_by_id = {b.id: b for b in base.bottlenecks}
    new_by_id = {b.id: b for b in new.bottlenecks}
    relative = step_noise(base, new).relative
    items: list[dict[str, Any]] = []
    for bid in dict.fromkeys([*new_by_id, *base_by_id]):
        b, n = _bottleneck_sides(base_by_id.get(bid), base, new_by_id.get(bid), new)
        either = new_by_id.get(bid) or base_by_id.get(bid)
        measure = "per_step_ns" if all(x["per_step_ns"] is not None for x in (b, n) if x) else "time_ns"
        delta, relative_change = change(_cost(b, measure), _cost(n, measure))
        items.append(
            {
                "id": bid,
                "title": either.title if either is not None else None,
                "status": _bottleneck_status(b, n, measure, relative),
                "measure": measure,
                "base": b,
                "new": n,
                "delta_ns": delta,
                "relative": relative_change,
            }
        )
    items.sort(key=lambda x: (_BOTTLENECK_ORDER[x["status"]], -abs(x["delta_ns"])))
    return {
        "added": [x["id"] for x in items if x["status"] == "added"],
        "removed": [x["id"] for x in items if x["status"] == "removed"],
        "items": items,
    }


def _kernel_totals(report: RunReport) -> tuple[dict[str, dict[str, Any]], bool]:
    """Top kernels of every device summed by normalised name, and whether those lists hold every kernel."""
    totals: dict[str, dict[str, Any]] = {}
    complete = True
    for device in report.devices:
        top = device.kernels.top
        complete &= sum(k.count for k in top) == device.kernels.count
        for k in top:
            entry = totals.setdefault(normalise_kernel_name(k.name), {"count": 0, "total_ns": 0, "names": set()})
            entry["count"] += k.count
            entry["total_ns"] += k.total_ns
            entry["names"].add(k.name)
    return totals, complete


def _kernel_side(entry: dict[str, Any] | None, complete: bool) -> dict[str, Any] | None:
    """One side's figures; a kernel missing from a complete list ran 0 times, from a top-N list: unknown."""
    if entry is None:
        return {"count": 0, "total_ns": 0, "mean_ns": None} if complete else None
    return {"count": entry["count"], "total_ns": entry["total_ns"], "mean_ns": entry["total_ns"] // entry["count"]}


def _kernel_status(b: dict[str, Any] | None, n: dict[str, Any] | None, delta: float | None, relative: float) -> str:
    """Each name is in at least one side's list, so a None or 0-count side is the one it is missing from. Slower
    or faster only beyond `relative` of the larger total (the step time's noise)."""
    if b is None:
        return "entered_top"
    if n is None:
        return "left_top"
    if b["count"] == 0:
        return "new"
    if n["count"] == 0:
        return "gone"
    if delta is None or abs(delta) <= relative * max(b["total_ns"], n["total_ns"]):
        return "same"
    return "slower" if delta > 0 else "faster"


def kernel_changes(base: RunReport, new: RunReport) -> list[dict[str, Any]]:
    """Kernels by normalised name, most changed total time first.

    The reports keep each device's top kernels only. Where that list is complete, a kernel
    missing from it ran 0 times (``new`` / ``gone``); otherwise its time there is unknown
    (``entered_top`` / ``left_top``, delta null, ranked by the time known on the other side).
    """
    (base_totals, base_complete), (new_totals, new_complete) = _kernel_totals(base), _kernel_totals(new)
    noise = step_noise(base, new).relative
    items = []
    for name in dict.fromkeys([*base_totals, *new_totals]):
        b = _kernel_side(base_totals.get(name), base_complete)
        n = _kernel_side(new_totals.get(name), new_complete)
        delta, relative = change(b["total_ns"] if b else None, n["total_ns"] if n else None)
        raw = base_totals.get(name, {}).get("names", set()) | new_totals.get(name, {}).get("names", set())
        items.append(
            {
                "name": name,
                "names": sorted(raw),
                "status": _kernel_status(b, n, delta, noise),
                "base": b,
                "new": n,
                "delta_ns": delta,
                "relative": relative,
            }
        )
    items.sort(key=_kernel_change_size, reverse=True)
    return items


def _kernel_change_size(item: dict[str, Any]) -> float:
    """How much a kernel changed: |delta|, or the time known on one side when the other is unknown."""
    if item["delta_ns"] is not None:
        return abs(item["delta_ns"])
    return float((item["base"] or item["new"])["total_ns"])


def _mean_step_ns(report: RunReport) -> float | None:
    return report.steps.mean_ns


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def _projected_versus_measured(projection: Projection, base: RunReport, new: RunReport) -> dict[str, Any]:
    """What `projection` (from BASE) promised per step, what BASE and NEW measured, and how far off it was."""
    before, after = _mean_step_ns(base), _mean_step_ns(new)
    projected_after = projection.step_ns_after
    ratio = _ratio(projected_after, after)
    path_ratio = _ratio(projection.path_step_ns_after, after)
    return {
        "projected_step_ns_before": projection.step_ns_before,
        "projected_step_ns_after": projected_after,
        "projected_saving_ns": projection.saving_ns,
        "projected_speedup": projection.speedup,
        "measured_step_ns_before": before,
        "measured_step_ns_after": after,
        "measured_saving_ns": None if before is None or after is None else before - after,
        "measured_speedup": _ratio(before, after),
        "error": None if ratio is None else ratio - 1,
        "path_step_ns_after": projection.path_step_ns_after,
        "path_error": None if path_ratio is None else path_ratio - 1,
    }


def _cause_figure(b: Bottleneck, keys: tuple[str, ...]) -> float | None:
    """The first of `keys` the bottleneck's evidence holds as a number."""
    for key in keys:
        value = b.evidence.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


def cause_change(b: Bottleneck, base: RunReport, new: RunReport) -> dict[str, Any]:
    """Whether NEW changed what caused BASE's bottleneck `b`: ``{measure, base, new, noise, status}``.

    The cause is the finding's own evidence a step (`rules.FINDING_CAUSE_EVIDENCE`), else its cost a step
    (`_bottleneck_sides`). It changed when the finding is gone from NEW ("gone"), or when the cause fell by more than
    the step time's noise, relative (`step_noise`), of its BASE figure ("shrunk"); otherwise status is None.
    """
    n = next((x for x in new.bottlenecks if x.id == b.id), None)
    keys = FINDING_CAUSE_EVIDENCE.get(b.id, ())
    sides = _bottleneck_sides(b, base, n, new)
    measure, before, after = "per_step_ns", *(None if x is None else x["per_step_ns"] for x in sides)
    if (figure := _cause_figure(b, keys)) is not None:
        found = None if n is None else _cause_figure(n, keys)
        if n is None or found is not None:
            measure, before, after = "evidence", figure, found
    noise = step_noise(base, new).relative * (before or 0)
    if n is None:
        status: str | None = "gone"
    elif before is not None and after is not None and before - after > noise:
        status = "shrunk"
    else:
        status = None
    return {"measure": measure, "base": before, "new": after, "noise": noise, "status": status}


def projection_checks(base: RunReport, new: RunReport) -> list[dict[str, Any]]:
    """One check per BASE bottleneck with a projection whose cause changed in NEW (`cause_change`), in BASE's rank
    order: a projection is scored only against a change to what it is about.

    Bottlenecks without a projection (reports made before projections existed) give no check.
    """
    checks = []
    for b in base.bottlenecks:
        projection = b.projection
        if projection is None or (cause := cause_change(b, base, new))["status"] is None:
            continue
        checks.append(
            {
                "id": b.id,
                "basis": projection.basis,
                "status": cause["status"],
                "cause": cause,
                **_projected_versus_measured(projection, base, new),
            }
        )
    return checks


def headline_check(base: RunReport, new: RunReport) -> dict[str, Any] | None:
    """BASE's top-level ``projection`` (its top fixes applied together) against NEW's measured mean step.

    None when BASE has no top-level projection, or when NEW did not change the cause of every bottleneck it
    applies (`cause_change`): the combined projection is of fixes NEW did not all make.
    """
    projection: RunProjection | None = base.projection
    if not projection or not projection.applied:
        return None
    applied = list(projection.applied)
    by_id = {b.id: b for b in base.bottlenecks}
    addressed = [bid for bid in applied if bid in by_id and cause_change(by_id[bid], base, new)["status"]]
    if addressed != applied:
        return None
    return {
        "applied": applied,
        "addressed": addressed,
        **_projected_versus_measured(projection, base, new),
        "projected_gpu_util_after": projection.gpu_util_after,
        "measured_gpu_util_before": base.totals.gpu_util,
        "measured_gpu_util_after": new.totals.gpu_util,
    }


def summarise(report: RunReport, origin: Origin = None) -> dict[str, Any]:
    """What a diff says about one side: which run, read from what, with which settings."""
    start, end = report.window.start_ns, report.window.end_ns
    thresholds = {d.kernels.small_threshold_ns for d in report.devices}
    return {
        "run": report.run,
        "schema": report.schema,
        "version": report.version,
        "framework": report.framework,
        "inputs": [{"path": i.path, "format": i.format} for i in report.inputs],
        "window_ns": end - start if start is not None and end is not None else None,
        "step_count": report.steps.count,
        "capture_kind": report.capture.kind if report.capture else None,
        "capture_projects": report.capture.projects if report.capture else None,
        "small_kernel_threshold_ns": thresholds.pop() if len(thresholds) == 1 else None,
        "hardware": _hardware(report) or None,
        **(origin or {}),
    }


def build_diff(
    base: RunReport,
    new: RunReport,
    origins: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
) -> dict[str, Any]:
    """The diff object; `origins` adds where each side came from (e.g. its path and whether it was a saved report)."""
    return {
        "schema": SCHEMA,
        "version": __version__,
        "base": summarise(base, origins[0]),
        "new": summarise(new, origins[1]),
        "step_time": (time := step_time(base, new)),
        "verdict": time["verdict"],
        "warnings": comparability(base, new),
        "changes": metric_changes(base, new),
        "bottlenecks": bottleneck_changes(base, new),
        "kernels": kernel_changes(base, new),
        "projections": {"checks": projection_checks(base, new), "headline": headline_check(base, new)},
    }


_VERDICT_ORDER = {"regression": 0, "improvement": 1, "changed": 2, "unchanged": 3, "unknown": 4}


def ranked(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Regressions first, then improvements, other changes, unchanged, unknown; biggest relative change first.

    A change from 0 (relative null) counts as the biggest.
    """

    def size(c: dict[str, Any]) -> float:
        if c["relative"] is not None:
            return abs(c["relative"])
        return math.inf if c["delta"] else 0.0

    return sorted(changes, key=lambda c: (_VERDICT_ORDER[c["verdict"]], -size(c)))
