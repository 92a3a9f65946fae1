"""Estimates state their evidence (issue 34): how much of the time an estimate judges it could read (FLOPs counted,
precision known, launch shapes given), and nothing projected from too little of it."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.analysis.builders import host, kernel, launch, profile
from tests.analysis.test_compute import QWEN
from tests.conftest import shared_trace
from tests.test_findings import _low_compute_efficiency, _marked
from traceinsight.analysis import analyze
from traceinsight.analysis.step_model import KernelClass
from traceinsight.analysis.tensor_cores import classify_kernel_names
from traceinsight.assemble import assemble
from traceinsight.events import DeviceInfo, Profile
from traceinsight.findings import evaluate, find_bottlenecks
from traceinsight.render.html import render_html
from traceinsight.render.json import dumps
from traceinsight.rules import EVIDENCE_MIN_COVERAGE, MFU_EXACT_COVERAGE
from traceinsight.workflow import analyze_path

H100_BF16_TFLOPS = 989.5  # H100 SXM data sheet, dense


def _steps_of(name: str, cc: str = "7.0", **kw) -> Profile:
    """Two 1 ms steps, each one 950 us kernel called `name` (launched at the step's start) on a GPU of `cc`."""
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), launch(t, 5, i + 1), kernel(t + 10, 950, corr=i + 1, name=name, **kw)]
    p = profile(rows)
    p.devices = {"GPU:0": DeviceInfo("GPU:0", compute_capability=cc)}
    return p


# --------------------------------------------------------------------------- precision: unknown is unknown


def test_a_gemm_of_untold_precision_is_not_fp32_work():
    """A GEMM kernel whose name gives no element type nor Tensor Core mark may be bf16 on Tensor Cores: it is
    "unknown", never FP32, and fp32_compute (which fired on it before) says nothing."""
    name = "my_custom_gemm_kernel_128x64"
    (row,) = classify_kernel_names([name]).to_dict("records")
    assert row["eligible"] and row["precision"] is None and not row["tensor_core_known"]
    analysis = analyze(_steps_of(name))
    (stats,) = analysis.kernels
    (top,) = stats.top
    assert top.tensor_core is None
    assert stats.tensor_core_unknown_ns == stats.tensor_core_eligible_ns == 2 * 950_000
    assert "fp32_compute" not in {b.id for b in find_bottlenecks(analysis)}
    assert "<td>unknown</td>" in render_html(analysis_report(analysis), analysis)


def analysis_report(analysis):
    return assemble(analysis, evaluate(analysis))


def test_an_sgemm_is_still_fp32_work():
    """The control: `volta_sgemm` is FP32 on CUDA cores by its name, so fp32_compute fires with full coverage."""
    analysis = analyze(_steps_of("volta_sgemm_128x64_nn"))
    assert analysis.kernels[0].top[0].tensor_core is False
    (b,) = [b for b in find_bottlenecks(analysis) if b.id == "fp32_compute"]
    assert b.evidence["precision_coverage"] == 1.0


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", "fp8"),
        ("deep_gemm_fp8_gemm_kernel_128x128", "fp8"),
        ("cublasLt_gemm_e5m2_kernel", "fp8"),
        ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1", "fp4"),
        ("gemm_mxfp6_e3m2_kernel", "fp6"),
        ("nvfp4_gemm_kernel", "fp4"),
        ("cutlass_int8_gemm_i8_tn", "int8"),
    ],
)
def test_narrow_precisions_are_known_and_on_tensor_cores(name, precision):
    """FP8, FP6, FP4 and INT8 matrix work exists only on Tensor / matrix cores: known precision, Tensor Cores yes,
    whatever library named the kernel."""
    (row,) = classify_kernel_names([name]).to_dict("records")
    assert (row["eligible"], row["tensor_core"], row["tensor_core_known"], row["precision"]) == (
        True,
        True,
        True,
        precision,
    )


def test_an_fp8_step_on_a_hopper_is_not_called_fp32():
    """The held-back FP8 training step: 95 % busy with FP8 GEMMs of an unknown library, on a Hopper. No fp32_compute,
    its kernels on Tensor Cores, and every compute kernel's precision known (no FLOPs: no MFU, coverage 0)."""
    analysis = analyze(_steps_of("deep_gemm_fp8_gemm_kernel_128x128", cc="9.0"))
    assert analysis.kernels[0].top[0].tensor_core is True
    assert "fp32_compute" not in {b.id for b in find_bottlenecks(analysis)}
    c = analysis.compute.summary
    assert c.precision_coverage == 1.0 and c.flop_coverage == 0.0 and c.mfu is None


# --------------------------------------------------------------------------- FLOP coverage and MFU


def _gemm_steps(gemm_us: float, extra: list[dict] | None = None) -> Profile:
    """`_low_compute_efficiency`'s two 1 ms steps on an H100, their bf16 1024^3 GEMM (aten::mm, counted) lasting
    `gemm_us`, with the rows of `extra` besides."""
    rows = list(extra or [])
    for i in range(2):
        t = i * 1_000
        rows += [
            _marked(i, t, 1_000),
            {**launch(t + 1, 5, i + 1), "external_id": 100 + i},
            kernel(t + 10, gemm_us, corr=i + 1, name="sm90_xmma_gemm_bf16bf16_bf16f32"),
        ]
    p = profile(rows)
    template = _low_compute_efficiency()
    p.devices, p.ops = template.devices, template.ops
    return p


def _tenth_counted() -> Profile:
    """The GEMM cut to 95 us, and after it an 855 us GEMM no op launched (uncounted): FLOPs cover 95 / 950 = 10 % of
    the matmul time."""
    return _gemm_steps(95, [kernel(i * 1_000 + 105, 855, name="sm90_xmma_gemm_bf16bf16_bf16f32_q") for i in range(2)])


def test_mfu_under_a_tenth_of_flop_coverage_is_a_lower_bound_and_projects_nothing():
    analysis = analyze(_tenth_counted())
    c = analysis.compute.summary
    flop = 2 * 1024**3
    assert c.flop_coverage == pytest.approx(95 / 950) and c.precision_coverage == 1.0
    assert c.mfu == pytest.approx(flop / (1e-3 * H100_BF16_TFLOPS * 1e12), rel=1e-4)
    assert c.mfu_is_lower_bound and c.flop_coverage < EVIDENCE_MIN_COVERAGE < MFU_EXACT_COVERAGE
    assert c.not_counted_kernel_ns == {"no op in the trace launched it": 2 * 855_000}
    assert "low_compute_efficiency" not in {b.id for b in find_bottlenecks(analysis)}
    report = analysis_report(analysis)
    assert json.loads(dumps(report))["compute"]["mfu_is_lower_bound"] is True
    assert "MFU <strong>\u2265 " in render_html(report, analysis)


def test_mfu_with_every_flop_counted_is_exact():
    """The control: the same GEMM wholly counted (`_low_compute_efficiency`) is an exact MFU and fires the rule."""
    analysis = analyze(_low_compute_efficiency())
    c = analysis.compute.summary
    assert c.flop_coverage == 1.0 and not c.mfu_is_lower_bound
    (b,) = [b for b in find_bottlenecks(analysis) if b.id == "low_compute_efficiency"]
    assert b.evidence["flop_coverage"] == 1.0 and b.projection.saving_ns > 0


def test_a_server_is_told_to_batch_more_not_to_compile():
    """A vLLM server (its frames in the trace) busy with slow counted GEMMs: the advice is the server's batch knobs,
    as its GEMMs read every weight for a few rows and the server already compiles."""
    frame = "vllm/v1/worker/gpu_model_runner.py(2100): execute_model"
    p = _gemm_steps(950, [host("python", i * 1_000 + 1, 990, frame) for i in range(2)])
    (b,) = [b for b in find_bottlenecks(analyze(p)) if b.id == "low_compute_efficiency"]
    assert "--max-num-seqs" in b.recommendations[0] and not any("torch.compile" in r for r in b.recommendations)


# --------------------------------------------------------------------------- launch shapes and collectives


def _nccl_beside_full_gemms(nccl_blocks: int) -> Profile:
    """Per 1 ms step a 500 us GEMM launching 4 blocks per SM, then a 400 us NCCL all-reduce on `nccl_blocks` of an
    H100's 132 SMs (NCCL runs on a few channels by design)."""
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), launch(t, 5, i + 1), kernel(t + 10, 500, corr=i + 1, blocks_per_sm=4.0)]
        rows += [
            launch(t + 6, 5, 20 + i),
            kernel(
                t + 520,
                400,
                corr=20 + i,
                name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                blocks_per_sm=nccl_blocks / 132,
            ),
        ]
    p = profile(rows)
    p.devices = {"GPU:0": DeviceInfo("GPU:0", compute_capability="9.0")}
    return p


@pytest.mark.parametrize("nccl_blocks", [1, 8])
def test_collectives_on_a_few_sms_are_not_low_occupancy(nccl_blocks):
    analysis = analyze(_nccl_beside_full_gemms(nccl_blocks))
    (stats,) = analysis.kernels
    assert stats.low_blocks_ns == 0 and stats.launch_shape_ns == stats.shaped_kernel_ns == 2 * 500_000
    assert "low_occupancy" not in {b.id for b in find_bottlenecks(analysis)}


def test_low_occupancy_needs_launch_shapes_for_most_kernel_time():
    """100 us of a 1-block-per-4-SMs kernel with its shape, 850 us of kernels without: 100 / 950 = 10.5 % of the
    kernel time has launch shapes, too little to judge the step by."""
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), launch(t, 5, i + 1), kernel(t + 10, 100, corr=i + 1, blocks_per_sm=0.25)]
        rows += [launch(t + 6, 5, 20 + i), kernel(t + 110, 850, corr=20 + i)]
    analysis = analyze(profile(rows))
    (stats,) = analysis.kernels
    assert stats.launch_shape_ns / stats.shaped_kernel_ns == pytest.approx(100 / 950)
    assert "low_occupancy" not in {b.id for b in find_bottlenecks(analysis)}


# --------------------------------------------------------------------------- estimates compose, never empty a device


def test_two_estimates_on_the_same_kernels_never_leave_a_busy_device_idle():
    """A V100 sgemm of 950 us a step on 5 % of the SMs: fp32_compute (Tensor Cores: 125 / 15.7 TFLOP/s faster at
    most) and low_occupancy (20x) both act on the same kernel time. They claim disjoint parts of it (issue 34): the
    larger claim, low_occupancy's 950 x 0.95 us, first, and fp32_compute only the 950 x 0.05 us left, so together
    they claim the kernel time at most, and no projection leaves the busy device at 0 % GPU-Util."""
    analysis = analyze(_steps_of("volta_sgemm_128x64_nn", blocks_per_sm=0.05))
    found = evaluate(analysis)
    steps = analysis.step_model.count
    cost = {b.id: b.time_ns / steps for b in found.bottlenecks}
    assert cost["low_occupancy"] == pytest.approx(950_000 * 0.95, abs=1)
    assert cost["fp32_compute"] == pytest.approx(950_000 * 0.05, abs=1)
    assert found.headline.gpu_util_after > 0.1
    assert all(b.projection.gpu_util_after > 0.1 for b in found.bottlenecks if b.projection.gpu_util_after is not None)


# --------------------------------------------------------------------------- real traces


def _raw_events(relative: str) -> list[dict]:
    trace = shared_trace(relative)
    path = next(trace.glob("*.json.gz")) if trace.is_dir() else trace
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_vllm_decode_states_its_flop_coverage_and_gets_no_advice():
    """vLLM decode on an MI300X: the MXFP4 MoE GEMMs (`_matmul_ogs_`, 7 of 8.3 ms of matmul time) are graph nodes
    whose capture is not in the trace: no FLOPs. The counted ones are the dense Tensile GEMMs; coverage is their
    time over the matmul and attention kernels' time (from the raw events)."""
    events = [e for e in _raw_events("inference/vllm_decode_full") if e.get("cat") == "kernel"]
    matmul_ogs = sum(e["dur"] for e in events if e["name"].startswith("_matmul_ogs_"))
    attention = sum(e["dur"] for e in events if "attention" in e["name"])
    dense = sum(e["dur"] for e in events if e["name"].startswith("Cijk_"))
    report = analyze_path(shared_trace("inference/vllm_decode_full")).report
    c = report.compute
    compute_ns = {k.name: k.time_ns for k in c.classes}
    assert compute_ns["matmul"] + compute_ns["attention"] == pytest.approx(
        (matmul_ogs + attention + dense) * 1e3, rel=0.02
    )
    counted_ns = sum(k.counted_ns for k in c.classes)
    assert c.flop_coverage == pytest.approx(counted_ns / (matmul_ogs + attention + dense) / 1e3, abs=0.01)
    assert 0.1 < c.flop_coverage < 0.2 and c.mfu_is_lower_bound
    assert sum(c.not_counted_kernel_ns.values()) >= matmul_ogs * 1e3 * 0.99
    assert "low_compute_efficiency" not in {b.id for b in report.bottlenecks}
    top = {t.name: t.tensor_core for d in report.devices for t in d.kernels.top}
    assert top["_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1"] is True
    assert top["kernel_unified_attention_3d"] is None  # a Triton attention kernel: its precision is not told


def test_qwen_mfu_is_exact_with_full_flop_coverage():
    """Qwen on an H100 (TraceLens' FLOPs, MFU 16.7 %): every compute kernel counted, so the MFU is no lower bound."""
    c = analyze_path(shared_trace(QWEN)).report.compute
    assert c.mfu == pytest.approx(0.167, abs=0.001)
    assert c.flop_coverage >= MFU_EXACT_COVERAGE and not c.mfu_is_lower_bound


@pytest.mark.parametrize(("overlap_us", "waste_us"), [(0, 375), (300, 150)])
def test_low_occupancy_counts_only_the_time_no_other_stream_fills(overlap_us, waste_us):
    """Two 1 ms steps, each with a 500 us kernel of 0.25 blocks per SM on stream 7; a 300 us kernel on stream 8
    overlaps it by `overlap_us`. The SMs it leaves free are idle only while nothing else runs: waste (500 - overlap)
    x 0.75 a step (DualPipe-style overlap runs compute beside communication on purpose)."""
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), launch(t, 5, i + 1), kernel(t + 10, 500, corr=i + 1, blocks_per_sm=0.25)]
        other = t + 10 + 500 - overlap_us if overlap_us else t + 600
        rows += [launch(t + 6, 5, 20 + i), kernel(other, 300, corr=20 + i, blocks_per_sm=2.0, stream=8)]
    a = analyze(profile(rows))
    assert a.step_model.kernel_ns[KernelClass.LOW_BLOCKS_WASTE].tolist() == [waste_us * 1_000] * 2
    if not overlap_us:  # one kernel at a time: the finding costs that waste
        found = {b.id: b for b in find_bottlenecks(a)}
        assert found["low_occupancy"].time_ns == pytest.approx(2 * waste_us * 1_000)
