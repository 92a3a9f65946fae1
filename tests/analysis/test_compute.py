"""Compute efficiency (`analysis/compute.py`) against figures worked out apart from it: TraceLens's op FLOPs and
the trace's own device-side step window (Qwen H100), the published ResNet-50 count (V100), XProf's roofline tool
(TPU), a hand-built run whose MFU follows from one GEMM's shape; and no MFU where the trace holds no FLOPs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, shared_trace
from tests.test_findings import _low_compute_efficiency
from traceinsight.analysis import analyze
from traceinsight.api import analyze as api_analyze
from traceinsight.diff import build_diff
from traceinsight.gating import lookup
from traceinsight.workflow import analyze_path

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
H100_BF16_TFLOPS = 989.5  # NVIDIA H100 SXM data sheet, dense BF16
V100_FP32_TFLOPS = 15.7  # NVIDIA V100 SXM2 data sheet
RESNET50_FORWARD_FLOP = 2 * 4.09e9  # 4.09 GMAC per 224x224 image (He et al. / torchvision)


def _qwen_tracelens_flops(trace: Path) -> float:
    """TraceLens's FLOPs of the step: its GEMM and SDPA tables, each unique op's FLOPs times its count."""
    folder = trace.with_name(trace.name.removesuffix(".json.gz") + "_perf_report_csvs")
    tables = [pd.read_csv(folder / name) for name in ("GEMM.csv", "SDPA_fwd.csv")]
    return float(sum((t["GFLOPS_first"] * t["name_count"]).sum() for t in tables)) * 1e9


def _device_step_ns(trace: Path, name: str) -> int:
    """The step's device-side window, read from the trace itself: its `gpu_user_annotation`."""
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    (step,) = [e for e in events if e.get("cat") == "gpu_user_annotation" and e.get("name") == name]
    return round(float(step["dur"]) * 1000)


@pytest.fixture(scope="module")
def qwen():
    return analyze_path(shared_trace(QWEN))


def test_qwen_mfu_from_tracelens_flops_over_the_device_step(qwen) -> None:
    trace = shared_trace(QWEN)
    flops, window = _qwen_tracelens_flops(trace), _device_step_ns(trace, "ProfilerStep#6")
    c = qwen.report.compute
    assert c.window == "device step" and c.steps[0].dur_ns == window  # 34.9 ms, not the host's 47.2 ms
    assert c.flops == pytest.approx(flops, rel=5e-3)
    assert c.device == "H100 SXM" and c.dtype == "bf16" and c.peak_tflops == H100_BF16_TFLOPS
    assert c.mfu == pytest.approx(flops / (window * 1e-9 * H100_BF16_TFLOPS * 1e12), rel=5e-3)  # 16.7 %
    assert c.gpu_util * c.compute_share * c.compute_efficiency == pytest.approx(c.mfu, rel=1e-4)


def test_qwen_classes_and_the_finding_ranked_first(qwen) -> None:
    classes = {k.name: k for k in qwen.report.compute.classes}
    # TraceLens: GEMM 28 % of kernel time at about 610 TFLOP/s, elementwise 54 % (+ 2 % reductions).
    assert classes["matmul"].share == pytest.approx(0.28, abs=0.01)
    assert classes["matmul"].tflops == pytest.approx(610, rel=0.05) and classes["matmul"].bound == "compute"
    assert classes["elementwise"].share == pytest.approx(0.57, abs=0.02)
    top, *rest = qwen.report.bottlenecks
    assert top.id == "low_compute_efficiency" and top.projection.basis == "estimated"
    assert all(b.severity == "low" for b in rest) and top.severity == "medium"
    e = top.evidence
    assert e["gpu_util"] * e["compute_share"] * e["compute_efficiency"] == pytest.approx(e["mfu"], rel=1e-4)
    assert e["elementwise_heavy"] and "torch.compile" in top.recommendations[0]


def test_resnet_step_flops_match_the_published_count_against_the_v100_fp32_peak() -> None:
    report = analyze_path(shared_trace("kineto/resnet50_num_workers_0")).report
    c = report.compute
    assert c.device == "V100 SXM2" and c.dtype == "fp32" and c.peak_tflops == V100_FP32_TFLOPS
    batch = 32  # the first convolution's input: [32, 3, 224, 224]
    published = 3 * RESNET50_FORWARD_FLOP * batch
    # A kernel counts in the step its start falls in; without device-side step ranges (2021 Kineto) a step's last
    # kernels start in the next host step, so single steps vary (+-6 %): their mean does not.
    assert c.flops / len(c.steps) == pytest.approx(published, rel=0.03)
    assert sum(s.flops for s in c.steps) / len(c.steps) == pytest.approx(published, rel=0.03)
    for step in c.steps:
        assert step.mfu == pytest.approx(step.flops / (step.dur_ns * 1e-9 * V100_FP32_TFLOPS * 1e12), rel=1e-4)
    assert "low_compute_efficiency" not in {b.id for b in report.bottlenecks}  # 55 % busy: idle time comes first


def test_tpu_op_rates_equal_xprofs_roofline_tool() -> None:
    peer = json.loads((REPO / "tests" / "readers" / "data" / "xprof_roofline_tpu_inference_2.json").read_text())
    xprof = {o["operation"]: o for o in peer["ops"] if o["measured_flop_rate"] > 0}
    ops = {o.name: o for o in analyze_path(shared_trace("xprof/test_xplanes")).report.compute.ops}
    assert set(xprof) <= set(ops)
    for name, theirs in xprof.items():
        ours = ops[name]
        assert ours.calls == theirs["occurrences"]
        assert ours.flops / ours.time_ns == pytest.approx(theirs["measured_flop_rate"], rel=0.01)  # GFLOP/s


@pytest.mark.parametrize(
    ("relative", "how"),
    [
        ("kineto/gpu_metrics", "record_shapes=True"),
        ("hta/nccl_parser_config", "record_shapes=True"),
        ("tracelens/mi300", "JAX GPU traces carry no op FLOPs"),  # XSpace of a GPU: no cost stats on its ops
    ],
)
def test_no_flops_in_the_trace_no_mfu(relative: str, how: str) -> None:
    report = analyze_path(shared_trace(relative)).report
    c = report.compute
    assert c.flops_source == "none" and c.mfu is None and c.flops == 0
    assert c.note and how in c.note
    assert "low_compute_efficiency" not in {b.id for b in report.bottlenecks}


def test_hand_built_mfu_multiplies_out() -> None:
    """Two 1 ms steps, each a 950 us bf16 GEMM of 1024^3 (2 x 1024^3 FLOP) on an H100."""
    c = analyze(_low_compute_efficiency()).compute.summary
    flop = 2 * 1024**3
    assert c.flops == 2 * flop and [s.flops for s in c.steps] == [flop, flop]
    assert c.mfu == pytest.approx(flop / (1e-3 * H100_BF16_TFLOPS * 1e12), rel=1e-4)
    assert c.gpu_util == pytest.approx(0.95) and c.compute_share == pytest.approx(1.0)
    assert c.compute_efficiency == pytest.approx(flop / (950e-6 * H100_BF16_TFLOPS * 1e12), rel=1e-4)
    (matmul,) = c.classes
    assert matmul.name == "matmul" and matmul.tflops == pytest.approx(flop / 950e-6 / 1e12, rel=1e-3)


def test_api_frames_and_diff_metrics() -> None:
    report = api_analyze(shared_trace(QWEN))
    classes = report.kernel_classes
    assert list(classes.columns[:4]) == ["name", "count", "time_ns", "share"]
    assert classes["share"].sum() == pytest.approx(1.0, abs=1e-3)
    ops = report.ops
    assert set(ops["op_class"]) >= {"matmul", "attention"} and len(ops) >= len(report.result.compute.ops)
    diff = build_diff(report.result, report.result)
    changes = {c["metric"]: c for c in diff["changes"]}
    assert changes["compute.mfu"]["base"] == report.result.compute.mfu and changes["compute.mfu"]["delta"] == 0
    assert lookup(report.result, "compute.classes.matmul.share") == classes.set_index("name")["share"]["matmul"]


@pytest.mark.parametrize("folder", ["vllm_decode_full", "vllm_prefilldecode_piecewise", "sglang_decode"])
def test_graph_replays_count_their_work_through_the_capture_pass(folder: str) -> None:
    """A replay's nodes are launched by no op of its own trace: each is matched to the launch that recorded it in
    the capture pass beside it, whose op has shapes. TraceLens merges the capture onto the replay the same way;
    its GEMM table (the `aten::` rows, not the server's wrappers around them) gives the FLOPs."""
    base = shared_trace(f"inference/{folder}")
    gemm = pd.read_csv(base / "perf_csvs" / "GEMM.csv")
    aten = gemm[gemm["name"].str.startswith("aten::")]
    report = analyze_path(base).report
    c = report.compute
    assert c.flops_source == "shapes" and c.device == "MI300X"
    assert c.flops == pytest.approx(float((aten["GFLOPS_first"] * aten["name_count"]).sum()) * 1e9, rel=5e-3)
    matmul = sum(o.flops for o in c.ops if o.op_class == "matmul")
    assert matmul == pytest.approx(c.flops, rel=1e-6)  # all of it GEMMs, as TraceLens finds


def test_fp32_work_on_tensor_cores_is_rated_against_tf32() -> None:
    """HTA's A100 control run multiplies FP32 tensors in `cutlass_80_tensorop_s1688gemm` kernels: TF32 Tensor Core
    GEMMs. Rated against the FP32 peak (19.5 TFLOP/s) they would exceed it; against TF32's (156) they do not."""
    c = analyze_path(shared_trace("hta/trace_diff"), "trace_diff/control").report.compute
    assert c.device == "A100 SXM4 40GB" and c.dtype == "tf32" and c.peak_tflops == 156.0
    assert all(k.roofline_fraction is None or k.roofline_fraction <= 1 for k in c.classes)
    assert all(o.roofline_fraction is None or o.roofline_fraction <= 1 for o in c.ops if o.dtype == "tf32")


def test_a_device_busy_moving_data_is_not_called_slow_at_computing() -> None:
    """The TPU run is mostly host-offload copies (XProf: transfer-dominated; `copy-start` / `copy-done` are copies,
    not kernels): its MFU is near 0, but no compute fix is claimed; that it moves data is the finding."""
    report = analyze_path(shared_trace("xprof/test_xplanes")).report
    copies = sum(v for k, v in report.ledger.total.items() if k.startswith("copy_"))
    busy = copies + sum(report.ledger.total[k] for k in ("compute", "collective_wait", "collective_transfer"))
    assert copies > 0.8 * busy and report.compute.mfu < 1e-4
    ids = [b.id for b in report.bottlenecks]
    assert "low_compute_efficiency" not in ids and ids[0] == "transfer_bound"
