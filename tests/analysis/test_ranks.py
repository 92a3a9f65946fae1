"""The cross-rank view on hand-built three-input runs whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tests.analysis.builders import host, kernel, table
from traceinsight.analysis import analyze
from traceinsight.analysis.ranks import rank_view
from traceinsight.events import InputInfo, Profile


def step(input_id: int, n: int, ts: float, dur: float) -> dict:
    return {**host("annotation", ts, dur, f"ProfilerStep#{n}"), "input_id": input_id}


def _rows() -> list[dict]:
    """rank 0: kernels [0,10) [20,30), steps of 15 us; rank 1: kernel [0,40), steps 20 and 25 us; host h2: CPU only."""
    return [
        {**kernel(0, 10, device="rank0/GPU:0"), "input_id": 0},
        {**kernel(20, 10, device="rank0/GPU:0"), "input_id": 0},
        step(0, 1, 0, 15),
        step(0, 2, 15, 15),
        {**kernel(0, 40, device="rank1/GPU:0"), "input_id": 1},
        step(1, 1, 0, 20),
        step(1, 2, 20, 25),
        {**host("cpu_op", 0, 100, "aten::mm"), "input_id": 2},
    ]


INPUTS = [
    InputInfo("rank0.json", "kineto", rank=0),
    InputInfo("rank1.json", "kineto", rank=1),
    InputInfo("h2.json", "kineto", host="h2"),
]


def test_per_rank_figures_and_the_slowest_rank() -> None:
    view = rank_view(analyze(Profile(events=table(_rows()), inputs=INPUTS)))
    assert view is not None
    r0, r1, h2 = view.ranks
    assert [r.label for r in view.ranks] == ["rank 0", "rank 1", "h2"]
    assert (r0.device_count, r0.span_ns, r0.busy_ns, r0.idle_ns) == (1, 30_000, 20_000, 10_000)
    assert r0.idle_fraction == pytest.approx(1 / 3)
    # Idle over its steps (the ledger's): [0,45) holds the kernel [0,40), so 5 of 45 us are idle.
    assert (r1.span_ns, r1.busy_ns, r1.idle_fraction) == (40_000, 40_000, pytest.approx(5 / 45))
    assert (h2.device_count, h2.idle_fraction) == (0, None)
    assert (r0.steps.count, r0.steps.mean_ns, r1.steps.mean_ns) == (2, 15_000, 22_500)
    # h2 has no markers: its inferred 100 us "step" is not compared with the marked ones.
    assert h2.steps.source == "inferred" and h2.steps.mean_ns == 100_000
    assert (view.step_mean_min_ns, view.step_mean_max_ns, view.step_mean_spread_ns) == (15_000, 22_500, 7_500)
    assert view.step_mean_spread_fraction == pytest.approx(0.5)
    assert view.slowest is r1


def test_row_order_does_not_matter() -> None:
    rows = _rows()
    shuffled = [rows[i] for i in np.random.default_rng(1).permutation(len(rows))]
    a = rank_view(analyze(Profile(events=table(rows), inputs=INPUTS)))
    b = rank_view(analyze(Profile(events=table(shuffled), inputs=INPUTS)))
    assert a is not None and b is not None
    assert [(r.busy_ns, r.steps.mean_ns) for r in a.ranks] == [(r.busy_ns, r.steps.mean_ns) for r in b.ranks]


def test_equal_ranks_have_no_slowest_and_one_input_no_view() -> None:
    rows = [r for r in _rows() if r["input_id"] == 0]
    twins = rows + [{**r, "input_id": 1, "device": "rank1/GPU:0" if r.get("device") else None} for r in rows]
    view = rank_view(analyze(Profile(events=table(twins), inputs=INPUTS[:2])))
    assert view is not None and view.slowest is None and view.step_mean_spread_ns == 0
    assert rank_view(analyze(Profile(events=table(rows), inputs=INPUTS[:1]))) is None
