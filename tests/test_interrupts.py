"""Ctrl-C and SIGTERM during a report: exit 130 / 143, one line from the main process only (no traceback from a
reader or the chart painter), no process left behind, no output or temp file left.

The input is a real Kineto trace (../shared/traces) replicated to about 300 MB (`benchmarks/replicate.py`, the
`trace_300mb` fixture), as the issue asks: the signal lands while it is being read, by several processes when
there are cores for them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO


def _session(sid: int) -> list[int]:
    """Every live process of session `sid` (children and orphaned grandchildren alike), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session
            found.append(int(entry.name))
    return found


def _wait_gone(sid: int, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _session(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="looks for processes left behind in /proc")
@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["SIGINT", "SIGTERM"],
)
@pytest.mark.parametrize("to", ["group", "main"], ids=["to the group (Ctrl-C)", "to the main process"])
def test_signal_mid_report(tmp_path, trace_300mb, signum, code, word, to):
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, "-m", "traceinsight", "report", str(trace_300mb), "--jobs", "4"]
    command += ["-o", str(out / "r.html"), "--json", str(out / "r.json"), "--markdown", str(out / "r.md")]
    command += ["--trace-out", str(out / "t.json.gz")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACEINSIGHT_DEBUG", None)
    # A session of its own: what it leaves behind is found by its session id; SIGINT is not ignored there.
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        time.sleep(1.0)
        assert proc.poll() is None, "the report ended before the signal: make the input larger"
        if to == "group":
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, stderr
    assert stderr.splitlines() == [f"traceinsight: {word}"], stderr
    assert stdout == ""
    assert _wait_gone(proc.pid) == []
    assert sorted(p.name for p in out.iterdir()) == []


def test_interrupt_while_writing_removes_what_was_written(tmp_path, capsys, monkeypatch):
    """Ctrl-C after the timeline and the HTML were written, before the JSON: neither is left behind."""
    from traceinsight.cli import main
    from traceinsight.report import output

    real = output.write_atomic

    def write_then_interrupt(path: Path, text: str, protected: tuple[Path, ...] = ()) -> None:
        if path.suffix == ".json":
            raise KeyboardInterrupt
        real(path, text, protected)

    monkeypatch.setattr("traceinsight.report.output.write_atomic", write_then_interrupt)
    out = tmp_path / "out"
    run = REPO / "sample_traces" / "synthetic_gpu" / "healthy"
    args = ["report", str(run), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q"]
    assert main([*args, "--trace-out", str(out / "t.json.gz")]) == 130
    assert capsys.readouterr().err == "traceinsight: interrupted\n"
    assert list(out.iterdir()) == []
