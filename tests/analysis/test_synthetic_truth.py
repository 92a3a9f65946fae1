"""The analyses against the generator's exact ground truth, through both writers and readers."""

from pathlib import Path

import pytest

from tools import synth
from traceinsight.analysis import analyze
from traceinsight.events import merge_reads
from traceinsight.findings import find_bottlenecks
from traceinsight.readers import read_trace

EXPECTED_TOP = {
    "input_bound": "input_bound",
    "launch_bound": "launch_bound",
    "sync_heavy": "d2h_sync",
    # Copies hold most of the device's busy time: transfer-bound, told to pin memory (`test_pageable_transfers`).
    "h2d_pageable": "transfer_bound",
}


def _written(timeline: synth.GpuTimeline, fmt: str, tmp: Path) -> Path:
    if fmt == "kineto":
        return synth.write_kineto(timeline, tmp / f"{timeline.name}.pt.trace.json.gz")
    return synth.write_xspace(timeline, tmp)


@pytest.fixture(scope="module", params=sorted(synth.SCENARIOS))
def scenario(request):
    return synth.SCENARIOS[request.param]()


@pytest.mark.parametrize("fmt", ["kineto", "xspace"])
def test_analysis_matches_ground_truth(scenario, fmt, tmp_path):
    truth = scenario.ground_truth()
    analysis = analyze(merge_reads([read_trace(_written(scenario, fmt, tmp_path))]))
    assert [u.id for u in analysis.devices] == sorted(truth["devices"])
    for usage, gaps, kernels, copies in zip(
        analysis.devices, analysis.gaps, analysis.kernels, analysis.copies, strict=True
    ):
        want = truth["devices"][usage.id]
        assert (usage.span_ns, usage.busy_ns, usage.idle_ns) == (want["span_ns"], want["busy_ns"], want["idle_ns"])
        assert gaps.count == want["gaps"]["count"]
        assert gaps.max_ns == (want["gaps"]["max_ns"] or None)
        assert gaps.by_cause == {**want["gaps"]["by_cause"], "graph_internal": 0}  # the generator makes no graphs
        assert (kernels.count, kernels.small_count) == (want["kernels"]["count"], want["kernels"]["small_count"])
        assert kernels.small_total_ns == want["kernels"]["small_total_ns"]
        for kind in ("h2d", "d2h", "d2d"):
            got, exp = copies.copies[kind], want["copies"][kind]
            assert (got.count, got.total_ns, got.pageable_count, got.exposed_ns) == (
                exp["count"],
                exp["total_ns"],
                exp["pageable_count"],
                exp["exposed_ns"],
            )
            assert got.bytes == exp["bytes"]
    steps = analysis.steps
    assert steps.source == "marker"
    assert [s.dur_ns for s in steps.items] == [s["dur_ns"] for s in truth["steps"]["items"]]
    top = find_bottlenecks(analysis)
    if scenario.name in EXPECTED_TOP:
        assert top[0].id == EXPECTED_TOP[scenario.name]
    if scenario.name == "h2d_pageable" and fmt == "kineto":  # pageable copies: pinning is the first fix
        assert top[0].recommendations[0].startswith("Pin host memory")
    if scenario.name == "healthy":
        assert all(b.severity != "high" for b in top)
