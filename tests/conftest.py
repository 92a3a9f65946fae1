"""Shared fixtures: where the real traces in ../shared live (tests skip when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
SAMPLE_TRACES = REPO / "sample_traces"


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
