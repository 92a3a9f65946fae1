"""The XSpace reader, checked against plain loops over the raw protobuf and hand-built XSpaces."""

from __future__ import annotations

import json
import multiprocessing
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import traceinsight as ti
from benchmarks.replicate_xspace import XSpaceReplicator
from tests.conftest import SHARED_TRACES, shared_trace
from traceinsight import parallel
from traceinsight.errors import TraceError
from traceinsight.events import COLUMNS, TraceRead, narrowed_ints
from traceinsight.readers import xspace, xspace_table, xspace_wire
from traceinsight.readers.xplane_schema import XSpace
from traceinsight.readers.xspace import read_xspace
from traceinsight.result import as_dict

GPU_MULTI_WORKER = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
TPU = "xprof/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb"
REAL_FILES = [GPU_MULTI_WORKER, TPU, MI300, "tf_cpu/a_input_bound", "tf_cpu/b_input_tuned"]


def _real_path(relative: str) -> Path:
    """A real trace; tf_cpu scenarios name their directory (the run folder has a timestamp)."""
    if relative.startswith("tf_cpu/"):
        found = sorted((SHARED_TRACES / relative).glob("plugins/profile/*/vm.xplane.pb"))
        return found[0] if found else shared_trace(f"{relative}/plugins/profile/missing/vm.xplane.pb")
    return shared_trace(relative)


@cache
def _read(path: Path) -> TraceRead:
    return read_xspace(path)


@cache
def _raw(path: Path) -> Any:
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def _stat(plane: Any, stats: Any, wanted: str) -> Any:
    """Plain lookup of one stat by name (ref values resolved), None if absent."""
    for stat in stats:
        if plane.stat_metadata[stat.metadata_id].name != wanted:
            continue
        which = stat.WhichOneof("value")
        return plane.stat_metadata[stat.ref_value].name if which == "ref_value" else getattr(stat, which)
    return None


def _expected_device_work(space: Any) -> dict[str, Counter[str]]:
    """Per device, by walking the raw protobuf: kernels, H2D copies and H2D bytes, kernel ns and start ns."""
    start = 0
    for plane in space.planes:
        if plane.name == "Task Environment":
            start = _stat(plane, plane.stats, "profile_start_time") or 0
    out: dict[str, Counter[str]] = {}
    for plane in space.planes:
        match = re.fullmatch(r"/device:(GPU|TPU):(\d+)", plane.name)
        if not match:
            continue
        counts = out.setdefault(f"{match[1]}:{match[2]}", Counter())
        for line in plane.lines:
            if not (line.name.startswith("Stream #") if match[1] == "GPU" else line.name == "XLA Ops"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name == "MemcpyH2D":
                    counts["h2d"] += 1
                    details = _stat(plane, event.stats, "memcpy_details")
                    counts["h2d_bytes"] += sum(int(tok[5:]) for tok in details.split() if tok.startswith("size:"))
                elif not name.startswith(("Memcpy", "Memset")):
                    counts["kernels"] += 1
                    counts["kernel_ns"] += event.duration_ps // 1000
                    counts["kernel_start_ns"] += start + (line.timestamp_ns * 1000 + event.offset_ps) // 1000
    return out


@pytest.mark.parametrize("relative", REAL_FILES)
def test_device_work_matches_raw_protobuf(relative: str) -> None:
    path = _real_path(relative)
    events = _read(path).events
    expected = _expected_device_work(_raw(path))
    for device, counts in expected.items():
        on_device = events[(events["device"] == device).to_numpy()]
        # A TPU's ops line: its XLA asynchronous copies (`copy-start` / `copy-done`) are copies, the rest kernels.
        xla_copies = (on_device["kind"] == "memcpy").to_numpy() & on_device["name"].astype(str).str.match(
            r"%?copy-(?:start|done)\b"
        ).to_numpy()
        kernels = on_device[(on_device["kind"] == "kernel").to_numpy() | xla_copies]
        h2d = on_device[(on_device["copy_kind"] == "h2d").to_numpy() & ~xla_copies]
        assert len(kernels) == counts["kernels"], device
        assert int(kernels["dur_ns"].sum()) == counts["kernel_ns"], device
        assert sum(kernels["ts_ns"].tolist()) == counts["kernel_start_ns"], device
        assert len(h2d) == counts["h2d"], device
        assert int(h2d["bytes"].sum()) == counts["h2d_bytes"], device
    device_events = events[events["device"].notna().to_numpy()]
    assert set(device_events["device"].unique()) <= set(expected)


@pytest.mark.parametrize("relative", REAL_FILES)
def test_table_contract_and_event_count(relative: str) -> None:
    path = _real_path(relative)
    read = _read(path)
    events = read.events
    assert tuple(events.columns) == COLUMNS
    assert events["dur_ns"].min() >= 0
    assert read.input.format == "xspace" and read.input.events == len(events)
    # Every event of every read line is a row: count lines the plain way.
    space = _raw(path)
    expected = 0
    for plane in space.planes:
        if plane.name.startswith("/device:GPU:"):
            read = [ln for ln in plane.lines if ln.name.startswith("Stream #") or ln.name == "Steps"]
            expected += sum(len(ln.events) for ln in read)
        elif plane.name.startswith(("/device:TPU:", "/host:")) and plane.name != "/host:metadata":
            expected += sum(len(ln.events) for ln in plane.lines)
    assert len(events) == expected
    host = events[events["device"].isna().to_numpy()]
    assert (host["thread"] != -1).all() and (host["stream"] == -1).all()


def test_gpu_multi_worker_figures() -> None:
    """formats.md §4c: H2D 202 copies / 81,118 B / 394 µs, 1,330 kernels, 1556/1556 joins, 382 µs launch lag."""
    read = _read(_real_path(GPU_MULTI_WORKER))
    events = read.events
    h2d = events[events["copy_kind"] == "h2d"]
    assert (len(h2d), int(h2d["bytes"].sum())) == (202, 81_118)
    assert round(h2d["dur_ns"].sum() / 1000) == 394
    kernels = events[events["kind"] == "kernel"]
    assert len(kernels) == 1330
    assert kernels["dur_ns"].median() == pytest.approx(12_300, abs=100)
    assert (kernels["dur_ns"] < 10_000).mean() == pytest.approx(0.23, abs=0.01)
    device = events[events["kind"].isin(["kernel", "memcpy"]) & events["device"].notna()]
    host = events[events["device"].isna() & (events["correlation"] >= 0)]
    assert len(device) == 1556 and (host["kind"] == "runtime").all()
    joined = device.merge(host[["correlation", "ts_ns"]], on="correlation", suffixes=("", "_host"))
    assert len(joined) == 1556
    assert np.median(joined["ts_ns"] - joined["ts_ns_host"]) / 1000 == pytest.approx(382, abs=1)
    gpu4 = device[device["device"] == "GPU:4"]
    assert round(((gpu4["ts_ns"] + gpu4["dur_ns"]).max() - gpu4["ts_ns"].min()) / 1e6) == 119
    # kernel_details "grid:160,1,1" on an 80-SM V100 -> 2 blocks per SM.
    assert kernels["blocks_per_sm"].max() == 2.0
    info = read.devices["GPU:4"]
    assert (info.compute_capability, info.sm_count, info.clock_khz) == ("7.0", 80, 1_530_000)
    assert (info.memory_bytes, info.memory_bandwidth_bps) == (16_945_512_448, 898_048_000_000.0)
    assert sorted(read.devices) == [f"GPU:{i}" for i in range(8)]
    assert read.framework == "tensorflow"
    assert read.input.host == "34.83.195.179:6003"
    assert read.metadata["clock"] == "relative"  # this 2020 file has no Task Environment plane
    steps = events[events["kind"] == "step"]
    assert sorted(steps["device"].astype(str)) == ["GPU:4", "GPU:6"] and (steps["step_id"] == 0).all()


def test_tpu_and_rocm_files() -> None:
    tpu = _read(_real_path(TPU))
    # Of each core's XLA Ops events, 1,200 are asynchronous copies (host offloading), the rest kernels.
    copies = tpu.events[tpu.events["kind"] == "memcpy"]
    assert copies.groupby("device", observed=True).size().to_dict() == {f"TPU:{i}": 1200 for i in range(4)}
    kernels = tpu.events[tpu.events["kind"] == "kernel"]
    assert kernels.groupby("device", observed=True).size().to_dict() == {
        "TPU:0": 304,
        "TPU:1": 303,
        "TPU:2": 303,
        "TPU:3": 303,
    }
    modules = tpu.events[tpu.events["kind"] == "annotation"]
    assert len(modules) == 105 + 3 * 103 and modules["device"].notna().all()
    assert tpu.framework == "jax" and tpu.input.host == "tpu_inference_2"
    assert tpu.devices["TPU:0"].name == "TPU v6 Lite"
    assert tpu.metadata["clock"] == "epoch"
    start, stop = tpu.metadata["profile_start_time_ns"], tpu.metadata["profile_stop_time_ns"]
    assert start <= tpu.events["ts_ns"].min() and tpu.events["ts_ns"].max() <= stop

    rocm = _read(_real_path(MI300))
    kernels = rocm.events[rocm.events["kind"] == "kernel"]
    per_gpu = kernels.groupby("device", observed=True).size().to_dict()
    assert per_gpu == {"GPU:0": 60, **{f"GPU:{i}": 25 for i in range(1, 8)}}
    assert rocm.framework == "jax" and rocm.input.host == "tw003"
    gpu0 = rocm.devices["GPU:0"]
    assert (gpu0.vendor, gpu0.sm_count, gpu0.clock_khz, gpu0.compute_capability) == ("AMD", 304, 2_100_000, "9.4")
    assert kernels["occupancy_pct"].isna().all()  # ROCm writes occ_pct:0, i.e. not computed
    launches = rocm.events[rocm.events["kind"] == "runtime"]
    assert set(kernels["correlation"]) <= set(launches["correlation"])
    python = rocm.events[rocm.events["kind"] == "python"]
    assert len(python) > 0 and python["name"].astype(str).str.startswith("$").all()


@pytest.mark.parametrize(("scenario", "first_step"), [("a_input_bound", 4), ("b_input_tuned", 16)])
def test_tf_cpu_step_markers(scenario: str, first_step: int) -> None:
    path = _real_path(f"tf_cpu/{scenario}")
    read = _read(path)
    steps = read.events[read.events["kind"] == "step"].sort_values("ts_ns")
    assert list(steps["name"].astype(str)) == ["train"] * 10
    assert list(steps["step_id"]) == list(range(first_step, first_step + 10))
    wall_ms = json.loads((SHARED_TRACES / "tf_cpu" / scenario / "run_info.json").read_text())["profiled_step_wall_ms"]
    np.testing.assert_allclose(steps["dur_ns"].to_numpy() / 1e6, wall_ms, atol=0.5)
    assert (read.events["kind"] == "input_wait").sum() == 10
    assert read.framework == "tensorflow" and read.input.host == "vm" and read.metadata["clock"] == "epoch"
    space = _raw(path)
    task = next(p for p in space.planes if p.name == "Task Environment")
    assert read.metadata["profile_start_time_ns"] == _stat(task, task.stats, "profile_start_time")
    assert steps["ts_ns"].min() >= read.metadata["profile_start_time_ns"]


# ----------------------------------------------------------------------------- hand-built XSpaces

START = 1_700_000_000_000_000_000


class _Builder:
    """Small helper to write an XSpace plane by plane with interned stat names."""

    def __init__(self) -> None:
        self.space = XSpace()

    def plane(self, name: str) -> Any:
        plane = self.space.planes.add()
        plane.name = name
        return plane

    @staticmethod
    def stat_id(plane: Any, name: str) -> int:
        for key, meta in plane.stat_metadata.items():
            if meta.name == name:
                return key
        key = len(plane.stat_metadata) + 1
        plane.stat_metadata[key].id = key
        plane.stat_metadata[key].name = name
        return key

    def add_stats(self, plane: Any, target: Any, **stats: Any) -> None:
        for name, value in stats.items():
            stat = target.stats.add()
            stat.metadata_id = self.stat_id(plane, name)
            if isinstance(value, tuple):  # ("ref", text): an interned string
                stat.ref_value = self.stat_id(plane, value[1])
            elif isinstance(value, float):
                stat.double_value = value
            elif isinstance(value, str):
                stat.str_value = value
            elif value >= 2**32:
                stat.uint64_value = value
            else:
                stat.int64_value = value

    def event(self, plane: Any, line: Any, name: str, offset_ps: int, duration_ps: int, **stats: Any) -> Any:
        md = next((k for k, m in plane.event_metadata.items() if m.name == name), None)
        if md is None:
            md = len(plane.event_metadata) + 1
            plane.event_metadata[md].id = md
            plane.event_metadata[md].name = name
        event = line.events.add(metadata_id=md, offset_ps=offset_ps, duration_ps=duration_ps)
        self.add_stats(plane, event, **stats)
        return event


def _hand_built() -> bytes:
    b = _Builder()
    b.space.hostnames.append("myhost")
    b.space.errors.append("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")
    gpu = b.plane("/device:GPU:0")
    b.add_stats(
        gpu,
        gpu,
        core_count=10,
        compute_cap_major=8,
        compute_cap_minor=6,
        clock_rate=1_410_000,
        memory_size=40 * 2**30,
        memory_bandwidth=1_555_000_000_000,
        device_vendor="Nvidia",
        gpu_device_name="NVIDIA A100",
    )
    stream = gpu.lines.add(id=7, name="Stream #7(Compute,MemcpyH2D,Memset)", timestamp_ns=1000)
    b.event(
        gpu,
        stream,
        "k1",
        1_500,
        2_999,
        correlation_id=11,
        kernel_details=("ref", "regs:32 grid:20,2,1 block:128,1,1 occ_pct:50"),
    )
    k2 = b.event(
        gpu,
        stream,
        "k2",
        10_000,
        5_000_000,
        correlation_id=2**40 + 5,
        kernel_details="grid:30,1,1 block:64,1,1 occ_pct:40",
        theoretical_occupancy_pct=75.0,
    )
    b.add_stats(gpu, gpu.event_metadata[k2.metadata_id], kernel_details="grid:5,1,1 occ_pct:10")
    k3 = b.event(gpu, stream, "k3", 20_000, 1_000)
    b.add_stats(gpu, gpu.event_metadata[k3.metadata_id], correlation_id=99)
    b.event(
        gpu,
        stream,
        "MemcpyH2D",
        30_000,
        4_000,
        memcpy_details=("ref", "kind_src:pageable kind_dst:device size:4096 dest:0 async:1"),
    )
    b.event(gpu, stream, "MemcpyD2H", 40_000, 1_000, memcpy_details="size:8 dest:0 async:0")
    b.event(gpu, stream, "Memset 3", 50_000, 1_000, Memset_details="kind:device num_bytes:512 async:1")
    b.event(gpu, stream, "MemoryAlloc", 55_000, 1_000)
    aggregated = b.event(gpu, stream, "k1", 0, 7_000)
    aggregated.num_occurrences = 5
    derived = gpu.lines.add(id=-559038734, name="TensorFlow Ops", timestamp_ns=1000)
    b.event(gpu, derived, "dense/MatMul:MatMul", 1_500, 2_999)
    steps = gpu.lines.add(id=-559038737, name="Steps", timestamp_ns=1000)
    b.event(gpu, steps, "3", 0, 60_000_000)

    cpu = b.plane("/host:CPU")
    thread = cpu.lines.add(id=42, name="tf_Compute/42", timestamp_ns=500)
    b.event(cpu, thread, "cudaLaunchKernel", 0, 800_000, correlation_id=11)
    b.event(cpu, thread, "cuStreamSynchronize", 900_000, 100_000, correlation_id=12)
    b.event(cpu, thread, "train", 0, 70_000_000, step_num=7, _r=1)
    b.event(cpu, thread, "train", 80_000_000, 1_000)
    b.event(cpu, thread, "dense/MatMul:MatMul", 1_000_000, 2_000)
    b.event(cpu, thread, "$demo.py:10 main", 1_000_000, 2_000)
    b.event(cpu, thread, "IteratorGetNextOp::DoCompute", 2_000_000, 3_000)
    b.event(cpu, thread, "Iterator::Root", 2_000_000, 3_000)

    task = b.plane("Task Environment")
    b.add_stats(task, task, profile_start_time=START, profile_stop_time=START + 10**9)
    meta = b.plane("/host:metadata")
    meta.lines.add(id=1, name="ignored").events.add(metadata_id=1, offset_ps=1)
    return b.space.SerializeToString()


@pytest.fixture(scope="module")
def hand_built() -> TraceRead:
    return read_xspace(Path("/nowhere/built.xplane.pb"), _hand_built())


def _row(read: TraceRead, name: str, **where: Any) -> pd.Series:
    events = read.events
    mask = (events["name"] == name).to_numpy()
    for col, value in where.items():
        mask = mask & (events[col] == value).to_numpy()
    rows = events[mask]
    assert len(rows) == 1, (name, where, len(rows))
    return rows.iloc[0]


def test_hand_built_device_rows(hand_built: TraceRead) -> None:
    k1 = _row(hand_built, "k1")
    assert (k1["kind"], k1["device"], k1["stream"], k1["thread"]) == ("kernel", "GPU:0", 7, -1)
    assert (k1["ts_ns"], k1["dur_ns"]) == (START + 1000 + 1, 2)  # (1000 ns * 1000 + 1500 ps) // 1000; 2999 ps
    assert (k1["correlation"], k1["occupancy_pct"], k1["blocks_per_sm"]) == (11, 50.0, 4.0)  # ref stat; 40 blocks
    k2 = _row(hand_built, "k2")
    # Event stats win over the metadata's kernel_details; the theoretical_occupancy_pct stat over occ_pct.
    assert (k2["blocks_per_sm"], k2["occupancy_pct"], k2["dur_ns"]) == (3.0, 75.0, 5000)
    assert k2["correlation"] == 2**40 + 5  # written as uint64_value
    assert _row(hand_built, "k3")["correlation"] == 99  # only the metadata carries it
    h2d = _row(hand_built, "MemcpyH2D")
    assert (h2d["kind"], h2d["copy_kind"], h2d["bytes"], h2d["src_memory"]) == ("memcpy", "h2d", 4096, "pageable")
    d2h = _row(hand_built, "MemcpyD2H")
    assert (d2h["copy_kind"], d2h["bytes"], d2h["src_memory"]) == ("d2h", 8, "unknown")
    memset = _row(hand_built, "Memset 3")
    assert (memset["kind"], memset["bytes"]) == ("memset", 512) and pd.isna(memset["copy_kind"])
    assert _row(hand_built, "MemoryAlloc")["kind"] == "other"
    step = _row(hand_built, "3")
    assert (step["kind"], step["device"], step["step_id"]) == ("step", "GPU:0", 3)
    assert hand_built.warnings["xspace: aggregated events (num_occurrences, no timestamp) skipped"] == 1
    assert (hand_built.events["name"] == "k1").sum() == 1
    # The derived "TensorFlow Ops" line is not read: only the host copy of the op is a row.
    assert pd.isna(_row(hand_built, "dense/MatMul:MatMul")["device"])


def test_hand_built_host_rows(hand_built: TraceRead) -> None:
    expected = {
        "cudaLaunchKernel": "runtime",
        "cuStreamSynchronize": "sync",
        "dense/MatMul:MatMul": "cpu_op",
        "$demo.py:10 main": "python",
        "IteratorGetNextOp::DoCompute": "input_wait",
        "Iterator::Root": "other",
    }
    for name, kind in expected.items():
        row = _row(hand_built, name)
        assert (row["kind"], row["thread"], row["stream"]) == (kind, 42, -1), name
        assert pd.isna(row["device"]) and row["host"] == "myhost"
    assert _row(hand_built, "cudaLaunchKernel")["ts_ns"] == START + 500
    marker = _row(hand_built, "train", kind="step")
    assert (marker["step_id"], marker["dur_ns"]) == (7, 70_000)
    assert _row(hand_built, "train", kind="other")["step_id"] == -1  # no step_num: not a step


def test_hand_built_read_info(hand_built: TraceRead) -> None:
    gpu = hand_built.devices["GPU:0"]
    assert as_dict(gpu) == {
        "id": "GPU:0",
        "name": "NVIDIA A100",
        "vendor": "Nvidia",
        "compute_capability": "8.6",
        "sm_count": 10,
        "memory_bytes": 40 * 2**30,
        "clock_khz": 1_410_000,
        "memory_bandwidth_bps": 1.555e12,
    }
    assert list(hand_built.devices) == ["GPU:0"]
    assert hand_built.input.host == "myhost" and hand_built.input.rank is None
    assert hand_built.framework == "tensorflow"
    meta = hand_built.metadata
    assert meta["planes"] == ["/device:GPU:0", "/host:CPU", "Task Environment", "/host:metadata"]
    assert (meta["profile_start_time_ns"], meta["profile_stop_time_ns"], meta["clock"]) == (
        START,
        START + 10**9,
        "epoch",
    )
    assert len(hand_built.events) == 7 + 1 + 8  # stream events (less the aggregate) + step + host
    assert meta["errors"] == ["CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"]
    assert hand_built.warnings["xspace: profiler reported: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"] == 1


def test_host_name_from_file_name_relative_clock_and_unnamed_events() -> None:
    b = _Builder()
    cpu = b.plane("/host:CPU")
    line = cpu.lines.add(id=1, name="main", timestamp_ns=5)
    b.event(cpu, line, "work", 2_000, 1_000)
    line.events.add(metadata_id=77, offset_ps=9_000)  # no metadata entry 77
    read = read_xspace(Path("/x/worker-3.xplane.pb"), b.space.SerializeToString())
    assert read.input.host == "worker-3" and read.framework == "unknown"
    assert read.metadata["clock"] == "relative" and read.events["ts_ns"].tolist() == [7, 14]
    assert read.events["name"].tolist() == ["work", ""]
    assert read.warnings["xspace: events whose metadata id has no entry (name left empty)"] == 1


def test_lines_already_on_the_epoch_clock_are_not_shifted() -> None:
    """An unsaved capture has epoch line timestamps: adding profile_start_time again would double them."""
    b = _Builder()
    cpu = b.plane("/host:CPU")
    b.event(cpu, cpu.lines.add(id=1, name="main", timestamp_ns=START + 50), "work", 1_999, 1_000)
    task = b.plane("Task Environment")
    b.add_stats(task, task, profile_start_time=START)
    read = read_xspace(Path("raw.xplane.pb"), b.space.SerializeToString())
    assert read.events["ts_ns"].tolist() == [START + 51] and read.metadata["clock"] == "epoch"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xff\xff\xff\xff",
        b'{"traceEvents": []}',
        b"\x08\x01",  # valid protobuf, but no planes
        _hand_built()[:40],  # cut inside the first plane: no plane is whole
    ],
    ids=["empty", "garbage", "json", "no-planes", "truncated"],
)
def test_not_an_xspace(data: bytes) -> None:
    with pytest.raises(TraceError, match="not an XSpace protobuf"):
        read_xspace(Path("bad.xplane.pb"), data)


def test_corrupt_event_bytes() -> None:
    b = _Builder()
    cpu = b.plane("/host:CPU")
    b.event(cpu, cpu.lines.add(id=1, name="main"), "work", 300, 500)
    data = b.space.SerializeToString()
    event = cpu.lines[0].events[0].SerializeToString()
    assert data.count(event) == 1
    broken = bytes([event[0] | 7]) + event[1:]  # wire type 7 does not exist
    with pytest.raises(TraceError, match="corrupt XSpace event data"):
        read_xspace(Path("bad.xplane.pb"), data.replace(event, broken))


def test_too_big_and_unreadable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Protobuf parses a line (or a plane's metadata) of at most 2 GiB; the file may be larger."""
    monkeypatch.setattr(xspace_wire, "MAX_PROTOBUF_BYTES", 100)
    with pytest.raises(TraceError, match="2 GiB"):
        read_xspace(Path("big.xplane.pb"), _hand_built())
    with pytest.raises(TraceError, match="cannot read"):
        read_xspace(tmp_path / "missing.xplane.pb")


# ----------------------------------------------------------------------------- any layout protobuf allows


def _varint(value: int) -> bytes:
    value &= 2**64 - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def _field(number: int, value: int | bytes) -> bytes:
    """One protobuf field: a varint, or length-delimited bytes."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _odd_events_space() -> bytes:
    """A GPU stream whose events (and one stat) are written in ways writers do not, though protobuf allows
    them: fields out of order, repeated (the last wins), unknown, a tag written in two bytes; and a line
    whose events have another line field between them."""
    b = _Builder()
    gpu = b.plane("/device:GPU:0")
    md = {name: i + 1 for i, name in enumerate(("k_usual", "k_reordered", "k_repeated", "k_unknown", "MemcpyH2D"))}
    for name, key in md.items():
        gpu.event_metadata[key].id = key
        gpu.event_metadata[key].name = name
    corr, details = b.stat_id(gpu, "correlation_id"), b.stat_id(gpu, "memcpy_details")
    stat = _field(1, corr) + _field(4, 7)  # correlation_id 7
    events = [
        _field(1, md["k_usual"]) + _field(2, 5_000) + _field(3, 2_000) + _field(4, stat),
        _field(4, _field(4, 8) + _field(1, corr)) + _field(3, 3_000) + _field(2, 9_000) + _field(1, md["k_reordered"]),
        _field(1, md["k_repeated"]) + _field(2, 1) + _field(2, 12_000) + _field(3, 1_000) + _field(3, 4_000),
        b"\x88\x00" + _varint(md["k_unknown"]) + _field(2, 20_000) + _field(9, 5) + _field(3, 6_000),
        _field(1, md["MemcpyH2D"]) + _field(2, 30_000) + _field(4, _field(1, details) + _field(5, b"size:64")),
    ]
    header = _field(1, 3) + _field(2, b"Stream #3(Compute)") + _field(3, 100)
    first = header + b"".join(_field(4, event) for event in events)
    second = (
        _field(1, 4)
        + _field(2, b"Stream #4(Compute)")
        + _field(4, events[0])
        + _field(9, 123)  # duration_ps, between the events
        + _field(4, events[1])
    )
    rest = gpu.SerializeToString()  # the plane's metadata
    plane = _field(3, first) + _field(3, second) + rest
    return _field(1, plane)


def test_events_in_any_layout_read_as_protobuf_reads_them() -> None:
    data = _odd_events_space()
    space = XSpace()
    space.ParseFromString(data)
    plane = space.planes[0]
    expected = sorted(
        (
            plane.event_metadata[event.metadata_id].name,
            line.id,
            line.timestamp_ns + event.offset_ps // 1000,
            event.duration_ps // 1000,
            _stat(plane, event.stats, "correlation_id") or -1,
        )
        for line in plane.lines
        for event in line.events
    )
    assert len(expected) == 7  # the layouts above are valid protobuf
    read = read_xspace(Path("odd.xplane.pb"), data)
    rows = read.events
    got = sorted(
        zip(
            rows["name"].astype(str),
            rows["stream"].tolist(),
            rows["ts_ns"].tolist(),
            rows["dur_ns"].tolist(),
            rows["correlation"].tolist(),
            strict=True,
        )
    )
    assert got == expected
    copy = rows[rows["name"] == "MemcpyH2D"]
    assert copy["bytes"].tolist() == [64]
    assert not read.warnings  # nothing here is damage


def test_a_stat_whose_id_runs_on_is_corrupt_and_the_event_read() -> None:
    """A stat id over 10 bytes long, where the reader looks for the stats it wants (ids 0 and 128 share the
    first byte of that varint): that stat is ignored and counted, the event and its other stat read."""
    b = _Builder()
    cpu = b.plane("/host:CPU")
    for key, name in ((0, "correlation_id"), (128, "step_num")):
        cpu.stat_metadata[key].id = key
        cpu.stat_metadata[key].name = name
    cpu.event_metadata[1].id = 1
    cpu.event_metadata[1].name = "work"
    bad = _field(4, b"\x08" + b"\x80" * 10 + b"\x01" + _field(4, 5))
    event = _field(1, 1) + _field(2, 1_000) + bad + _field(4, _field(1, 0) + _field(4, 9))
    line = _field(1, 1) + _field(2, b"main") + _field(4, event)
    rest = cpu.SerializeToString()
    read = read_xspace(Path("odd.xplane.pb"), _field(1, _field(3, line) + rest))
    assert read.events[["name", "correlation", "ts_ns"]].values.tolist() == [["work", 9, 1]]
    assert read.warnings == Counter({"xspace: corrupt event stats (bad protobuf wire data) ignored": 1})


def test_batches_and_chunks_do_not_change_the_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines read a few at a time and events decoded a few at a time give the table read in large pieces."""
    paths = [_real_path(relative) for relative in REAL_FILES]
    whole = [read_xspace(path) for path in paths]
    monkeypatch.setattr(xspace_wire, "LINE_BATCH_BYTES", 3000)
    monkeypatch.setattr(xspace_wire, "EVENT_CHUNK", 97)
    for path, want in zip(paths, whole, strict=True):
        got = read_xspace(path)
        pd.testing.assert_frame_equal(got.events, want.events)
        pd.testing.assert_frame_equal(got.memory, want.memory)
        assert got.warnings == want.warnings and got.metadata == want.metadata


def test_replicated_file_reports_the_copies_figures(tmp_path: Path) -> None:
    """Every line's events copied 3 times, end to end on the clock: 3x the kernels, copies and their bytes."""
    source = shared_trace(GPU_MULTI_WORKER)
    copies = 3
    replica = XSpaceReplicator(source).write(tmp_path / "replica.xplane.pb", copies)
    once, thrice = (ti.analyze(path).to_dict() for path in (source, replica))
    devices = {device["id"]: device for device in thrice["devices"]}
    assert sorted(devices) == sorted(device["id"] for device in once["devices"])
    checked = 0
    for device in once["devices"]:
        other = devices[device["id"]]
        assert other["kernels"]["count"] == copies * device["kernels"]["count"]
        assert other["kernels"]["total_ns"] == copies * device["kernels"]["total_ns"]
        assert other["memset"]["count"] == copies * device["memset"]["count"]
        for kind, figures in device["copies"].items():
            assert other["copies"][kind]["count"] == copies * figures["count"], kind
            assert other["copies"][kind]["bytes"] == copies * figures["bytes"], kind
            checked += figures["count"]
    # The original's figures, counted from the protobuf (`test_gpu_multi_worker_figures`): 1,330 kernels, 202 H2D.
    assert sum(d["kernels"]["count"] for d in once["devices"]) == 1330 and checked > 202


def _assert_same_read(got: TraceRead, want: TraceRead) -> None:
    pd.testing.assert_frame_equal(got.events, want.events)
    pd.testing.assert_frame_equal(got.memory, want.memory)
    assert list(got.warnings.items()) == list(want.warnings.items())
    assert got.metadata == want.metadata and got.devices == want.devices and got.framework == want.framework


def test_runs_of_lines_read_by_worker_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Runs of lines read by a worker process, largest first, give the table read in one process: the same
    rows in the same order, names and annotations coded alike, warnings in the same order; and the device
    work the raw protobuf holds."""
    replica = XSpaceReplicator(shared_trace(GPU_MULTI_WORKER)).write(tmp_path / "x3.xplane.pb", 3)
    paths = [*(_real_path(relative) for relative in REAL_FILES), replica]
    monkeypatch.setattr(xspace_wire, "LINE_BATCH_BYTES", 50_000)  # many runs of a few lines, some of one long line
    for path in paths:
        layout = xspace_wire.walk_space(xspace_wire.Source(path))
        runs = [len(xspace_wire.line_runs(plane)) for plane in layout.planes]
        assert sum(runs) >= 2, path
        parallel = read_xspace(path, jobs=2)
        _assert_same_read(parallel, read_xspace(path, jobs=1))
    events = parallel.events
    for device, counts in _expected_device_work(_raw(replica)).items():
        kernels = events[(events["device"] == device).to_numpy() & (events["kind"] == "kernel").to_numpy()]
        assert len(kernels) == counts["kernels"] and int(kernels["dur_ns"].sum()) == counts["kernel_ns"], device


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_workers_claim_units_as_they_are_free(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, method: str) -> None:
    """Workers claim the units themselves and read the same rows as one process: forked ones with the reader's
    layout, their rows back through the shared file; ones from a fork server walk the file again and send their
    rows through the pipe (they hold no copy of the shared file). A damaged file's error comes back as its
    reason, one line naming the file."""
    replica = XSpaceReplicator(shared_trace(GPU_MULTI_WORKER)).write(tmp_path / "x2.xplane.pb", 2)
    monkeypatch.setattr(xspace_wire, "LINE_BATCH_BYTES", 50_000)
    monkeypatch.setattr(xspace, "start_context", lambda: multiprocessing.get_context(method))
    through_the_file: list[bool] = []
    parcel_open = parallel.Parcel.open

    def opened(parcel: parallel.Parcel, shared: parallel.SharedFile) -> Any:
        through_the_file.append(parcel.inline is None)
        return parcel_open(parcel, shared)

    monkeypatch.setattr(parallel.Parcel, "open", opened)
    _assert_same_read(read_xspace(replica, jobs=2), read_xspace(replica, jobs=1))
    assert through_the_file == [method == "fork"]
    data = bytearray(replica.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4000] = b"\xff" * 4000  # in a line's events: not protobuf
    damaged = tmp_path / "damaged.xplane.pb"
    damaged.write_bytes(bytes(data))
    for jobs in (1, 2):
        with pytest.raises(TraceError, match=r"damaged\.xplane\.pb: not an XSpace protobuf \(corrupt"):
            read_xspace(damaged, jobs=jobs)


def test_strings_told_apart_by_their_words() -> None:
    """Inline string stats are grouped by their bytes read as words: strings alike up to a word's end, of
    lengths either side of a word, empty, or at the very end of the bytes are each their own, as Python
    compares them."""
    texts = [b"GPU_0_bfc", b"GPU_0_bfd", b"GPU_0_bf", b"", b"abcdefgh", b"abcdefghi", b"abcdefgh\x00", b"x" * 200]
    texts += [b"GPU_0_bfc", b"x" * 199 + b"y", b"abcdefgh", b""]
    raw = b"".join(texts)
    wire = xspace_wire.Wire(raw + bytes(16))
    ends = np.cumsum([len(t) for t in texts])
    starts = ends - [len(t) for t in texts]
    grouped = wire.distinct_strings(starts, ends)
    assert grouped is not None
    codes, first = grouped
    assert [texts[i] for i in first] == list(dict.fromkeys(texts))  # each distinct string, first seen first
    assert [texts[first[c]] for c in codes] == texts


def test_batch_columns_joined_and_narrowed_as_the_table_would() -> None:
    """The table's columns are filled from the batches' kept rows, each batch's array freed once copied, and
    step ids narrowed to the table's int32 as `make_event_table` would (out of range: unknown, -1)."""
    arrays = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6, 7, 8])]
    keeps = [np.array([True, False, True]), np.array([True, True]), np.array([False, False, False])]
    kept = [int(keep.sum()) for keep in keeps]
    assert xspace_table.rows_kept(arrays, keeps, kept, np.int64).tolist() == [1, 3, 4, 5]
    assert arrays == []
    assert xspace_table.rows_kept([], [], [], np.int32).dtype == np.int32
    steps = np.array([-1, 0, 2**31 - 1, 2**31, -(2**31) - 1, 7], np.int64)
    narrowed = narrowed_ints(steps, np.int32)
    assert narrowed.dtype == np.int32
    assert narrowed.tolist() == [-1, 0, 2**31 - 1, -1, -1, 7]
