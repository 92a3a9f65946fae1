"""Kineto reader and JSON loading: real traces against plain arithmetic over their JSON, hand-built docs.

Expectations on real traces come from ``json.loads`` (decimals kept exact) and loops
written here, or from the figures in ../shared/traces/README.md.
"""

from __future__ import annotations

import gc
import gzip
import json
import re
from collections import Counter
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests import corpus
from tests.conftest import KINETO_TRACES, shared_trace
from traceinsight.errors import TraceError
from traceinsight.events import TraceRead
from traceinsight.readers import is_trace_file, read_trace
from traceinsight.readers.json_document import load_trace_json

# (kernels, memcpy) from the README's table.
README_COUNTS = {
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz": (8772, 12),
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz": (8868, 12),
    "kineto/gpu_metrics/gpu_metrics_input.json": (30, 2),
    "hta/trace_diff/control/control.json.gz": (8568, 228),
    "hta/trace_diff/test/test.json.gz": (9876, 4856),
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (4350, 1600),
    "hta/nccl_parser_config/nccl_data.json.gz": (2700, 960),
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": (14, 2),
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": (0, 0),
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz": (4330, 85),
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": (1465, 1),
    "tracelens/b200/eager_trace.json.gz": (768, 161),
}
SYNC_NAMES = {
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
}


# --------------------------------------------------------------------------- real traces


@cache
def _raw_doc(rel: str) -> dict[str, Any]:
    """The trace as plain JSON, decimals exact (a float cannot hold 1712195495519689.047)."""
    data = shared_trace(rel).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    gc.disable()
    try:
        return json.loads(data, parse_float=Decimal)
    finally:
        gc.enable()


@cache
def _read(rel: str) -> TraceRead:
    return read_trace(shared_trace(rel))


def _ns(us: Any) -> int:
    return int((Decimal(us) * 1000).to_integral_value())


def _complete(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Timed complete events that are not the profiler's own ``Trace`` span, in file order."""
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e and e.get("cat") != "Trace"]


def _cat(event: dict[str, Any]) -> str:
    return str(event.get("cat", "")).lower()


@pytest.mark.parametrize("rel", KINETO_TRACES)
def test_times_are_exact_ns(rel: str) -> None:
    doc = _raw_doc(rel)
    events = _complete(doc)
    base = doc.get("baseTimeNanoseconds", 0)  # Kineto >= 2023 writes ts relative to it
    table = _read(rel).events
    assert len(table) == len(events)
    np.testing.assert_array_equal(table["ts_ns"].to_numpy(), [base + _ns(e["ts"]) for e in events])
    np.testing.assert_array_equal(table["dur_ns"].to_numpy(), [max(_ns(e.get("dur", 0)), 0) for e in events])


@pytest.mark.parametrize("rel", KINETO_TRACES)
def test_kernels_per_device(rel: str) -> None:
    expected = Counter(
        f"GPU:{e.get('args', {}).get('device', e.get('pid'))}" for e in _complete(_raw_doc(rel)) if _cat(e) == "kernel"
    )
    table = _read(rel).events
    kernels = table[table["kind"] == "kernel"]
    assert kernels["device"].notna().all()
    assert Counter(kernels["device"].astype(str)) == expected


@pytest.mark.parametrize("rel", KINETO_TRACES)
def test_h2d_copies_and_bytes(rel: str) -> None:
    events = _complete(_raw_doc(rel))
    # ROCm copies carry no bytes; their runtime call (same correlation) carries "size".
    sizes = {
        e["args"]["correlation"]: int(e["args"]["size"])
        for e in events
        if _cat(e) == "cuda_runtime" and "size" in e.get("args", {})
    }
    h2d = [e for e in events if _cat(e) in ("gpu_memcpy", "memcpy") and "HtoD" in e["name"]]
    expected_bytes = sum(e["args"].get("bytes", sizes.get(e["args"].get("correlation"), 0)) for e in h2d)
    table = _read(rel).events
    copies = table[table["copy_kind"] == "h2d"]
    assert (copies["kind"] == "memcpy").all()
    assert len(copies) == len(h2d)
    assert int(copies["bytes"].clip(lower=0).sum()) == expected_bytes
    memcpy = sum(1 for e in events if _cat(e) in ("gpu_memcpy", "memcpy"))
    memset = sum(1 for e in events if _cat(e) in ("gpu_memset", "memset"))
    assert (table["kind"] == "memcpy").sum() == memcpy
    assert (table["kind"] == "memset").sum() == memset


@pytest.mark.parametrize("rel", KINETO_TRACES)
def test_sync_calls_are_host_syncs_and_cpu_ops_stay_on_host(rel: str) -> None:
    events = _complete(_raw_doc(rel))
    syncs = sum(1 for e in events if _cat(e) in ("cuda_runtime", "runtime", "cuda_driver") and e["name"] in SYNC_NAMES)
    # Old-schema step and DataLoader markers are Operator events; they become step / input_wait rows.
    markers = ("ProfilerStep#", "enumerate(DataLoader)#")
    cpu_ops = sum(1 for e in events if _cat(e) in ("cpu_op", "operator") and not e["name"].startswith(markers))
    table = _read(rel).events
    sync = table[table["kind"] == "sync"]
    assert len(sync) == syncs
    assert sync["device"].isna().all()
    ops = table[table["kind"] == "cpu_op"]
    assert len(ops) == cpu_ops
    assert ops["device"].isna().all() and (ops["stream"] == -1).all()


@pytest.mark.parametrize("rel", sorted(README_COUNTS))
def test_readme_counts(rel: str) -> None:
    kernels, memcpy = README_COUNTS[rel]
    table = _read(rel).events
    assert (table["kind"] == "kernel").sum() == kernels
    assert (table["kind"] == "memcpy").sum() == memcpy


def test_hta_control_h2d_in_first_five_steps_matches_readme() -> None:
    """README: 125 HtoD copies, 353 MB (353.3 MB) in the 5 steps before the last one."""
    table = _read("hta/trace_diff/control/control.json.gz").events
    steps = table[table["kind"] == "step"].sort_values("ts_ns")
    assert list(steps["step_id"]) == list(range(1009, 1015))
    start, last = steps["ts_ns"].iloc[0], steps["ts_ns"].iloc[-1]
    h2d = table[(table["copy_kind"] == "h2d") & (table["ts_ns"] >= start) & (table["ts_ns"] < last)]
    assert len(h2d) == 125
    assert round(h2d["bytes"].sum() / 1e6, 1) == 353.3
    assert (h2d["src_memory"] == "pinned").all()


def test_resnet_copies_are_pageable_h2d() -> None:
    table = _read("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz").events
    copies = table[table["kind"] == "memcpy"]
    assert set(copies["copy_kind"]) == {"h2d"} and set(copies["src_memory"]) == {"pageable"}
    assert (copies["stream"] == 7).all() and set(copies["device"]) == {"GPU:0"}


def test_cpu_only_trace_has_no_device_rows() -> None:
    read = _read("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert len(read.events) > 0
    assert read.events["device"].isna().all()
    assert read.input.rank == 34 and read.devices == {}


def test_ns_resolution_keeps_sub_microsecond_digits() -> None:
    read = _read("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    table = read.events
    assert table["dur_ns"].min() >= 0
    assert (table["ts_ns"] % 1000 != 0).mean() > 0.5  # the digits a double would lose are there
    assert read.metadata["displayTimeUnit"] == "ns" and read.metadata["clock"] == "epoch"


def test_sub_microsecond_memsets_keep_positive_durations() -> None:
    """HTA rounds Qwen's sub-µs memsets to -1 µs; here they stay >= 0 and sum to their real time."""
    rel = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    expected = sum(_ns(e["dur"]) for e in _complete(_raw_doc(rel)) if _cat(e) == "gpu_memset")
    memsets = _read(rel).events.query("kind == 'memset'")
    assert len(memsets) == 241 and (memsets["dur_ns"] > 0).all()
    assert memsets["dur_ns"].sum() == expected


def test_base_time_puts_relative_timestamps_on_the_epoch() -> None:
    b200 = _read("tracelens/b200/eager_trace.json.gz")
    mi250 = _read("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    # Traces made before their repository commit (B200: added 2026-05; MI250: 2025-03).
    assert pd.Timestamp(int(b200.events["ts_ns"].min())).year == 2026
    assert pd.Timestamp(int(mi250.events["ts_ns"].min())) < pd.Timestamp("2025-03-31")
    assert b200.metadata["clock"] == "epoch" and b200.metadata["ts_offset_ns"] == 1767189312000000000
    assert "trace_span_ns" not in b200.metadata  # this trace has no Trace span


def test_b200_cpu_op_with_stream_arg_is_host_work() -> None:
    rel = "tracelens/b200/eager_trace.json.gz"
    raw = [e for e in _complete(_raw_doc(rel)) if _cat(e) == "cpu_op" and "stream" in e.get("args", {})]
    assert raw  # the trace has the case HTA counts as GPU time
    table = _read(rel).events
    rows = table[table["name"].isin({e["name"] for e in raw}) & (table["kind"] == "cpu_op")]
    assert len(rows) >= len(raw)
    assert rows["device"].isna().all() and (rows["stream"] == -1).all()


def test_amd_copy_bytes_come_from_runtime_size() -> None:
    table = _read("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz").events
    copies = table[table["kind"] == "memcpy"]
    assert (copies["bytes"] > 0).all() and set(copies["src_memory"]) == {"unknown"}
    assert set(copies["device"]) == {"GPU:2"}


def test_string_categories_have_the_pandas_default_dtype() -> None:
    """So that tables of several readers concatenate (union_categoricals needs equal dtypes)."""
    table = _read("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz").events
    default = pd.Index(["a"]).dtype
    for column in ("name", "device", "host", "kind", "copy_kind", "src_memory"):
        assert table[column].cat.categories.dtype == default, column


def test_distributed_and_device_metadata() -> None:
    control = _read("hta/trace_diff/control/control.json.gz")
    assert control.input.rank == 3 and control.input.format == "kineto" and control.framework == "pytorch"
    gpu = control.devices["GPU:3"]
    assert (gpu.name, gpu.compute_capability, gpu.sm_count, gpu.vendor) == (
        "NVIDIA A100-PG509-200",
        "8.0",
        108,
        "Nvidia",
    )
    assert control.metadata["distributedInfo"] == {"backend": "nccl", "rank": 3, "world_size": 8}
    ns = _read("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    assert ns.input.host == "twshared39868.02.pnb3.facebook.com"
    assert set(ns.events["host"].dropna()) == {"twshared39868.02.pnb3.facebook.com"}
    old = _read("kineto/gpu_metrics/gpu_metrics_input.json")  # 2021 schema: computeProperties
    assert old.devices["GPU:0"].sm_count == 80 and old.devices["GPU:0"].compute_capability == "7.0"


# --------------------------------------------------------------------------- hand-built documents


def _write(tmp_path: Path, doc: Any, name: str = "t.pt.trace.json", gz: bool = False) -> Path:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _kineto(tmp_path: Path, events: list[Any], **top: Any) -> TraceRead:
    return read_trace(_write(tmp_path, {"schemaVersion": 1, **top, "traceEvents": events}))


def _x(
    cat: str, name: str, ts: float = 10.0, dur: float = 1.0, pid: Any = 100, tid: Any = 100, **args: Any
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _row(read: TraceRead, name: str) -> pd.Series:
    rows = read.events[read.events["name"] == name]
    assert len(rows) == 1, name
    return rows.iloc[0]


def test_new_schema_categories(tmp_path: Path) -> None:
    gpu = {"pid": 0, "tid": 7}
    events = [
        _x(
            "kernel",
            "k",
            device=0,
            stream=7,
            correlation=11,
            **{"External id": 5, "blocks per SM": 0.5, "est. achieved occupancy %": 42},
            **gpu,
        ),
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            device=0,
            stream=7,
            correlation=12,
            bytes=4096,
            **gpu,
        ),
        _x("gpu_memset", "Memset (Device)", device=0, stream=7, correlation=13, bytes=64, **gpu),
        _x("cuda_sync", "Context Sync", device=0, stream=4294967295, correlation=14, **gpu),
        _x("cuda_sync", "Stream Wait Event", device=0, stream=7, correlation=15, **gpu),
        _x("gpu_user_annotation", "## forward ##", **{"External id": 5}, **gpu),
        _x("cuda_runtime", "cudaLaunchKernel", correlation=11, **{"External id": 5}),
        _x("cuda_driver", "cuLaunchKernelEx", correlation=16),
        _x("cpu_op", "triton_launcher", stream=0, device=0),
        _x("cpu_op", "aten::mm", **{"External id": 5}),
        _x("user_annotation", "ProfilerStep#3"),
        _x("user_annotation", "my_range"),
        _x("python_function", "train.py(10): step"),
        _x("overhead", "Activity Buffer Request", pid=-1, tid=0),
        _x("Trace", "PyTorch Profiler (0)", ts=5.0, dur=100.0, pid="Spans", tid="PyTorch Profiler"),
        {"ph": "s", "cat": "ac2g", "id": 11, "pid": 100, "tid": 100, "ts": 10.0, "name": "ac2g"},
        {"ph": "f", "cat": "ac2g", "id": 11, "pid": 0, "tid": 7, "ts": 12.0, "name": "ac2g", "bp": "e"},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 100, "tid": 100, "ts": 11.0, "args": {"Bytes": 4}},
        {"ph": "C", "name": "GPU 0 Utilization", "pid": 0, "ts": 11.0, "args": {"GPU Utilization": 1}},
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "ts": 1.0, "args": {"name": "python3"}},
    ]
    read = _kineto(tmp_path, events)
    expected = {
        "k": ("kernel", "GPU:0", 7, -1),
        "Memcpy HtoD (Pinned -> Device)": ("memcpy", "GPU:0", 7, -1),
        "Memset (Device)": ("memset", "GPU:0", 7, -1),
        "Context Sync": ("sync", "GPU:0", -1, -1),
        "Stream Wait Event": ("sync", "GPU:0", 7, -1),
        "## forward ##": ("annotation", "GPU:0", 7, -1),
        "cudaLaunchKernel": ("runtime", None, -1, 100),
        "cuLaunchKernelEx": ("runtime", None, -1, 100),
        "triton_launcher": ("cpu_op", None, -1, 100),
        "aten::mm": ("cpu_op", None, -1, 100),
        "ProfilerStep#3": ("step", None, -1, 100),
        "my_range": ("annotation", None, -1, 100),
        "train.py(10): step": ("python", None, -1, 100),
        "Activity Buffer Request": ("other", None, -1, 0),
    }
    assert len(read.events) == len(expected)  # flows, instants, counters, metadata and Trace are not rows
    for name, (kind, device, stream, thread) in expected.items():
        row = _row(read, name)
        got_device = None if pd.isna(row["device"]) else row["device"]
        assert (row["kind"], got_device, row["stream"], row["thread"]) == (kind, device, stream, thread), name
    kernel = _row(read, "k")
    assert (
        kernel["correlation"],
        kernel["external_id"],
        kernel["blocks_per_sm"],
        kernel["occupancy_pct"],
    ) == (11, 5, 0.5, 42.0)
    assert _row(read, "Memcpy HtoD (Pinned -> Device)")["bytes"] == 4096
    assert _row(read, "Memset (Device)")["bytes"] == 64
    assert _row(read, "ProfilerStep#3")["step_id"] == 3
    assert _row(read, "cudaLaunchKernel")["bytes"] == -1  # bytes belong to copies and memsets only
    assert read.metadata["trace_span_ns"] == (5000, 105000)


def test_old_schema(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "volta_sgemm",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1621401187225275,
            "dur": 3,
            "args": {"device": 0, "stream": 7, "correlation": 311, "external id": 31},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy DtoH (Device -> Pageable)",
            "pid": 1,
            "tid": "stream 9",
            "ts": 1621401187225300,
            "dur": 2,
            "args": {"bytes": 640, "external id": 32},
        },
        {
            "ph": "X",
            "cat": "Memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1621401187225310,
            "dur": 1,
            "args": {"device": 0, "stream": 7, "bytes": 128},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaMemcpyAsync",
            "pid": 24572,
            "tid": "24572",
            "ts": 1621401187225200,
            "dur": 20,
            "args": {"correlation": 311, "external id": 31},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaStreamSynchronize",
            "pid": 24572,
            "tid": "24572",
            "ts": 1621401187225230,
            "dur": 20,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "Operator",
            "name": "aten::empty",
            "pid": 24572,
            "tid": "24610",
            "ts": 1621401187225197,
            "dur": 21,
            "args": {"Device": 24572, "External id": 2},
        },
    ]
    read = _kineto(tmp_path, events)
    kernel = _row(read, "volta_sgemm")
    assert (kernel["kind"], kernel["device"], kernel["stream"], kernel["external_id"]) == (
        "kernel",
        "GPU:0",
        7,
        31,
    )
    assert kernel["ts_ns"] == 1621401187225275000 and kernel["dur_ns"] == 3000
    copy = _row(read, "Memcpy DtoH (Device -> Pageable)")  # no device/stream args: pid and "stream 9" say it
    assert (copy["device"], copy["stream"], copy["copy_kind"], copy["src_memory"], copy["bytes"]) == (
        "GPU:1",
        9,
        "d2h",
        "pageable",
        640,
    )
    assert _row(read, "Memset (Device)")["kind"] == "memset"
    runtime = _row(read, "cudaMemcpyAsync")
    assert (runtime["kind"], runtime["thread"], runtime["external_id"]) == ("runtime", 24572, 31)
    assert _row(read, "cudaStreamSynchronize")["kind"] == "sync"
    op = _row(read, "aten::empty")
    assert (op["kind"], op["thread"], op["external_id"]) == ("cpu_op", 24610, 2)
    assert read.metadata["clock"] == "epoch" and read.metadata["ts_offset_ns"] == 0


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("cudaDeviceSynchronize", "sync"),
        ("cudaStreamSynchronize", "sync"),
        ("cudaEventSynchronize", "sync"),
        ("cuCtxSynchronize", "sync"),
        ("cuStreamSynchronize", "sync"),
        ("hipDeviceSynchronize", "sync"),
        ("hipStreamSynchronize", "sync"),
        ("cudaLaunchKernel", "runtime"),
        ("cudaStreamWaitEvent", "runtime"),
        ("cudaEventQuery", "runtime"),
        ("hipMemcpyWithStream", "runtime"),
    ],
)
def test_sync_api_names(tmp_path: Path, name: str, kind: str) -> None:
    read = _kineto(tmp_path, [_x("cuda_runtime", name, correlation=1), _x("cuda_driver", name, correlation=2)])
    assert list(read.events["kind"]) == [kind, kind]
    assert read.events["device"].isna().all()


@pytest.mark.parametrize(
    ("name", "copy_kind", "memory"),
    [
        ("Memcpy HtoD (Pageable -> Device)", "h2d", "pageable"),
        ("Memcpy HtoD (Pinned -> Device)", "h2d", "pinned"),
        ("Memcpy DtoH (Device -> Pageable)", "d2h", "pageable"),  # d2h: the host side is the destination
        ("Memcpy DtoH (Device -> Pinned)", "d2h", "pinned"),
        ("Memcpy DtoD (Device -> Device)", "d2d", "device"),
        ("Memcpy PtoP (Device -> Device)", "p2p", "device"),
        ("Memcpy HtoD (Host -> Device)", "h2d", "unknown"),  # ROCm does not say which host memory
        ("Memcpy HtoH (Pinned -> Pinned)", "other", "pinned"),
        ("Memcpy Peer", "p2p", "unknown"),
    ],
)
def test_memcpy_names(tmp_path: Path, name: str, copy_kind: str, memory: str) -> None:
    row = _row(_kineto(tmp_path, [_x("gpu_memcpy", name, pid=0, tid=7, device=0, stream=7, bytes=8)]), name)
    assert (row["kind"], row["copy_kind"], row["src_memory"]) == ("memcpy", copy_kind, memory)


def test_missing_copy_bytes_come_from_the_runtime_size(tmp_path: Path) -> None:
    events = [
        _x("cuda_runtime", "hipMemcpyWithStream", correlation=5, size="4096", stream="0x0", kind="1"),
        _x("gpu_memcpy", "Memcpy HtoD (Host -> Device)", pid=2, tid=0, device=2, stream=0, correlation=5),
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Host)", pid=2, tid=0, device=2, stream=0, correlation=6),
    ]
    read = _kineto(tmp_path, events)
    assert _row(read, "Memcpy HtoD (Host -> Device)")["bytes"] == 4096
    assert _row(read, "Memcpy DtoH (Device -> Host)")["bytes"] == -1  # no runtime call with its correlation
    assert _row(read, "hipMemcpyWithStream")["bytes"] == -1


def test_fractional_and_large_timestamps_are_exact(tmp_path: Path) -> None:
    # Written as text: a Python float could not even hold these literals.
    data = b"""{"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1712195495519689.047, "dur": 63.813},
        {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 1712195495519689.8, "dur": 0.0004},
        {"ph": "X", "cat": "cpu_op", "name": "c", "ts": 1712195495519690, "dur": -1.0}]}"""
    read = read_trace(_write(tmp_path, data))
    assert list(read.events["ts_ns"]) == [1712195495519689047, 1712195495519689800, 1712195495519690000]
    assert list(read.events["dur_ns"]) == [63813, 0, 0]
    assert read.warnings["negative durations set to 0"] == 1


def test_base_time_offset_only_when_ts_is_relative(tmp_path: Path) -> None:
    base = 1767189312000000000
    relative = _kineto(tmp_path, [_x("cpu_op", "a", ts=1365627862757.064)], baseTimeNanoseconds=base)
    assert relative.events["ts_ns"].iloc[0] == base + 1365627862757064
    absolute = _kineto(tmp_path, [_x("cpu_op", "a", ts=1767189313000000.5)], baseTimeNanoseconds=base)
    assert absolute.events["ts_ns"].iloc[0] == 1767189313000000500
    assert absolute.metadata["ts_offset_ns"] == 0 and absolute.metadata["clock"] == "epoch"
    bare = _kineto(tmp_path, [_x("cpu_op", "a", ts=12.5)])
    assert bare.metadata["clock"] == "relative" and bare.events["ts_ns"].iloc[0] == 12500


def test_damaged_events_are_skipped_and_counted(tmp_path: Path) -> None:
    events = [
        _x("kernel", "good", pid=0, tid=7, device=0, stream=7),
        {**_x("kernel", "bad ts", pid=0, tid=7), "ts": [1, 2]},
        {**_x("kernel", "bad stream", pid=0, tid=7), "args": {"stream": {"id": 7}}},
        42,
        {"ph": "X", "cat": "kernel", "name": "no ts", "pid": 0, "tid": 7, "dur": 1},
    ]
    read = _kineto(tmp_path, events)
    assert list(read.events["name"]) == ["good"]
    skipped = {k: v for k, v in read.warnings.items() if k.startswith("skipped damaged event")}
    assert sum(skipped.values()) == 3 and len(skipped) == 1  # one summary line, not one per message
    assert read.warnings["complete events without ts skipped"] == 1


def test_null_and_missing_fields(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": None, "name": None, "pid": None, "tid": None, "ts": 1, "dur": None, "args": None},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "gpu", "ts": 2, "dur": 1, "args": {"stream": None}},
    ]
    read = _kineto(tmp_path, events)
    assert list(read.events["kind"]) == ["other", "kernel"] and list(read.events["dur_ns"]) == [0, 1000]
    assert read.events["device"].iloc[1] == "GPU:?" and read.events["stream"].iloc[1] == -1


def test_gzip_is_detected_by_magic_bytes(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "traceEvents": [_x("cpu_op", "a")]}
    plain_named_gz = _write(tmp_path, doc, "plain.json.gz")
    gz_named_plain = _write(tmp_path, doc, "packed.json", gz=True)
    assert len(read_trace(plain_named_gz).events) == len(read_trace(gz_named_plain).events) == 1


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    data = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op\xff", "ts": 1}]}'
    read = read_trace(_write(tmp_path, data))
    assert list(read.events["name"]) == ["op\ufffd"] and read.warnings["invalid UTF-8 replaced"] == 1


@pytest.mark.parametrize(
    ("data", "gz", "reason"),
    [
        (b"", False, "empty file"),
        (b"  \n ", False, "empty file"),
        (b"", True, "empty file"),
        (b'{"traceEvents": [{"ph": "X",}]}', False, "invalid JSON at byte 28: trailing comma in object"),
        (b'{"traceEvents": [{"ph": "X"', False, "invalid JSON at byte 27: the document ends early"),
        (b'{"traceEvents": []} x', False, r"invalid JSON at byte \d+: trailing characters"),
        (b'{"traceEvents": [{"ph": "X", "ts": NaN}]}', False, "invalid JSON at byte 35: invalid character"),
        (b"[1, 2]", False, "top level is not an object with traceEvents"),
        (b'{"schemaVersion": 1}', False, "top level is not an object with traceEvents"),
        (b'{"traceEvents": {}}', False, "top level is not an object with traceEvents"),
        (gzip.compress(b"{}")[:10] + b"\xff" * 20, False, "corrupt gzip stream"),
    ],
)
def test_broken_inputs(tmp_path: Path, data: bytes, gz: bool, reason: str) -> None:
    with pytest.raises(TraceError) as info:
        read_trace(_write(tmp_path, data, gz=gz))
    assert re.match(reason, info.value.reason), info.value.reason


def test_gzip_cut_before_its_first_event(tmp_path: Path) -> None:
    """Files cut later are read as far as they go (test_truncated.py); before the first event, nothing can be."""
    packed = gzip.compress(json.dumps({"traceEvents": [_x("cpu_op", "a")] * 100}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(packed[:10])  # the gzip header only
    with pytest.raises(TraceError, match="truncated gzip stream"):
        read_trace(path)
    text = json.dumps({"traceEvents": [_x("cpu_op", "a")]}).encode()
    path.write_bytes(corpus.cut_gzip(text[:30]))  # part of the first event
    with pytest.raises(TraceError, match="ends early"):
        read_trace(path)


def test_unreadable_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read file"):
        read_trace(tmp_path / "missing.json")
    with pytest.raises(TraceError, match="not a trace file"):
        read_trace(_write(tmp_path, b"{}", "notes.txt"))
    assert is_trace_file("a/b.PT.TRACE.JSON.GZ") and is_trace_file("h.xplane.pb") and not is_trace_file("x.pb")


def test_kineto_recognised_by_cats_without_top_level_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, {"traceEvents": [_x("kernel", "k", pid=0, tid=7, device=0, stream=7)]})
    read = read_trace(path)
    assert read.input.format == "kineto" and list(read.events["kind"]) == ["kernel"]


def test_loader_keeps_only_known_top_level_keys(tmp_path: Path) -> None:
    doc = {"schemaVersion": 1, "metadata": {"env": {"HF_TOKEN": "secret"}}, "traceEvents": []}
    loaded = load_trace_json(_write(tmp_path, doc))
    assert loaded.top == {"schemaVersion": 1} and loaded.events == []
