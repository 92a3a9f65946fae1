"""Shared fixtures: where the real traces in ../shared live (tests skip when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"
# Every Kineto (PyTorch profiler) trace in ../shared/traces, relative to it.
KINETO_TRACES = (
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto/gpu_metrics/gpu_metrics_input.json",
    "kineto/gpu_metrics/gpu_metrics_expected.json",
    "hta/trace_diff/control/control.json.gz",
    "hta/trace_diff/test/test.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/b200/eager_trace.json.gz",
)


def shared_trace(relative: str) -> Path:
    """Path of a real trace in ../shared/traces, skipping the test when it is not there."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"../shared/traces/{relative} not available")
    return path


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces not available")
    return SHARED_TRACES
