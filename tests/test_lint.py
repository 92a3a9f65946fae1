"""The project's own checks, so CI fails on them like on any test: ruff (lint + format) and mypy. Both are in the
`test` extra: without them these tests skip, and under CI (``CI=true``) fail instead."""

import subprocess
import sys

from tests.conftest import REPO, required_module


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_lint_and_format():
    required_module("ruff")
    lint = _run(sys.executable, "-m", "ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout[-3000:]
    fmt = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout[-3000:]


def test_mypy():
    required_module("mypy")
    result = _run(sys.executable, "-m", "mypy", "traceinsight")
    assert result.returncode == 0, result.stdout[-3000:]
