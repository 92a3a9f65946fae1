"""One hand-built GPU trace whose every figure is worked out by hand (times in us).

GPU:0 busy intervals: K1 [0,100) + H2D copy [50,130) -> [0,130); K2 [300,310); K3 [410,420);
K4 [470,475); K5 [575,580). Span 580, busy 160, idle 420 in four gaps:
  [130,300) 170: K2's launch ends at 300, DataLoader wait [90,290) overlaps -> input_wait
  [310,410) 100: K3's launch ends at 407, cudaStreamSynchronize [305,400) overlaps -> sync
  [420,470)  50: K4's launch ended at 355, before the gap -> other (a CPU op with a stream arg runs in it: not busy)
  [475,575) 100: K5's launch [500,508) ends after the gap began, no wait or sync -> host_launch
"""

import pytest

from tests.analysis.builders import US, host, kernel, launch, profile
from traceinsight.analysis import analyze
from traceinsight.findings import find_bottlenecks

ROWS = [
    host("annotation", 0, 300, "ProfilerStep#1"),
    host("annotation", 300, 280, "ProfilerStep#2"),
    launch(-10, 5, 1),
    kernel(0, 100, 1, name="volta_sgemm_128x64_nn"),
    {
        "kind": "memcpy",
        "ts": 50,
        "dur": 80,
        "device": "GPU:0",
        "stream": 8,
        "copy_kind": "h2d",
        "src_memory": "pageable",
        "bytes": 1000,
        "name": "Memcpy HtoD (Pageable -> Device)",
    },
    host("cpu_op", 90, 200, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
    launch(295, 5, 2),
    kernel(300, 10, 2),
    host("sync", 305, 95, "cudaStreamSynchronize"),
    launch(350, 5, 4),
    launch(402, 5, 3),
    kernel(410, 10, 3),
    host("cpu_op", 430, 30, "triton_launcher"),
    kernel(470, 5, 4),
    launch(500, 8, 5),
    kernel(575, 5, 5),
]


@pytest.fixture(scope="module")
def analysis():
    return analyze(profile(ROWS))


def test_busy_idle(analysis):
    (usage,) = analysis.devices
    assert usage.span_ns == 580 * US
    assert usage.busy_ns == 160 * US
    assert usage.idle_ns == 420 * US
    assert usage.idle_fraction == pytest.approx(420 / 580)


def test_gap_causes(analysis):
    (gaps,) = analysis.gaps
    assert gaps.count == 4
    assert gaps.by_cause == {"input_wait": 170 * US, "sync": 100 * US, "host_launch": 100 * US, "other": 50 * US}
    assert sum(gaps.by_cause.values()) == analysis.devices[0].idle_ns
    labels = {g.start_ns // US: g.cause for g in gaps.longest}
    assert labels == {130: "input_wait", 310: "sync", 420: "other", 475: "host_launch"}
    assert gaps.max_ns == 170 * US
    first = next(g for g in gaps.longest if g.start_ns == 130 * US)
    assert first.host_activity[0].startswith("enumerate(DataLoader)")


def test_kernels(analysis):
    (k,) = analysis.kernels
    assert k.count == 5
    assert k.small_count == 2  # K4 and K5 (5 us); 10 us is not below the threshold
    assert k.small_total_ns == 10 * US
    assert k.shorter_than_launch_count == 1  # K5: 5 us kernel, 8 us launch call
    assert k.launched_count == 5
    # launch end -> start: K1 5, K2 0, K3 3, K4 115 (ends 355, starts 470), K5 67
    assert k.launch_delay_max_ns == 115 * US
    assert k.launch_delay_p50_ns == 5 * US
    assert k.tensor_core_ns == 0
    assert k.tensor_core_eligible_ns == 100 * US  # the sgemm


def test_copies(analysis):
    (c,) = analysis.copies
    h2d = c.copies["h2d"]
    assert (h2d.count, h2d.total_ns, h2d.bytes, h2d.pageable_count) == (1, 80 * US, 1000, 1)
    assert h2d.exposed_ns == 30 * US
    assert c.copies["d2h"].bytes == 0 and c.copies["d2h"].count == 0  # no copies: 0 bytes is known


def test_steps_breakdown(analysis):
    steps = analysis.steps
    assert steps.source == "marker"
    assert [s.id for s in steps.items] == [1, 2]
    one, two = steps.items
    assert one.breakdown == {
        "device_compute": 100 * US,
        "device_copy": 30 * US,
        "host_runtime": 5 * US,
        "input_wait": 160 * US,
        "host_compute": 0,
        "idle": 5 * US,
    }
    assert two.breakdown == {
        "device_compute": 30 * US,
        "device_copy": 0,
        "host_runtime": 103 * US,
        "input_wait": 0,
        "host_compute": 30 * US,
        "idle": 117 * US,
    }
    for s in steps.items:
        assert sum(s.breakdown.values()) == s.dur_ns


def test_input_pipeline(analysis):
    ip = analysis.input_pipeline
    assert ip.wait_ns == 160 * US
    assert ip.fraction == pytest.approx(160 / 580)
    assert ip.verdict == "high"
    assert ip.source == "DataLoader"


def test_bottlenecks_ranked_by_cost(analysis):
    found = find_bottlenecks(analysis)
    assert [(b.id, b.time_ns // US) for b in found] == [
        ("input_bound", 170),
        ("host_bound", 100),
        ("d2h_sync", 100),
        ("fp32_compute", 50),
        ("idle_other", 50),
        ("h2d_copy", 30),
    ]
    assert [b.severity for b in found][:3] == ["high", "medium", "medium"]  # 170, 100, 100 of 580
    assert any("num_workers" in r for r in found[0].recommendations)
