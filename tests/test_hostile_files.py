"""Hostile files (issue 36, cases 1, 17 and 18): only regular files are opened, walks are loops, damaged XSpace
events are counted.

A FIFO named like a trace blocked discovery's `open()` forever; a link to /dev/zero
reads without end; a socket or a dangling link failed the whole report. Each now is
skipped and counted in `warnings.not_a_regular_file`, and one given by name is a
one-line error. Every report runs in a child process with a timeout, and every
in-process open under an alarm, so a regression fails instead of hanging the suite.
A logdir 1,500 folders deep overflowed the recursion of `os.walk` (TensorBoard's
`has_profiles`). An XSpace whose only event lasts 2**62 ps gave an empty report.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_TRACES
from tests.readers.test_xspace import START, _Builder
from traceinsight.commands.trend import _history as trend_history
from traceinsight.discover import find_runs, is_trace
from traceinsight.errors import TraceError
from traceinsight.readers import json_head, read_trace
from traceinsight.readers.json_files import FileText
from traceinsight.readers.nsys import is_nsys_export
from traceinsight.readers.regular import open_regular
from traceinsight.readers.stamp import CaptureStamp, capture_stamp
from traceinsight.readers.xspace import read_xspace
from traceinsight.tensorboard.runs import has_profiles

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and UNIX sockets are POSIX's")

INPUT_BOUND = SAMPLE_TRACES / "synthetic_gpu" / "input_bound"
HOSTILE_NAME = "x.pt.trace.json"  # named like a trace, so discovery looks at it
TIMEOUT_S = 120  # a report of the sample takes a few seconds; a FIFO waited forever


@contextmanager
def _deadline(seconds: int = 20) -> Iterator[None]:
    """Fail, instead of hanging, when the block takes longer than `seconds` (a blocked `open()` is interrupted)."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: blocked on a file that is no regular file?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))  # the socket file stays after the socket closes


def _link_to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name("hidden-fifo"))
    path.symlink_to(path.with_name("hidden-fifo"))


def _dangling_link(path: Path) -> None:
    path.symlink_to(path.with_name("gone.pt.trace.json"))


def _link_loop(path: Path) -> None:
    path.symlink_to(path.name)


HOSTILE: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "socket": _socket,
    "link to /dev/zero": _link_to_dev_zero,
    "link to a fifo": _link_to_fifo,
    "dangling link": _dangling_link,
    "link loop": _link_loop,
}


def _run_folder(tmp_path: Path, kind: str) -> Path:
    """A logdir whose run folder holds the input_bound sample and one hostile file beside it."""
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    for trace in INPUT_BOUND.glob("*.gz"):
        shutil.copy(trace, run)
    HOSTILE[kind](run / HOSTILE_NAME)
    return tmp_path / "logdir"


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceinsight", "report", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,  # a hang fails the test (TimeoutExpired) instead of stalling the suite
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _kernels(trace: Path) -> int:
    """The trace's kernel events, counted from its raw JSON."""
    return sum(e.get("cat") == "kernel" for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"])


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_file_that_is_no_regular_file_is_skipped_and_counted(tmp_path: Path, kind: str) -> None:
    logdir = _run_folder(tmp_path, kind)
    out = tmp_path / "r.json"
    result = _report(str(logdir), "-o", str(tmp_path / "r.html"), "--json", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_bytes())
    assert report["warnings"]["not_a_regular_file"] == 1
    assert "not_a_trace" not in report["warnings"]
    (sample,) = INPUT_BOUND.glob("*.gz")
    assert [Path(i["path"]).name for i in report["inputs"]] == [sample.name]
    assert report["totals"]["kernel_count"] == _kernels(sample) == 240


@pytest.mark.parametrize("kind", ["fifo", "socket", "link to /dev/zero", "dangling link"])
def test_one_given_by_name_is_one_line_and_exit_2(tmp_path: Path, kind: str) -> None:
    path = tmp_path / HOSTILE_NAME
    HOSTILE[kind](path)
    result = _report(str(path), "-o", str(tmp_path / "r.html"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a regular file" in lines[0] and str(path) in lines[0], result.stderr
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("name", ["x.pt.trace.json", "x.json.gz", "x.xplane.pb", "x.sqlite", "x.nsys-rep"])
def test_readers_refuse_a_fifo_at_once(tmp_path: Path, name: str) -> None:
    """Every way a file is opened, given a FIFO with no writer: an answer, never a wait."""
    fifo = tmp_path / name
    os.mkfifo(fifo)
    with _deadline():
        assert not is_trace(fifo)
        assert capture_stamp(fifo) == CaptureStamp()
        assert not is_nsys_export(fifo)
        with pytest.raises(TraceError, match=r"not a regular file \(a FIFO\)"):
            read_trace(fifo)
        with pytest.raises(TraceError, match=r"not a regular file \(a FIFO\)"):
            json_head(fifo)
        with pytest.raises(TraceError, match="not a regular file"):
            next(iter(FileText(fifo).blocks(1024)))
        with pytest.raises(OSError, match=r"not a regular file \(a FIFO\)"):
            open_regular(fifo)
        with pytest.raises(TraceError, match=r"not a regular file \(a FIFO\)"):
            find_runs(fifo)


def test_discovery_and_the_tab_see_no_trace_in_a_fifo(tmp_path: Path) -> None:
    """A logdir holding only a FIFO named like a trace: no trace, said at once, the FIFO counted."""
    os.mkfifo(tmp_path / HOSTILE_NAME)
    with _deadline():
        assert not has_profiles(tmp_path)
        with pytest.raises(TraceError, match="skipped 1 named like traces that are no regular files"):
            find_runs(tmp_path)


DEPTH = 1_500  # Python's recursion limit is 1,000: a recursive walk fails well before the bottom


@contextmanager
def _deep_logdir() -> Iterator[tuple[Path, Path]]:
    """A logdir `DEPTH` one-letter folders deep (about 3 kB of path: within PATH_MAX) with the sample at the
    bottom, made folder by folder and removed bottom up afterwards: `os.makedirs` and `shutil.rmtree` recurse once
    a level, so it lives outside pytest's `tmp_path`, whose clean-up would fail on it."""
    logdir = Path(tempfile.mkdtemp(prefix="traceinsight-deep-"))
    folders = [logdir]
    for _ in range(DEPTH):
        folders.append(folders[-1] / "d")
    (sample,) = INPUT_BOUND.glob("*.gz")
    trace = folders[-1] / sample.name
    try:
        for folder in folders[1:]:
            folder.mkdir()
        shutil.copy(sample, trace)
        yield logdir, trace
    finally:
        trace.unlink(missing_ok=True)
        for folder in reversed(folders):
            if folder.exists():
                folder.rmdir()


def test_a_logdir_thousands_of_folders_deep() -> None:
    with _deep_logdir() as (logdir, trace):
        assert has_profiles(logdir, limit=10 * DEPTH)
        (run,) = find_runs(logdir)
        assert run.files == (trace,)
        assert run.name.count("/") == DEPTH
        assert trend_history(logdir, set()) == ([], [])  # the history walk too: no saved report down there


def _xspace(*durations_ps: int) -> bytes:
    """A GPU stream with one kernel per duration, 10 µs apart, and a profiling window of 1 s."""
    b = _Builder()
    gpu = b.plane("/device:GPU:0")
    stream = gpu.lines.add(id=7, name="Stream #7(Compute)", timestamp_ns=START)
    for i, duration in enumerate(durations_ps):
        b.event(gpu, stream, f"k{i}", i * 10_000_000, duration)
    task = b.plane("Task Environment")
    b.add_stats(task, task, profile_start_time=START, profile_stop_time=START + 10**9)
    return b.space.SerializeToString()


IMPOSSIBLE_DURATION = "xspace: events with an impossible duration (over 7 days: counter overflow) skipped"


def test_an_xspace_event_of_length_2_62_is_skipped_and_counted() -> None:
    read = read_xspace(Path("/nowhere/h.xplane.pb"), _xspace(5_000_000, 2**62, 7_000_000))
    assert read.events["name"].tolist() == ["k0", "k2"]
    assert read.events["dur_ns"].tolist() == [5_000, 7_000]  # ps // 1000
    assert read.warnings == {IMPOSSIBLE_DURATION: 1}


def test_an_xspace_of_only_impossible_events_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no usable event: all 2 events were skipped \(events with an impossible"):
        read_xspace(Path("/nowhere/h.xplane.pb"), _xspace(2**62, 2**63 - 1))
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(_xspace(2**62))
    result = _report(str(path), "-o", str(tmp_path / "r.html"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"traceinsight: error: {path}: no usable event: all 1 events were skipped "
        "(events with an impossible duration (over 7 days: counter overflow) skipped: 1)"
    ]
