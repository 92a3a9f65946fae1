"""`traceinsight diff`: the diff object from hand-made reports with known deltas, kernel-name
normalisation, the change thresholds, and the renderers (the command end to end: tests/commands/test_diff.py)."""

import copy
import re
from typing import Any

import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight import diff as diffs
from traceinsight.diff import DEVICE_METRICS, RUN_METRICS, UP, normalise_kernel_name, ranked
from traceinsight.gating import SKIP, ExpressionError, Threshold, evaluate, parse_threshold
from traceinsight.render.diff_render import (
    render_diff_html,
    render_diff_markdown,
    render_diff_terminal,
)
from traceinsight.result import RunReport, from_document
from traceinsight.workflow import analyze_path


# ---------------------------------------------------------------- hand-made reports
# They are JSON documents, as a CI job keeps them; each is read back into the model as `read_saved_report` does.
def typed(report: dict[str, Any] | RunReport) -> RunReport:
    return report if isinstance(report, RunReport) else from_document(report)


def build_diff(base: Any, new: Any, origins: Any = (None, None)) -> dict[str, Any]:
    return diffs.build_diff(typed(base), typed(new), origins)


MISSING = "missing"  # a threshold the runs have no value for


def crossing(threshold: Threshold, base: Any, new: Any) -> str | None:
    return threshold.check_diff(typed(base), typed(new))


def _kernel(name: str, count: int, total_ns: int) -> dict[str, Any]:
    return {"name": name, "count": count, "total_ns": total_ns, "mean_ns": total_ns // count, "tensor_core": False}


def _device(device_id: str, idle_fraction: float | None, top: list[dict[str, Any]], count: int | None = None):
    return {
        "id": device_id,
        "span_ns": 1_000_000,
        "busy_ns": None if idle_fraction is None else round(1_000_000 * (1 - idle_fraction)),
        "idle_ns": None if idle_fraction is None else round(1_000_000 * idle_fraction),
        "idle_fraction": idle_fraction,
        "gaps": {"count": 3, "total_ns": 0, "max_ns": 0, "by_cause": {"input_wait": 0, "other": 0}},
        "kernels": {
            "count": sum(k["count"] for k in top) if count is None else count,
            "small_count": 0,
            "small_threshold_ns": 10_000,
            "occupancy_mean_pct": 50.0,
            "top": top,
        },
        "copies": {"h2d": {"count": 0, "total_ns": 0, "bytes": None, "exposed_ns": 0}},
    }


def _bottleneck(bid: str, severity: str, time_ns: int) -> dict[str, Any]:
    return {"id": bid, "rank": 1, "severity": severity, "time_ns": time_ns, "fraction": 0.1, "title": bid}


def _report(run: str = "r", **fields: Any) -> dict[str, Any]:
    report = {
        "schema": "traceinsight.report/1",
        "version": "0",
        "run": run,
        "inputs": [{"path": f"{run}.pt.trace.json.gz", "format": "kineto"}],
        "framework": "pytorch",
        "window": {"start_ns": 0, "end_ns": 2_000_000},
        "steps": {"count": 4, "mean_ns": 400, "median_ns": 380},
        "devices": [_device("GPU:0", 0.25, [_kernel("gemm", 10, 5_000)])],
        "totals": {"idle_fraction": 0.25, "kernel_count": 10, "small_kernel_count": 0, "h2d_ns": 0, "d2h_bytes": None},
        "input_pipeline": {"fraction": 0.1, "wait_ns": 40},
        "bottlenecks": [],
    }
    report.update(fields)
    return report


def _changes(diff: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["metric"]: c for c in diff["changes"]}


def test_known_deltas_and_relative_changes():
    base = _report(steps={"count": 4, "mean_ns": 400, "median_ns": 380})
    new = _report(steps={"count": 4, "mean_ns": 500, "median_ns": 380})
    new["totals"] = {**base["totals"], "idle_fraction": 0.5, "kernel_count": 12, "small_kernel_count": 3}
    changes = _changes(build_diff(base, new))
    mean = changes["steps.mean_ns"]
    assert (mean["base"], mean["new"], mean["delta"], mean["relative"]) == (400, 500, 100, 0.25)
    assert mean["verdict"] == "regression" and mean["worse_when"] == UP and mean["unit"] == "ns"
    idle = changes["totals.idle_fraction"]
    assert (idle["delta"], idle["relative"]) == (0.25, 1.0)
    kernels = changes["totals.kernel_count"]
    assert (kernels["delta"], kernels["relative"]) == (2, pytest.approx(0.2))
    # From 0: the change is known, the relative change is not.
    small = changes["totals.small_kernel_count"]
    assert (small["delta"], small["relative"], small["verdict"]) == (3, None, "regression")
    median = changes["steps.median_ns"]
    assert (median["delta"], median["relative"], median["verdict"]) == (0, 0.0, "unchanged")


def test_null_metrics_are_kept_with_null_delta():
    base, new = _report(), _report()
    base["totals"]["d2h_bytes"] = 100
    changes = _changes(build_diff(base, new))
    assert changes["totals.d2h_bytes"] == {
        "metric": "totals.d2h_bytes",
        "label": "Device-to-host bytes",
        "per_step": False,
        "base": 100,
        "new": None,
        "delta": None,
        "relative": None,
        "worse_when": UP,
        "unit": "bytes",
        "noise": None,
        "noise_source": None,
        "verdict": "unknown",
    }
    # A metric neither report has is still listed, both sides null.
    assert changes["totals.h2d_bytes"]["base"] is None and changes["totals.h2d_bytes"]["new"] is None
    assert len(changes) == len(RUN_METRICS) + len(DEVICE_METRICS)


def test_devices_matched_by_id_and_direction_per_metric():
    base = _report(devices=[_device("GPU:0", 0.2, []), _device("GPU:1", 0.4, [])])
    new = _report(devices=[_device("GPU:1", 0.1, []), _device("GPU:2", 0.3, [])])
    new["devices"][0]["kernels"]["occupancy_mean_pct"] = 40.0
    changes = _changes(build_diff(base, new))
    gpu1 = changes["devices.GPU:1.idle_fraction"]
    assert (gpu1["base"], gpu1["new"], gpu1["delta"], gpu1["verdict"]) == (0.4, 0.1, pytest.approx(-0.3), "improvement")
    # Lower occupancy is the bad direction.
    occupancy = changes["devices.GPU:1.kernels.occupancy_mean_pct"]
    assert (occupancy["delta"], occupancy["relative"], occupancy["verdict"]) == (-10.0, -0.2, "regression")
    assert changes["devices.GPU:1.busy_ns"]["verdict"] == "changed"  # neither direction is bad
    assert (
        changes["devices.GPU:0.idle_fraction"]["new"] is None
        and changes["devices.GPU:0.idle_fraction"]["delta"] is None
    )
    assert changes["devices.GPU:2.idle_fraction"]["base"] is None
    assert {m.split(".")[1] for m in changes if m.startswith("devices.")} == {"GPU:0", "GPU:1", "GPU:2"}


def _stepped(durations_ms: list[float], input_wait_ms: list[float]) -> dict[str, Any]:
    """A report whose steps last `durations_ms` and wait `input_wait_ms` each for input (the ledger's per-step
    parts), the rest computing."""
    ms = 1_000_000
    step_ns = [round(d * ms) for d in durations_ms]
    wait_ns = [round(w * ms) for w in input_wait_ms]
    compute = [s - w for s, w in zip(step_ns, wait_ns, strict=True)]
    report = _report(
        steps={
            "count": len(step_ns),
            "mean_ns": round(sum(step_ns) / len(step_ns)),
            "median_ns": sorted(step_ns)[len(step_ns) // 2],
            "items": [{"id": i, "start_ns": i * 10**9, "dur_ns": d} for i, d in enumerate(step_ns)],
            "breakdown_total": {"compute": sum(compute), "input_wait": sum(wait_ns)},
        },
        ledger={
            "parts": ["compute", "input_wait"],
            "idle_parts": ["input_wait"],
            "step_ns": step_ns,
            "per_step": {"compute": compute, "input_wait": wait_ns},
        },
    )
    report["schema"] = "traceinsight.report/2"
    report["totals"]["idle_fraction"] = sum(wait_ns) / sum(step_ns)
    return report


def test_noise_threshold_from_the_step_to_step_spread():
    """Steps of 100 +- 2 ms against 90 +- 2 ms (sample variances 16/3 ms^2 a side, 4 steps each): the threshold is
    2.5 sqrt(16/3/4 + 16/3/4) = 2.5 sqrt(8/3) = 4.08 ms, a 10 ms fall a win; a 3 ms one would be inside it."""
    base = _stepped([98, 102, 98, 102], [8, 12, 8, 12])
    new = _stepped([88, 92, 88, 92], [8, 12, 8, 12])
    diff = build_diff(base, new)
    expected = 2.5 * (8 / 3) ** 0.5 * 1_000_000
    assert diff["step_time"]["noise_ns"] == pytest.approx(expected)
    assert (diff["verdict"], diff["step_time"]["noise_source"]) == ("win", "steps")
    assert diff["step_time"]["speedup"] == pytest.approx(100 / 90)
    changes = _changes(diff)
    # Input wait a step: 10 ms on both sides, spread 2 ms: unchanged, threshold the same 4.08 ms.
    wait = changes["steps.breakdown_total.input_wait"]
    assert (wait["base"], wait["new"], wait["verdict"]) == (10_000_000, 10_000_000, "unchanged")
    assert wait["noise"] == pytest.approx(expected)
    # Kernels in the capture: no per-step values: the step time's noise relative to the larger mean step, 4.08 %
    # of the larger count (10 -> 10.4 is inside, 10 -> 11 is not).
    assert changes["totals.kernel_count"]["noise"] == pytest.approx(expected / 100_000_000 * 10)
    assert changes["totals.kernel_count"]["noise_source"] == "step time"
    new["totals"]["kernel_count"] = 11
    assert _changes(build_diff(base, new))["totals.kernel_count"]["verdict"] == "regression"
    # A 3 ms fall, inside 4.08 ms: unchanged, never a win or a red row.
    closer = _stepped([95, 99, 95, 99], [8, 12, 8, 12])
    diff = build_diff(base, closer)
    assert diff["verdict"] == "unchanged" and _changes(diff)["steps.mean_ns"]["verdict"] == "unchanged"
    assert (
        "a win" not in render_diff_terminal(diff)
        and "unchanged (inside the step-to-step noise)" in (render_diff_terminal(diff).splitlines()[1])
    )


def test_noise_threshold_of_a_share_reads_each_steps_share():
    """Idle share a step: 8/98, 12/102, ... against 20/88, 24/92, ...: the threshold is 2.5 standard errors of the
    difference of the per-step shares' means, worked out here; the rise is far beyond it."""
    import statistics

    base = _stepped([98, 102, 98, 102], [8, 12, 8, 12])
    new = _stepped([88, 92, 88, 92], [20, 24, 20, 24])
    shares_b = [8 / 98, 12 / 102, 8 / 98, 12 / 102]
    shares_n = [20 / 88, 24 / 92, 20 / 88, 24 / 92]
    expected = 2.5 * (statistics.variance(shares_b) / 4 + statistics.variance(shares_n) / 4) ** 0.5
    idle = _changes(build_diff(base, new))["totals.idle_fraction"]
    assert idle["noise"] == pytest.approx(expected) and idle["noise_source"] == "steps"
    assert idle["verdict"] == "regression"


def test_no_steps_take_the_fixed_fallback():
    """Reports without per-step values: 10 % (`rules.FALLBACK_RELATIVE_NOISE`) of the larger side."""
    base, new = _report(), _report(steps={"count": 4, "mean_ns": 430, "median_ns": 380})
    diff = build_diff(base, new)
    assert diff["step_time"]["noise_ns"] == pytest.approx(43.0) and diff["step_time"]["noise_source"] == "fixed"
    assert diff["verdict"] == "unchanged"  # +30 ns of 430


def test_warnings_for_other_hardware_framework_and_capture():
    base, new = _report(), _report(framework="jax")
    base["devices"][0]["name"] = "NVIDIA A100-SXM4-80GB"
    new["devices"][0]["name"] = "Tesla V100-SXM2-16GB"
    new["capture"] = {"kind": "inference", "evidence": []}
    base["capture"] = {"kind": "training", "evidence": []}
    kinds = [w["kind"] for w in build_diff(base, new)["warnings"]]
    assert kinds == ["hardware", "framework", "capture"]
    (message,) = [w["message"] for w in build_diff(base, new)["warnings"] if w["kind"] == "hardware"]
    assert "NVIDIA A100-SXM4-80GB" in message and "Tesla V100-SXM2-16GB" in message
    assert build_diff(base, base)["warnings"] == []
    md = render_diff_markdown(build_diff(base, new))
    assert md.index("**Step time") < md.index("**Warning:** the hardware differs") < md.index("idle share of the step")


def test_rows_that_say_nothing_are_left_out():
    """A figure neither run has, or zero on both sides, is no row in any form; the JSON keeps it."""
    diff = build_diff(_report(), _report())
    zero = _changes(diff)["totals.h2d_ns"]
    assert (zero["base"], zero["new"]) == (0, 0)
    html = render_diff_html(diff)
    assert 'title="totals.h2d_ns"' not in html and 'title="totals.h2d_bytes"' not in html
    assert 'title="totals.kernel_count"' in html  # 10 on both sides: unchanged, folded away but there


def test_ranked_puts_regressions_first_biggest_first():
    base, new = _report(), _report()
    new["totals"] = {**base["totals"], "idle_fraction": 0.4, "kernel_count": 30}  # +60 %, +200 %
    new["input_pipeline"] = {"fraction": 0.0}  # an improvement
    base["steps"]["mean_ns"] = 420  # 400 -> 420: inside the fallback noise (10 % of 420), unchanged
    changes = ranked(build_diff(base, new)["changes"])
    order = [c["metric"] for c in changes]
    assert order[:3] == ["totals.kernel_count", "totals.idle_fraction", "input_pipeline.fraction"]
    assert {c["metric"]: c["verdict"] for c in changes}["steps.mean_ns"] == "unchanged"


def test_bottlenecks_added_removed_and_changed():
    base = _report(bottlenecks=[_bottleneck("input_bound", "high", 800), _bottleneck("h2d_copy", "low", 50)])
    new = _report(
        bottlenecks=[
            _bottleneck("launch_bound", "medium", 300),
            _bottleneck("input_bound", "low", 20),
            _bottleneck("fp32_compute", "low", 10),
        ]
    )
    base["bottlenecks"].append(_bottleneck("fp32_compute", "low", 4))
    b = build_diff(base, new)["bottlenecks"]
    assert b["added"] == ["launch_bound"] and b["removed"] == ["h2d_copy"]
    by_id = {x["id"]: x for x in b["items"]}
    assert by_id["input_bound"]["status"] == "better" and by_id["input_bound"]["measure"] == "per_step_ns"
    # No projections: the time over the 4 steps, 800 / 4 -> 20 / 4.
    assert (by_id["input_bound"]["delta_ns"], by_id["input_bound"]["relative"]) == (5 - 200, -0.975)
    assert by_id["input_bound"]["base"]["severity"] == "high" and by_id["input_bound"]["new"]["severity"] == "low"
    assert by_id["fp32_compute"]["status"] == "worse" and by_id["fp32_compute"]["delta_ns"] == 10 // 4 - 4 // 4
    assert by_id["launch_bound"]["base"] is None and by_id["launch_bound"]["relative"] is None
    assert by_id["h2d_copy"]["new"] is None and by_id["h2d_copy"]["delta_ns"] == -round(50 / 4)
    assert [x["status"] for x in b["items"]] == ["added", "worse", "removed", "better"]


def test_severity_rise_is_worse_even_when_cheaper():
    base = _report(bottlenecks=[_bottleneck("launch_bound", "low", 100)])
    new = _report(bottlenecks=[_bottleneck("launch_bound", "medium", 90)])
    (item,) = build_diff(base, new)["bottlenecks"]["items"]
    assert item["status"] == "worse" and item["delta_ns"] == round(90 / 4) - 100 // 4


def test_bottleneck_cost_compares_per_step_across_captures_of_different_lengths():
    # BASE profiled 8 steps of 10 ms input stall each (80 ms), NEW only 4 of 12 ms (48 ms): the capture's total
    # fell, the cost a step rose by 2 ms (+20 %), and that is what changed.
    def saving(ns: int) -> dict[str, Any]:
        return {"step_ns_before": 10**8, "step_ns_after": 10**8 - ns, "saving_ns": ns, "speedup": 10**8 / (10**8 - ns)}

    base = _report(bottlenecks=[{**_bottleneck("input_bound", "high", 80_000_000), "projection": saving(10**7)}])
    new = _report(bottlenecks=[{**_bottleneck("input_bound", "high", 48_000_000), "projection": saving(12 * 10**6)}])
    (item,) = build_diff(base, new)["bottlenecks"]["items"]
    assert (item["status"], item["measure"], item["delta_ns"]) == ("worse", "per_step_ns", 2_000_000)
    assert item["relative"] == pytest.approx(0.2)
    assert (item["base"]["per_step_ns"], item["new"]["time_ns"]) == (10**7, 48_000_000)
    line = render_diff_terminal(build_diff(base, new))
    assert "input_bound: worse, high -> high, 10 ms a step -> 12 ms a step (+20.0 %)" in line
    # A report from before projections against one with: both sides' time over their steps (80 / 4 -> 48 / 4 ms),
    # never an estimate against a measurement.
    del base["bottlenecks"][0]["projection"]
    (item,) = build_diff(base, new)["bottlenecks"]["items"]
    assert (item["status"], item["measure"], item["delta_ns"]) == ("better", "per_step_ns", -8_000_000)


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        (
            "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, float const*, int)",
            "cudnn::detail::dgrad_engine",
        ),
        (  # nested templates, (anonymous namespace) inside them, lambdas with their own argument lists
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::clamp(at::Tensor"
            "IteratorBase&)::{lambda()#1}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
            "std::array<char*, 2ul>)",
            "at::native::vectorized_elementwise_kernel",
        ),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, float const*, int)",
            "at::native::cunn_SoftMaxForward",
        ),
        ("triton_poi_fused_add_3", "triton_poi_fused_add"),
        ("triton_red_fused_native_layer_norm_12_0", "triton_red_fused_native_layer_norm"),
        ("my_kernel_0x1a2b", "my_kernel"),
        ("fused_kernel_7f3a9c1e", "fused_kernel"),
        ("fusion.12", "fusion"),
        ("loop_add_fusion_2", "loop_add_fusion"),
        ("volta_sgemm_128x64_nt", "volta_sgemm_128x64_nt"),  # tile sizes tell kernels apart: kept
        (
            "sm90_xmma_gemm_f32f32_tn_n_tilesize128x128x32_kernel__5x_cublas",
            "sm90_xmma_gemm_f32f32_tn_n_tilesize128x128x32_kernel__5x_cublas",
        ),
        ("void truncated_kernel<float, 128, at::native::Op", "truncated_kernel"),  # cut by the profiler
        ("<unnamed>", "<unnamed>"),  # nothing would be left: kept as is
        ("gemm", "gemm"),
    ],
)
def test_normalise_kernel_name(raw, normalised):
    assert normalise_kernel_name(raw) == normalised


def test_kernels_matched_by_normalised_name_complete_lists():
    base = _report(
        devices=[
            _device(
                "GPU:0",
                0.2,
                [
                    _kernel("void gemm<float, 128>(float const*, float*)", 10, 10_000),
                    _kernel("void gemm<float, 64>(float const*, float*)", 5, 2_000),
                    _kernel("triton_poi_fused_add_3", 4, 400),
                    _kernel("old_kernel", 2, 900),
                ],
            )
        ]
    )
    new = _report(
        devices=[
            _device(
                "GPU:0",
                0.2,
                [
                    _kernel("void gemm<half, 128>(half const*, half*)", 10, 6_000),
                    _kernel("triton_poi_fused_add_7", 4, 400),
                    _kernel("new_kernel", 3, 3_000),
                ],
            )
        ]
    )
    kernels = {k["name"]: k for k in build_diff(base, new)["kernels"]}
    gemm = kernels["gemm"]
    assert gemm["base"] == {"count": 15, "total_ns": 12_000, "mean_ns": 800}
    assert gemm["new"] == {"count": 10, "total_ns": 6_000, "mean_ns": 600}
    assert (gemm["status"], gemm["delta_ns"], gemm["relative"]) == ("faster", -6_000, -0.5)
    assert len(gemm["names"]) == 3
    assert kernels["triton_poi_fused_add"]["status"] == "same" and kernels["triton_poi_fused_add"]["delta_ns"] == 0
    assert kernels["new_kernel"]["status"] == "new" and kernels["new_kernel"]["base"]["count"] == 0
    assert kernels["old_kernel"]["status"] == "gone" and kernels["old_kernel"]["delta_ns"] == -900
    order = [k["name"] for k in build_diff(base, new)["kernels"]]
    assert order == ["gemm", "new_kernel", "old_kernel", "triton_poi_fused_add"]


def test_kernels_outside_an_incomplete_top_list_are_unknown():
    base = _report(devices=[_device("GPU:0", 0.2, [_kernel("a", 1, 100), _kernel("b", 1, 50)], count=5)])
    new = _report(devices=[_device("GPU:0", 0.2, [_kernel("a", 1, 120), _kernel("c", 1, 70)], count=5)])
    kernels = {k["name"]: k for k in build_diff(base, new)["kernels"]}
    assert kernels["b"]["status"] == "left_top" and kernels["b"]["new"] is None and kernels["b"]["delta_ns"] is None
    assert kernels["c"]["status"] == "entered_top" and kernels["c"]["base"] is None
    assert kernels["a"]["status"] == "slower" and kernels["a"]["delta_ns"] == 20


def test_diff_summaries_and_schema():
    diff = build_diff(_report("base"), _report("new"), ({"path": "b.json", "source": "report"}, None))
    assert diff["schema"] == "traceinsight.diff/2"
    assert diff["base"]["run"] == "base" and diff["base"]["path"] == "b.json" and diff["base"]["source"] == "report"
    # A saved /1 report is read into the current schema (its step figures moved into GPU-Util and idle).
    assert diff["new"]["schema"] == "traceinsight.report/2" and diff["new"]["framework"] == "pytorch"
    assert diff["new"]["window_ns"] == 2_000_000 and diff["new"]["small_kernel_threshold_ns"] == 10_000
    assert diff["new"]["inputs"] == [{"path": "new.pt.trace.json.gz", "format": "kineto"}]


# ---------------------------------------------------------------- thresholds
@pytest.mark.parametrize(
    ("expr", "crossed"),
    [
        ("steps.mean_ns>+99", True),  # +100 ns
        ("steps.mean_ns>+100", False),
        ("steps.mean_ns>=+100", True),
        ("steps.mean_ns>+24%", True),  # +25 %
        ("steps.mean_ns>+25%", False),
        ("steps.mean_ns<-5%", False),
        ("totals.idle_fraction<-0.05", True),  # 0.25 -> 0.1
        ("totals.idle_fraction<-0.2", False),
        ("totals.idle_fraction<-50%", True),  # -60 %
        ("totals.idle_fraction>0.05", True),  # plain: on the NEW value (0.1)
        ("totals.idle_fraction>0.2", False),
        ("totals.small_kernel_count>+0%", False),  # 0 -> 0: no relative change
        ("totals.h2d_ns>+1000%", True),  # 0 -> 5: a rise from nothing is infinite
        ("totals.h2d_ns<-10%", False),
        ("totals.d2h_bytes>+0", MISSING),  # null on both sides
        ("totals.d2h_bytes>0", MISSING),  # null in NEW
        ("devices.GPU:0.idle_fraction<-0.1", True),
        ("devices.GPU:9.idle_fraction>+0", MISSING),  # only in NEW: no change to compare
        ("devices.GPU:7.idle_fraction>0", MISSING),  # in neither
        ("bottleneck=launch_bound", True),  # new in NEW (even if low)
        ("bottleneck=input_bound", False),  # present in both, low in NEW
        ("bottleneck=fp32_compute", True),  # present in both, medium in NEW
        ("bottleneck=h2d_copy", False),  # gone
    ],
)
def test_change_thresholds(expr, crossed):
    base = _report(
        steps={"count": 4, "mean_ns": 400, "median_ns": 380},
        bottlenecks=[
            _bottleneck("input_bound", "high", 10),
            _bottleneck("fp32_compute", "medium", 10),
            _bottleneck("h2d_copy", "high", 10),
        ],
    )
    new = _report(
        steps={"count": 4, "mean_ns": 500, "median_ns": 380},
        bottlenecks=[
            _bottleneck("input_bound", "low", 10),
            _bottleneck("fp32_compute", "medium", 10),
            _bottleneck("launch_bound", "low", 10),
        ],
        devices=[_device("GPU:0", 0.1, []), _device("GPU:9", 0.1, [])],
    )
    new["totals"] = {**base["totals"], "idle_fraction": 0.1, "h2d_ns": 5}
    gate = evaluate([parse_threshold(expr, allow_change=True)], typed(new), [typed(base)])
    if crossed is MISSING:  # fails the gate by default, passes when skipped, crossed either way by nothing
        assert gate.failed and not gate.crossed and len(gate.missing) == 1 and gate.missing[0].startswith(expr)
        skipped = evaluate([parse_threshold(expr, allow_change=True)], typed(new), [typed(base)], on_missing=SKIP)
        assert not skipped.failed and skipped.lines() == [f"threshold skipped, no value: {gate.missing[0]}"]
    else:
        assert gate.failed == crossed == bool(gate.crossed) and not gate.missing


def test_identical_reports_cross_no_positive_change():
    report = _report(bottlenecks=[_bottleneck("input_bound", "low", 10)])
    other = copy.deepcopy(report)
    for expr in ("steps.mean_ns>+0", "totals.idle_fraction>+0%", "totals.kernel_count<-0", "bottleneck=input_bound"):
        assert crossing(parse_threshold(expr, allow_change=True), report, other) is None


@pytest.mark.parametrize("expr", ["steps.mean_ns>5%", "steps.mean_ns>+", "steps.mean_ns>>+5", "steps.mean_ns>+5%%"])
def test_bad_change_expressions(expr):
    with pytest.raises(ExpressionError):
        parse_threshold(expr, allow_change=True)


@pytest.mark.parametrize("expr", ["totals.idle_fraction>+0.05", "steps.mean_ns>+5%", "totals.idle_fraction<-0.1"])
def test_change_forms_are_refused_by_report(expr):
    with pytest.raises(ExpressionError, match="traceinsight diff"):
        parse_threshold(expr)


def test_path_missing_from_both_reports_is_an_error():
    with pytest.raises(ExpressionError, match="nope"):
        crossing(parse_threshold("totals.nope>+1", allow_change=True), _report(), _report())


# ---------------------------------------------------------------- renderers
def test_renderers_escape_names_and_put_regressions_first():
    evil = "<script>alert(1)</script>|x"
    base = _report(devices=[_device("GPU:0", 0.2, [_kernel(evil, 1, 10)])])
    new = _report("new<b>", devices=[_device("GPU:0", 0.4, [_kernel(evil, 1, 30)])])
    new["totals"] = {**base["totals"], "idle_fraction": 0.4}
    base["input_pipeline"] = {"fraction": 0.3, "wait_ns": 40}
    new["input_pipeline"] = {"fraction": 0.0, "wait_ns": 0}
    diff = build_diff(base, new)
    html = render_diff_html(diff)
    assert "<script>" not in html and "&lt;script&gt;" in html and "new&lt;b&gt;" in html
    assert "default-src 'none'" in html and not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    rows = re.findall(r'<tr class="(\w+)"><td><abbr class="path" title="([^"]+)">', html)
    order = ["regression", "improvement", "changed", "unchanged", "unknown"]
    run_verdicts = [verdict for verdict, metric in rows if not metric.startswith("devices.")]
    assert run_verdicts == sorted(run_verdicts, key=order.index) and "improvement" in run_verdicts
    device_verdicts = [verdict for verdict, metric in rows if metric.startswith("devices.")]
    assert device_verdicts == sorted(device_verdicts, key=order.index) and device_verdicts[0] == "regression"
    assert rows[0] == ("regression", "totals.idle_fraction")
    assert "+15.0 pp" in html and "+20.0 pp" in html  # idle fraction 25 % -> 40 %, on GPU:0 20 % -> 40 %
    md = render_diff_markdown(diff)
    assert "| `alert\\|x` |" in md and "<script>" not in md  # the normalised name, pipes escaped in table cells
    assert md.index("regression") < md.index("improvement")
    text = render_diff_terminal(diff)
    assert "Idle share of the step" in text and "totals.idle_fraction" not in text and "\033[" not in text
    assert '<abbr class="path" title="totals.idle_fraction">Idle share of the step</abbr>' in html
    assert "(s)" not in text and re.search(r"\b1 input, ", text)  # counts agree in number


@pytest.mark.parametrize(
    ("base", "noted"), [("torch_compile_first_call", True), ("torch_compile_first_call_steps", False)]
)
def test_a_side_without_a_steady_state_is_noted(base, noted):
    """A warm-up with no steps after it against a steady run: the step figures don't compare. A warm-up whose
    steady steps were analysed compares as they are."""
    warmup = SAMPLE_TRACES / "warmup"
    reports = [analyze_path(warmup / name).report for name in (base, "torch_compile_scheduled")]
    note = "; ".join(w["message"] for w in build_diff(*reports)["warnings"])
    assert ("holds no steady state" in note) == noted


def test_kernel_names_normalise_in_linear_time_as_the_suffix_pattern_did():
    """Numbered suffixes are found from the end, token by token: the same cut as the pattern anchored at ``$``
    (tried on every real kernel name here), without its quadratic time on a saved report's hostile name."""
    import csv
    import re
    import time

    from tests.conftest import REPO
    from traceinsight.diff import _without_numbered_suffixes

    anchored = re.compile(r"(?:[_.](?:0x[0-9a-fA-F]+|\d+|(?=[0-9a-f]*\d)[0-9a-f]{8,}))+$")
    with open(REPO / "tests" / "analysis" / "kernel_names.csv", newline="") as f:
        names = [row["name"] for row in csv.DictReader(f)]
    names += ["triton_poi_fused_add_3", "fusion.12", "k_0x1a2b", "a_deadbeef12", "a__3", "x.1_0xff.7", "name_3_"]
    assert len(names) > 100
    assert all(_without_numbered_suffixes(n) == anchored.sub("", n) for n in names)
    start = time.perf_counter()
    for hostile in ("a" + "_1" * 500_000 + "x", "<(" * 500_000, "f" * 1_000_000 + "_1"):
        normalise_kernel_name(hostile)
    assert time.perf_counter() - start < 0.5
