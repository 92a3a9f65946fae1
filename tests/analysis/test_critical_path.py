"""The critical path (`analysis/critical_path.py`): hand-built steps whose longest chain is known, and on every
real run, a path that covers each step exactly, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.analysis.builders import host, kernel, launch, profile
from tests.conftest import shared_trace
from traceinsight.analysis import analyze
from traceinsight.api import load as ti_load
from traceinsight.assemble import assemble
from traceinsight.discover import find_runs
from traceinsight.findings import evaluate
from traceinsight.workflow import analyze_path

US = 1_000
REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
SHARED = REPO.parent / "shared" / "traces"


def _step(dur: float = 100) -> dict[str, Any]:
    return {**host("step", 0, dur, "ProfilerStep#1"), "step_id": 1, "thread": 1}


def _on(thread: int, row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "thread": thread}


def _profile(rows: list[dict[str, Any]]) -> Any:
    """Host rows on thread 1 unless they say, device rows on none."""
    return profile([{"thread": -1 if r.get("device") else 1, **r} for r in rows])


def _parts(rows: list[dict[str, Any]]) -> dict[str, int]:
    path = analyze(_profile(rows)).critical_path
    assert len(path.step_ns) == 1
    return {p: int(ns[0]) // US for p, ns in path.parts.items() if ns[0]}


def test_gpu_bound_step_runs_through_the_kernels_the_sync_waited_for() -> None:
    """aten::mm [0, 55] launches K1 (at 10) and K2 (at 40); K1 runs [22, 80], K2 after it [80, 90]; a device sync
    [55, 95] returns at 95. Back from 100: 5 us of step marker, the sync's 5 us after K2 ended, K2 (10), K1 (58),
    K1's launch from its call's start (12), and aten::mm before the call (10)."""
    rows = [
        _step(),
        _on(1, host("cpu_op", 0, 55, "aten::mm")),
        _on(1, launch(10, 10, 1)),
        _on(1, launch(40, 10, 2)),
        _on(1, host("sync", 55, 40, "cudaDeviceSynchronize")),
        kernel(22, 58, corr=1, name="gemm"),
        kernel(80, 10, corr=2, name="relu"),
    ]
    assert _parts(rows) == {"host_gap": 5, "sync": 5, "compute": 68, "launch": 12, "cpu_op": 10}


def test_host_bound_step_stays_on_the_host() -> None:
    """Short kernels right after their launches, no sync: the host's own chain is the step."""
    rows = [
        _step(),
        _on(1, host("cpu_op", 0, 100, "aten::add")),
        _on(1, launch(10, 10, 1)),
        _on(1, launch(60, 10, 2)),
        kernel(25, 5, corr=1),
        kernel(75, 5, corr=2),
    ]
    assert _parts(rows) == {"cpu_op": 80, "launch": 20}


def test_a_kernel_late_for_both_its_launch_and_its_stream_waited_for_another_stream() -> None:
    """K2 on stream 8 is launched at 5 and starts at 60, when K1 on stream 7 ends (a cudaStreamWaitEvent): the path
    goes from K2 to K1, not to K2's launch."""
    rows = [
        _step(),
        _on(1, host("cpu_op", 0, 30, "forward")),
        _on(1, launch(2, 2, 1)),
        _on(1, launch(5, 2, 2)),
        _on(1, host("sync", 30, 70, "cudaDeviceSynchronize")),
        kernel(4, 56, corr=1, name="k1"),
        {**kernel(60, 30, corr=2, name="k2"), "stream": 8},
    ]
    # back from 100: sync after k2 (10), k2 (30), k1 (56), k1's launch edge [2, 4] (2), forward before it (2)
    assert _parts(rows) == {"sync": 10, "compute": 86, "launch": 2, "cpu_op": 2}


def test_the_step_thread_waiting_for_another_thread_follows_that_thread() -> None:
    """The main thread's `backward` range has no traced child for 1 ms while thread 2 runs ops through it: the
    path goes through thread 2's ops, and before them, back to the main thread."""
    rows = [
        _step(1000),
        _on(1, host("annotation", 0, 1000, "backward")),
        _on(2, host("cpu_op", 50, 400, "MmBackward")),
        _on(2, host("cpu_op", 450, 500, "AddBackward")),
    ]
    path = analyze(_profile(rows)).critical_path
    seg = path.segments
    on_thread_2 = seg[seg["resource"] == 2]
    assert set(on_thread_2["name"].astype(str)) == {"MmBackward", "AddBackward"}
    # the main thread's return after AddBackward (50), thread 2's ops (900), the main thread before they began (50)
    assert int((on_thread_2["end_ns"] - on_thread_2["start_ns"]).sum()) == 900 * US
    assert {p: int(ns[0]) // US for p, ns in path.parts.items() if ns[0]} == {"cpu_op": 950, "sync": 50}


def test_the_step_thread_follows_the_thread_that_ran_through_its_wait_not_the_last_short_op() -> None:
    """A TF function's run on the main thread [0, 1000] while an inter-op thread sits in ``IteratorGetNext``
    [20, 900] (an input wait) and another thread runs the step's compute [900, 980]: that thread ran for 80 of the
    1000 us, so the main thread waited for the thread in the input wait (ended at 900), whose wait is the path's
    880 us of input; the compute thread's last short op alone is not what it waited for."""
    rows = [
        _step(1000),
        _on(1, host("cpu_op", 0, 1000, "KernelAndDeviceFunc::Run")),
        _on(2, host("input_wait", 20, 880, "IteratorGetNextOp::DoCompute")),
        _on(3, host("cpu_op", 900, 80, "MatMul")),
    ]
    path = analyze(_profile(rows)).critical_path
    groups = {g: int(ns[0]) // US for g, ns in path.group_ns().items() if ns[0]}
    # back from 1000: the main thread after the wait ended (100), the wait (880), the main thread before it (20)
    assert groups == {"cpu": 120, "input": 880}


def test_pageable_copy_waits_like_a_sync() -> None:
    """A cudaMemcpyAsync from pageable memory returns after its copy, which ran after the kernel before it."""
    rows = [
        _step(),
        _on(1, launch(0, 5, 1)),
        _on(1, {**launch(10, 85, 2, name="cudaMemcpyAsync")}),
        kernel(5, 70, corr=1, name="gemm"),
        {
            **kernel(75, 15, corr=2, name="Memcpy HtoD (Pageable -> Device)"),
            "kind": "memcpy",
            "copy_kind": "h2d",
            "src_memory": "pageable",
        },
    ]
    # back from 100: host gap (5), the call's return after its copy (5), the copy (15), gemm (70), its launch (5)
    assert _parts(rows) == {"host_gap": 5, "sync": 5, "copy": 15, "compute": 70, "launch": 5}


def _runs() -> list[tuple[Path, str]]:
    bases = [SAMPLES] + ([SHARED] if SHARED.is_dir() else [])
    return [(base, run.name) for base in bases for run in find_runs(base)]


@pytest.mark.parametrize(("base", "name"), _runs(), ids=lambda x: str(x) if isinstance(x, str) else "")
def test_each_steps_path_covers_the_step_once(base: Path, name: str) -> None:
    """Every run at hand: each step's path stretches follow one another back from its end to its start, without gap
    or overlap (so its length is the step's, to the nanosecond)."""
    analysis = analyze_path(base, name).analysis
    path = analysis.critical_path
    seg = path.segments
    for k, step in enumerate(analysis.steps.items):
        mine = seg[seg["step"].to_numpy() == k]
        start, end = mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
        assert (end > start).all()
        assert start[0] == step.start_ns and end[-1] == step.start_ns + step.dur_ns, (name, step.id)
        assert (start[1:] == end[:-1]).all(), (name, step.id)


def _input_share(run: Path, input_id: int, name: str) -> float:
    path = analyze_path(run).analysis.critical_path
    seg = path.segments
    length = seg["end_ns"] - seg["start_ns"]
    mine = (seg["input_id"] == input_id) & (seg["name"].astype(str) == name)
    return float(length[mine].sum()) / path.total_ns


def test_a_rank_that_sleeps_in_its_data_phase_is_on_the_other_ranks_path() -> None:
    """sleep_rank1: rank 1 sleeps in `data` (run_info.json: 30 ms a step); rank 0 waits in the all-reduce, so its
    steps' path crosses to rank 1 and runs through rank 1's data phase. Balanced ranks: it does not."""
    assert _input_share(SAMPLES / "distributed" / "sleep_rank1", 1, "data") > 0.6
    assert _input_share(SAMPLES / "distributed" / "balanced", 1, "data") < 0.05


def test_work_queued_long_after_its_launch_waited_for_what_the_trace_does_not_hold() -> None:
    """A kernel launched at 0 (a 5 us call) with nothing before it on its stream starts at 500 us: 5 + 50 us of it
    is the launch's cost (`rules.DRAINED_QUEUE_LAUNCH_DELAY_NS`), the other 445 us it sat queued."""
    rows = [_step(1000), _on(1, launch(0, 5, 1)), _on(1, host("sync", 5, 995, "cudaDeviceSynchronize"))]
    rows.append(kernel(500, 400, corr=1))
    assert _parts(rows) == {"sync": 100, "compute": 400, "queued": 445, "launch": 55}


def test_python_frames_of_another_thread_are_no_work_the_step_waits_for() -> None:
    """A progress bar's monitor thread sleeps in a Python frame through the main thread's 1 ms range: the path stays
    on the main thread."""
    rows = [
        _step(1000),
        _on(1, host("annotation", 0, 1000, "backward")),
        _on(2, host("python", 10, 980, "threading.py(359): wait")),
    ]
    assert _parts(rows) == {"cpu_op": 1000}


def _group_shares(relative: str) -> dict[str, float]:
    path = analyze_path(shared_trace(relative)).analysis.critical_path
    return path.shares()


def test_a_full_launch_queue_makes_the_step_gpu_bound_as_hta_finds() -> None:
    """hta/ns_resolution_trace: launches find up to 1023 outstanding on their stream and block; HTA 0.5.0 puts
    97.9 % of step #103's path on GPU compute (benchmarks/data/hta_critical_path.json)."""
    assert _group_shares("hta/ns_resolution_trace")["gpu_compute"] > 0.9


def test_a_graph_replay_of_a_busy_device_is_gpu_bound() -> None:
    """vllm_decode_full's replay keeps the GPU 99.8 % busy: its path is GPU compute (HTA says 97 % kernel-to-kernel
    overhead)."""
    assert _group_shares("inference/vllm_decode_full/graph_execution.json.gz")["gpu_compute"] > 0.95


def test_a_copy_blocked_on_work_outside_the_trace_is_idle_not_launch_overhead() -> None:
    """sglang_decode: hipMemcpyWithStream blocks 463 ms while the device is idle (corpus label: idle)."""
    shares = _group_shares("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    assert shares["idle"] > 0.9 and shares["launch"] < 0.05


def test_the_size_bound_is_each_inputs_as_in_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run read in one process walks each input of at most `CRITICAL_PATH_MAX_EVENTS` events, as a worker that
    reads that input alone does: the bound is not the whole run's (bench_ranks: 8 ranks gave a path with --jobs 2
    and none with --jobs 1)."""
    import traceinsight.analysis as analysis

    profile = ti_load(SAMPLES / "distributed" / "sleep_rank1")
    sizes = np.bincount(profile.events["input_id"].to_numpy())
    monkeypatch.setattr(analysis, "CRITICAL_PATH_MAX_EVENTS", int(sizes.max()))
    walks = analyze(profile).walks
    assert [bool(w.steps) for w in walks] == [True, True]
    monkeypatch.setattr(analysis, "CRITICAL_PATH_MAX_EVENTS", int(sizes.min()) - 1)
    result = analyze(profile)
    assert [bool(w.steps) for w in result.walks] == [False, False]
    # The report says so: the events of the inputs not walked.
    assert assemble(result, evaluate(result)).warnings["critical_path_not_walked"] == int(sizes.sum())
