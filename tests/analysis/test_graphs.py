"""CUDA / HIP graph replays: one launch each, their gaps the graph's own (issue 26)."""

import gzip
import json

import pytest

from tests.analysis.builders import US, kernel, launch, profile
from tests.conftest import shared_trace
from traceinsight.analysis import analyze
from traceinsight.findings import find_bottlenecks
from traceinsight.workflow import analyze_path


def _two_replays():
    # Replay 1: cudaGraphLaunch [0,50) runs nodes at 100, 110, 120 (5 us each); replay 2: [130,180) runs nodes at
    # 200, 210. Gaps: [105,110) and [115,120) and [205,210) inside replays (15 us), [125,200) before replay 2,
    # whose launch ended at 180, after the gap began: host_launch (75 us).
    rows = [launch(0, 50, 1, "cudaGraphLaunch"), launch(130, 50, 2, "cudaGraphLaunch")]
    rows += [kernel(t, 5, corr=1, name=f"node{t}") for t in (100, 110, 120)]
    rows += [kernel(t, 5, corr=2, name=f"node{t}") for t in (200, 210)]
    return analyze(profile(rows))


def test_a_replay_is_one_launch_through_its_first_node():
    (k,) = _two_replays().kernels
    assert (k.count, k.replayed_count, k.launched_count) == (5, 5, 2)
    assert k.shorter_than_launch_count == 2  # the first nodes, 5 us against 50 us launches; not all five
    # Launch delay of each first node: 100 - 50 and 200 - 180.
    assert (k.launch_delay_p50_ns, k.launch_delay_max_ns) == (35 * US, 50 * US)


def test_gaps_between_nodes_of_one_replay_are_the_graphs_own():
    (g,) = _two_replays().gaps
    assert g.by_cause == {"input_wait": 0, "sync": 0, "host_launch": 75 * US, "other": 0, "graph_internal": 15 * US}


def test_per_replay_figures():
    replays = _two_replays().graphs
    assert (replays.count, replays.nodes, replays.kernel_ns, replays.kernel_share) == (2, 5, 25 * US, 1.0)
    first, second = replays.items
    assert (first.nodes, first.launch_ns, first.first_node_delay_ns, first.span_ns, first.busy_ns) == (
        3,
        50 * US,
        50 * US,
        25 * US,
        15 * US,
    )
    assert first.host_ns_per_node == pytest.approx(50 * US / 3)
    assert first.busy_share == pytest.approx(0.6)
    assert (second.nodes, second.first_node_delay_ns, second.span_ns, second.busy_ns) == (2, 20 * US, 15 * US, 10 * US)


def test_launch_bound_never_fires_on_replayed_kernels():
    ids = {b.id for b in find_bottlenecks(_two_replays())}
    assert "launch_bound" not in ids


def _raw_graph_launches(path) -> tuple[int, int]:
    """Graph launches and the kernels sharing their correlation ids, counted from the raw JSON."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    launches = {
        e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"]
    }
    kernels = sum(1 for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in launches)
    return len(launches), kernels


@pytest.mark.parametrize("folder", ["vllm_decode_full", "vllm_prefilldecode_piecewise"])
def test_vllm_replays_count_once(folder):
    path = shared_trace(f"inference/{folder}/graph_execution.json.gz")
    launches, replayed = _raw_graph_launches(path)
    a = analyze_path(path).analysis
    kernels = sum(k.count for k in a.kernels)
    launched = sum(k.launched_count for k in a.kernels)
    assert a.graphs.count == launches and sum(k.replayed_count for k in a.kernels) == replayed
    # Every kernel launched alone counts once, and each replay once, through its first node.
    assert launched <= kernels - replayed + launches
    ids = {b.id for b in find_bottlenecks(a)}
    assert "launch_bound" not in ids and "host_bound" not in ids
