"""Kineto's op-cost table (`TraceRead.ops`): the CPU ops that record shapes or FLOPs, with the event
table's times and ids; expectations on the real trace come from ``json.loads``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import shared_trace
from traceinsight.analysis.flops import op_costs
from traceinsight.events import OP_COLUMNS, TraceRead
from traceinsight.readers import read_trace

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 7, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _read(tmp_path: Path, events: list[Any]) -> TraceRead:
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return read_trace(path)


def test_ops_with_shapes_or_flops_only(tmp_path: Path) -> None:
    dims = [[8, 16], [16, 4]]
    read = _read(
        tmp_path,
        [
            _x("aten::mm", 10.5, 2.25, **{"External id": 5, "Input Dims": dims, "Input type": ["float", "float"]}),
            _x("aten::add", 20.0, 1.0, **{"External id": 6, "flops": 1234}),
            _x("aten::empty", 30.0, 1.0, **{"External id": 7}),
            _x("aten::mm", 40.0, 1.0, cat="user_annotation", **{"Input Dims": dims}),
            _x("cudaLaunchKernel", 11.0, 0.5, cat="cuda_runtime", correlation=1, **{"External id": 5}),
        ],
    )
    ops = read.ops
    assert list(ops.columns) == list(OP_COLUMNS)
    assert ops["name"].tolist() == ["aten::mm", "aten::add"]
    row = read.events[read.events["name"] == "aten::mm"].iloc[0]
    assert (ops["ts_ns"].iloc[0], ops["dur_ns"].iloc[0], ops["thread"].iloc[0]) == (row.ts_ns, row.dur_ns, row.thread)
    assert ops["external_id"].tolist() == [5, 6]
    assert ops["input_dims"].iloc[0] == dims and ops["input_types"].iloc[0] == ["float", "float"]
    assert ops["input_dims"].iloc[1] is None and ops["concrete_inputs"].iloc[0] is None
    assert np.isnan(ops["flops"].iloc[0]) and ops["flops"].iloc[1] == 1234
    assert ops["device"].isna().all()


def test_equal_shapes_share_one_value(tmp_path: Path) -> None:
    args = {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}
    read = _read(tmp_path, [_x("aten::mm", 10.0 * i, 1.0, **args) for i in range(3)])
    assert len({id(v) for v in read.ops["input_dims"]}) == 1


def test_odd_values_are_kept_and_not_counted(tmp_path: Path) -> None:
    read = _read(
        tmp_path,
        [
            _x("aten::mm", 1.0, 1.0, **{"Input Dims": [["a", 3], [3, 4]], "Input type": "float"}),
            _x("aten::mm", 3.0, 1.0, **{"Input Dims": "[[2, 3]]", "Concrete Inputs": {"x": 1}}),
            _x("aten::mm", 5.0, 1.0, **{"Input Dims": [[2.5, 3], [3, 4]], "flops": "many"}),
            _x("aten::addmm", 7.0, 1.0, **{"Input Dims": [[4], [2, 3]], "Input type": [None, 1]}),
        ],
    )
    assert len(read.ops) == 4
    costs = op_costs(read.ops)
    assert costs["flops"].isna().all() and costs["not_counted"].notna().all()


def test_trace_without_shapes_has_an_empty_op_table() -> None:
    read = read_trace(shared_trace("hta/nccl_parser_config/nccl_data.json.gz"))
    assert read.ops.empty and list(read.ops.columns) == list(OP_COLUMNS)


def test_real_trace_ops_are_its_cpu_ops_with_shapes() -> None:
    path = shared_trace(QWEN)
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    expected = [
        e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e.get("args", {}).get("Input Dims")
    ]
    ops = read_trace(path).ops
    assert len(ops) == len(expected)
    by_id = {e["args"]["External id"]: e for e in expected}
    sample = ops.iloc[:: max(1, len(ops) // 50)]
    for row in sample.itertuples():
        event = by_id[row.external_id]
        assert (row.name, row.input_dims, row.input_types) == (
            event["name"],
            event["args"]["Input Dims"],
            event["args"]["Input type"],
        )
        assert row.concrete_inputs == event["args"]["Concrete Inputs"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_streamed_chunks_give_the_same_table(tmp_path: Path, jobs: int) -> None:
    from traceinsight.readers.kineto import read_kineto

    path = shared_trace(QWEN)
    whole = read_trace(path).ops
    chunked = read_kineto(path, chunk_bytes=1 << 16, jobs=jobs).ops
    assert len(chunked) == len(whole)
    assert chunked["external_id"].tolist() == whole["external_id"].tolist()
    assert chunked["input_dims"].tolist() == whole["input_dims"].tolist()
