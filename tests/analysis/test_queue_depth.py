"""Launch queue depth (`analysis/queue_depth.py`): hand-built launches with a depth profile known exactly, and one
real trace against the definition computed from its raw JSON with plain numpy."""

from __future__ import annotations

import gzip
import importlib
import json

import numpy as np
import pytest

from tests.analysis.builders import host, kernel, launch, profile, table
from tests.conftest import shared_trace
from traceinsight.analysis import analyze
from traceinsight.analysis.queue_depth import launched_work
from traceinsight.analysis.steps import find_steps
from traceinsight.workflow import analyze_path

queue_depth = importlib.import_module("traceinsight.analysis.queue_depth")  # the package exports its function too

# Launches at 0, 10, 20 us (5 us each); their kernels run 100 us each back to back from 30 us. Depth: 1 on
# [0, 10), 2 on [10, 20), 3 on [20, 130), 2 on [130, 230), 1 on [230, 330), then 0.
THREE = [launch(0, 5, 1), launch(10, 5, 2), launch(20, 5, 3)]
THREE += [kernel(30 + 100 * i, 100, corr=i + 1) for i in range(3)]


def test_depth_profile_over_the_launches_span() -> None:
    queues = queue_depth.queue_depth(launched_work(table(THREE)), [])
    (stream,) = queues.streams
    assert (stream.device, stream.stream, stream.launches) == ("GPU:0", 7, 3)
    assert stream.mean_depth == pytest.approx((10 * 1 + 10 * 2 + 110 * 3 + 100 * 2 + 100 * 1) / 330)  # 2.0
    assert stream.max_depth == 3
    assert stream.drained_share == 0.0
    assert stream.found_depth_p50 == 1.0  # the launches found 0, 1 and 2 ahead of them
    # The series: 330 us in 500 bins of 660 ns, each the deepest queue in it.
    ts = stream.series_ts_ns
    assert len(ts) == 500 and ts[0] == 0
    depth_at = dict(zip(ts.tolist(), stream.series_depth.tolist(), strict=True))
    assert depth_at[5_280] == 1 and depth_at[15_840] == 2 and depth_at[100_320] == 3 and depth_at[300_300] == 1
    (device,) = queues.devices
    assert device.stream == -1 and device.mean_depth == stream.mean_depth


def test_depth_over_a_step_and_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [*THREE, {**host("step", 0, 400, "ProfilerStep#1"), "step_id": 1}]
    events = table(rows)
    monkeypatch.setattr(queue_depth, "LAUNCH_QUEUE_LIMIT", 2)
    (stream,) = queue_depth.queue_depth(launched_work(events), [find_steps(events)]).streams
    assert stream.mean_depth == pytest.approx(660 / 400)
    assert stream.drained_share == pytest.approx(70 / 400)  # [330, 400): nothing queued or running
    assert stream.full_share == pytest.approx(220 / 400)  # depth >= 2 on [10, 230)


def test_device_depth_sums_its_streams() -> None:
    # A second stream: one launch at 400 us whose kernel runs 500-600 us; the device drains only on [330, 400).
    rows = [*THREE, launch(400, 5, 9), kernel(500, 100, corr=9, stream=8)]
    queues = queue_depth.queue_depth(launched_work(table(rows)), [])
    by_stream = {s.stream: s for s in queues.streams}
    assert by_stream[8].mean_depth == pytest.approx(200 / 600)
    assert by_stream[7].drained_share == pytest.approx(270 / 600)
    (device,) = queues.devices
    assert device.mean_depth == pytest.approx((660 + 200) / 600)
    assert device.drained_share == pytest.approx(70 / 600)
    assert device.max_depth == 3


def test_streams_in_the_same_order_whether_a_run_is_read_whole_or_by_input() -> None:
    """Rank 0 launches on stream 7 then 8, rank 1 on 8 then 7: rank 1's records are the same, in the same order,
    from the whole run's table as from its own rows alone (as a worker reads it)."""

    def on(rank: int, row: dict) -> dict:
        return {**row, "input_id": rank}

    rows = [on(0, launch(0, 5, 1)), on(0, kernel(10, 10, corr=1)), on(0, launch(20, 5, 2))]
    rows += [on(0, kernel(30, 10, corr=2, stream=8))]
    rows += [on(1, launch(0, 5, 3)), on(1, kernel(10, 10, corr=3, stream=8)), on(1, launch(20, 5, 4))]
    rows += [on(1, kernel(30, 10, corr=4))]
    events = table(rows)
    whole = queue_depth.queue_depth(launched_work(events), []).streams
    alone = queue_depth.queue_depth(launched_work(events[events["input_id"] == 1]), []).streams
    assert [(q.stream, q.launches) for q in alone] == [(7, 1), (8, 1)]
    assert [(q.stream, q.mean_depth) for q in whole[2:]] == [(q.stream, q.mean_depth) for q in alone]


def test_copies_and_graphs_are_launches_synchronous_calls_are_not() -> None:
    rows = [
        launch(0, 5, 1, name="cudaMemcpyAsync"),
        {"kind": "memcpy", "ts": 10, "dur": 10, "device": "GPU:0", "stream": 7, "correlation": 1},
        launch(30, 5, 2, name="cudaGraphLaunch"),
        kernel(40, 10, corr=2),
        kernel(50, 10, corr=2),
        launch(70, 5, 3, name="cudaMemcpy"),
        {"kind": "memcpy", "ts": 80, "dur": 10, "device": "GPU:0", "stream": 7, "correlation": 3},
    ]
    joined = launched_work(table(rows))
    assert sorted(joined["correlation"].tolist()) == [1, 2]
    assert joined.set_index("correlation").loc[2, "work_end"] == 60_000  # a graph: its last node's end


def _raw_queue_means(path: str) -> tuple[float, float, int]:
    """On the largest stream of a Kineto trace, from its raw JSON: the time-weighted mean over the ProfilerStep
    ranges of (our) launches outstanding until their device work ends, and of HTA's queue length (dropped when the
    work starts), and the stream."""
    with gzip.open(path) as file:
        events = json.loads(file.read())["traceEvents"]
    launch_names = ("cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync")
    calls = {}
    for e in events:
        runtime = e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
        if runtime and "correlation" in e.get("args", {}) and e["name"].startswith(launch_names):
            calls.setdefault(e["args"]["correlation"], e["ts"])
    work: dict[int, list[tuple[float, float, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            corr = e["args"].get("correlation")
            if corr in calls:
                work.setdefault(e["args"]["stream"], []).append((calls[corr], e["ts"], e["ts"] + e["dur"]))
    stream = max(work, key=lambda s: len(work[s]))
    launched, begun, ended = (np.array(column) for column in zip(*work[stream], strict=True))
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    steps = [s for s in steps if s[1] > s[0]]

    def mean(drop: np.ndarray) -> float:
        times = np.concatenate([launched, drop])
        deltas = np.concatenate([np.ones(len(launched)), -np.ones(len(drop))])
        order = np.lexsort((deltas, times))
        times, depth = times[order], np.cumsum(deltas[order])
        area = sum((np.diff(np.clip(np.append(times, times[-1]), lo, hi)) * depth).sum() for lo, hi in steps)
        return float(area / sum(hi - lo for lo, hi in steps))

    return mean(ended), mean(begun), stream


def test_mean_depth_matches_the_raw_trace_and_exceeds_htas_queue_length_by_the_busy_share() -> None:
    path = shared_trace("hta/nccl_parser_config/nccl_data.json.gz")
    ours_raw, hta_raw, stream = _raw_queue_means(str(path))
    analysis = analyze_path(path.parent).analysis
    assert analysis.steps.count == 3
    (record,) = [q for q in analysis.queue_depth.streams if q.stream == stream]
    assert record.mean_depth == pytest.approx(ours_raw, rel=1e-3)
    assert record.mean_depth > hta_raw  # HTA drops a launch when its work starts; we keep it until the work ends


def test_analyze_carries_the_queues() -> None:
    analysis = analyze(profile(THREE))
    assert [q.stream for q in analysis.queue_depth.streams] == [7]
