"""Ctrl-C and SIGTERM during a report: exit 130 / 143, one line from the main process only (no traceback from a
reader), no process left behind, no output or temp file left.

The input is a real Kineto trace (../shared/traces) replicated to about 300 MB (`benchmarks/replicate.py`, the
`trace_300mb` fixture), as the issue asks: the signal lands while it is being read, by several processes (the
test waits until /proc shows the trace open in the main process and read by every worker, not for a fixed time),
or while a process is being started (a fork hook sends it at each start in turn, so no timing decides where).
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

JOBS = 4  # the trace is read by JOBS - 1 worker processes, and by the main process when they are all busy


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


def _holds_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open, from /proc."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # gone, or not ours to look at
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def _bytes_read(pid: int) -> int:
    """The bytes process `pid` has read so far (``rchar``, from /proc; 0 once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/io").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith("rchar:")), 0)


def _wait_read(proc: subprocess.Popen[str], path: Path, workers: int, seconds: float = 60.0) -> bool:
    """Wait until `path` is being read by several processes: open in the main process, and open in `workers`
    others of its session that have each read a megabyte since they started (a worker just forked has the
    main process's files open, but reads nothing until it runs a task: so none is still starting when the signal
    lands). False when the report ends first, or after `seconds`."""
    path = path.resolve()
    readers: set[int] = set()
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        readers.update(p for p in _session(proc.pid) if p != proc.pid and _holds_open(p, path))
        started = [p for p in readers if _bytes_read(p) >= 1 << 20]
        if len(started) >= workers and _holds_open(proc.pid, path):
            return True
        time.sleep(0.005)
    return False


def _wait_gone(sid: int, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _session(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# Each interrupt with the exit code and the one word it ends with, sent to the whole group or the main process.
EACH_SIGNAL = pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["SIGINT", "SIGTERM"],
)
EACH_TARGET = pytest.mark.parametrize("to", ["group", "main"], ids=["to the group (Ctrl-C)", "to the main process"])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="looks for processes left behind in /proc")
@EACH_SIGNAL
@EACH_TARGET
def test_signal_mid_report(tmp_path, trace_300mb, signum, code, word, to):
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, "-m", "traceinsight", "report", str(trace_300mb), "--jobs", str(JOBS)]
    command += ["-o", str(out / "r.html"), "--json", str(out / "r.json"), "--markdown", str(out / "r.md")]
    command += ["--trace-out", str(out / "t.json.gz")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACEINSIGHT_DEBUG", None)
    # A session of its own: what it leaves behind is found by its session id; SIGINT is not ignored there.
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        assert _wait_read(proc, trace_300mb, JOBS - 1), "the report ended, or its workers never read the trace"
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


# `python -c` this, SIGNUM NTH TO, then traceinsight's arguments: traceinsight, with SIGNUM sent as its NTH process
# starts, from ``os.register_at_fork`` hooks: TO "main", by the main process to itself just after the fork (where a
# signal acted on raises in the fork's hooks, which only print it); TO "group", by the new process to the whole
# group before it has run anything of its own (a worker still starting, with the handlers it inherited).
_SIGNAL_AT_FORK = """
import os, runpy, sys

signum, nth, to = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
starts = 0


def count():
    global starts
    starts += 1


def in_parent():
    if starts == nth and to == "main":
        os.kill(os.getpid(), signum)


def in_child():
    if starts == nth and to == "group":
        os.killpg(0, signum)


os.register_at_fork(before=count, after_in_parent=in_parent, after_in_child=in_child)
sys.argv = ["traceinsight", *sys.argv[4:]]
runpy.run_module("traceinsight", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="signals a fork from its hooks")
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="looks for processes left behind in /proc")
@EACH_SIGNAL
@EACH_TARGET
def test_signal_as_a_process_starts(tmp_path, trace_300mb, signum, code, word, to):
    """The signal lands as each process of the report starts in turn: the JOBS - 1 reading workers (forked at
    the pool's first call). Each run ends as one interrupted mid-read does; one that
    starts fewer processes ends with its report written, and fails here."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACEINSIGHT_DEBUG", None)
    for nth in range(1, JOBS):
        out = tmp_path / f"out{nth}"
        out.mkdir()
        command = [sys.executable, "-c", _SIGNAL_AT_FORK, str(int(signum)), str(nth), to]
        command += ["report", str(trace_300mb), "--jobs", str(JOBS), "-o", str(out / "r.html")]
        command += ["--json", str(out / "r.json"), "--markdown", str(out / "r.md"), "--trace-out", str(out / "t.gz")]
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )
        try:
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        at = f"signal at process start {nth}"
        assert proc.returncode == code, f"{at}: {stderr}"
        assert stderr.splitlines() == [f"traceinsight: {word}"], f"{at}: {stderr}"
        assert stdout == "", at
        assert _wait_gone(proc.pid) == [], at
        assert sorted(p.name for p in out.iterdir()) == [], at


def test_interrupt_while_writing_leaves_the_previous_set(tmp_path, capsys, monkeypatch):
    """Ctrl-C after the timeline and the HTML were staged, before the JSON: the previous run's three files are
    left as they were (none renamed yet), and no temp file."""
    from traceinsight.cli import main
    from traceinsight.render import output

    real = output.stage

    def stage_then_interrupt(path: Path, *args: object, **kwargs: object) -> output.Staged:
        if path.suffix == ".json":
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("traceinsight.render.output.stage", stage_then_interrupt)
    out = tmp_path / "out"
    out.mkdir()
    previous = {out / "r.html": "old page", out / "r.json": "{}", out / "t.json.gz": "old timeline"}
    for path, text in previous.items():
        path.write_text(text)
    run = REPO / "sample_traces" / "synthetic_gpu" / "healthy"
    args = ["report", str(run), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q"]
    assert main([*args, "--trace-out", str(out / "t.json.gz")]) == 130
    assert capsys.readouterr().err == "traceinsight: interrupted\n"
    assert {p: p.read_text() for p in out.iterdir()} == previous
