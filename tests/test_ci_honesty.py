"""Honest CI: under ``CI=true`` a test that would skip for want of ../shared/traces fails instead.

A small test file is run by a pytest of its own, with this suite's conftest as a plugin, once as a
developer runs it and once as CI does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PROBE = """
import pytest

from tests.conftest import shared_trace


def test_a_missing_shared_trace():
    shared_trace("no/such/trace.pt.trace.json.gz")


def test_a_skip_of_its_own_for_the_shared_traces():
    pytest.skip("../shared/traces not available")


def test_another_skip():
    pytest.skip("headless Chromium not installed")
"""


def _outcomes(tmp_path: Path, ci: str | None) -> tuple[dict[str, str], str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-rs", "-v", str(probe)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return dict(re.findall(r"::(test_\w+) (PASSED|FAILED|SKIPPED|ERROR)", result.stdout)), result.stdout


def test_without_ci_they_skip_and_say_why(tmp_path: Path) -> None:
    found, out = _outcomes(tmp_path, None)
    assert set(found.values()) == {"SKIPPED"}, out
    assert "../shared/traces/no/such/trace.pt.trace.json.gz not available" in out


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_shared_trace_fails(tmp_path: Path, ci: str) -> None:
    found, out = _outcomes(tmp_path, ci)
    assert found == {
        "test_a_missing_shared_trace": "FAILED",
        "test_a_skip_of_its_own_for_the_shared_traces": "FAILED",
        "test_another_skip": "SKIPPED",
    }, out
    assert "CI=true needs it" in out
