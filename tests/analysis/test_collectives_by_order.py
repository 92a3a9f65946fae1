"""Collectives without Seq, group or size args (gloo without `record_shapes`) matched across ranks by order alone.

Hand-built two-rank runs (us; the builders store ns): each rank's `ProfilerStep`s on its main thread (1) and its
`gloo:all_reduce` calls on a worker thread (2), no collectives' args table. The waits are worked out by hand from
the arrivals: an instance's wait on a rank is the latest arrival minus its own, its transfer the shortest call.
"""

from __future__ import annotations

from tests.analysis.builders import US, host, table
from traceinsight.analysis.collectives import Collectives, collectives
from traceinsight.events import InputInfo, Profile, make_collective_table

INPUTS = [InputInfo("rank0.json", "kineto", rank=0), InputInfo("rank1.json", "kineto", rank=1)]
STEP_US = 1000


def _step(rank: int, n: int) -> dict:
    return {**host("annotation", (n - 1) * STEP_US, STEP_US, f"ProfilerStep#{n}"), "input_id": rank, "thread": 1}


def _call(rank: int, start: float, end: float) -> dict:
    return {**host("annotation", start, end - start, "gloo:all_reduce"), "input_id": rank, "thread": 2}


# Steps 1 and 2: two buckets a step, rank 1 late. Each bucket's all-reduce ends at once on both ranks.
# Step 1: rank 0 arrives 100 / 110, rank 1 400 / 405; ends 460 / 470.
# Step 2: rank 0 arrives 1100 / 1110, rank 1 1200 / 1210; ends 1260 / 1270.
CLEAN = [
    *(_step(rank, n) for rank in (0, 1) for n in (1, 2)),
    _call(0, 100, 460),
    _call(0, 110, 470),
    _call(1, 400, 460),
    _call(1, 405, 470),
    _call(0, 1100, 1260),
    _call(0, 1110, 1270),
    _call(1, 1200, 1260),
    _call(1, 1210, 1270),
]
# (arrival rank 0, arrival rank 1, transfer) of each instance, in time order.
CLEAN_INSTANCES = [(100, 400, 60), (110, 405, 65), (1100, 1200, 60), (1110, 1210, 60)]
# Rank 0's waits, a union per step: [100, 400) u [110, 405) = 305; [1100, 1200) u [1110, 1210) = 110.
RANK0_WAIT_US = 305 + 110

# Step 3: rank 0 calls twice, rank 1 three times: order cannot pair them, all five stay unmatched.
COUNTS_DIFFER = [
    *(_step(rank, 3) for rank in (0, 1)),
    _call(0, 2100, 2200),
    _call(0, 2300, 2400),
    _call(1, 2150, 2200),
    _call(1, 2250, 2260),
    _call(1, 2350, 2400),
]
# Step 4: two calls a rank, but the second pair does not overlap (rank 0's ends at 3600 before rank 1's starts at
# 3700): no one collective, rejected; the first pair (rank 0 arrives 3100, rank 1 3150) is kept.
MIS_ORDER = [
    *(_step(rank, 4) for rank in (0, 1)),
    _call(0, 3100, 3200),
    _call(0, 3500, 3600),
    _call(1, 3150, 3200),
    _call(1, 3700, 3750),
]


def _view(rows: list[dict]) -> Collectives:
    return collectives(Profile(events=table(rows), inputs=INPUTS))


def test_argless_calls_are_matched_by_order_within_each_step() -> None:
    view = _view(CLEAN)
    assert (view.scope, view.side, view.unmatched, view.counts_differ, view.not_overlapping) == (
        "matched",
        "host",
        0,
        0,
        0,
    )
    assert len(view.instances) == len(CLEAN_INSTANCES)
    found = sorted(view.instances, key=lambda i: min(a.arrival_ns for a in i.arrivals))
    for instance, (rank0_us, rank1_us, transfer_us) in zip(found, CLEAN_INSTANCES, strict=True):
        assert instance.bytes is None and instance.group is None and instance.group_size == 2
        arrivals = {a.rank: a for a in instance.arrivals}
        assert (arrivals[0].arrival_ns, arrivals[1].arrival_ns) == (rank0_us * US, rank1_us * US)
        assert (arrivals[0].wait_ns, arrivals[1].wait_ns) == ((rank1_us - rank0_us) * US, 0)
        assert (arrivals[0].late_ns, arrivals[1].late_ns) == (0, (rank1_us - rank0_us) * US)
        assert instance.transfer_ns == transfer_us * US and instance.last_rank == 1
    assert [i.step_id for i in found] == [1, 1, 2, 2]
    rank0, rank1 = sorted(view.ranks, key=lambda r: r.rank)
    assert rank0.wait_ns == RANK0_WAIT_US * US and rank0.wait_per_step_ns == RANK0_WAIT_US * US // 2
    assert (rank1.wait_ns, rank1.last_count, rank0.last_count) == (0, 4, 0)


def test_a_step_whose_counts_differ_between_ranks_stays_unmatched() -> None:
    view = _view(CLEAN + COUNTS_DIFFER)
    assert (view.unmatched, view.counts_differ, view.not_overlapping) == (5, 5, 0)
    assert len(view.instances) == len(CLEAN_INSTANCES)
    assert {i.step_id for i in view.instances} == {1, 2}
    assert "5 calls" in view.note and "different number of times" in view.note
    rank0 = next(r for r in view.ranks if r.rank == 0)
    assert rank0.wait_ns == RANK0_WAIT_US * US  # step 3's calls add no wait


def test_a_pairing_that_does_not_overlap_in_time_is_rejected() -> None:
    view = _view(CLEAN + MIS_ORDER)
    assert (view.unmatched, view.counts_differ, view.not_overlapping) == (2, 0, 2)
    step4 = [i for i in view.instances if i.step_id == 4]
    assert len(step4) == 1
    assert sorted(a.arrival_ns for a in step4[0].arrivals) == [3100 * US, 3150 * US]
    assert "2 calls paired by order" in view.note
    rank0 = next(r for r in view.ranks if r.rank == 0)
    assert rank0.wait_ns == (RANK0_WAIT_US + 50) * US


def test_calls_with_a_size_keep_the_order_match_of_before() -> None:
    """The checks are for calls without args: sized calls (gloo with `record_shapes`) are paired by order within
    their size and step as before, step 3's first two pairs matched and rank 1's third call left out alone."""
    calls = [row for row in COUNTS_DIFFER if row["name"] == "gloo:all_reduce"]
    args = make_collective_table(
        {
            "ts_ns": [int(row["ts"] * US) for row in calls],
            "name": [row["name"] for row in calls],
            "input_id": [row["input_id"] for row in calls],
            "in_nelems": [1024] * len(calls),
            "dtype": ["float"] * len(calls),
        }
    )
    view = collectives(Profile(events=table(COUNTS_DIFFER), inputs=INPUTS, collectives=args))
    assert (view.unmatched, view.counts_differ, view.not_overlapping) == (1, 0, 0)
    assert [i.bytes for i in view.instances] == [4096, 4096]
    assert sorted(a.arrival_ns for i in view.instances for a in i.arrivals) == [
        t * US for t in (2100, 2150, 2250, 2300)
    ]
