"""Advice that reads what the run already does (issue 18): never recommend a setting the trace shows in place,
say what is there, and give the next fix in order. On real CPU captures (tools/capture_pairs.py) whose
run_info.json says what each pipeline did, and on ../shared/traces."""

from pathlib import Path

import pytest

from tests.analysis.builders import host, kernel, launch, profile
from tests.conftest import SAMPLE_TRACES, shared_trace
from traceinsight.analysis import analyze
from traceinsight.discover import discover
from traceinsight.findings import find_bottlenecks
from traceinsight.load import load_run

PAIRS = SAMPLE_TRACES / "pairs"


def _found(path: Path):
    if not path.exists():
        pytest.skip(f"{path} not present")
    analysis = analyze(load_run(discover(path), path))
    return analysis, {b.id: b for b in find_bottlenecks(analysis)}


def _pair(name: str):
    return _found(PAIRS / name)


def test_prefetch_present_slow_sequential_map():
    analysis, found = _pair("tf_prefetch_slow_map/before")
    b = found["input_bound"]
    assert b.evidence["seen"]["prefetch"] is True and b.evidence["seen"]["map_parallel"] is False
    assert b.recommendations[0].startswith("Parallelise the map")
    assert not any(".prefetch(" in r for r in b.recommendations)
    assert "Already in place: prefetch" in b.evidence["in_place"]
    assert analysis.settings.input == {**analysis.settings.input, "prefetch": True}


def test_py_function_is_named_as_holding_the_gil():
    _, found = _found(shared_trace("tf_cpu/a_input_bound"))
    recs = found["input_bound"].recommendations
    assert recs[0].startswith("Parallelise the map")
    assert any(r.startswith("`slow_decode` is a `tf.py_function`") and "GIL" in r for r in recs)


@pytest.mark.parametrize("run", ["pairs/tf_tuned/after", "shared:tf_cpu/b_input_tuned"])
def test_fully_tuned_pipeline_has_no_input_bottleneck(run):
    path = shared_trace(run[7:]) if run.startswith("shared:") else SAMPLE_TRACES / run
    analysis, found = _found(path)
    assert "input_bound" not in found
    assert analysis.settings.input["cache"] is True and analysis.settings.input["prefetch"] is True


def test_sequential_interleave_gets_parallel_interleave_first():
    _, found = _pair("tf_interleave/before")
    b = found["input_bound"]
    assert b.evidence["seen"]["interleave_parallel"] is False
    assert b.recommendations[0].startswith("Read files in parallel") and "interleave" in b.recommendations[0]


@pytest.mark.parametrize(
    "run", ["pairs/torch_dataloader_2workers_bound/before", "shared:kineto/resnet50_num_workers_4"]
)
def test_dataloader_with_workers_is_never_told_to_use_workers(run):
    path = shared_trace(run[7:]) if run.startswith("shared:") else SAMPLE_TRACES / run
    analysis, found = _found(path)
    assert analysis.settings.input["dataloader"] == "multiprocess"
    for b in found.values():
        assert not any(r.startswith("Load batches in worker processes") for r in b.recommendations)
    if "input_bound" in found:  # 2 workers, still 98 % of the step waiting
        assert found["input_bound"].recommendations[0].startswith("Raise `num_workers`")


def test_single_process_dataloader_is_told_to_use_workers():
    _, found = _pair("torch_dataloader_workers/before")
    assert found["input_bound"].evidence["seen"]["dataloader"] == "single_process"
    assert found["input_bound"].recommendations[0].startswith("Load batches in worker processes")


def test_eager_against_tf_function():
    eager, before = _pair("tf_eager_vs_function/before")
    graph, after = _pair("tf_eager_vs_function/after")
    assert (eager.settings.run["graph"], graph.settings.run["graph"]) == (False, True)
    assert before["host_bound"].recommendations[0].startswith("Run the step as a graph: `@tf.function`")
    assert before["host_bound"].projection.basis == "estimated"
    if "host_bound" in after:  # graph mode already: the next step up
        assert not any(r.startswith("Run the step as a graph") for r in after["host_bound"].recommendations)
        assert after["host_bound"].recommendations[0].startswith("Compile the step with XLA")


def test_pinned_copies_are_not_told_to_pin():
    """A hand-built step whose only H2D copy is pinned and exposed: h2d_copy fires, without "pin memory"."""
    copy = {
        "kind": "memcpy",
        "ts": 0,
        "dur": 500,
        "device": "GPU:0",
        "stream": 8,
        "copy_kind": "h2d",
        "src_memory": "pinned",
        "bytes": 1 << 20,
        "name": "Memcpy HtoD (Pinned -> Device)",
    }
    rows = [host("annotation", 0, 1000, "ProfilerStep#1"), copy, launch(400, 5, 1), kernel(500, 500, 1)]
    (b,) = [b for b in find_bottlenecks(analyze(profile(rows))) if b.id == "h2d_copy"]
    assert b.evidence["seen"] == {"pin_memory": True}
    assert b.recommendations and not any("pin_memory=True" in r for r in b.recommendations)
    assert b.evidence["in_place"] == "Already in place: pinned memory."


def test_pageable_copies_are_told_to_pin():
    _, found = _found(shared_trace("kineto/resnet50_num_workers_0"))
    b = found["h2d_copy"]
    assert b.evidence["seen"] == {"pin_memory": False}  # pageable copies: pinning is the fix
    assert b.recommendations[0].startswith("Pin host memory")
