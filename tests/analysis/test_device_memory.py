"""Device memory figures (`analysis.device_memory`) against plain loops over the real traces, and a hand-built table
whose static level, transient, headroom and warnings are known."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import shared_trace
from tests.readers.test_memory_events import (
    KINETO_MEMORY,
    XSPACE_MEMORY,
    _kineto,
    _memory_event,
    _op,
    kineto_expected,
    xspace_expected,
)
from traceinsight.analysis.device_memory import (
    BATCH_SPARE_FRACTION,
    DeviceMemory,
    device_memory,
    profile_memory,
)
from traceinsight.analysis.steps import find_steps
from traceinsight.events import Profile, make_memory_table, merge_reads
from traceinsight.readers import read_trace

GIB = 2**30


def _analyzed(rel: str) -> tuple[Profile, list[Any], list[DeviceMemory]]:
    profile = merge_reads([read_trace(shared_trace(rel))])
    steps = find_steps(profile.events).items
    return profile, steps, profile_memory(profile, steps)


def _plain_steps(rows: pd.DataFrame, steps: list[Any]) -> list[tuple[int, int, int]]:
    """(id, static, peak) per step, by a loop over the device's rows in time order."""
    levels = (rows["allocated"] + rows["stack_reserved"].clip(lower=0)).tolist()
    events = list(zip(rows["ts_ns"].tolist(), levels, strict=True))
    initial = events[0][1] - int(rows["delta"].iloc[0])
    out = []
    for step in steps:
        start, end = step.start_ns, step.start_ns + step.dur_ns
        before_start = [level for ts, level in events if ts < start]
        before_end = [level for ts, level in events if ts < end]
        at_start = before_start[-1] if before_start else initial
        at_end = before_end[-1] if before_end else initial
        peak = max([at_start] + [level for ts, level in events if start <= ts < end])
        out.append((step.id, min(at_start, at_end), peak))
    return out


def _plain_live_ops(rows: pd.DataFrame, peak_at: int) -> list[tuple[str, int]]:
    """Live allocations at row `peak_at` by a loop: an allocation lives until the next event on its address."""
    live: dict[int, tuple[str | None, int]] = {}
    for i, (addr, delta, op) in enumerate(zip(rows["addr"], rows["delta"], rows["op"], strict=True)):
        if i > peak_at:
            break
        if addr in live:
            del live[addr]
        elif delta > 0 and addr >= 0:
            live[addr] = (None if pd.isna(op) else op, delta)
    totals: dict[str, int] = defaultdict(int)
    for op, nbytes in live.values():
        if op is not None:
            totals[op] += nbytes
    return sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:5]


def _check_steps_and_ops(memory: DeviceMemory, rows: pd.DataFrame, steps: list[Any], capacity: int | None) -> None:
    plain = _plain_steps(rows, steps)
    assert [(s.id, s.static_bytes, s.peak_bytes) for s in memory.steps] == plain
    assert all(s.transient_bytes == s.peak_bytes - s.static_bytes for s in memory.steps)
    growing = [(static, peak - static) for _, static, peak in plain if peak > static]
    if memory.absolute and capacity and growing:
        spare = (1 - BATCH_SPARE_FRACTION) * capacity
        assert memory.batch_headroom_factor == pytest.approx(min(max(0, (spare - s) / t) for s, t in growing))
    else:
        assert memory.batch_headroom_factor is None
    levels = (rows["allocated"] + rows["stack_reserved"].clip(lower=0)).tolist()
    peak_at = levels.index(max(levels))
    assert memory.peak_ns == rows["ts_ns"].iloc[peak_at]
    assert [(o.op, o.bytes) for o in memory.top_ops_at_peak] == _plain_live_ops(rows, peak_at)


# --------------------------------------------------------------------------- real traces


@pytest.mark.parametrize(("rel", "absolute"), KINETO_MEMORY)
def test_kineto_peaks_capacity_and_steps(rel: str, absolute: bool) -> None:
    profile, steps, memories = _analyzed(rel)
    expected = kineto_expected(rel)
    assert [m.device for m in memories] == sorted(expected)
    for memory in memories:
        want = expected[memory.device]
        assert memory.events == want["events"]
        assert memory.absolute is absolute
        assert memory.peak_allocated_bytes == want["peak_allocated"]
        assert memory.peak_reserved_bytes == want["peak_reserved"]
        assert memory.capacity_bytes == want["capacity"]
        assert memory.allocator_limit_bytes is None and memory.fragmentation_max is None
        if absolute:
            assert memory.headroom_fraction == pytest.approx(1 - want["peak_allocated"] / want["capacity"])
            assert memory.slack_bytes == want["peak_reserved"] - want["peak_allocated"]
        else:
            assert memory.headroom_fraction is None and memory.slack_bytes is None
        assert memory.warnings == []  # small models on big GPUs
        rows = profile.memory[(profile.memory["device"] == memory.device).to_numpy()]
        _check_steps_and_ops(memory, rows, steps, want["capacity"])
        assert memory.peak_step == next(
            (s.id for s in steps if s.start_ns <= memory.peak_ns < s.start_ns + s.dur_ns), None
        )


@pytest.mark.parametrize("rel", XSPACE_MEMORY)
def test_xspace_peaks_limit_capacity_and_steps(rel: str) -> None:
    profile, steps, memories = _analyzed(rel)
    expected = xspace_expected(rel)
    assert {m.device for m in memories} == set(expected)
    for memory in memories:
        want = expected[memory.device]
        capacity = want["memory_size"] or want["limit"]  # XProf's capacity where the plane has no size (TPU)
        assert memory.events == want["events"]
        assert memory.absolute
        assert memory.peak_allocated_bytes == want["peak_allocated"]
        assert memory.peak_in_use_bytes == want["peak_in_use"]
        assert memory.peak_reserved_bytes is None and memory.slack_bytes is None
        assert memory.allocator_limit_bytes == want["limit"]
        assert memory.capacity_bytes == capacity
        assert memory.fragmentation_max == want["fragmentation"]
        assert memory.headroom_fraction == pytest.approx(1 - want["peak_in_use"] / capacity)
        rows = profile.memory[(profile.memory["device"] == memory.device).to_numpy()]
        _check_steps_and_ops(memory, rows, steps, want["limit"])  # the batch factor is against the limit


def test_real_figures() -> None:
    """A few numbers as people would read them."""
    gpu4 = next(m for m in _analyzed(XSPACE_MEMORY[1])[2] if m.device == "GPU:4")
    assert gpu4.peak_allocated_bytes == 6_208_853_760 and gpu4.capacity_bytes == 16_945_512_448
    assert gpu4.top_ops_at_peak[0].op.endswith("word_embeddings/GatherV2/Cast")
    _, _, (qwen,) = _analyzed(KINETO_MEMORY[2][0])
    assert qwen.peak_step == 6 and qwen.top_ops_at_peak[0].op == "aten::linear"
    assert qwen.batch_headroom_factor is not None and qwen.batch_headroom_factor > 10  # 0.5 B model, 80 GB


# --------------------------------------------------------------------------- hand-built


def _table(rows: list[tuple[Any, ...]], absolute: bool = True) -> pd.DataFrame:
    """Rows of (ts_ns, device, allocated, delta, addr, op, reserved)."""
    ts, device, allocated, delta, addr, op, reserved = (list(c) for c in zip(*rows, strict=True))
    return make_memory_table(
        {
            "ts_ns": ts,
            "device": pd.Categorical(device),
            "allocated": allocated,
            "delta": delta,
            "addr": addr,
            "op": pd.Categorical(op),
            "reserved": reserved,
            "absolute": np.full(len(rows), absolute),
        }
    )


def _training(device: str = "GPU:0", reserved: int = 8 * GIB) -> list[tuple[Any, ...]]:
    """2 GiB of weights, then two steps that each allocate 4 GiB on top and free it."""
    return [
        (0, device, 2 * GIB, 2 * GIB, 1, "init", reserved),
        (20, device, 5 * GIB, 3 * GIB, 2, "conv", reserved),  # step 1: [10, 100)
        (30, device, 6 * GIB, 1 * GIB, 3, "relu", reserved),
        (60, device, 5 * GIB, -1 * GIB, 3, "relu", reserved),
        (70, device, 2 * GIB, -3 * GIB, 2, "conv", reserved),
        (120, device, 6 * GIB, 4 * GIB, 4, "matmul", reserved),  # step 2: [100, 200)
        (150, device, 2 * GIB, -4 * GIB, 4, "matmul", reserved),
    ]


STEPS = [(10, 100), (100, 200)]


def test_static_transient_headroom_and_slack() -> None:
    (memory,) = device_memory(_table(_training()), STEPS, [1, 2], {"GPU:0": 10 * GIB})
    assert [(s.id, s.static_bytes, s.peak_bytes, s.transient_bytes) for s in memory.steps] == [
        (1, 2 * GIB, 6 * GIB, 4 * GIB),
        (2, 2 * GIB, 6 * GIB, 4 * GIB),
    ]
    assert memory.peak_allocated_bytes == 6 * GIB and memory.peak_ns == 30 and memory.peak_step == 1
    assert memory.headroom_fraction == pytest.approx(0.4)
    assert memory.batch_headroom_factor == pytest.approx((9 - 2) / 4)  # (0.9 * 10 GiB - 2 GiB) / 4 GiB
    assert (memory.static_bytes, memory.transient_bytes) == (2 * GIB, 4 * GIB)
    assert memory.slack_bytes == 2 * GIB and memory.warnings == ["slack"]  # 2 of 8 GiB held never used
    assert [(o.op, o.bytes) for o in memory.top_ops_at_peak] == [("conv", 3 * GIB), ("init", 2 * GIB), ("relu", GIB)]
    assert memory.capacity_bytes == 10 * GIB and memory.allocator_limit_bytes is None
    assert memory.series.allocated == [r[2] for r in _training()]


def test_at_limit_and_the_limiting_step() -> None:
    rows = _training(reserved=9_800 * 2**20)
    rows.append((180, "GPU:0", 7 * GIB, 5 * GIB, 5, "big", 9_800 * 2**20))  # step 2 now ends 5 GiB higher
    (memory,) = device_memory(_table(rows), STEPS, None, {"GPU:0": 10 * GIB})
    assert [s.id for s in memory.steps] == [0, 1]
    assert memory.steps[1].static_bytes == 2 * GIB and memory.steps[1].peak_bytes == 7 * GIB
    assert memory.peak_step == 1 and memory.peak_ns == 180
    assert memory.batch_headroom_factor == pytest.approx(7 / 5)  # step 2's 5 GiB transient limits
    assert "at_limit" in memory.warnings  # 9.57 GiB held of 10


def test_relative_levels_have_no_headroom() -> None:
    rows = [(t, "GPU:0", level - 2 * GIB, delta, -1, None, -1) for t, _, level, delta, *_ in _training()]
    (memory,) = device_memory(_table(rows, absolute=False), STEPS, [1, 2], {"GPU:0": 10 * GIB})
    assert not memory.absolute and memory.capacity_bytes == 10 * GIB
    assert memory.headroom_fraction is None and memory.batch_headroom_factor is None
    assert (memory.static_bytes, memory.transient_bytes) == (0, 4 * GIB)  # transients still mean what they say
    assert memory.peak_reserved_bytes is None and memory.warnings == [] and memory.top_ops_at_peak == []


def test_without_steps_the_series_is_one_step_and_unknown_capacity() -> None:
    (memory,) = device_memory(_table(_training()))
    assert memory.steps == [] and memory.peak_step is None
    assert (memory.static_bytes, memory.transient_bytes) == (0, 6 * GIB)  # the weights came within the window
    assert memory.capacity_bytes is None and memory.headroom_fraction is None
    assert memory.batch_headroom_factor is None and memory.warnings == ["slack"]


def test_xspace_limit_is_the_usable_memory() -> None:
    table = _table(_training()[:3])
    table["available"] = 6 * GIB - table["allocated"]  # a 6 GiB allocator limit (XLA's preallocated share)
    table["stack_reserved"] = 0
    table["reserved"] = -1
    table["fragmentation"] = [0.1, np.nan, 0.3]
    (memory,) = device_memory(table, [(10, 100)], [7], {"GPU:0": 10 * GIB})
    assert memory.allocator_limit_bytes == 6 * GIB and memory.capacity_bytes == 10 * GIB
    assert memory.headroom_fraction == pytest.approx(0.4)
    assert memory.warnings == ["at_limit"]  # 6 GiB in use of a 6 GiB limit
    assert memory.batch_headroom_factor == pytest.approx((0.9 * 6 - 2) / 4)
    assert memory.fragmentation_max == pytest.approx(0.3)
    (tpu,) = device_memory(table)  # no device capacity: the allocator's limit, as XProf
    assert tpu.capacity_bytes == 6 * GIB and tpu.headroom_fraction == pytest.approx(0.0)


def test_devices_in_input_then_natural_order() -> None:
    rows = [*_training("GPU:10"), *_training("GPU:2")]
    table = _table(rows)
    memories = device_memory(table)
    assert [m.device for m in memories] == ["GPU:2", "GPU:10"]
    assert device_memory(make_memory_table()) == []


def test_series_keeps_peaks_and_troughs_within_the_point_budget() -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    delta = rng.integers(-1000, 1001, n)
    level = 10**6 + np.cumsum(delta)
    ts = np.cumsum(rng.integers(1, 100, n))
    table = make_memory_table(
        {"ts_ns": ts, "device": pd.Categorical(["GPU:0"] * n), "allocated": level, "reserved": level + 5}
    )
    (memory,) = device_memory(table, max_points=101)
    series = memory.series
    assert len(series.ts_ns) <= 101
    assert series.ts_ns == sorted(series.ts_ns) and series.ts_ns[0] == ts[0] and series.ts_ns[-1] == ts[-1]
    assert max(series.allocated) == level.max() and min(series.allocated) == level.min()
    assert series.reserved == [a + 5 for a in series.allocated]
    positions = np.searchsorted(ts, series.ts_ns)
    assert (level[positions] == series.allocated).all()


def test_merged_inputs_keep_their_prefixed_devices_and_capacities(tmp_path: Path) -> None:
    reads = []
    for rank, gib in ((1, 3), (0, 5)):  # file order is input order, whatever the ranks
        folder = tmp_path / str(rank)
        folder.mkdir()
        events = [
            _op("aten::empty", 10, 10),
            _memory_event(15, 1, 0, gib * GIB, Addr=1, **{"Total Allocated": gib * GIB, "Total Reserved": 8 * GIB}),
        ]
        top = {"distributedInfo": {"rank": rank}, "deviceProperties": [{"id": 0, "totalGlobalMem": 16 * GIB}]}
        reads.append(_kineto(folder, events, **top))
    profile = merge_reads(reads)
    memories = profile_memory(profile)
    assert [(m.device, m.input_id, m.peak_allocated_bytes) for m in memories] == [
        ("rank1/GPU:0", 0, 3 * GIB),
        ("rank0/GPU:0", 1, 5 * GIB),
    ]
    assert all(m.capacity_bytes == 16 * GIB for m in memories)
    assert memories[1].top_ops_at_peak[0].op == "aten::empty"
