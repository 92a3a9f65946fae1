"""The early read (readers/early.py): a Kineto file read by a process of its own while `report` imports pandas.

It is only a head start, so its oracle is the read it replaces: the same `TraceRead`, table for table, as the file
read here (whose figures the other reader tests check against the raw events). And it must never change what the
user sees when it cannot help: a damaged, foreign or changed file is read here as always, with the same message.
"""

from __future__ import annotations

import gzip
import json
import mmap
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import REPO, SAMPLE_TRACES, shared_trace
from traceinsight import discover, parallel
from traceinsight.cli import main
from traceinsight.events import TraceRead
from traceinsight.readers import early, json_stream, kineto, read_trace
from traceinsight.readers.early import EarlyRead, early_read, take, worth_reading_early

SAMPLES = (  # ops with shapes, collectives, memory events, graph replays, several threads
    "distributed/balanced/rank0.1796375708077857791.pt.trace.json.gz",
    "warmup/torch_compile_first_call/sample.pt.trace.json.gz",
    "synthetic_gpu/h2d_pageable/sample_1.1767229323456.pt.trace.json.gz",
    "pairs/torch_dataloader_workers/before/sample.1796279880321513497.pt.trace.json.gz",
    "torch_cpu_dataloader/sample.1796235412336039639.pt.trace.json.gz",
)
SHARED = (  # memory events (absolute and running), exact epoch timestamps, AMD's string numbers, many chunks
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
)


@pytest.fixture
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Kineto file is worth an early read (the samples are far below `EARLY_READ_MIN_BYTES`), forked as a
    command's is, even while the idle thread the Dask tests leave behind (``Dask-Offload``) runs."""
    monkeypatch.setattr(early, "EARLY_READ_MIN_BYTES", 0)
    monkeypatch.setattr(early, "forks_workers", lambda: True)
    monkeypatch.setattr(parallel.threading, "active_count", lambda: 1)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EarlyRead | None]]:
    """What each Kineto read took from an early read."""
    seen: list[EarlyRead | None] = []

    def recording(path: Path | str) -> EarlyRead | None:
        seen.append(take(path))
        return seen[-1]

    monkeypatch.setattr(kineto, "take", recording)
    yield seen


def _assert_same_read(got: TraceRead, want: TraceRead) -> None:
    for table in ("events", "ops", "collectives", "memory"):
        pd.testing.assert_frame_equal(getattr(got, table), getattr(want, table), obj=table)
    assert (got.warnings, got.metadata, got.devices, got.input) == (
        want.warnings,
        want.metadata,
        want.devices,
        want.input,
    )


def _params() -> list[object]:
    return [pytest.param(SAMPLE_TRACES / rel, id=rel.split("/")[0]) for rel in SAMPLES] + [
        pytest.param(rel, id=rel.split("/")[1]) for rel in SHARED
    ]


@pytest.mark.parametrize("trace", _params())
def test_the_early_read_is_the_read_here(
    trace: Path | str, any_size: None, taken: list[EarlyRead | None], chunk_bytes: None
) -> None:
    path = trace if isinstance(trace, Path) else shared_trace(trace)
    want = read_trace(path)
    with early_read(path, jobs=2):
        got = read_trace(path)
    assert taken[-1] is not None and taken[-1].chunks  # read by the other process, not here
    _assert_same_read(got, want)


def _plain(tmp_path: Path) -> Path:
    """A plain JSON file: this process reads its pieces as byte ranges of the file."""
    path = tmp_path / "plain.pt.trace.json"
    path.write_bytes(gzip.decompress((SAMPLE_TRACES / SAMPLES[1]).read_bytes()))
    return path


def _cut_short(tmp_path: Path) -> Path:
    """A .gz file whose writer was killed: the gzip stream stops two thirds in, inside an event."""
    text = gzip.decompress((SAMPLE_TRACES / SAMPLES[1]).read_bytes())
    packed = gzip.compress(text)
    path = tmp_path / "cut.pt.trace.json.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    return path


def _two_members(tmp_path: Path) -> Path:
    """A .gz file of two gzip members, the second small: its trailer sizes the last member only, so the text
    outgrows the memory the two processes share and the other process decodes every piece."""
    text = gzip.decompress((SAMPLE_TRACES / SAMPLES[1]).read_bytes())
    path = tmp_path / "two.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text[:-100]) + gzip.compress(text[-100:]))
    return path


def _json_cut_short(tmp_path: Path) -> Path:
    """A whole gzip stream of a JSON text cut short (a killed job's file, compressed afterwards): inflated into the
    shared text, whose truncation warning counts inflated bytes as the read here does."""
    text = gzip.decompress((SAMPLE_TRACES / SAMPLES[1]).read_bytes())
    path = tmp_path / "json_cut.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text[: len(text) * 2 // 3]))
    return path


@pytest.mark.parametrize("make", [_plain, _cut_short, _two_members, _json_cut_short])
def test_plain_cut_short_and_several_member_files_read_early_are_read_as_here(
    make: Any,
    tmp_path: Path,
    any_size: None,
    taken: list[EarlyRead | None],
    chunk_bytes: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This process decodes pieces too: from a plain file's bytes, or from the text shared with the other process;
    a file cut short keeps its truncation warning; past the shared text the other process decodes them all."""
    monkeypatch.setattr(early, "EARLY_READ_MAX_BYTES", 1 << 40)  # a gzip stream cut short ends in no trailer
    path = make(tmp_path)
    want = read_trace(path)
    with early_read(path, jobs=2):
        time.sleep(0.05)  # some pieces are left to this process, some taken by the other
        got = read_trace(path)
    assert taken[-1] is not None and len(taken[-1].chunks) > 10
    _assert_same_read(got, want)


@pytest.fixture
def chunk_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small chunks, so the samples are read in several, as a real file of tens of MB is."""
    monkeypatch.setattr(early, "CHUNK_BYTES", 1 << 16)


def test_its_process_reads_without_pandas() -> None:
    """The point of it: the process starts before pandas is imported, and must not import it (0.15-0.2 s)."""
    path = SAMPLE_TRACES / SAMPLES[0]
    code = (
        "import sys\nfrom traceinsight.readers.early import cut_pieces, decode_claimed\n"
        f"cut = cut_pieces({str(path)!r})\nread = decode_claimed({str(path)!r})\n"
        "print(len(cut.pieces), len(read.chunks), len(read.tail), 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "0", "1", "False"]  # 0.3 MB: no piece before the last, which it decodes too


def test_a_gz_file_is_inflated_into_the_shared_text_and_cut_into_views_of_it(chunk_bytes: None) -> None:
    """Inflated straight into the text both processes share, its pieces are views of that text: no block of it is
    copied, there or here. The text the trailer sized is the file's."""
    path = str(SAMPLE_TRACES / SAMPLES[1])
    text = gzip.decompress(Path(path).read_bytes())
    shared = mmap.mmap(-1, len(text))
    with parallel.inherit(early._SHARED, early._Sharing(parallel.Tickets(parallel.start_context()), shared, None)):
        cut = early.cut_pieces(path)
        _, pieces = early._cut.pop(path)
    assert cut is not None and cut.shared and len(cut.pieces) > 10
    assert shared[:] == text
    assert all(isinstance(p, memoryview) and p.obj is shared for p in pieces)
    assert [bytes(p) for p in pieces] == [text[start:end] for start, end in cut.pieces]
    assert bytes(pieces[0]).lstrip().startswith(b"{") and text[: cut.pieces[0][0]].rstrip().endswith(b"[")


def test_this_process_decodes_the_pieces_the_other_has_not_reached(
    any_size: None, taken: list[EarlyRead | None], chunk_bytes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its imports are done, `take` decodes the pieces the early read's process has not claimed yet: each
    piece once, by one process or the other, and the same read."""
    path = shared_trace("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    want = read_trace(path)
    here = os.getpid()
    decoded_here: list[int] = []
    decode = json_stream.decode_and_convert

    def slow_over_there(*args: object, **kwargs: object) -> object:
        if os.getpid() == here:
            decoded_here.append(1)
        else:
            time.sleep(0.05)  # the early read's process is slow: this one gets to most pieces
        return decode(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(json_stream, "decode_and_convert", slow_over_there)
    with early_read(path, jobs=2):
        time.sleep(0.2)  # it cuts the pieces and claims the first
        got = read_trace(path)
    assert taken[-1] is not None
    assert 0 < len(decoded_here) < len(taken[-1].chunks) - 1  # some pieces here, some there, the last there
    _assert_same_read(got, want)


def test_a_file_changed_since_is_read_here(tmp_path: Path, any_size: None, taken: list[EarlyRead | None]) -> None:
    path = tmp_path / "sample.pt.trace.json.gz"
    path.write_bytes((SAMPLE_TRACES / SAMPLES[1]).read_bytes())
    want = read_trace(path)
    with early_read(path, jobs=2):
        info = path.stat()
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
        got = read_trace(path)
    assert taken == [None, None]
    _assert_same_read(got, want)


def test_a_read_not_taken_is_stopped(any_size: None) -> None:
    path = SAMPLE_TRACES / SAMPLES[0]
    with early_read(path, jobs=2):
        (pending,) = early._pending.values()
    assert not early._pending
    assert pending.child.process.exitcode is not None  # stopped and reaped


def test_a_read_taken_is_killed_at_once_and_reaped_at_the_end(any_size: None) -> None:
    """`take` does not wait for the process to be gone (the kernel frees its memory meanwhile); the block's end
    reaps it, so none is left behind."""
    path = SAMPLE_TRACES / SAMPLES[0]
    with early_read(path, jobs=2):
        (pending,) = early._pending.values()
        assert take(path) is not None
        assert not early._pending and early._to_reap == [pending]
        pending.child.process.join(timeout=30)  # killed: it ends without being told to
        assert pending.child.process.exitcode == -signal.SIGKILL
    assert not early._to_reap


def test_where_it_gains_nothing_it_does_not_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = SAMPLE_TRACES / SAMPLES[0]  # 0.3 MB of JSON: its read costs about what a process's start does
    assert not worth_reading_early(small, jobs=2)
    monkeypatch.setattr(early, "EARLY_READ_MIN_BYTES", 0)
    monkeypatch.setattr(early, "forks_workers", lambda: True)
    assert worth_reading_early(small, jobs=2)
    assert not worth_reading_early(small, jobs=1)  # --jobs 1, or no idle core
    assert not worth_reading_early(small.parent, jobs=2)  # a folder: its runs are found after the imports
    assert not worth_reading_early(tmp_path / "missing.json", jobs=2)
    xspace = next(SAMPLE_TRACES.rglob("*.xplane.pb"))
    assert not worth_reading_early(xspace, jobs=2)
    monkeypatch.setattr(early, "forks_workers", lambda: False)  # macOS, Windows, a threaded process
    assert not worth_reading_early(small, jobs=2)


def test_a_big_text_in_a_small_gzip_is_sized_by_its_trailer(tmp_path: Path) -> None:
    """A .gz file's text is sized from its trailer, not its size on disk: repeated events pack 100-fold."""
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1} for i in range(200_000)]
    text = json.dumps({"traceEvents": events}).encode()
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(text, 9))
    assert path.stat().st_size * 20 < len(text)
    assert early.json_size_guess(path) == len(text)


@pytest.mark.parametrize("pieces", ["one", "many"])
def test_a_foreign_or_damaged_file_gives_nothing_back(
    tmp_path: Path, any_size: None, monkeypatch: pytest.MonkeyPatch, pieces: str
) -> None:
    if pieces == "many":
        monkeypatch.setattr(early, "CHUNK_BYTES", 1 << 10)
    timeline = SAMPLE_TRACES / "tf1_timeline/cpu_mlp/timeline.json"  # a Chrome trace, not Kineto's
    damaged = tmp_path / "damaged.pt.trace.json"
    events = ", ".join(
        json.dumps({"ph": "X", "cat": "kernel", "ts": i, "dur": 1, "pid": 0, "tid": 0}) for i in range(99)
    )
    damaged.write_text('{"traceEvents": [' + events + ', {"ph": "X", "ts": 1, "dur": ], ' + events + "]}")
    for path in (timeline, damaged):
        with early_read(path, jobs=2):
            assert early._pending and take(path) is None


def test_the_report_is_the_same_and_so_is_an_error(
    tmp_path: Path, any_size: None, taken: list[EarlyRead | None], capsys: pytest.CaptureFixture[str]
) -> None:
    path = SAMPLE_TRACES / SAMPLES[0]
    documents = []
    for jobs in ("2", "1"):
        out = tmp_path / jobs
        assert (
            main(["report", str(path), "-q", "--jobs", jobs, "-o", str(out / "r.html"), "--json", str(out / "r.json")])
            == 0
        )
        documents.append({k: v for k, v in json.loads((out / "r.json").read_text()).items() if k != "meta"})
    assert taken[0] is not None and taken[1] is None  # read early, then here
    assert documents[0] == documents[1]
    capsys.readouterr()
    damaged = tmp_path / "damaged.pt.trace.json"
    damaged.write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts": ]}')
    errors = []
    for jobs in ("2", "1"):
        assert main(["report", str(damaged), "-q", "--jobs", jobs, "-o", str(tmp_path / "d.html")]) != 0
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] and str(damaged) in errors[0] and errors[0].count("\n") == 1


def test_a_folder_of_one_trace_is_read_early(
    tmp_path: Path, any_size: None, taken: list[EarlyRead | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report FOLDER` reads the folder's one trace early, as `report FILE` does, and gives the same report; a
    folder of two traces, or of more entries than `LONE_TRACE_MAX_ENTRIES`, is left to discovery."""
    folder = tmp_path / "logdir" / "plugins" / "profile" / "run1"
    folder.mkdir(parents=True)
    (folder / "host.pt.trace.json.gz").write_bytes((SAMPLE_TRACES / SAMPLES[1]).read_bytes())
    logdir = tmp_path / "logdir"
    documents = []
    for jobs in ("2", "1"):
        out = ["-q", "--jobs", jobs, "-o", str(tmp_path / "r.html"), "--json", str(tmp_path / f"{jobs}.json")]
        assert main(["report", str(logdir), *out]) == 0
        documents.append({k: v for k, v in json.loads((tmp_path / f"{jobs}.json").read_text()).items() if k != "meta"})
    assert taken[0] is not None and taken[1] is None  # read early, then here
    assert documents[0] == documents[1]
    started: list[Path | None] = []
    monkeypatch.setattr(early, "_start", lambda path, jobs: started.append(path))
    (folder / "other.pt.trace.json.gz").write_bytes((SAMPLE_TRACES / SAMPLES[0]).read_bytes())
    assert main(["report", str(logdir), "-q", "--jobs", "2", "-o", str(tmp_path / "r.html")]) == 0
    assert started == []  # two traces: none read early
    (folder / "other.pt.trace.json.gz").unlink()
    monkeypatch.setattr(discover, "LONE_TRACE_MAX_ENTRIES", 3)  # logdir, plugins, profile, run1 and the trace
    assert main(["report", str(logdir), "-q", "--jobs", "2", "-o", str(tmp_path / "r.html")]) == 0
    assert started == []


def test_a_file_bigger_than_its_trailer_said_is_given_up(
    tmp_path: Path, any_size: None, taken: list[EarlyRead | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip trailer that lies (a bomb: 40 MB of blanks said to be 1 MB) is not read early past twice the largest
    text read early: the early read gives up before its buffer grows to the bomb's size, and the read here, under
    its memory limit, says what the file is."""
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 0}'
    path = tmp_path / "bomb.pt.trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + event + b"," + b" " * (40 << 20) + event + b"]}", 1))
    monkeypatch.setattr(early, "json_size_guess", lambda path: 1 << 20)
    monkeypatch.setattr(early, "EARLY_READ_MAX_BYTES", 4 << 20)  # given up past 8 MB of text
    want = read_trace(path)
    started = time.monotonic()
    with early_read(path, jobs=2):
        assert early._pending  # begun: the trailer said 1 MB
        got = read_trace(path)
    assert taken[-1] is None and time.monotonic() - started < 10
    _assert_same_read(got, want)


def test_no_process_to_be_had_reads_here(
    any_size: None, taken: list[EarlyRead | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork refused (a limit on processes) costs nothing but the head start."""

    def refused(what: str, context: object = None) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(early, "Child", refused)
    path = SAMPLE_TRACES / SAMPLES[0]
    with early_read(path, jobs=2):
        assert not early._pending
        got = read_trace(path)
    assert taken == [None]
    _assert_same_read(got, read_trace(path))


def test_a_memory_limit_keeps_the_read_here(tmp_path: Path, any_size: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--max-memory` is checked as the read here goes, chunk by chunk: no early read under it."""
    started: list[Path] = []
    monkeypatch.setattr(early, "_start", lambda path, jobs: started.append(path) if jobs > 1 else None)
    path = SAMPLE_TRACES / SAMPLES[0]
    out = ["-q", "--jobs", "2", "-o", str(tmp_path / "r.html")]
    assert main(["report", str(path), *out, "--max-memory", "1GB"]) == 0
    assert main(["report", str(path), *out]) == 0
    assert started == [path]  # the second run only
