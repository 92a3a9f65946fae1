"""The memory side table (`TraceRead.memory`) against plain loops over the raw files.

Kineto: ``[memory]`` instant events decoded with the json module; XSpace: the
allocator events walked in the protobuf (xplane_schema's full messages, not the
reader's wire decoding). Hand-built files cover what the real ones lack.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import shared_trace
from tests.readers.test_xspace import _Builder
from traceinsight.events import INPUT_WAIT_PATTERN, MEMORY_COLUMNS, PROFILER_STEP_PATTERN, TraceRead, merge_reads
from traceinsight.readers import read_trace
from traceinsight.readers.kineto import read_kineto_json
from traceinsight.readers.xplane_schema import XSpace
from traceinsight.readers.xspace import read_xspace

KINETO_MEMORY = (  # (trace, absolute levels written)
    ("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", False),
    ("kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz", False),
    ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", True),
    ("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", True),
)
XSPACE_MEMORY = (
    "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb",
    "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "xprof/test_xplanes/tpu_inference_2.xplane.pb",
)
NO_MEMORY = (
    "hta/nccl_parser_config/nccl_data.json.gz",
    "tf_cpu/a_input_bound/plugins/profile/2026_12_02_13_47_03/vm.xplane.pb",
)


# --------------------------------------------------------------------------- plain arithmetic


@cache
def _doc(rel: str) -> dict[str, Any]:
    data = shared_trace(rel).read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data, parse_float=Decimal)


def _ns(us: Any) -> int:
    return int((Decimal(us) * 1000).to_integral_value())


def kineto_expected(rel: str) -> dict[str, dict[str, Any]]:
    """Per device: events, the levels in time order (running sum of Bytes where Total Allocated is missing),
    peak reserved (None when never written), capacity."""
    doc = _doc(rel)
    rows: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for i, event in enumerate(doc["traceEvents"]):
        args = event.get("args") or {}
        if event.get("ph") == "i" and event.get("name") == "[memory]" and args.get("Device Type") == 1:
            rows[f"GPU:{args['Device Id']}"].append((_ns(event["ts"]), i, args))
    capacity = {f"GPU:{p['id']}": p["totalGlobalMem"] for p in doc.get("deviceProperties", [])}
    out = {}
    for device, found in rows.items():
        found.sort(key=lambda row: (row[0], row[1]))
        absolute = all("Total Allocated" in args for _, _, args in found)
        levels, running = [], 0
        for _, _, args in found:
            running += args["Bytes"]
            levels.append(args["Total Allocated"] if absolute else running)
        reserved = [args["Total Reserved"] for _, _, args in found if "Total Reserved" in args]
        out[device] = {
            "events": len(found),
            "levels": levels,
            "deltas": [args["Bytes"] for _, _, args in found],
            "absolute": absolute,
            "peak_allocated": max(levels),
            "peak_reserved": max(reserved) if reserved else None,
            "capacity": capacity.get(device),
        }
    return out


def _stat(plane: Any, stat: Any) -> Any:
    which = stat.WhichOneof("value")
    return plane.stat_metadata[stat.ref_value].name if which == "ref_value" else getattr(stat, which)


def xspace_expected(rel: str) -> dict[str, dict[str, Any]]:
    """Per device, walking every host plane's allocator events: events, peak bytes_allocated, peak in use
    (allocated + reserved), the allocator limit (allocated + reserved + available), top fragmentation,
    the device plane's memory_size."""
    space = XSpace()
    space.ParseFromString(shared_trace(rel).read_bytes())
    device_planes = {p.name.removeprefix("/device:"): p for p in space.planes if p.name.startswith("/device:")}
    kind = "TPU" if any(d.startswith("TPU") for d in device_planes) else "GPU"
    out: dict[str, dict[str, Any]] = {}
    for plane in space.planes:
        if not plane.name.startswith("/host:") or plane.name == "/host:metadata":
            continue
        for line in plane.lines:
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                stats = {plane.stat_metadata[s.metadata_id].name: _stat(plane, s) for s in event.stats}
                allocator = stats.get("allocator_name")
                if allocator is None:
                    device = f"{kind}:{stats['index_on_host']}"
                elif re.fullmatch(r"GPU_\d+_bfc", allocator):
                    device = f"GPU:{allocator.split('_')[1]}"
                else:
                    continue  # host memory (gpu_host_bfc)
                if device not in device_planes:
                    continue
                figures = out.setdefault(
                    device, {"events": 0, "peak_allocated": 0, "peak_in_use": 0, "limit": 0, "fragmentation": 0.0}
                )
                allocated, reserved = stats["bytes_allocated"], stats["bytes_reserved"]
                figures["events"] += 1
                figures["peak_allocated"] = max(figures["peak_allocated"], allocated)
                figures["peak_in_use"] = max(figures["peak_in_use"], allocated + reserved)
                figures["limit"] = max(figures["limit"], allocated + reserved + stats["bytes_available"])
                figures["fragmentation"] = max(figures["fragmentation"], float(stats["fragmentation"]))
    for device, figures in out.items():
        sizes = [_stat(device_planes[device], s) for s in device_planes[device].stats]
        names = [device_planes[device].stat_metadata[s.metadata_id].name for s in device_planes[device].stats]
        figures["memory_size"] = dict(zip(names, sizes, strict=True)).get("memory_size")
    return out


# --------------------------------------------------------------------------- real traces


def _device_rows(memory: pd.DataFrame, device: str) -> pd.DataFrame:
    return memory[(memory["device"] == device).to_numpy()]


def _per_device(
    memory: pd.DataFrame, expected: dict[str, dict[str, Any]]
) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """Each device's expected figures and rows, once what all tables share is checked: columns, devices,
    event counts, peak allocated, time order."""
    assert list(memory.columns) == list(MEMORY_COLUMNS)
    assert set(memory["device"].cat.categories) == set(expected)
    for device, want in expected.items():
        rows = _device_rows(memory, device)
        assert len(rows) == want["events"], device
        assert int(rows["allocated"].max()) == want["peak_allocated"], device
        assert (np.diff(rows["ts_ns"].to_numpy()) >= 0).all(), device
        yield want, rows


@pytest.mark.parametrize(("rel", "absolute"), KINETO_MEMORY)
def test_kineto_memory_matches_plain_arithmetic(rel: str, absolute: bool) -> None:
    read = read_trace(shared_trace(rel))
    memory = read.memory
    for want, rows in _per_device(memory, kineto_expected(rel)):
        assert rows["allocated"].tolist() == want["levels"]
        assert rows["delta"].tolist() == want["deltas"]
        assert bool(rows["absolute"].all()) is want["absolute"] is absolute
        peak_reserved = int(rows["reserved"].max()) if (rows["reserved"] >= 0).any() else None
        assert peak_reserved == want["peak_reserved"]
        assert read.devices[rows["device"].iloc[0]].memory_bytes == want["capacity"]
    # The memory rows are on the event table's clock.
    ts = read.events["ts_ns"]
    assert ts.min() - 10**9 < memory["ts_ns"].min() and memory["ts_ns"].max() < ts.max() + 10**9


@pytest.mark.parametrize(("rel", "absolute"), KINETO_MEMORY)
def test_kineto_memory_is_the_same_streamed_in_chunks(rel: str, absolute: bool, tmp_path: Path) -> None:
    """Whole document, streamed by chunks in this process, and by worker processes (a plain file): one table."""
    path = shared_trace(rel)
    whole = read_trace(path).memory
    pd.testing.assert_frame_equal(read_kineto_json(path, chunk_bytes=1 << 20).memory, whole)
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    streamed = read_kineto_json(plain, chunk_bytes=1 << 20, jobs=3)
    assert streamed is not None
    pd.testing.assert_frame_equal(streamed.memory, whole)


def _outermost_op(ops: list[tuple[int, int, str]], ts: int) -> str | None:
    """Plain search: of the ops running at `ts`, the one that started first (the longest when tied)."""
    running = [(start, -end, name) for start, end, name in ops if start <= ts <= end]
    return min(running)[2] if running else None


@pytest.mark.parametrize("rel", [KINETO_MEMORY[0][0], KINETO_MEMORY[2][0]])
def test_kineto_memory_op_is_the_outermost_cpu_op_of_the_thread(rel: str) -> None:
    doc = _doc(rel)
    base = doc.get("baseTimeNanoseconds", 0) if rel.startswith("tracelens") else 0
    ops: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for event in doc["traceEvents"]:
        name = event.get("name", "")
        if (
            event.get("ph") == "X"
            and str(event.get("cat")).lower() in ("cpu_op", "operator")
            and not PROFILER_STEP_PATTERN.match(name)
            and not INPUT_WAIT_PATTERN.match(name)
        ):
            start = _ns(event["ts"]) + base
            # The 2021 schema writes op tids as strings, memory event tids as numbers.
            ops[int(event["tid"])].append((start, start + _ns(event.get("dur", 0)), name))
    memory = read_trace(shared_trace(rel)).memory
    sample = memory.iloc[:: max(1, len(memory) // 300)]
    found = [None if pd.isna(op) else op for op in sample["op"]]
    expected = [_outermost_op(ops[t], ts) for t, ts in zip(sample["thread"], sample["ts_ns"], strict=True)]
    assert found == expected
    allocations = memory[(memory["delta"] > 0).to_numpy()]
    assert allocations["op"].notna().all()  # every allocation happens inside an op (frees mostly outside)


@pytest.mark.parametrize("rel", XSPACE_MEMORY)
def test_xspace_memory_matches_plain_arithmetic(rel: str) -> None:
    read = read_xspace(shared_trace(rel))
    for want, rows in _per_device(read.memory, xspace_expected(rel)):
        assert int((rows["allocated"] + rows["stack_reserved"]).max()) == want["peak_in_use"]
        assert int((rows["allocated"] + rows["stack_reserved"] + rows["available"]).max()) == want["limit"]
        assert float(rows["fragmentation"].max()) == want["fragmentation"]
        assert read.devices[rows["device"].iloc[0]].memory_bytes == want["memory_size"]
        assert rows["absolute"].all() and (rows["reserved"] == -1).all()


def test_xspace_memory_figures() -> None:
    """What the files say, in numbers checked by hand against the raw stats."""
    gpu = read_xspace(shared_trace(XSPACE_MEMORY[1])).memory
    assert gpu["device"].value_counts().to_dict() == {"GPU:4": 969, "GPU:6": 969, "GPU:1": 19}  # no gpu_host_bfc
    assert gpu["op"].notna().sum() > 1500  # tf_op on most
    tpu = read_xspace(shared_trace(XSPACE_MEMORY[2])).memory
    assert sorted(tpu["device"].cat.categories) == ["TPU:0", "TPU:1", "TPU:2", "TPU:3"]  # from index_on_host
    assert int(tpu["stack_reserved"].max()) > 0  # the TPU's program stack


@pytest.mark.parametrize("rel", NO_MEMORY)
def test_traces_without_memory_events_have_an_empty_table(rel: str) -> None:
    memory = read_trace(shared_trace(rel)).memory
    assert memory.empty and list(memory.columns) == list(MEMORY_COLUMNS)


# --------------------------------------------------------------------------- hand-built files


def _memory_event(ts: float, device_type: int, device: int, nbytes: int, tid: int = 1, **more: int) -> dict[str, Any]:
    args = {"Device Type": device_type, "Device Id": device, "Bytes": nbytes, **more}
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts, "args": args}


def _op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _kineto(tmp_path: Path, events: list[dict[str, Any]], **top: Any) -> TraceRead:
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return read_trace(path)


def test_kineto_new_schema_levels_ops_and_devices(tmp_path: Path) -> None:
    totals = {"Total Allocated": 0, "Total Reserved": 0}
    events = [
        _op("aten::linear", 10, 20),
        _op("aten::empty", 11, 2),  # inside linear: the outermost op is linear's
        _op("aten::relu", 40, 5, tid=2),
        _memory_event(12, 1, 0, 512, Addr=7, **{**totals, "Total Allocated": 1512, "Total Reserved": 4096}),
        _memory_event(41, 1, 0, 256, tid=2, Addr=8, **{**totals, "Total Allocated": 1768, "Total Reserved": 4096}),
        _memory_event(35, 1, 1, 100, Addr=9, **{**totals, "Total Allocated": 100, "Total Reserved": 2048}),
        _memory_event(36, 0, -1, 64),  # CPU memory: not a device's
        _memory_event(50, 1, 0, -512, Addr=7, **{**totals, "Total Allocated": 1256, "Total Reserved": 4096}),
    ]
    read = _kineto(tmp_path, events, deviceProperties=[{"id": 0, "totalGlobalMem": 80 * 2**30}])
    memory = read.memory
    assert memory["device"].tolist() == ["GPU:0", "GPU:1", "GPU:0", "GPU:0"]  # time order
    assert memory["ts_ns"].tolist() == [12_000, 35_000, 41_000, 50_000]
    assert memory["allocated"].tolist() == [1512, 100, 1768, 1256]
    assert memory["reserved"].tolist() == [4096, 2048, 4096, 4096]
    assert memory["delta"].tolist() == [512, 100, 256, -512]
    assert memory["addr"].tolist() == [7, 9, 8, 7]
    assert memory["thread"].tolist() == [1, 1, 2, 1]
    assert [None if pd.isna(op) else op for op in memory["op"]] == ["aten::linear", None, "aten::relu", None]
    assert memory["absolute"].all() and (memory["stack_reserved"] == -1).all()
    assert read.devices["GPU:0"].memory_bytes == 80 * 2**30
    assert memory["device"].cat.categories.dtype == pd.Index(["a"]).dtype


def test_kineto_2021_schema_is_a_running_sum_per_device(tmp_path: Path) -> None:
    events = [
        _memory_event(30, 1, 0, -100),  # frees what was allocated before the profile: levels go below 0
        _memory_event(10, 1, 0, 400),
        _memory_event(20, 1, 0, 200),
        _memory_event(25, 1, 1, 50),
        _memory_event(40, 1, 0, 1000),
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "args": {"Device Type": 1, "Bytes": 5}},  # no ts
    ]
    read = _kineto(tmp_path, events)
    gpu0 = _device_rows(read.memory, "GPU:0")
    assert gpu0["allocated"].tolist() == [400, 600, 500, 1500]
    assert not gpu0["absolute"].any() and (gpu0["reserved"] == -1).all() and (gpu0["addr"] == -1).all()
    assert _device_rows(read.memory, "GPU:1")["allocated"].tolist() == [50]
    assert read.warnings["memory events without ts skipped"] == 1


def test_kineto_exact_timestamps_for_memory_events(tmp_path: Path) -> None:
    """Epoch µs with ns decimals (beyond a double's precision) are read digit by digit, as complete events are."""
    path = tmp_path / "t.pt.trace.json"
    path.write_text(
        '{"schemaVersion": 1, "traceEvents": ['
        '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1712195495519689.001,'
        ' "dur": 0.5},'
        '{"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1712195495519689.047,'
        ' "args": {"Device Type": 1, "Device Id": 0, "Bytes": 8, "Total Allocated": 8, "Total Reserved": 8}}]}'
    )
    memory = read_trace(path).memory
    assert memory["ts_ns"].tolist() == [1712195495519689047]
    assert memory["op"].tolist() == ["aten::add"]


def _memory_space() -> bytes:
    b = _Builder()
    gpu = b.plane("/device:GPU:0")
    b.add_stats(gpu, gpu, memory_size=16 * 2**30)
    b.plane("/device:GPU:1")
    cpu = b.plane("/host:CPU")
    thread = cpu.lines.add(id=5, name="tf_Compute/5", timestamp_ns=1000)
    common = {"bytes_reserved": 0, "peak_bytes_in_use": 0, "requested_bytes": 100}
    b.event(
        cpu,
        thread,
        "MemoryAllocation",
        2_000,
        0,
        allocator_name=("ref", "GPU_0_bfc"),
        bytes_allocated=1024,
        bytes_available=2**30,
        fragmentation=0.25,
        allocation_bytes=256,
        addr=2**50,
        tf_op=("ref", "dense/MatMul"),
        **common,
    )
    b.event(
        cpu,
        thread,
        "MemoryAllocation",
        3_000,
        0,
        allocator_name="gpu_host_bfc",
        bytes_allocated=7,
        bytes_available=7,
        fragmentation=0.0,
        **common,
    )
    b.event(
        cpu,
        thread,
        "MemoryDeallocation",
        4_000,
        0,
        allocator_name="GPU_0_bfc",
        bytes_allocated=768,
        bytes_available=2**30 + 256,
        fragmentation=0,
        allocation_bytes=256,
        addr=2**50,
        **common,
    )
    b.event(cpu, thread, "MemoryAllocation", 5_000, 0, allocator_name="GPU_3_bfc", bytes_allocated=1, **common)
    b.event(cpu, thread, "MemoryAllocation", 6_000, 0, allocator_name="GPU_1_bfc", bytes_allocated=64, **common)
    b.event(cpu, thread, "Other", 1_000, 5_000)
    return b.space.SerializeToString()


def test_xspace_hand_built_allocator_events() -> None:
    read = read_xspace(Path("/nowhere/m.xplane.pb"), _memory_space())
    memory = read.memory
    assert memory["device"].tolist() == ["GPU:0", "GPU:0", "GPU:1"]  # no host allocator, no plane for GPU:3
    assert memory["ts_ns"].tolist() == [1002, 1004, 1006]
    assert memory["allocated"].tolist() == [1024, 768, 64]
    assert memory["available"].tolist() == [2**30, 2**30 + 256, -1]
    assert memory["delta"].tolist() == [256, -256, 0]
    assert memory["addr"].tolist() == [2**50, 2**50, -1]
    assert memory["fragmentation"].tolist()[:2] == [0.25, 0.0] and np.isnan(memory["fragmentation"].iloc[2])
    assert [None if pd.isna(op) else op for op in memory["op"]] == ["dense/MatMul", None, None]
    assert memory["thread"].tolist() == [5, 5, 5] and (memory["stack_reserved"] == 0).all()
    assert len(read.events) == 6  # the allocator events stay host rows of the event table


def test_merged_inputs_prefix_memory_devices(tmp_path: Path) -> None:
    events = [_memory_event(10, 1, 0, 8, **{"Total Allocated": 8, "Total Reserved": 8})]
    reads = []
    for rank, found in enumerate((events, [], events)):
        folder = tmp_path / str(rank)
        folder.mkdir()
        reads.append(_kineto(folder, [*found, _op("aten::add", 5, 1)], distributedInfo={"rank": rank}))
    assert merge_reads([reads[0]]).memory["device"].tolist() == ["GPU:0"]
    assert merge_reads([reads[1]]).memory.empty
    profile = merge_reads(reads)  # renames the reads' devices in place, as it does the events'
    assert profile.memory["device"].tolist() == ["rank0/GPU:0", "rank2/GPU:0"]
    assert profile.memory["input_id"].tolist() == [0, 2]
    assert profile.memory["op"].isna().all()
