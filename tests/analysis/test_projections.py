"""Projections: the step model by hand, and predicted against measured on real before/after runs."""

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import KINETO_TRACES, SAMPLE_TRACES, SHARED_TRACES, shared_trace
from traceinsight.analysis import analyze
from traceinsight.analysis.step_model import StepModel, fix, project
from traceinsight.assemble import report_of
from traceinsight.discover import discover
from traceinsight.findings import find_bottlenecks
from traceinsight.load import load_run
from traceinsight.result import to_document

# Within this share of the fixed run's measured mean step, a projection counts as right (issue 11).
TOLERANCE = 0.25


def _analyze(path: Path):
    return analyze(load_run(discover(path), path))


def _model(step, busy, floor, kernel=None) -> StepModel:
    return StepModel(
        step_ns=np.array(step, np.int64),
        device_busy_ns=np.array(busy, np.float64),
        kernel_busy_ns=np.array(kernel if kernel is not None else busy, np.float64),
        host_floor_ns=np.array(floor, np.float64),
        stalls={},
        kernel_ns={},
        device_count=1,
        small_host_op_ns=np.zeros(len(step)),
        batch_work_ns=np.zeros(len(step)),
        eager_dispatch_ns=np.zeros(len(step)),
    )


def test_fixes_applied_together_do_not_add_up():
    # One 100 ns step, device busy 60, host floor 50: each 30 ns stall alone wins 30 (step 70), but both together
    # can only remove the 40 ns of idle time the step has: max(100 - 40, 60, 50) = 60, a 40 ns saving, not 60.
    m = _model([100], [60], [50])
    one = fix(m, idle_ns=[30])
    assert project(m, [one]).step_ns_after == 70
    assert project(m, [one, one]).step_ns_after == 60


def test_host_floor_bounds_a_device_fix_but_not_a_host_fix():
    # Host busy 90 of a 100 ns step: kernels twice as fast (device 80 -> 40) leave the step at the host's 90;
    # removing 50 ns of host work and the 10 ns it kept the device idle gives max(90, 80, 40) = 90 -> 90 too,
    # and with the kernels faster as well: max(100 - 10 - 40, 40, 40) = 50.
    m = _model([100], [80], [90])
    faster = fix(m, device_ns=[40], kernel_ns=[40])
    host = fix(m, idle_ns=[10], host_ns=[50])
    assert project(m, [faster]).step_ns_after == 90
    assert project(m, [host]).step_ns_after == 90
    both = project(m, [faster, host])
    assert both.step_ns_after == 50
    assert both.gpu_util_before == pytest.approx(0.8)
    assert both.gpu_util_after == pytest.approx(40 / 50)


def _profiler_step_mean_ns(path: Path) -> float:
    """Mean `ProfilerStep#N` duration of a Kineto trace, read from the raw JSON (host copies only)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    durations = [
        e["dur"]
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))
        and e.get("cat") != "gpu_user_annotation"
    ]
    return float(np.mean(durations)) * 1000


def _check_pair(before: Path, measured_after_ns: float, fix_id: str, basis: str = "measured"):
    analysis = _analyze(before)
    top = find_bottlenecks(analysis)[0]
    assert top.id == fix_id
    assert top.projection.basis == basis
    return top.projection, top.projection.step_ns_after / measured_after_ns - 1


def test_resnet50_dataloader_workers_projection():
    """num_workers 0 -> 4 on a V100: the fixed run's mean ProfilerStep is 139.7 ms."""
    measured = _profiler_step_mean_ns(shared_trace(KINETO_TRACES[1]))
    assert measured == pytest.approx(139.7e6, rel=0.002)
    projection, error = _check_pair(shared_trace(KINETO_TRACES[0]).parent, measured, "input_bound")
    assert abs(error) <= TOLERANCE, (projection, error)


def _run_info_mean_ns(folder: Path) -> float:
    return float(np.mean(json.loads((folder / "run_info.json").read_text())["profiled_step_wall_ms"])) * 1e6


def _hidden_input_step(before: Path) -> tuple[int, int]:
    """The step before, and once the input is fully hidden (the fix caches the data)."""
    (b,) = [b for b in find_bottlenecks(_analyze(before)) if b.id == "input_bound"]
    return b.projection.step_ns_before, b.evidence["step_ns_after_hidden"]


def test_tf_data_sequential_to_tuned_projection_speedup():
    """a (sequential py_function map, no prefetch) -> b (parallel map, cache, prefetch): measured 72x."""
    measured = _run_info_mean_ns(shared_trace("tf_cpu/b_input_tuned"))
    _check_pair(shared_trace("tf_cpu/a_input_bound"), measured, "input_bound")
    before, hidden = _hidden_input_step(shared_trace("tf_cpu/a_input_bound"))
    assert before / hidden >= 10


_CACHED_MISS = (
    "the fixed run also caches the data, and its step's own work runs 1.6-2x faster than the same work in the "
    "input-bound run, for causes the trace does not hold (decode threads beside the step on 2 cores, tf.data's "
    "spinning threads, caches gone cold during a 40-160 ms wait); the step model keeps that slower work"
)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(
            "tf_cpu/a_input_bound", "tf_cpu/b_input_tuned", marks=pytest.mark.xfail(strict=True, reason=_CACHED_MISS)
        ),
        pytest.param(  # held back: the same change on our own job (no decode runs beside its steps)
            "pairs/tf_data_parallel/before",
            "pairs/tf_tuned/after",
            marks=pytest.mark.xfail(strict=True, reason=_CACHED_MISS),
        ),
    ],
)
def test_tf_data_sequential_to_tuned_projection_within_tolerance(before, after):
    def folder(name: str) -> Path:
        return SAMPLE_TRACES / name if name.startswith("pairs/") else shared_trace(name)

    measured = _run_info_mean_ns(folder(after))
    _, hidden = _hidden_input_step(folder(before))
    assert abs(hidden / measured - 1) <= TOLERANCE


@pytest.mark.parametrize(
    "pair",
    [
        "tf_eager_vs_function",
        pytest.param(
            "tf_eager_vs_function_wide",
            marks=pytest.mark.xfail(
                strict=True,
                reason="+26 %: under tf.function the ops also run side by side on the two cores (6.0 ms of op time in "
                "a 4.5 ms span), which an eager trace, one op at a time, cannot show",
            ),
        ),
    ],
)
def test_eager_to_tf_function_projection(pair):
    """A train step run eagerly -> the same step under tf.function (our captures, `tools/capture_pairs.py`)."""
    before, after = SAMPLE_TRACES / "pairs" / pair / "before", SAMPLE_TRACES / "pairs" / pair / "after"
    projection, error = _check_pair(before, _run_info_mean_ns(after), "host_bound", basis="estimated")
    assert abs(error) <= TOLERANCE, (projection, error)


def _all_shared_runs() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    files = [
        p for p in SHARED_TRACES.rglob("*") if p.suffix in (".gz", ".pb", ".json") and "xprof_reference" not in p.parts
    ]
    return sorted({p.parent for p in files if not p.name.startswith("gpu_metrics_expected")})


@pytest.fixture(scope="module")
def shared_reports() -> dict[str, dict]:
    runs = _all_shared_runs()
    if not runs:
        pytest.skip("../shared/traces not available")
    reports = {}
    for run in runs:
        analysis = _analyze(run)
        reports[str(run.relative_to(SHARED_TRACES))] = to_document(report_of(analysis))
    return reports


# What the trace shows but no fix in it removes: reported with its cost, never with a projected step (issue 26).
NOT_PROJECTED = {"idle_other", "external_wait", "warmup_in_window", "collective_wait"}
# Stall fixes that remove device time (exposed collectives): their step may fall below the kernels' busy time.
REMOVES_KERNEL_TIME = {"communication"}
# Stall fixes that remove idle time only: the device's whole busy time (kernels and copies) stays.
IDLE_ONLY = {"input_bound", "host_bound", "launch_bound"}


def test_every_bottleneck_has_a_projection(shared_reports):
    for name, report in shared_reports.items():
        for b in report["bottlenecks"]:
            p = b["projection"]
            if b["id"] in NOT_PROJECTED:
                assert (p["basis"], p["saving_ns"], p["speedup"]) == ("none", 0, 1.0), (name, b["id"])
                assert p["step_ns_after"] == p["step_ns_before"], (name, b["id"])
                continue
            assert p["basis"] in ("measured", "estimated"), name
            assert p["step_ns_after"] <= p["step_ns_before"] == report["steps"]["mean_ns"] or name
            assert p["saving_ns"] == p["step_ns_before"] - p["step_ns_after"] > 0, (name, b["id"])
            assert (p["assumption"] is None) == (p["basis"] == "measured"), (name, b["id"])
            if b["kind"] == "efficiency":
                assert p["basis"] == "estimated", (name, b["id"])


# The step parts in which a kernel runs / only copies or memsets run: the ledger's (a run with devices) or the host
# breakdown's names.
_KERNEL_PARTS = ("compute", "collective_wait", "collective_transfer", "device_compute")
_COPY_PARTS = ("copy_h2d", "copy_d2h", "copy_d2d", "copy_other", "device_copy")


def _busy_per_step(report: dict, *parts: tuple[str, ...]) -> float:
    """The mean over the steps of the step parts in `parts` (`_KERNEL_PARTS`: some kernel runs; `_COPY_PARTS`:
    only copies or memsets run)."""
    names = {name for group in parts for name in group}
    return float(np.mean([sum(v for k, v in s["breakdown"].items() if k in names) for s in report["steps"]["items"]]))


def _projections(report: dict) -> list[tuple[str, dict]]:
    """Every projected step of a report: each bottleneck's (the ones that project) and the headline's."""
    found = [(b["id"], b["projection"]) for b in report["bottlenecks"] if b["id"] not in NOT_PROJECTED]
    return found + ([("headline", report["projection"])] if report["projection"] else [])


def test_no_projected_step_is_shorter_than_the_kernels_it_keeps(shared_reports):
    """A stall fix removes idle time (and exposed copies): the kernels stay, so the step after is at least the
    kernel time of the step, measured from the step breakdown, and a fix of idle time alone keeps the device's
    whole busy time. Efficiency estimates make kernels faster."""
    checked = 0
    for name, report in shared_reports.items():
        stalls = {b["id"] for b in report["bottlenecks"] if b["kind"] == "stall"} - REMOVES_KERNEL_TIME
        for which, p in _projections(report):
            applied = set(p["applied"]) if which == "headline" else {which}
            if not report["steps"]["items"] or not applied <= stalls:
                continue
            assert p["step_ns_after"] >= _busy_per_step(report, _KERNEL_PARTS) - 1, (name, which)
            if applied <= IDLE_ONLY:
                assert p["step_ns_after"] >= _busy_per_step(report, _KERNEL_PARTS, _COPY_PARTS) - 1, (name, which)
            checked += 1
    assert checked >= 10


def test_every_speedup_equals_the_steps_it_compares(shared_reports):
    for name, report in shared_reports.items():
        for which, p in _projections(report):
            assert p["step_ns_after"] > 0, (name, which)
            assert p["speedup"] == pytest.approx(p["step_ns_before"] / p["step_ns_after"], abs=5e-4), (name, which)


def test_inferred_steps_repeat_at_one_scale(shared_reports):
    """No inferred step under 1 % of the longest one (issue 26: never microsecond "steps" beside a 493 ms one)."""
    inferred = 0
    for name, report in shared_reports.items():
        steps = report["steps"]
        if steps["source"] != "inferred":
            continue
        inferred += 1
        lengths = [s["dur_ns"] for s in steps["items"]]
        assert min(lengths) >= 0.01 * max(lengths), name
    assert inferred >= 5


def test_bottlenecks_rank_by_severity_then_measured_before_estimates(shared_reports):
    """One documented rule orders the list (issue 34: "#2 low" above "#3 medium" no more): severity first, then,
    within a severity, the leading kind (stalls unless the device is busy) before the other."""
    order = {"high": 0, "medium": 1, "low": 2}
    for name, report in shared_reports.items():
        ranked = [b for b in report["bottlenecks"] if b["id"] != "warmup_in_window"]
        severities = [order[b["severity"]] for b in ranked]
        assert severities == sorted(severities), name
        for level in set(severities):
            kinds = [b["kind"] for b in ranked if order[b["severity"]] == level]
            assert kinds == sorted(kinds, key=lambda k: k != kinds[0]), name


def test_high_input_verdict_means_high_input_bound(shared_reports):
    seen_high = 0
    for name, report in shared_reports.items():
        ip = report["input_pipeline"]
        severity = {b["id"]: b["severity"] for b in report["bottlenecks"]}.get("input_bound")
        if ip["verdict"] == "high":
            seen_high += 1
            assert severity == "high", name
        if ip["verdict"] == "moderate":
            assert severity == "medium", name
    assert seen_high >= 2  # ResNet-50 num_workers=0 and tf_cpu/a


@pytest.mark.parametrize(
    "run", ["tracelens/b200", "xprof/test_xplanes", "tracelens/mi300/jax_conv_minimal_08", "hta/nccl_parser_config"]
)
def test_input_verdict_unknown_without_input_events(shared_reports, run):
    ip = shared_reports[run]["input_pipeline"]
    assert (ip["verdict"], ip["fraction"], ip["wait_ns"]) == ("unknown", None, None)
    assert "input_bound" not in {b["id"] for b in shared_reports[run]["bottlenecks"]}


def test_headline_projection_never_sums_savings(shared_reports):
    for name, report in shared_reports.items():
        p = report["projection"]
        if p is None:
            assert all(b["id"] in NOT_PROJECTED for b in report["bottlenecks"]), name
            continue
        applied = [b for b in report["bottlenecks"] if b["id"] in p["applied"]]
        assert p["saving_ns"] <= sum(b["projection"]["saving_ns"] for b in applied) + len(applied), name  # ns rounding
        assert p["saving_ns"] >= max(b["projection"]["saving_ns"] for b in applied) - 1, name
        estimated = any(b["projection"]["basis"] == "estimated" for b in applied)
        assert p["basis"] == ("estimated" if estimated else "measured"), name


def test_fp32_compute_ignores_type_conversions(shared_reports):
    """GPU-multi-worker's only kernels that the old rule called eligible are Eigen casts (TensorConversionOp)."""
    report = shared_reports["xprof/GPU-multi-worker"]
    assert "fp32_compute" not in {b["id"] for b in report["bottlenecks"]}
    assert sum(d["kernels"]["tensor_core_eligible_ns"] for d in report["devices"]) == 0


OWN_PAIRS = ["tf_data_parallel", "torch_dataloader_workers", "tf_prefetch_slow_map", "tf_interleave"]
OWN_PAIRS += ["torch_dataloader_2workers_bound"]


@pytest.mark.parametrize("pair", OWN_PAIRS)
def test_own_before_after_pairs(pair):
    """Our real CPU captures (tools/capture_pairs.py): the fix's bottleneck is first and its projected step is
    within 25 % of the fixed run's measured mean step (wall clock, from its run_info.json)."""
    folder = SAMPLE_TRACES / "pairs" / pair
    if not folder.is_dir():
        pytest.skip("sample_traces/pairs not present")
    measured = _run_info_mean_ns(folder / "after")
    projection, error = _check_pair(folder / "before", measured, "input_bound")
    assert abs(error) <= TOLERANCE, (projection, error)
