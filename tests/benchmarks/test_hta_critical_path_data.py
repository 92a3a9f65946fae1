"""The committed HTA 0.5.0 critical-path figures (benchmarks/data/hta_critical_path.json, issue 37) are well-formed.

HTA is not run here (`python -m benchmarks.hta_critical_path` regenerates the file in its own environment); this
checks every entry is either an error or a breakdown whose parts add up, and that the figures known from running
HTA by hand before the script existed are the ones written down.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "hta_critical_path.json"
DOCUMENT = json.loads(DATA.read_text())
ENTRIES = {entry["path"]: entry for entry in DOCUMENT["traces"]}
BOUND_BY = {
    "",  # HTA's label for its zero-weight dependency edges
    "cpu_bound",
    "gpu_compute_bound",
    "gpu_communication_bound",
    "gpu_kernel_kernel_overhead",
    "gpu_kernel_launch_overhead",
}


def test_one_entry_per_trace_all_from_hta_0_5_0() -> None:
    assert len(ENTRIES) == len(DOCUMENT["traces"]) >= 15
    assert "holistictraceanalysis==0.5.0" in DOCUMENT["packages"]
    assert {entry["hta_version"] for entry in ENTRIES.values()} == {"0.5.0"}


@pytest.mark.parametrize("path", sorted(ENTRIES))
def test_entry_is_an_error_or_a_breakdown_that_adds_up(path: str) -> None:
    entry = ENTRIES[path]
    if "error" in entry:
        assert entry["error"].strip() and "\n" not in entry["error"]
        assert "shares" not in entry
        return
    assert set(entry["shares"]) <= BOUND_BY
    assert sum(entry["shares"].values()) == pytest.approx(100.0, abs=0.01)
    weight = entry["path_weight_ns"]
    assert 0 < weight <= entry["path_span_ns"] + 1000  # a weighted edge never runs backwards in time (1 us: rounding)
    assert entry["step_ns"] > 0
    # The path's weight is its edges' weights, type by type; each share is that weight's part by bound_by.
    assert sum(kind["weight_ns"] for kind in entry["edge_types"].values()) == weight
    assert sum(kind["count"] for kind in entry["edge_types"].values()) == entry["path_edges"]
    # The path is a chain of nodes, so the time its edges cover adds up to its span; only dependency edges weigh
    # nothing, delay edges weigh what they cover, and op/kernel spans less when blocking calls are zeroed.
    kinds = entry["edge_types"]
    assert sum(kind["covers_ns"] for kind in kinds.values()) == entry["path_span_ns"]
    for name, kind in kinds.items():
        if name in ("critical_path_dependency", "critical_path_sync_dependency"):
            assert kind["weight_ns"] == 0
        elif name in ("critical_path_kernel_kernel_delay", "critical_path_kernel_launch_delay"):
            assert kind["weight_ns"] == kind["covers_ns"]
        else:
            assert kind["weight_ns"] <= kind["covers_ns"] + kind["count"] * 1000  # zeroed edges may cover -1 us
    launch = entry["edge_types"].get("critical_path_kernel_launch_delay", {"weight_ns": 0})["weight_ns"]
    assert entry["shares"].get("gpu_kernel_launch_overhead", 0.0) == pytest.approx(100 * launch / weight, abs=0.01)
    gaps = entry["edge_types"].get("critical_path_kernel_kernel_delay", {"weight_ns": 0})["weight_ns"]
    assert entry["shares"].get("gpu_kernel_kernel_overhead", 0.0) == pytest.approx(100 * gaps / weight, abs=0.01)
    durations = [event["duration_ns"] for event in entry["top"]]
    assert durations == sorted(durations, reverse=True) and sum(durations) <= weight
    assert {event["bound_by"] for event in entry["top"]} <= BOUND_BY - {""}


@pytest.mark.parametrize(
    ("path", "step", "bound_by", "percent"),
    [
        # HTA run by hand on these traces before this script (issue 37's brief)
        ("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", "ProfilerStep#6", "cpu_bound", 46),
        (
            "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
            "ProfilerStep#6",
            "gpu_compute_bound",
            53,
        ),
        ("hta/nccl_parser_config/nccl_data.json.gz", None, "cpu_bound", 100),
        ("inference/vllm_decode_full/graph_execution.json.gz", None, "gpu_kernel_kernel_overhead", 97),
    ],
)
def test_figures_known_from_running_hta_by_hand(path: str, step: str | None, bound_by: str, percent: float) -> None:
    entry = ENTRIES[path]
    if step is not None:
        assert entry["step"] == step
    assert entry["shares"][bound_by] == pytest.approx(percent, abs=0.6)


def test_old_schema_kineto_traces_are_recorded_as_failures() -> None:
    """PyTorch 1.9's categories (``Operator``, ``Runtime``) are not HTA's ``cpu_op``/``cuda_runtime``."""
    old = [entry for path, entry in ENTRIES.items() if path.startswith("kineto/resnet50_num_workers_")]
    assert len(old) == 2
    assert all(entry["error"].startswith("AssertionError") for entry in old)
