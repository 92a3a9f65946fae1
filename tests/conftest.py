"""Shared fixtures: where the real traces in ../shared live.

Without them the tests that read them skip, and say so (`-rs`); under CI (``CI=true``) a missing
../shared/traces is a failure instead: a CI run that silently skipped a third of the tests would pass
for the wrong reason.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Generator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

from traceinsight.result import RunReport, from_document

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


# What a test says when it skips for want of the shared traces (here and in tests that check for them alone).
SHARED_MISSING = "../shared/traces"
_CHECK_OUT = "check out ../shared beside the project"


def typed_report(**fields: Any) -> RunReport:
    """A report with only `fields` given (the rest empty), read into the model as a saved `--json` report is:
    for renderers tested on hand-made figures."""
    document = {"run": "r", "inputs": [], "steps": {}, "devices": [], "totals": {}, "input_pipeline": {}}
    return from_document({**document, "bottlenecks": [], **fields})


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``, as GitHub Actions and most CI services set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _missing(what: str) -> NoReturn:
    """Skip the test for want of a shared trace, or fail it under CI."""
    if in_ci():
        pytest.fail(f"{what} not available, and CI=true needs it: {_CHECK_OUT}", pytrace=False)
    pytest.skip(f"{what} not available")


def shared_trace(relative: str) -> Path:
    """Path of a real trace in ../shared/traces, skipping the test when it is not there (failing it under CI)."""
    path = SHARED_TRACES / relative
    if not path.exists():
        _missing(f"../shared/traces/{relative}")
    return path


def required_module(name: str, install: str = "pip install -e '.[test]' (traceinsight-report)") -> ModuleType:
    """Import module `name` for a test that needs it, skipping the test when it is not installed, or failing it
    under CI: CI installs what `install` does, so there a missing module is a broken setup, not a reason to skip."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        if in_ci():
            pytest.fail(f"{name} not installed, and CI=true needs it: {install}", pytrace=False)
        pytest.skip(f"{name} not installed ({install})")


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        _missing("../shared/traces")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def trace_300mb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Kineto trace (``hta/nccl_parser_config``) replicated to about 300 MB of JSON by
    benchmarks/replicate.py, made once for the tests that need a load of that size (interrupts, memory limit)."""
    from benchmarks.replicate import Replicator

    replicator = Replicator(shared_trace("hta/nccl_parser_config/nccl_data.json.gz"))
    target = tmp_path_factory.mktemp("big") / "big.pt.trace.json"
    return replicator.write(target, replicator.copies_for(300))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """Under CI, a skip for want of the shared traces that a test decided alone (not through `shared_trace`)
    fails too."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and isinstance(report.longrepr, tuple) and SHARED_MISSING in report.longrepr[2]:
        report.outcome = "failed"
        reason = report.longrepr[2].removeprefix("Skipped: ")
        report.longrepr = f"{reason}, and CI=true needs it: {_CHECK_OUT}"
