"""FLOPs and bytes of framework ops (analysis/flops.py) and their kernels (analysis/op_kernels.py).

Hand-built ops check each formula against sums worked out by hand; real traces against TraceLens' own
reports (``<trace>_perf_report_csvs``, from the same TraceLens commit as the traces) and against ResNet-50's
published FLOP count.
"""

from __future__ import annotations

import ast
import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import shared_trace
from traceinsight.analysis.flops import NESTED, NO_FORMULA, NO_PARAMS, op_cost, op_costs
from traceinsight.analysis.op_kernels import counted_kernel_ns, kernel_ops
from traceinsight.events import make_op_table
from traceinsight.readers import read_trace

H100 = "tracelens/h100/"
QWEN = H100 + "Qwen_Qwen1.5-0.5B-Chat__1016005"
OWL = H100 + "google_owlv2-large-patch14-ensemble__1016001"
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
BF16, F32 = "c10::BFloat16", "float"

# --------------------------------------------------------------------------- one op at a time


def _flops(name: str, dims: Any, types: Any = None, concrete: Any = None, next_dims: Any = None) -> float:
    flops, _, _, reason = op_cost(name, dims, types, concrete, next_dims)
    assert reason is None, reason
    return flops


def test_gemms() -> None:
    assert _flops("aten::mm", [[8, 16], [16, 4]]) == 2 * 8 * 4 * 16
    assert _flops("aten::addmm", [[4], [8, 16], [16, 4], [], []]) == 2 * 8 * 4 * 16 + 8 * 4
    assert _flops("aten::bmm", [[3, 8, 16], [3, 16, 4]]) == 3 * 2 * 8 * 4 * 16
    assert _flops("aten::baddbmm", [[3, 8, 4], [3, 8, 16], [3, 16, 4], [], []]) == 3 * (2 * 8 * 4 * 16 + 8 * 4)
    assert _flops("aten::matmul", [[5, 1, 8, 16], [3, 16, 4]]) == 15 * 2 * 8 * 4 * 16  # batch dims broadcast
    assert _flops("aten::matmul", [[16], [16, 4]]) == 2 * 4 * 16
    assert _flops("aten::linear", [[2, 5, 16], [4, 16], [4]]) == 2 * 10 * 4 * 16 + 10 * 4
    assert _flops("aten::linear", [[2, 5, 16], [4, 16], []]) == 2 * 10 * 4 * 16


def test_gemm_bytes_and_dtypes() -> None:
    flops, nbytes, dtype, _ = op_cost("aten::mm", [[8, 16], [16, 4]], [BF16, BF16])
    assert (nbytes, dtype) == ((8 * 16 + 16 * 4 + 8 * 4) * 2, "bf16")
    fp8 = "c10::Float8_e4m3fn"
    dims = [[8, 16], [16, 4], [], [], [4], []]
    flops, nbytes, dtype, _ = op_cost("aten::_scaled_mm", dims, [fp8, fp8, F32, F32, BF16, ""])
    assert (flops, dtype) == (2 * 8 * 4 * 16 + 8 * 4, "fp8")
    assert nbytes == 8 * 16 + 16 * 4 + 8 * 4 * 2 + 4  # fp8 in, 2-byte out, bias as fp8-sized elements
    assert op_cost("aten::mm", [[8, 16], [16, 4]], ["float", "float"])[2] == "fp32"
    assert math.isnan(op_cost("aten::mm", [[8, 16], [16, 4]], ["Scalar", "x"])[1])  # bytes unknown, FLOPs not


def test_convolutions() -> None:
    x, w = [2, 3, 32, 32], [8, 3, 3, 3]
    concrete = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    out = 2 * 8 * 16 * 16  # stride 2, padding 1: 16 x 16
    assert _flops("aten::convolution", [x, w, [], *[[]] * 6], [F32, F32], concrete) == 2 * out * 27
    assert _flops("aten::convolution", [x, w, [8], *[[]] * 6], [F32, F32], concrete) == 2 * out * 27 + out
    grouped = [2, 8, 10, 10]  # groups 4: weight (16, 2, 3, 3), padding 0, dilation 2: 6 x 6
    args = ["", "", "", "1", "0", "2", "1"]
    assert _flops("aten::conv2d", [grouped, [16, 2, 3, 3], []], [F32], args) == 2 * (2 * 16 * 36) * 18
    assert _flops("aten::conv2d", [x, w, []], [F32], ["", "", "", "1", "'same'", "1", "1"]) == 2 * (2 * 8 * 1024) * 27
    cudnn = ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"]  # padding before stride
    assert _flops("aten::cudnn_convolution", [x, w], [F32, F32], cudnn) == 2 * out * 27
    assert op_cost("aten::cudnn_convolution", [x, w], [F32, F32], cudnn)[2] == "tf32"  # allow_tf32
    transposed = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1"]
    assert _flops("aten::convolution", [[2, 8, 16, 16], [8, 3, 3, 3], []], [F32], transposed) == 2 * 2 * 8 * 256 * 27


def test_convolution_without_stride_reads_the_output_from_the_next_ops() -> None:
    x, w = [32, 3, 224, 224], [64, 3, 7, 7]
    following = [[[], [], []], [[32, 64, 112, 112], [64], [64]]]  # a scalar add, then batch norm on the output
    assert _flops("aten::cudnn_convolution", [x, w], [F32], None, following) == 2 * (32 * 64 * 112 * 112) * 147
    assert op_cost("aten::cudnn_convolution", [x, w], [F32], None, [[[32, 3, 224, 224]]])[3] == NO_PARAMS
    assert op_cost("aten::cudnn_convolution", [x, w], [F32])[3] == NO_PARAMS


def test_convolution_backward() -> None:
    x, grad, w = [2, 3, 32, 32], [2, 8, 16, 16], [8, 3, 3, 3]
    macs = 2 * 8 * 256 * 27
    concrete = ["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, True]"]
    dims = [grad, x, w, *[[]] * 8]
    assert _flops("aten::convolution_backward", dims, [F32] * 3, concrete) == 2 * 2 * macs + 2 * 8 * 256
    concrete[-1] = "[False, True, False]"  # a first layer: no input gradient
    assert _flops("aten::convolution_backward", dims, [F32] * 3, concrete) == 2 * macs
    old = [x, grad, w, *[[]] * 8]  # 2021: (self, grad_output, weight, ...), no Concrete Inputs
    assert _flops("aten::cudnn_convolution_backward", old, [F32] * 3) == 2 * 2 * macs
    assert op_cost("aten::cudnn_convolution_backward_weight", [[], grad, x])[3] == NO_FORMULA


def test_attention() -> None:
    b, h, s, d = 2, 4, 128, 64
    q = [b, h, s, d]
    full = 4 * b * h * s * s * d
    sdpa = ["", "", "", "", "0.", "False", "", "False"]
    assert _flops("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []], [BF16], sdpa) == full
    sdpa[5] = "True"
    assert _flops("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []], [BF16], sdpa) == full / 2
    flash = ["", "", "", "0.", "True", "False", "0.125"]
    assert _flops("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []], [BF16], flash) == full / 2
    bshd = [b, s, h, d]  # the kernels' own ops take (batch, seq, heads, dim)
    fwd = ["", "", "", "", "", "128", "128", "0.", "False", "False", "0.125"]
    assert _flops("aten::_flash_attention_forward", [bshd] * 3 + [[]] * 8, [BF16], fwd) == full
    gqa = [b, 1, s, d]  # one key/value head for four query heads: the same FLOPs
    assert _flops("aten::_scaled_dot_product_efficient_attention", [q, gqa, gqa, [], [], [], []], [BF16]) == full
    bwd = ["", "", "", "", "", "", "", "", "", "", "0.", "False", "", "", ""]
    assert _flops("aten::_scaled_dot_product_flash_attention_backward", [q] * 6 + [[]] * 9, [BF16], bwd) == 2.5 * full
    _, nbytes, dtype, _ = op_cost("aten::_scaled_dot_product_flash_attention", [q, q, q], [BF16], flash)
    assert (nbytes, dtype) == (4 * b * h * s * d * 2, "bf16")


def test_attention_not_counted() -> None:
    q, k = [2, 4, 128, 64], [2, 4, 256, 64]
    flash = ["", "", "", "0.", "True", "False", ""]
    assert op_cost("aten::_scaled_dot_product_flash_attention", [q, k, k], None, flash)[3] is not None
    varlen = [[256, 4, 64]] * 3 + [[3], [3]]
    assert op_cost("aten::_flash_attention_forward", varlen, None, None)[3] is not None


@pytest.mark.parametrize(
    "dims",
    [None, "x", [[8, "16"], [16, 4]], [[8, 16], [15, 4]], [[8, 16.0], [16, 4]], [[8, -1], [-1, 4]], [[8, 16]], [1, 2]],
)
def test_odd_shapes_are_not_counted(dims: Any) -> None:
    flops, nbytes, _, reason = op_cost("aten::mm", dims, ["float"], ["", ""])
    assert math.isnan(flops) and math.isnan(nbytes) and reason


def test_table_counts_each_piece_of_work_once() -> None:
    ms = 1_000_000
    ops = make_op_table(
        {
            "ts_ns": [0, 1 * ms, 10 * ms, 10 * ms, 20 * ms, 30 * ms],
            "dur_ns": [5 * ms, 3 * ms, 2 * ms, 2 * ms, 1 * ms, 1 * ms],
            "thread": [1, 1, 1, 1, 1, 2],
            "name": ["aten::linear", "aten::addmm", "aten::mm", "aten::mm", "aten::add", "aten::empty"],
            "external_id": [1, 2, 3, 4, 5, 6],
            "input_dims": [
                [[2, 5, 16], [4, 16], [4]],
                [[4], [10, 16], [16, 4], [], []],
                [[8, 16], [16, 4]],
                [[8, 16], [16, 4]],
                [[3], [3]],
                [[]],
            ],
            "flops": [np.nan, np.nan, np.nan, np.nan, 3.0, np.nan],
        }
    )
    costs = op_costs(ops)
    # linear holds addmm; two mm with the same stamps (µs traces): the one of the smaller External id encloses
    assert costs["not_counted"].iloc[0] == NESTED and costs["not_counted"].iloc[2] == NESTED
    assert costs["not_counted"].iloc[[1, 3, 4]].isna().all()
    expected = [np.nan, 2 * 10 * 4 * 16 + 40, np.nan, 2 * 8 * 4 * 16, 3.0, np.nan]
    np.testing.assert_array_equal(costs["flops"].to_numpy(), expected)
    assert costs["op_class"].tolist() == ["matmul"] * 4 + ["other"] * 2
    assert costs["not_counted"].iloc[5] == NO_FORMULA
    assert costs.index.equals(ops.index)


# --------------------------------------------------------------------------- kernels of ops


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 7, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path: Path, repeat_correlation: bool) -> Any:
    mm = {"Input Dims": [[64, 32], [32, 16]], "Input type": [F32, F32]}
    events = [
        _x("cpu_op", "aten::linear", 0, 100, **{"External id": 1, "Input Dims": [[64, 32], [16, 32], []]}),
        _x("cpu_op", "aten::mm", 10, 50, **{"External id": 2, **mm}),
        _x("cpu_op", "aten::mm", 200, 50, **{"External id": 3, **mm}),
    ]
    for i, (ts, op) in enumerate([(20, 2), (30, 2), (210, 3), (80, 1)]):
        external = 100 + i if repeat_correlation else op
        events.append(_x("cuda_runtime", "cudaLaunchKernel", ts, 2, correlation=100 + i, **{"External id": external}))
        kernel = {"correlation": 100 + i, "device": 0, "stream": 7, "External id": external}
        events.append(_x("kernel", f"k{i}", 300 + 10 * i, 4.0 + i, tid=7, **kernel))
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return read_trace(path)


@pytest.mark.parametrize("repeat_correlation", [False, True])
def test_kernels_find_their_ops(tmp_path: Path, repeat_correlation: bool) -> None:
    read = _trace(tmp_path, repeat_correlation)
    launched_by = kernel_ops(read.events, read.ops)
    kernels = read.events["kind"].to_numpy() == "kernel"
    ids = read.ops["external_id"].to_numpy()[launched_by[kernels]]
    names = dict(zip(read.events["name"][kernels], ids, strict=True))
    assert names == {"k0": 2, "k1": 2, "k2": 3, "k3": 1}
    assert (launched_by[~kernels] == -1).all()
    costs = op_costs(read.ops)
    ns = counted_kernel_ns(read.events, read.ops, costs)
    # the counted ops are the two mm (linear holds the first); linear's own kernel k3 belongs to no counted op
    np.testing.assert_array_equal(ns, [np.nan, 9000.0, 6000.0])


# --------------------------------------------------------------------------- real traces against TraceLens


def _report(trace: str, name: str) -> list[dict[str, str]]:
    path = shared_trace(f"{trace}.json.gz").with_name(Path(trace).name + "_perf_report_csvs") / name
    with path.open() as f:
        return list(csv.DictReader(f))


def _costed(trace: str) -> pd.DataFrame:
    read = read_trace(shared_trace(f"{trace}.json.gz"))
    costs = op_costs(read.ops)
    kernel_ns = counted_kernel_ns(read.events, read.ops, costs)
    return read.ops.assign(**costs, kernel_ns=kernel_ns)


def _matching(ops: pd.DataFrame, row: dict[str, str], names: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Counted ops of the report row's name (or `names`) and shapes."""
    dims = ast.literal_eval(row["Input Dims_first"])
    wanted = ops["name"].isin(names or (row["name"],)) & ops["flops"].notna()
    return ops[wanted & ops["input_dims"].map(lambda d: d == dims)]


@pytest.mark.parametrize("trace", [QWEN, OWL])
def test_gemm_flops_and_throughput_match_tracelens(trace: str) -> None:
    ops = _costed(trace)
    for row in _report(trace, "GEMM.csv"):
        mine = _matching(ops, row)
        assert len(mine) == int(row["name_count"]), row["name"]
        assert mine["flops"].iloc[0] == pytest.approx(float(row["GFLOPS_first"]) * 1e9, rel=0.005)
        dims = mine["input_dims"].iloc[0]
        a, b = (dims[1], dims[2]) if "addmm" in row["name"] else (dims[0], dims[1])
        assert (a[-2], b[-1], a[-1]) == (int(row["param: M"]), int(row["param: N"]), int(row["param: K"]))
        assert (a[0] if len(a) == 3 else 1) == int(row["param: B"])
        tflops = (mine["flops"] / mine["kernel_ns"] / 1e3).mean()  # FLOP/ns = 1e-3 TFLOP/s
        assert tflops == pytest.approx(float(row["TFLOPS/s_mean"]), rel=0.05), row["name"]


def test_sdpa_flops_and_throughput_match_tracelens() -> None:
    ops = _costed(QWEN)
    (row,) = _report(QWEN, "SDPA_fwd.csv")
    # TraceLens reports _scaled_dot_product_flash_attention; the kernel is launched by the op in it,
    # _flash_attention_forward, which keeps the count with the same shapes in (batch, seq, heads, dim)
    q = ast.literal_eval(row["Input Dims_first"])[0]
    mine = ops[(ops["name"] == "aten::_flash_attention_forward") & ops["flops"].notna()]
    assert mine["input_dims"].map(lambda d: d[0] == [q[0], q[2], q[1], q[3]]).all()
    assert len(mine) == int(row["name_count"])
    assert mine["flops"].iloc[0] == pytest.approx(float(row["GFLOPS_first"]) * 1e9, rel=0.005)
    tflops = (mine["flops"] / mine["kernel_ns"] / 1e3).mean()
    assert tflops == pytest.approx(float(row["TFLOPS/s_mean"]), rel=0.05)


def test_conv_flops_and_throughput_match_tracelens() -> None:
    ops = _costed(OWL)
    (row,) = _report(OWL, "CONV_fwd.csv")
    # TraceLens reports aten::convolution; cudnn_convolution in it keeps the count (same input and weight)
    x, w = ast.literal_eval(row["Input Dims_first"])[:2]
    mine = ops[(ops["name"] == "aten::cudnn_convolution") & ops["input_dims"].map(lambda d: d[:2] == [x, w])]
    assert len(mine) == int(row["name_count"])
    assert mine["flops"].iloc[0] == pytest.approx(float(row["GFLOPS_first"]) * 1e9, rel=0.005)
    tflops = (mine["flops"] / mine["kernel_ns"] / 1e3).mean()
    assert tflops == pytest.approx(float(row["TFLOPS/s_mean"]), rel=0.05)


def test_resnet50_training_step_flops_match_the_published_count() -> None:
    """ResNet-50: 4.09 GMAC (8.18 GFLOP) per 224x224 image forward (torchvision's model card); a training
    step is forward + backward (input and weight gradients), three times that, for each image of the batch."""
    read = read_trace(shared_trace(RESNET))
    costs = op_costs(read.ops)
    ops = read.ops.assign(**costs)
    stems = ops[(ops["name"] == "aten::cudnn_convolution") & ops["input_dims"].map(lambda d: d[0][1:] == [3, 224, 224])]
    batch, steps = stems["input_dims"].iloc[0][0][0], len(stems)
    assert (batch, steps) == (32, 6)
    counted = ops[ops["op_class"].isin(["conv", "matmul"])]["flops"].sum()
    assert counted / steps == pytest.approx(3 * 8.18e9 * batch, rel=0.03)
    assert ops["not_counted"].eq(NO_PARAMS).sum() == 0
