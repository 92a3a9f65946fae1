"""Repeated small-kernel sequences (`analysis/kernel_sequences.py`) on hand-built steps with known repeats."""

from __future__ import annotations

from typing import Any

from tests.analysis.builders import host, kernel, launch, profile
from traceinsight.analysis import analyze


def _step(i: int, t0: float, names: list[str], corr: int) -> list[dict[str, Any]]:
    """Step i from t0 (1 ms long): under `aten::block`, one launch (2 us) per kernel every 10 us, each kernel 3 us
    (small), then a big kernel (50 us) that splits the run."""
    rows = [{**host("step", t0, 1_000, f"ProfilerStep#{i}"), "step_id": i, "thread": 1}]
    rows.append({**host("cpu_op", t0 + 1, 400, "aten::block"), "thread": 1})
    for j, name in enumerate([*names, "big"]):
        t = t0 + 10 + 10 * j
        rows.append({**launch(t, 2, corr + j), "thread": 1})
        rows.append(kernel(t + 5, 50 if name == "big" else 3, corr=corr + j, name=name, thread=-1))
    return rows


def test_a_sequence_in_every_step_is_found_and_one_in_two_of_three_is_not() -> None:
    rows = [
        *_step(1, 0, ["A", "B", "C", "D", "E"], 100),
        *_step(2, 1_000, ["A", "B", "C", "X", "D", "E"], 200),
        *_step(3, 2_000, ["A", "B", "C", "Y"], 300),  # no D E here
    ]
    found = analyze(profile(rows)).kernel_sequences
    assert found is not None and found.steps == 3
    top = found.items[0]
    assert top.names == ["A", "B", "C"]
    assert (top.count, top.per_step) == (3, 1.0)
    assert top.kernel_ns == 3 * 3 * 3_000  # 3 kernels of 3 us, in 3 steps
    assert top.launch_ns == 3 * 3 * 2_000  # their 2 us launch calls
    assert top.op_stack == ["aten::block"]
    assert all(s.names[:2] != ["D", "E"] for s in found.items)
    # Nothing else repeats in every step: A B and B C lie inside A B C's first occurrence.
    assert [s.names for s in found.items] == [["A", "B", "C"]]


def test_long_kernels_break_a_sequence() -> None:
    # A and B are split by a big kernel in every step: no small run holds both.
    rows = [r for i in range(3) for r in _step(i, i * 1_000, ["A", "big", "B"], 100 * (i + 1))]
    found = analyze(profile(rows)).kernel_sequences
    assert found is not None and found.items == []
