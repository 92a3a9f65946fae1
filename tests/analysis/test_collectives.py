"""Who waits for whom (analysis/collectives.py) on real captures whose answer is known.

`sample_traces/distributed/` holds 2-rank DDP runs (gloo on the CPU, `tools/capture_distributed.py`) with rank 1
slowed on purpose, and each run's wait measured by the script itself with `time.perf_counter` (`run_info.json`).
The NCCL trace of HTA (one rank of two) has no other rank to match: its all-reduces are split against the shortest
instance of the same size.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, shared_trace
from traceinsight.analysis.collectives import (
    SINGLE_RANK_NOTE,
    Collectives,
    RankCollectives,
    bandwidths,
    collective_kind,
    collectives,
)
from traceinsight.events import Profile
from traceinsight.rules import COLLECTIVES_COUNTS_DIFFER
from traceinsight.workflow import load_path

CAPTURES = REPO / "sample_traces" / "distributed"
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
STEPS, BUCKETS = 8, 2  # profiled steps; DDP's gradient buckets a step


@cache
def _load(scenario: str) -> tuple[Profile, Collectives, dict]:
    _, profile = load_path(CAPTURES / scenario)
    info = json.loads((CAPTURES / scenario / "run_info.json").read_text())
    return profile, collectives(profile), info


def _rank(view: Collectives, rank: int) -> RankCollectives:
    (found,) = [r for r in view.ranks if r.rank == rank]
    return found


@pytest.mark.parametrize("scenario", ["balanced", "sleep_rank1", "big_batch_rank1"])
def test_every_all_reduce_is_matched_on_both_ranks(scenario: str) -> None:
    profile, view, _ = _load(scenario)
    assert sorted(i.rank for i in profile.inputs) == [0, 1]
    assert (view.scope, view.side, view.unmatched) == ("matched", "host", 0)
    assert view.phase_source == "record_function ranges"
    assert len(view.instances) == STEPS * BUCKETS
    for instance in view.instances:
        assert instance.collective == "all_reduce" and instance.group_size == 2
        assert sorted(a.rank for a in instance.arrivals) == [0, 1]
        latest = max(a.arrival_ns for a in instance.arrivals)
        for a in instance.arrivals:
            assert a.wait_ns == latest - a.arrival_ns >= 0
            assert instance.transfer_ns <= a.dur_ns
        assert instance.transfer_ns == min(a.dur_ns for a in instance.arrivals)
        last = max(instance.arrivals, key=lambda a: a.arrival_ns)
        assert instance.last_rank == last.rank and last.wait_ns == 0
        # gloo's range carries the bucket's shape and dtype (record_shapes): float32 elements.
        assert instance.bytes is not None and instance.bytes % 4 == 0
        assert instance.busbw_gbps == pytest.approx(instance.bytes / instance.transfer_ns)  # 2(n-1)/n = 1 at n=2
        assert instance.link_peak_gbps is None  # a CPU has no NVLink
    for rank in view.ranks:
        assert rank.steps == STEPS and rank.instances == STEPS * BUCKETS
        assert set(rank.phases) == {"data", "forward", "backward", "optimizer"}


def test_sleeping_rank_is_the_straggler_in_its_data_phase() -> None:
    _, view, info = _load("sleep_rank1")
    straggler = view.straggler
    assert straggler is not None and straggler.rank == 1 and straggler.phase == "data"
    assert straggler.last_share == 1.0
    sleep_ns = info["settings"]["sleep_s"] * 1e9
    assert straggler.phase_excess_ns == pytest.approx(sleep_ns, rel=0.15)
    assert [p for p, _ in straggler.phases] == ["data"]
    assert "rank1" in straggler.message and "`data`" in straggler.message
    assert _rank(view, 1).wait_per_step_ns < 0.05 * _rank(view, 0).wait_per_step_ns


def test_big_batch_rank_is_the_straggler_in_forward_and_backward() -> None:
    _, view, _ = _load("big_batch_rank1")
    straggler = view.straggler
    assert straggler is not None and straggler.rank == 1
    assert straggler.phase in ("forward", "backward")
    assert {p for p, _ in straggler.phases} == {"forward", "backward"}
    # Rank 0's backward range holds its wait for rank 1 (DDP waits at the end of backward); taken out, its own
    # backward is the shorter.
    assert _rank(view, 0).phases["backward"] < _rank(view, 1).phases["backward"]


@pytest.mark.parametrize("scenario", ["sleep_rank1", "big_batch_rank1"])
def test_rank0_wait_per_step_matches_the_script_measurement(scenario: str) -> None:
    _, view, info = _load(scenario)
    measured_ns = info["rank0_mean_wait_ms"] * 1e6
    assert _rank(view, 0).wait_per_step_ns == pytest.approx(measured_ns, rel=0.15)


def test_balanced_run_names_no_straggler_and_waits_near_zero() -> None:
    _, view, info = _load("balanced")
    assert view.straggler is None and view.note
    for rank in view.ranks:
        assert rank.step_ns is not None
        assert rank.wait_per_step_ns is not None and rank.wait_per_step_ns < 0.15 * rank.step_ns
    assert _rank(view, 0).wait_per_step_ns == pytest.approx(info["rank0_mean_wait_ms"] * 1e6, abs=1e6)


def test_gloo_side_table_keeps_message_size() -> None:
    profile, _, _ = _load("sleep_rank1")
    table = profile.collectives
    gloo = table[(table["name"] == "gloo:all_reduce").to_numpy()]
    assert len(gloo) == 2 * STEPS * BUCKETS
    assert (gloo["in_nelems"] > 0).all() and set(gloo["dtype"].astype(str)) == {"float"}
    assert (gloo["group_size"] == -1).all() and (gloo["seq"] == -1).all()  # torch 2.13's gloo writes no args


def test_nccl_single_rank_all_reduces_split_into_waiting_and_transfer() -> None:
    _, profile = load_path(shared_trace(NCCL).parent)
    view = collectives(profile)
    assert (view.scope, view.side, view.straggler) == ("single_rank", "device", None)
    assert SINGLE_RANK_NOTE in view.note
    kernels = profile.collectives[profile.collectives["name"].astype(str).str.startswith("ncclKernel").to_numpy()]
    assert len(kernels) == 21
    assert set(kernels["group"].astype(str)) == {"0"} and (kernels["group_size"] == 2).all()
    all_reduces = [i for i in view.instances if i.collective == "all_reduce"]
    assert len(all_reduces) == 15
    sizes = {i.bytes for i in all_reduces}
    assert len(sizes) == 5  # five gradient buckets, each reduced once in each of the 3 steps
    biggest = [i for i in all_reduces if i.bytes == max(sizes)]  # 7,875,584 floats
    durations = sorted(i.arrivals[0].dur_ns for i in biggest)
    assert len(biggest) == 3
    assert all(i.transfer_ns == durations[0] for i in biggest)
    assert durations[0] == pytest.approx(2.4e6, rel=0.05)  # the shortest bounds the transfer
    assert 5.5e6 < durations[-1] < 6.5e6  # the longest waits most of its 6 ms
    for instance in biggest:
        (arrival,) = instance.arrivals
        assert arrival.wait_ns == arrival.dur_ns - instance.transfer_ns and arrival.late_ns == 0
        assert instance.link_peak_gbps == 300.0  # A100 SXM4 NVLink, a direction
        assert instance.busbw_gbps == pytest.approx(instance.bytes / instance.transfer_ns)
    (rank,) = view.ranks
    assert rank.wait_ns == pytest.approx(sum(a.wait_ns for i in view.instances for a in i.arrivals), rel=1e-6)


def test_bus_bandwidth_factors_follow_nccl_tests() -> None:
    algbw, busbw = bandwidths("all_reduce", 8_000, 1_000, 4)
    assert (algbw, busbw) == (8.0, pytest.approx(8.0 * 2 * 3 / 4))
    for collective in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bandwidths(collective, 8_000, 1_000, 8)[1] == pytest.approx(8.0 * 7 / 8)
    assert bandwidths("broadcast", 8_000, 1_000, 8) == (8.0, None)
    assert bandwidths("all_reduce", -1, 1_000, 8) == (None, None)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("gloo:all_reduce", "all_reduce"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
        ("_allgather_base", "all_gather"),
        ("all_to_allv", "all_to_all"),
        ("ncclDevKernel_SendRecv", "send_recv"),
        ("gloo:broadcast", "broadcast"),
        ("aten::mm", None),
    ],
)
def test_collective_kind(name: str, kind: str | None) -> None:
    assert collective_kind(name) == kind


def test_waits_are_unions_not_sums() -> None:
    """Both buckets of a step wait for rank 1 at once: the step's wait counts that time once."""
    _, view, _ = _load("sleep_rank1")
    rank0 = _rank(view, 0)
    summed = sum(a.wait_ns for i in view.instances for a in i.arrivals if a.rank == 0)
    assert rank0.wait_ns < 0.75 * summed
    assert np.isclose(rank0.wait_ns / STEPS, rank0.wait_per_step_ns, rtol=1e-6)


def test_the_report_api_and_diff_carry_the_waits() -> None:
    """What the analysis finds reaches the JSON, the API frame (one row per instance per rank) and the diff."""
    import traceinsight as ti
    from traceinsight.diff import build_diff

    r = ti.analyze(CAPTURES / "sleep_rank1")
    frame = r.collectives
    instances = r.analysis.collectives.instances
    assert len(frame) == sum(len(i.arrivals) for i in instances)
    assert frame["wait_ns"].sum() == r.result.collectives.wait_ns
    (straggler,) = [b for b in r.result.bottlenecks if b.id == "straggler"]
    assert straggler.evidence["straggler"] == "rank1" and straggler.evidence["late_phase"] == "data"
    changes = {c["metric"]: c for c in build_diff(r.result, r.result)["changes"]}
    assert changes["collectives.wait_ns"]["base"] == r.result.collectives.wait_ns > 0


NOSHAPES = ["balanced_noshapes", "sleep_rank1_noshapes"]  # profiled without record_shapes: no args at all
NO_ARGS = ("Input Dims", "Input type", "Seq", "Process Group Name", "Collective name", "In msg nelems", "Group size")


@pytest.mark.parametrize("scenario", NOSHAPES)
def test_captures_without_record_shapes_carry_no_collective_args(scenario: str) -> None:
    """The raw JSON: neither gloo's range nor the c10d enqueue holds a size, a sequence number or a group."""
    calls = 0
    for path in sorted((CAPTURES / scenario).glob("rank*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as f:
            events = json.load(f)["traceEvents"]
        for event in events:
            if event.get("name") in ("gloo:all_reduce", "c10d::allreduce_", "record_param_comms"):
                calls += event["name"] == "gloo:all_reduce"
                assert not set(NO_ARGS) & set(event.get("args", {}))
    assert calls == 2 * STEPS * BUCKETS


@pytest.mark.parametrize("scenario", NOSHAPES)
def test_argless_all_reduces_are_matched_by_order(scenario: str) -> None:
    profile, view, info = _load(scenario)
    assert (view.scope, view.side, view.unmatched, view.counts_differ, view.not_overlapping) == (
        "matched",
        "host",
        0,
        0,
        0,
    )
    assert len(view.instances) == STEPS * BUCKETS
    for instance in view.instances:
        assert (instance.bytes, instance.group, instance.group_size) == (None, None, 2)
        assert sorted(a.rank for a in instance.arrivals) == [0, 1]
        # One collective: every call ends after the latest arrival.
        assert min(a.arrival_ns + a.dur_ns for a in instance.arrivals) >= max(a.arrival_ns for a in instance.arrivals)
    assert {i.step_id for i in view.instances} == set(info["step_nums"])
    measured_ns = info["rank0_mean_wait_ms"] * 1e6
    if scenario == "balanced_noshapes":  # ~1 ms of jitter either way on a shared 2-core machine
        assert view.straggler is None
        assert _rank(view, 0).wait_per_step_ns == pytest.approx(measured_ns, abs=1e6)
    else:
        assert _rank(view, 0).wait_per_step_ns == pytest.approx(measured_ns, rel=0.15)


def test_argless_sleeping_rank_is_the_straggler_in_its_data_phase() -> None:
    _, view, info = _load("sleep_rank1_noshapes")
    straggler = view.straggler
    assert straggler is not None and (straggler.rank, straggler.phase, straggler.last_share) == (1, "data", 1.0)
    assert straggler.phase_excess_ns == pytest.approx(info["settings"]["sleep_s"] * 1e9, rel=0.15)
    assert [p for p, _ in straggler.phases] == ["data"]


def test_argless_straggler_reaches_the_report() -> None:
    """The findings and the Ranks section of the report: the straggler, named in `data`, costs rank 0 the wait the
    script measured; nothing is reported as a small batch."""
    import traceinsight as ti

    r = ti.analyze(CAPTURES / "sleep_rank1_noshapes")
    info = json.loads((CAPTURES / "sleep_rank1_noshapes" / "run_info.json").read_text())
    ids = [b.id for b in r.result.bottlenecks]
    assert ids[0] == "straggler" and "small_batch" not in ids
    assert r.result.bottlenecks[0].evidence["straggler"] == "rank1"
    assert r.result.bottlenecks[0].evidence["late_phase"] == "data"
    (rank0,) = [x for x in r.result.ranks.items if x.rank == 0]
    assert rank0.wait_per_step_ns == pytest.approx(info["rank0_mean_wait_ms"] * 1e6, rel=0.15)


def test_a_call_missing_on_one_rank_leaves_only_its_step_unmatched(tmp_path: Path) -> None:
    """The real argless capture with rank 1's first all-reduce of its fourth step taken out: that step's calls (two
    on rank 0, one on rank 1) cannot be paired by order, so all three stay unmatched under their warning; the other
    steps' 14 instances and the straggler stand."""
    import traceinsight as ti

    source = CAPTURES / "sleep_rank1_noshapes"
    info = json.loads((source / "run_info.json").read_text())
    for path in source.glob("rank*.pt.trace.json.gz"):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        if path.name.startswith("rank1."):
            events = doc["traceEvents"]
            (step,) = [e for e in events if e.get("name") == f"ProfilerStep#{info['step_nums'][3]}"]
            calls = [e for e in events if e.get("name") == "gloo:all_reduce" and step["ts"] <= e["ts"]]
            events.remove(min(calls, key=lambda e: e["ts"]))
        with gzip.open(tmp_path / path.name, "wt") as f:
            json.dump(doc, f)
    r = ti.analyze(tmp_path)
    view = r.analysis.collectives
    assert (view.unmatched, view.counts_differ, view.not_overlapping) == (3, 3, 0)
    assert len(view.instances) == STEPS * BUCKETS - 2
    assert info["step_nums"][3] not in {i.step_id for i in view.instances}
    assert r.result.warnings[COLLECTIVES_COUNTS_DIFFER] == 3
    assert view.straggler is not None and (view.straggler.rank, view.straggler.phase) == (1, "data")
