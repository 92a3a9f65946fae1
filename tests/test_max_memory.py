"""``--max-memory``: loading stops with exit 2 and one line naming the limit and what to do, early (after the
first chunk of a trace far too large, and of a gzip bomb), not once the machine swaps; the default is a share of
the memory available, read from the cgroup and /proc/meminfo.

Peak memory is measured on the command's own process (`os.wait4`); sizes in MB are 10**6 bytes.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import corpus
from tests.conftest import REPO, SAMPLE_TRACES
from traceinsight import limits
from traceinsight.cli import main
from traceinsight.errors import TraceError
from traceinsight.limits import EVENT_BYTES, WHOLE_JSON_FACTOR, MemoryLimit, parse_size
from traceinsight.readers import read_trace

LIMIT_WORDS = ("--jobs", "--scheduler", "--run", "--max-memory")


# Runs a command and prints its exit code and peak RSS. A process forked from this one (pytest, grown large)
# starts its high-water mark at this one's size, which an exec keeps: so the command is started by this small
# process instead, whose size is what it starts from.
_MEASURE = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""


def _command(*args: str) -> tuple[int, str, int]:
    """`traceinsight ARGS` in a fresh interpreter: exit code, stderr, and its peak RSS in bytes."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", _MEASURE, sys.executable, "-m", "traceinsight", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    code, peak = map(int, result.stdout.split())
    return code, result.stderr, peak


def _assert_limit_line(err: str, path: Path, limit: str) -> None:
    assert err.count("\n") == 1 and err.startswith(f"traceinsight: error: {path}: needs about "), err
    assert f"over the limit of {limit}" in err and all(word in err for word in LIMIT_WORDS), err


# --------------------------------------------------------------------------- sizes and the default


@pytest.mark.parametrize(
    ("text", "size"),
    [("64MB", 64_000_000), ("2GB", 2_000_000_000), ("1.5 GiB", 3 << 29), ("512M", 512 << 20), ("1000", 1000)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MB", "-1GB", "2XB", "0", "1e9"])
def test_what_is_no_size(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_a_bad_size_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(corpus.KINETO_SEED), "--max-memory", "lots"])
    assert exit_info.value.code == 2 and "--max-memory: not a size: 'lots'" in capsys.readouterr().err


def _cgroup_v1(root: Path, levels: dict[str, tuple[str, str]]) -> None:
    """A v1 memory hierarchy under `root`: (limit, usage) at each level (a path below the hierarchy's root)."""
    for level, (limit, usage) in levels.items():
        folder = root / "memory" / level
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "memory.limit_in_bytes").write_text(limit + "\n")
        (folder / "memory.usage_in_bytes").write_text(usage + "\n")


@pytest.mark.parametrize(
    ("cgroup", "files", "available"),
    [
        # v2: the group's own limit, and its parent's, tighter
        ("0::/job/step\n", {"job/step": ("max", "5"), "job": ("3000", "1000")}, 2000),
        ("0::/job\n", {"job": ("8000", "1000")}, 4096),  # /proc/meminfo's MemAvailable is less
        # v1: "no limit" is a page-rounded 2**63 - 1
        ("4:memory:/job\n2:cpu:/\n", {"job": ("9223372036854771712", "77")}, 4096),
        ("4:cpuacct,memory:/job\n", {"job": ("1500", "500"), "": ("9223372036854771712", "0")}, 1000),
    ],
)
def test_the_default_limit_is_a_share_of_the_memory_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cgroup: str, files: dict[str, tuple[str, str]], available: int
) -> None:
    proc_cgroup, meminfo = tmp_path / "cgroup", tmp_path / "meminfo"
    proc_cgroup.write_text(cgroup)
    meminfo.write_text("MemTotal:       16 kB\nMemAvailable:       4 kB\n")
    root = tmp_path / "sys"
    if cgroup.startswith("0::"):
        for level, (limit, usage) in files.items():
            (root / level).mkdir(parents=True, exist_ok=True)
            (root / level / "memory.max").write_text(limit + "\n")
            (root / level / "memory.current").write_text(usage + "\n")
    else:
        _cgroup_v1(root, files)
    monkeypatch.setattr(limits, "_PROC_CGROUP", proc_cgroup)
    monkeypatch.setattr(limits, "_MEMINFO", meminfo)
    monkeypatch.setattr(limits, "_CGROUP_ROOT", root)
    assert limits.available_memory() == available
    assert MemoryLimit.of(None).total == int(available * 0.75)


# --------------------------------------------------------------------------- stopping early


@pytest.mark.slow
def test_a_300mb_trace_over_64mb_stops_at_once(tmp_path: Path, trace_300mb: Path) -> None:
    """The issue's case: exit 2, the one line, nothing written, and a peak far below the trace's size."""
    out = tmp_path / "out"
    code, err, peak = _command("report", str(trace_300mb), "--max-memory", "64MB", "-o", str(out / "r.html"))
    assert code == 2
    _assert_limit_line(err, trace_300mb, "64 MB")
    assert peak < 400e6, peak
    assert not out.exists()


def _gzip_bomb(path: Path, gigabytes: float, chrome: bool = False) -> Path:
    """A .gz of a few MB inflating to `gigabytes` of events: one packed block of events written many times
    (gzip members in a row are one stream)."""
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}'
    if chrome:  # no Kineto cat nor key: read as XProf's export, decoded whole
        event = event.replace(b'"cat": "kernel", ', b"")
    block = b", ".join([event] * 50_000)
    member = gzip.compress(b", " + block, compresslevel=9)
    with path.open("wb") as file:
        file.write(gzip.compress(b'{"traceEvents": [' + block))
        for _ in range(int(gigabytes * 1e9 / len(block))):
            file.write(member)
        file.write(gzip.compress(b"]}"))
    return path


def test_a_gzip_bomb_stops_as_it_inflates(tmp_path: Path) -> None:
    bomb = _gzip_bomb(tmp_path / "bomb.pt.trace.json.gz", gigabytes=2)
    assert bomb.stat().st_size < 20e6
    out = tmp_path / "out"
    start = time.monotonic()
    code, err, peak = _command("report", str(bomb), "--max-memory", "64MB", "-o", str(out / "r.html"))
    assert code == 2 and time.monotonic() - start < 60
    _assert_limit_line(err, bomb, "64 MB")
    assert peak < 400e6, peak
    assert not out.exists()


def test_a_gzip_bomb_of_blanks_stops_as_it_inflates(tmp_path: Path) -> None:
    """No event ends in gigabytes of spaces: the text held waiting for one is what the limit stops."""
    bomb = tmp_path / "blanks.pt.trace.json.gz"
    blanks = gzip.compress(b" " * 50_000_000, compresslevel=9)
    bomb.write_bytes(gzip.compress(b'{"schemaVersion": 1, "traceEvents": [') + blanks * 40)
    start = time.monotonic()
    with pytest.raises(TraceError, match="over the limit of 64 MB"):
        read_trace(bomb, limit=MemoryLimit(64_000_000, "--max-memory 64MB"))
    assert time.monotonic() - start < 20


def test_a_gzip_bomb_read_whole_stops_as_it_inflates(tmp_path: Path) -> None:
    """XProf's export is decoded whole: its text is refused as it inflates past what the limit allows."""
    bomb = _gzip_bomb(tmp_path / "bomb.trace.json.gz", gigabytes=1, chrome=True)
    start = time.monotonic()
    with pytest.raises(TraceError, match="over the limit of 64 MB"):
        read_trace(bomb, limit=MemoryLimit(64_000_000, "--max-memory 64MB"))
    assert time.monotonic() - start < 20


def test_a_plain_json_read_whole_is_checked_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "export.trace.json"
    path.write_text(json.dumps(corpus.chrome_export()))
    size = path.stat().st_size
    with pytest.raises(TraceError, match="over the limit"):
        read_trace(path, limit=MemoryLimit(size * WHOLE_JSON_FACTOR - 1, "a test"))
    assert len(read_trace(path, limit=MemoryLimit(size * WHOLE_JSON_FACTOR, "a test")).events) > 0


# --------------------------------------------------------------------------- what counts against the limit


@pytest.fixture
def two_ranks(tmp_path: Path) -> Path:
    """A run of two ranks' files, each the synthetic Kineto trace (399 events) with its rank."""
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        doc = {**corpus.kineto_doc(), "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}
        (run / f"rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return run


def test_files_read_one_after_another_add_up(two_ranks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = len(read_trace(corpus.KINETO_SEED).events)
    limit = str(events * EVENT_BYTES * 3 // 2)  # one file fits, two do not
    out = two_ranks.parent / "out"
    assert main(["report", str(two_ranks), "--jobs", "1", "--max-memory", limit, "-o", str(out / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rank1.pt.trace.json.gz: needs about" in err
    assert "besides the" in err and "of the inputs read before it" in err
    assert (
        main(
            [
                "report",
                str(two_ranks),
                "--jobs",
                "1",
                "--max-memory",
                str(int(limit) * 2),
                "-o",
                str(out / "r.html"),
                "-q",
            ]
        )
        == 0
    )


def test_files_read_at_once_split_the_limit(
    two_ranks: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read in processes of their own as a big run's files are (these are far below `PARALLEL_RUN_MIN_BYTES`).
    monkeypatch.setattr(importlib.import_module("traceinsight.load"), "PARALLEL_RUN_MIN_BYTES", 0)
    events = len(read_trace(corpus.KINETO_SEED).events)
    limit = str(events * EVENT_BYTES * 3 // 2)  # one file fits in all of it, not in half
    out = two_ranks.parent / "out"
    assert main(["report", str(two_ranks), "--jobs", "2", "--max-memory", limit, "-o", str(out / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "split among 2 processes reading at once" in err


def test_an_xspace_file_is_checked_before_it_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = SAMPLE_TRACES / "synthetic_gpu_xspace" / "healthy"
    xspace = corpus.XSPACE_SEED
    out = tmp_path / "out"
    assert main(["report", str(run), "--max-memory", "100KB", "-o", str(out / "r.html")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"traceinsight: error: {xspace.absolute()}: needs about") and "over the limit of 0.1 MB" in err
    )
