"""Compare two runs: the diff object (schema ``traceinsight.diff/1``) built from two reports (`result.RunReport`).

Pure functions over the result model (the `--json` contract, ../shared/notes/report-json.md), so a
baseline report saved by an earlier CI job compares with a fresh trace exactly as two
traces do. Four parts:

* ``changes``: headline metrics (`RUN_METRICS`) and per-device ones (`DEVICE_METRICS`,
  devices matched by id), each named by its JSON path in the report, with NEW - BASE,
  the relative change and which direction is worse (data, so renderers and tests agree).
* ``bottlenecks``: added, removed, or changed in cost, by id.
* ``kernels``: the kernels whose total time changed most, matched by a normalised name
  (`normalise_kernel_name`), over the reports' top kernels of every device.
* ``projections``: did BASE's what-if come true? ``{checks: [...], headline: {...} | null}``
  (`projection_checks`, `headline_check`). A check per BASE bottleneck that has a ``projection`` and is
  gone in NEW or costs less there (``time_ns`` or ``fraction`` smaller); the headline when BASE has a
  top-level ``projection``. Each compares what BASE projected with the mean steps both runs measured:
  ``projected_step_ns_before``, ``projected_step_ns_after``, ``projected_saving_ns``, ``projected_speedup``
  (from the projection), ``measured_step_ns_before`` / ``measured_step_ns_after`` (BASE / NEW
  ``steps.mean_ns``), ``measured_saving_ns`` (before - after), ``measured_speedup`` (before / after) and
  ``error`` (projected step after / measured step after - 1: below 0 the projection promised more than
  came). A check adds ``id``, ``basis`` ("measured" | "estimated") and ``status`` ("gone" | "shrunk");
  the headline adds ``applied`` (the ids BASE applied), ``addressed`` (those of them gone or shrunk in
  NEW), ``projected_gpu_util_after`` and ``measured_gpu_util_before`` / ``measured_gpu_util_after``
  (``totals.gpu_util``). Anything unknown (no mean step, a zero to divide by) is null. Reports from
  before projections existed give no checks and no headline.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from traceinsight import __version__
from traceinsight.gating import ExpressionError, change, lookup
from traceinsight.result import PART_WORDS, Bottleneck, Device, Projection, RunProjection, RunReport
from traceinsight.rules import BREAKDOWN, COMPUTE_CLASSES, KERNEL_CLASSES, NAME_MATCH_MAX_CHARS

SCHEMA = "traceinsight.diff/1"
UP, DOWN = "up", "down"
SEVERITY_ORDER = {"low": 0, "medium": 1, "high": 2}
Origin = dict[str, Any] | None  # where one side came from, added to its summary


@dataclass(frozen=True)
class Metric:
    """One compared figure: its JSON path, the direction that is a regression, how to show it."""

    path: str  # dotted path in the report; for DEVICE_METRICS relative to one `devices[]` item
    worse_when: str | None  # UP, DOWN, or None where neither direction is bad in itself
    unit: str  # "ns" | "fraction" | "percent" | "bytes" | "count" | "flop" | "tflops"


RUN_METRICS: tuple[Metric, ...] = (
    Metric("totals.idle_fraction", UP, "fraction"),
    Metric("input_pipeline.fraction", UP, "fraction"),
    Metric("input_pipeline.wait_ns", UP, "ns"),
    Metric("input_pipeline.idle_fraction", UP, "fraction"),
    Metric("steps.mean_ns", UP, "ns"),
    Metric("steps.median_ns", UP, "ns"),
    Metric("steps.count", None, "count"),
    Metric("steps.breakdown_total.compute", None, "ns"),
    *(Metric(f"steps.breakdown_total.{part}", UP, "ns") for part in tuple(PART_WORDS)[1:]),
    Metric("steps.breakdown_total.device_compute", None, "ns"),
    *(Metric(f"steps.breakdown_total.{part}", UP, "ns") for part in BREAKDOWN[1:] if part not in PART_WORDS),
    Metric("totals.kernel_count", UP, "count"),
    Metric("totals.small_kernel_count", UP, "count"),
    Metric("totals.h2d_count", UP, "count"),
    Metric("totals.h2d_ns", UP, "ns"),
    Metric("totals.h2d_bytes", UP, "bytes"),
    Metric("totals.h2d_exposed_ns", UP, "ns"),
    Metric("totals.h2d_pageable_count", UP, "count"),
    Metric("totals.d2h_count", UP, "count"),
    Metric("totals.d2h_ns", UP, "ns"),
    Metric("totals.d2h_bytes", UP, "bytes"),
    Metric("totals.device_count", None, "count"),
    Metric("compute.mfu", DOWN, "fraction"),
    Metric("compute.gpu_util", DOWN, "fraction"),
    Metric("compute.compute_share", DOWN, "fraction"),
    Metric("compute.compute_efficiency", DOWN, "fraction"),
    Metric("compute.flops", None, "flop"),
    Metric("collectives.wait_ns", UP, "ns"),
    Metric("collectives.transfer_ns", UP, "ns"),
    *(Metric(f"compute.classes.{name}.share", None, "fraction") for name in KERNEL_CLASSES),
    *(Metric(f"compute.classes.{name}.tflops", DOWN, "tflops") for name in COMPUTE_CLASSES),
)

DEVICE_METRICS: tuple[Metric, ...] = (
    Metric("idle_fraction", UP, "fraction"),
    Metric("idle_ns", UP, "ns"),
    Metric("busy_ns", None, "ns"),
    Metric("span_ns", None, "ns"),
    Metric("gaps.count", UP, "count"),
    Metric("gaps.max_ns", UP, "ns"),
    Metric("kernels.count", UP, "count"),
    Metric("kernels.total_ns", None, "ns"),
    Metric("kernels.small_count", UP, "count"),
    Metric("kernels.small_total_ns", UP, "ns"),
    Metric("kernels.shorter_than_launch_count", UP, "count"),
    Metric("kernels.launch_delay.p50_ns", UP, "ns"),
    Metric("kernels.occupancy_mean_pct", DOWN, "percent"),
    Metric("kernels.tensor_core_ns", None, "ns"),
    Metric("kernels.communication_exposed_ns", UP, "ns"),
    Metric("copies.h2d.total_ns", UP, "ns"),
    Metric("copies.h2d.bytes", UP, "bytes"),
    Metric("copies.h2d.exposed_ns", UP, "ns"),
    Metric("copies.d2h.total_ns", UP, "ns"),
    Metric("copies.d2h.exposed_ns", UP, "ns"),
    Metric("copies.d2d.total_ns", None, "ns"),
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


def _verdict(worse_when: str | None, delta: float | None) -> str:
    if delta is None:
        return "unknown"
    if delta == 0:
        return "unchanged"
    if worse_when is None:
        return "changed"
    return "regression" if (delta > 0) == (worse_when == UP) else "improvement"


def _change(path: str, metric: Metric, base: Any, new: Any) -> dict[str, Any]:
    delta, relative = change(base, new)
    return {
        "metric": path,
        "base": base,
        "new": new,
        "delta": delta,
        "relative": relative,
        "worse_when": metric.worse_when,
        "unit": metric.unit,
        "verdict": _verdict(metric.worse_when, delta),
    }


def _devices_by_id(report: RunReport) -> dict[str, Device]:
    return {d.id: d for d in report.devices}


def metric_changes(base: RunReport, new: RunReport) -> list[dict[str, Any]]:
    """Every metric of both reports, in table order; a device only one run has gets nulls on the other side."""
    out = [_change(m.path, m, _value(base, m.path), _value(new, m.path)) for m in RUN_METRICS]
    base_devices, new_devices = _devices_by_id(base), _devices_by_id(new)
    for device_id in dict.fromkeys([*base_devices, *new_devices]):
        b, n = base_devices.get(device_id), new_devices.get(device_id)
        for m in DEVICE_METRICS:
            values = (_value(b, m.path) if b else None, _value(n, m.path) if n else None)
            out.append(_change(f"devices.{device_id}.{m.path}", m, *values))
    return out


def _per_step_ns(b: Bottleneck | None) -> int | None:
    """What the bottleneck costs a step: its projection's saving."""
    return None if b is None or b.projection is None else b.projection.saving_ns


def _bottleneck_side(b: Bottleneck | None) -> dict[str, Any] | None:
    if b is None:
        return None
    return {
        "severity": b.severity,
        "rank": b.rank,
        "time_ns": b.time_ns,
        "fraction": b.fraction,
        "per_step_ns": _per_step_ns(b),
    }


def _cost_measure(b: Bottleneck | None, n: Bottleneck | None) -> str:
    """What a bottleneck's change is measured in: its cost a step where every side present has one (captures
    of different lengths compare alike), else its cost over the capture."""
    return "per_step_ns" if all(_per_step_ns(x) is not None for x in (b, n) if x is not None) else "time_ns"


def _cost(b: Bottleneck | None, measure: str) -> int:
    """A bottleneck's cost in `measure` (`_cost_measure`); 0 where the run does not have it."""
    if b is None:
        return 0
    return int((_per_step_ns(b) if measure == "per_step_ns" else b.time_ns) or 0)


def _bottleneck_status(b: Bottleneck | None, n: Bottleneck | None) -> str:
    if b is None:
        return "added"
    if n is None:
        return "removed"
    rise = SEVERITY_ORDER.get(n.severity, 0) - SEVERITY_ORDER.get(b.severity, 0)
    if not rise:
        measure = _cost_measure(b, n)
        rise = _cost(n, measure) - _cost(b, measure)
    return "worse" if rise > 0 else "better" if rise < 0 else "same"


_BOTTLENECK_ORDER = {"added": 0, "worse": 1, "removed": 2, "better": 3, "same": 4}


def bottleneck_changes(base: RunReport, new: RunReport) -> dict[str, Any]:
    """Bottlenecks by id: added (only in NEW), removed (only in BASE), worse / better / same.

    Worse or better goes by severity first, then by cost: a step's (`projection.saving_ns`) where the reports
    have projections, else the capture's (`time_ns`), which `measure` names; regressions come first.
    """
    base_by_id = {b.id: b for b in base.bottlenecks}
    new_by_id = {b.id: b for b in new.bottlenecks}
    items: list[dict[str, Any]] = []
    for bid in dict.fromkeys([*new_by_id, *base_by_id]):
        b, n = base_by_id.get(bid), new_by_id.get(bid)
        either = n or b
        measure = _cost_measure(b, n)
        delta, relative = change(_cost(b, measure), _cost(n, measure))
        items.append(
            {
                "id": bid,
                "title": either.title if either is not None else None,
                "status": _bottleneck_status(b, n),
                "measure": measure,
                "base": _bottleneck_side(b),
                "new": _bottleneck_side(n),
                "delta_ns": delta,
                "relative": relative,
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


def _kernel_status(b: dict[str, Any] | None, n: dict[str, Any] | None, delta: float | None) -> str:
    """Each name is in at least one side's list, so a None or 0-count side is the one it is missing from."""
    if b is None:
        return "entered_top"
    if n is None:
        return "left_top"
    if b["count"] == 0:
        return "new"
    if n["count"] == 0:
        return "gone"
    if delta is None:
        return "same"
    return "slower" if delta > 0 else "faster" if delta < 0 else "same"


def kernel_changes(base: RunReport, new: RunReport) -> list[dict[str, Any]]:
    """Kernels by normalised name, most changed total time first.

    The reports keep each device's top kernels only. Where that list is complete, a kernel
    missing from it ran 0 times (``new`` / ``gone``); otherwise its time there is unknown
    (``entered_top`` / ``left_top``, delta null, ranked by the time known on the other side).
    """
    (base_totals, base_complete), (new_totals, new_complete) = _kernel_totals(base), _kernel_totals(new)
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
                "status": _kernel_status(b, n, delta),
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
    }


def _shrunk(b: Bottleneck, n: Bottleneck) -> bool:
    """Whether bottleneck `n` (NEW) costs less than `b` (BASE): smaller `time_ns` or smaller `fraction`."""
    return n.time_ns < b.time_ns or n.fraction < b.fraction


def _fixed_status(b: Bottleneck, new_by_id: dict[str, Bottleneck]) -> str | None:
    """How NEW fixed BASE bottleneck `b`: "gone", "shrunk" (in part), or None (not at all)."""
    n = new_by_id.get(b.id)
    if n is None:
        return "gone"
    return "shrunk" if _shrunk(b, n) else None


def projection_checks(base: RunReport, new: RunReport) -> list[dict[str, Any]]:
    """One check per BASE bottleneck with a projection that is gone or smaller in NEW, in BASE's rank order.

    Bottlenecks without a projection (reports made before projections existed) and ones that did not shrink
    give no check.
    """
    new_by_id = {n.id: n for n in new.bottlenecks}
    checks = []
    for b in base.bottlenecks:
        projection = b.projection
        if projection is None or (status := _fixed_status(b, new_by_id)) is None:
            continue
        checks.append(
            {
                "id": b.id,
                "basis": projection.basis,
                "status": status,
                **_projected_versus_measured(projection, base, new),
            }
        )
    return checks


def headline_check(base: RunReport, new: RunReport) -> dict[str, Any] | None:
    """BASE's top-level ``projection`` (its top fixes applied together) against NEW's measured mean step.

    None when BASE has no top-level projection.
    """
    projection: RunProjection | None = base.projection
    if not projection:
        return None
    new_by_id = {n.id: n for n in new.bottlenecks}
    applied = list(projection.applied)
    base_applied = [b for b in base.bottlenecks if b.id in applied]
    return {
        "applied": applied,
        "addressed": [b.id for b in base_applied if _fixed_status(b, new_by_id)],
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
