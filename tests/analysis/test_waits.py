"""Blocking waits, CUDA and HIP alike: what they waited for, or that it is outside the trace (issue 26)."""

import pytest

from tests.analysis.builders import US, host, kernel, launch, profile
from tests.conftest import shared_trace
from traceinsight.analysis import analyze
from traceinsight.findings import find_bottlenecks
from traceinsight.workflow import analyze_path


def _copy(ts: float, dur: float, corr: int) -> dict:
    return {"kind": "memcpy", "ts": ts, "dur": dur, "device": "GPU:0", "stream": 7, "correlation": corr,
            "name": "Memcpy DtoH (Device -> Pageable)", "copy_kind": "d2h"}  # fmt: skip


def _blocked(call: str, busy_during: bool):
    # Kernels [0,100) and [2100,2200); the host blocks in `call` [100,2100) whose own copy is [2090,2100) (10 us).
    # With `busy_during`, a kernel on another stream runs [150,1950) inside the wait: what it waited for.
    rows = [launch(0, 5, 1), kernel(0, 100, corr=1), launch(2100, 5, 3), kernel(2100, 100, corr=3, name="next")]
    rows += [{**launch(100, 2000, 2, call)}, _copy(2090, 10, 2)]
    if busy_during:
        rows += [launch(140, 5, 4), kernel(150, 1800, corr=4, name="long_kernel", stream=8)]
    return analyze(profile(rows))


@pytest.mark.parametrize("call", ["cudaMemcpy", "hipMemcpyWithStream", "hipMemcpy", "cuMemcpyDtoH_v2"])
def test_a_blocking_copy_with_nothing_running_waits_for_work_outside_the_trace(call):
    a = _blocked(call, busy_during=False)
    (gaps,) = a.gaps
    assert gaps.by_cause["sync"] == 1990 * US  # [100,2090): the copy itself is device work
    (wait,) = a.waits.items
    assert (wait.name, wait.dur_ns, wait.own_device_ns, wait.outside_trace) == (call, 2000 * US, 10 * US, True)
    found = {b.id: b for b in find_bottlenecks(a)}
    assert "d2h_sync" not in found and "host_bound" not in found
    b = found["external_wait"]
    assert b.time_ns == 1990 * US and b.projection.basis == "none" and b.projection.speedup == 1.0
    assert b.evidence["waits"][0]["name"] == call


def test_a_wait_for_work_on_another_stream_names_it_and_projects():
    a = _blocked("cudaStreamSynchronize", busy_during=True)
    (wait,) = a.waits.items
    assert not wait.outside_trace
    assert wait.waited_for[0].startswith("long_kernel (stream 8, 1.80 ms)")
    assert "external_wait" not in {b.id for b in find_bottlenecks(a)}


def test_a_copy_that_takes_its_own_time_is_no_wait():
    rows = [launch(0, 2000, 1, "cudaMemcpy"), _copy(5, 1990, 1)]
    assert analyze(profile(rows)).waits.count == 0


def test_sglang_decode_waits_463_ms_for_work_outside_the_trace():
    """SGLang on an MI300X: the host blocks 463 ms in one hipMemcpyWithStream while the GPU is idle."""
    a = analyze_path(shared_trace("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")).analysis
    (gaps,) = a.gaps
    longest = gaps.longest[0]
    assert longest.cause == "sync" and longest.dur_ns > 460_000_000
    assert any(activity.startswith("hipMemcpyWithStream") for activity in longest.host_activity)
    (wait,) = a.waits.items
    assert (wait.name, wait.outside_trace) == ("hipMemcpyWithStream", True)
    assert wait.dur_ns == pytest.approx(463e6, rel=0.001)
    found = {b.id: b for b in find_bottlenecks(a)}
    assert {"host_bound", "launch_bound", "d2h_sync"}.isdisjoint(found)
    assert found["external_wait"].projection.basis == "none"
    assert (a.capture.kind, a.capture.server) == ("inference", "SGLang")


def test_host_work_between_kernels_is_not_a_wait():
    rows = [launch(0, 5, 1), kernel(0, 10, corr=1), host("cpu_op", 10, 3000, "aten::nonzero")]
    rows += [launch(3010, 5, 2), kernel(3015, 10, corr=2)]
    assert analyze(profile(rows)).waits.count == 0
