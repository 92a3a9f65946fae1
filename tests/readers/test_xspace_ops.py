"""The XSpace op table (`TraceRead.ops`): checked against XProf's own roofline figures, the raw protobuf and a
hand-built XSpace with known costs.

XProf's figures (tests/readers/data/xprof_roofline_tpu_inference_2.json) are written by
``python -m benchmarks.xprof_roofline``, which runs XProf's converter (see its docstring for XProf's
definitions). Its op is an HLO op, named by its event metadata's display name, which the event table's name
(the metadata's name, the HLO text ``%broadcast_add_fusion.1 = f32[...] fusion(...)``) begins with; its time
is total device time (``device_duration_ps``), not self time, as ours.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceinsight as ti
from benchmarks.replicate_xspace import XSpaceReplicator
from tests.conftest import shared_trace
from tests.readers.test_xspace import _Builder
from traceinsight.events import OP_COLUMNS, TraceRead
from traceinsight.readers import xspace_wire
from traceinsight.readers.xplane_schema import XSpace
from traceinsight.readers.xspace import read_xspace

TPU = "xprof/test_xplanes/tpu_inference_2.xplane.pb"
GPU_FILES = [
    "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb",
]
XPROF = Path(__file__).parent / "data" / "xprof_roofline_tpu_inference_2.json"
_HLO_NAME = re.compile(r"%(\S+) = ")
GIB = 2**30


def _per_hlo_op(ops: pd.DataFrame) -> pd.DataFrame:
    """Per HLO op (XProf's op: the name the HLO text assigns): executions, FLOPs, bytes and device ns."""
    hlo = ops["name"].astype(str).str.extract(_HLO_NAME, expand=False)
    assert hlo.notna().all()
    return (
        ops.assign(hlo=hlo)
        .groupby("hlo")
        .agg(
            occurrences=("name", "size"), flops=("flops", "sum"), bytes=("bytes_accessed", "sum"), ns=("dur_ns", "sum")
        )
    )


def test_flop_rates_match_xprof() -> None:
    """For every op XProf lists with a nonzero FLOP rate (GFLOP/s = FLOP/ns), ours is within 1 % of its. The ops
    are the same (every ``XLA Ops`` execution of the 4 cores, none of the ``Async XLA Ops`` spans, whose
    metadata carries costs too), with the same executions and total time (but the part of a ns each execution
    loses to our ns durations), and so is the memory bandwidth (bytes accessed / total time, GiB/s) of ops that
    last 1 µs or more (that part is 2-20 % of the 1-3 ns copies)."""
    path = shared_trace(TPU)
    xprof = json.loads(XPROF.read_text())
    ours = _per_hlo_op(ti.load(path).ops)
    theirs = {row["operation"]: row for row in xprof["ops"]}
    assert sorted(ours.index) == sorted(theirs)
    rated = 0
    for name, row in theirs.items():
        op = ours.loc[name]
        assert op["occurrences"] == row["occurrences"], name
        assert op["ns"] / 1e3 == pytest.approx(row["total_time"], rel=0.01, abs=1e-3 * row["occurrences"]), name
        if row["measured_flop_rate"] > 0:
            assert op["flops"] / op["ns"] == pytest.approx(row["measured_flop_rate"], rel=0.01), name
            rated += 1
        if row["avg_time"] >= 1:
            assert op["bytes"] / op["ns"] * 1e9 / GIB == pytest.approx(row["measured_memory_bw"], rel=0.01), name
    assert rated == 4  # the three broadcast-add fusions and the all-reduce; copies and the broadcast have no FLOPs


def _assert_rows_are_kernels(read: TraceRead) -> None:
    """Each op row is a kernel (or one of XLA's asynchronous copies) of the event table: one of the same device,
    start and name."""
    events = read.events
    kernels = events[events["kind"].isin(["kernel", "memcpy"]).to_numpy()]
    key = ["device", "ts_ns", "name"]
    joined = read.ops[key].astype(str).merge(kernels[key].astype(str).drop_duplicates(), how="left", indicator=True)
    assert (joined["_merge"] == "both").all() and len(joined) == len(read.ops)


def _raw_costs(path: Path) -> dict[str, Counter[str]]:
    """Per TPU, walking the raw protobuf: the ``XLA Ops`` executions whose metadata has a cost, their FLOPs,
    model FLOPs, bytes accessed and device ns."""
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    out: dict[str, Counter[str]] = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:TPU:"):
            continue
        names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        costs = {
            key: {names[stat.metadata_id]: getattr(stat, stat.WhichOneof("value")) for stat in meta.stats}
            for key, meta in plane.event_metadata.items()
        }
        counts = out.setdefault(plane.name.removeprefix("/device:"), Counter())
        for line in plane.lines:
            for event in line.events if line.name == "XLA Ops" else ():
                cost = costs[event.metadata_id]
                if "flops" not in cost:
                    continue
                own = {names[stat.metadata_id]: getattr(stat, stat.WhichOneof("value")) for stat in event.stats}
                counts["ops"] += 1
                for key in ("flops", "model_flops", "bytes_accessed"):
                    counts[key] += cost[key]
                counts["ns"] += own["device_duration_ps"] // 1000
    return out


def test_costs_match_raw_protobuf() -> None:
    """Per device, the op rows and their sums are the raw protobuf's."""
    path = shared_trace(TPU)
    read = read_xspace(path)
    ops = read.ops
    assert tuple(ops.columns) == OP_COLUMNS and len(ops) == 6013
    expected = _raw_costs(path)
    assert sorted(ops["device"].unique()) == sorted(expected)
    for device, counts in expected.items():
        mine = ops[(ops["device"] == device).to_numpy()]
        assert len(mine) == counts["ops"], device
        for key in ("flops", "model_flops", "bytes_accessed"):
            assert mine[key].sum() == counts[key], (device, key)
        assert int(mine["dur_ns"].sum()) == counts["ns"], device
    assert (ops["thread"] == -1).all() and ops["external_id"].eq(-1).all() and ops["input_dims"].isna().all()
    _assert_rows_are_kernels(read)


@pytest.mark.parametrize("relative", GPU_FILES)
def test_gpu_files_without_costs_have_no_op_rows(relative: str) -> None:
    ops = read_xspace(shared_trace(relative)).ops
    assert ops.empty and tuple(ops.columns) == OP_COLUMNS


def test_op_rows_read_by_worker_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Runs of lines read by worker processes give the op table one process reads; a file of 2 copies of every
    line's events twice its ops."""
    path = shared_trace(TPU)
    monkeypatch.setattr(xspace_wire, "LINE_BATCH_BYTES", 20_000)  # many runs of lines, several per plane
    once = read_xspace(path, jobs=1).ops
    pd.testing.assert_frame_equal(read_xspace(path, jobs=2).ops, once)
    replica = XSpaceReplicator(path).write(tmp_path / "x2.xplane.pb", 2)
    twice = read_xspace(replica, jobs=2).ops
    pd.testing.assert_frame_equal(twice, read_xspace(replica, jobs=1).ops)
    assert len(twice) == 2 * len(once) and twice["flops"].sum() == 2 * once["flops"].sum()
    assert twice["dur_ns"].sum() == 2 * once["dur_ns"].sum()


START = 1_700_000_000_000_000_000


def _costed_space() -> bytes:
    """A TPU and a GPU plane whose ops carry known costs (on their metadata, on the event), and events that are
    not op executions although they carry costs too."""
    b = _Builder()
    tpu = b.plane("/device:TPU:0")
    ops = tpu.lines.add(id=3, name="XLA Ops", timestamp_ns=1_000)
    fusion = b.event(tpu, ops, "%fusion.1 = f32[8] fusion(f32[8] %p)", 0, 2_100_000, device_duration_ps=2_000_000)
    b.add_stats(tpu, tpu.event_metadata[fusion.metadata_id], flops=1_000, bytes_accessed=400, model_flops=800)
    b.event(tpu, ops, "%fusion.1 = f32[8] fusion(f32[8] %p)", 3_000_000, 1_500_000)  # no device time: the event's
    b.event(tpu, ops, "%dot.2 = f32[8] dot(f32[8] %a)", 5_000_000, 1_000_000, flops=2**40, device_duration_ps=-5)
    copy = b.event(tpu, ops, "%copy.3 = f32[8] copy(f32[8] %a)", 7_000_000, 1_000_000)  # no cost: not an op row
    bad = b.event(tpu, ops, "%bad.4 = f32[8] add(f32[8] %a)", 9_000_000, 1_000_000, flops=-7, bytes_accessed=16)
    aggregated = b.event(tpu, ops, "%dot.2 = f32[8] dot(f32[8] %a)", 0, 1_000_000, flops=9)
    aggregated.num_occurrences = 3  # no time: skipped, as by the event table
    spans = tpu.lines.add(id=4, name="Async XLA Ops", timestamp_ns=1_000)
    span = b.event(tpu, spans, "async-copy", 0, 9_000_000)
    b.add_stats(tpu, tpu.event_metadata[span.metadata_id], flops=0, bytes_accessed=64)
    gpu = b.plane("/device:GPU:0")
    stream = gpu.lines.add(id=7, name="Stream #7(Compute)", timestamp_ns=2_000)
    b.event(gpu, stream, "gemm_kernel", 1_000_000, 3_000, flops=6.0, correlation_id=1)
    b.event(gpu, stream, "MemcpyH2D", 2_000_000, 3_000, bytes_accessed=64, memcpy_details="size:64")
    cpu = b.plane("/host:CPU")
    b.event(cpu, cpu.lines.add(id=42, name="main", timestamp_ns=0), "host_op", 0, 1_000, flops=5)
    task = b.plane("Task Environment")
    b.add_stats(task, task, profile_start_time=START, profile_stop_time=START + 10**9)
    assert copy.metadata_id != bad.metadata_id
    return b.space.SerializeToString()


def test_hand_built_costs() -> None:
    """Rows for the device kernels with a cost only, at the event table's starts, with the device's own time
    where it is possible; a negative count is unknown."""
    read = read_xspace(Path("/nowhere/costed.xplane.pb"), _costed_space())
    ops = read.ops
    assert tuple(ops.columns) == OP_COLUMNS
    got = [
        (
            row.device,
            row.name.split(" ")[0],
            row.ts_ns - START,
            row.dur_ns,
            row.flops,
            row.bytes_accessed,
            row.model_flops,
        )
        for row in ops.itertuples()
    ]
    unknown = None  # NaN, spelt so that rows compare equal
    assert [tuple(unknown if isinstance(v, float) and np.isnan(v) else v for v in row) for row in got] == [
        ("TPU:0", "%fusion.1", 1_000, 2_000, 1_000.0, 400.0, 800.0),
        ("TPU:0", "%fusion.1", 4_000, 1_500, 1_000.0, 400.0, 800.0),
        ("TPU:0", "%dot.2", 6_000, 1_000, 2.0**40, unknown, unknown),
        ("TPU:0", "%bad.4", 10_000, 1_000, unknown, 16.0, unknown),
        ("GPU:0", "gemm_kernel", 3_000, 3, 6.0, unknown, unknown),
    ]
    assert (ops["thread"] == -1).all() and (ops["input_id"] == 0).all()
    assert list(ops["device"].cat.categories) == ["GPU:0", "TPU:0"]
    _assert_rows_are_kernels(read)
