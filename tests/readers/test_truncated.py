"""Traces cut short (a job killed while writing them): every complete event before the cut is read, one
truncation warning says so (JSON, terminal, HTML, Markdown), exit 0; ``--strict`` makes that exit 2.

What each cut file holds is found independently: `corpus.complete_events` (the standard library's JSON
decoder, event by event) on the text before the cut. A gzip file's text is inflated with the inflater the
reader uses (ISA-L, else zlib): two inflaters may give a few bytes more or less of a stream cut mid-block.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from markupsafe import escape

from tests import corpus
from tests.conftest import shared_trace
from tests.readers.test_scale import DOCS
from traceinsight.cli import main
from traceinsight.errors import is_truncation_warning, truncation_warning
from traceinsight.events import TraceRead
from traceinsight.readers import _read_document as read_whole_document
from traceinsight.readers import read_trace
from traceinsight.readers.json_document import load_trace_json
from traceinsight.readers.json_events import DAMAGED_EVENTS
from traceinsight.readers.json_files import fast_zlib
from traceinsight.readers.json_stream import StreamFallback, TraceStream
from traceinsight.readers.kineto import read_kineto_json

TRUNCATED = corpus.truncated_files()
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def _text(content: bytes) -> bytes:
    """The JSON text of a file's bytes: a gzip stream (cut or not) inflated as far as it goes."""
    if content[:2] != b"\x1f\x8b":
        return content
    inflater = fast_zlib.decompressobj(wbits=31)
    return bytes(inflater.decompress(content) + inflater.flush())


def _is_whole(text: bytes) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _expected_warning(path: Path, content: bytes) -> str:
    """The truncation warning of a file cut short: where its complete part ends, of the bytes there are."""
    text = _text(content)
    used = len(text) if _is_whole(text) else corpus.complete_events(text)[1]
    return truncation_warning(
        path, used, len(text), "bytes of inflated JSON" if content[:2] == b"\x1f\x8b" else "bytes"
    )


def _truncation_warnings(read: TraceRead | dict[str, Any]) -> list[str]:
    warnings = read.warnings if isinstance(read, TraceRead) else read["warnings"]
    return [k for k in warnings if is_truncation_warning(k)]


# --------------------------------------------------------------------------- the corpus of cut files


@pytest.mark.parametrize("name", sorted(TRUNCATED))
def test_a_file_cut_short_gives_its_complete_events_and_one_warning(tmp_path: Path, name: str) -> None:
    content = TRUNCATED[name]
    path = tmp_path / name
    path.write_bytes(content)
    events, _ = corpus.complete_events(_text(content))
    whole, _ = corpus.complete_events(_text(corpus.KINETO_SEED.read_bytes()))
    streamed, decoded = read_trace(path), read_whole_document(path, None)  # streamed, and decoded whole
    for read in (streamed, decoded):
        kernels = int((read.events["kind"] == "kernel").sum())
        assert kernels == corpus.kernel_count(events), name
        assert len(read.events) > 0
        assert _truncation_warnings(read) == [_expected_warning(path, content)]
    pd.testing.assert_frame_equal(streamed.events, decoded.events)
    if name.startswith("kineto"):
        assert int((streamed.events["kind"] == "kernel").sum()) <= corpus.kernel_count(whole)


@pytest.mark.parametrize("name", ["kineto-75pc.pt.trace.json.gz", "xprof-50pc.trace.json", "kineto-90pc.pt.trace.json"])
def test_the_command_reports_a_file_cut_short(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / name
    path.write_bytes(TRUNCATED[name])
    out = tmp_path / "out"
    assert main(["report", str(path), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q"]) == 0
    assert _truncation_warnings(json.loads((out / "r.json").read_text())) == [
        _expected_warning(path, path.read_bytes())
    ]
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------- every cut point of hand-made traces


@pytest.mark.parametrize(("name", "step"), [("keys around", 1), ("huge event", 3), ("spaced", 2), ("exact ts", 5)])
def test_the_stream_stops_at_the_last_complete_event_wherever_the_cut(tmp_path: Path, name: str, step: int) -> None:
    """Cut at every byte (or every few): the events streamed are exactly those complete before the cut, and
    `cut_at` is where they end; a cut among the keys after the events keeps every event."""
    doc = DOCS[name]
    path = tmp_path / "cut.pt.trace.json"
    for cut in [*range(0, len(doc), step), len(doc)]:
        path.write_bytes(doc[:cut])
        try:
            want, end = corpus.complete_events(doc[:cut])
        except (ValueError, IndexError):  # cut before the events' array
            want, end = [], 0
        stream = TraceStream(path, chunk_bytes=97)
        try:
            got = [e for chunk, _ in stream for e in chunk]
        except StreamFallback:  # a cut before the events' array: the whole-document decode says what is wrong
            assert not want, cut
            continue
        assert [e.name for e in got] == [e.get("name") for e in want], cut
        assert stream.cut_at == (None if cut == len(doc) else end), cut


@pytest.mark.parametrize("name", ["keys around", "huge event", "exact ts", "damaged"])
def test_whole_document_and_two_processes_read_a_cut_file_as_the_stream_does(tmp_path: Path, name: str) -> None:
    doc = DOCS[name]
    for cut in (len(doc) * 3 // 5, len(doc) * 4 // 5, len(doc) - 3):
        path = tmp_path / f"cut{cut}.pt.trace.json"
        path.write_bytes(doc[:cut])
        streamed = read_kineto_json(path, chunk_bytes=64)
        assert streamed is not None and len(streamed.events) > 0
        for other in (read_kineto_json(path, chunk_bytes=256, jobs=2), read_trace(path)):
            assert other is not None
            pd.testing.assert_frame_equal(other.events, streamed.events)
            assert other.warnings == streamed.warnings
        decoded = load_trace_json(path)  # damaged events among the complete ones are skipped, and counted
        assert len(decoded.events) + decoded.warnings[DAMAGED_EVENTS] == len(corpus.complete_events(doc[:cut])[0])


def test_a_gzip_stream_cut_after_its_json_warns_but_reads_everything(tmp_path: Path) -> None:
    path = tmp_path / "whole.pt.trace.json.gz"
    path.write_bytes(corpus.cut_gzip(DOCS["keys around"]))
    plain = tmp_path / "plain.pt.trace.json"
    plain.write_bytes(DOCS["keys around"])
    reference = read_kineto_json(plain, chunk_bytes=64)
    got = read_kineto_json(path, chunk_bytes=64)
    assert reference is not None and got is not None
    pd.testing.assert_frame_equal(got.events, reference.events)
    assert got.metadata == reference.metadata  # the keys after the events too
    size = len(DOCS["keys around"])
    assert _truncation_warnings(got) == [truncation_warning(path, size, size, "bytes of inflated JSON")]


# --------------------------------------------------------------------------- a real trace, as the issue asks


@pytest.fixture(scope="module")
def resnet_cut(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """The ResNet-50 step trace (a .json.gz), cut at 60 % of its bytes."""
    packed = shared_trace(RESNET).read_bytes()
    path = tmp_path_factory.mktemp("in") / Path(RESNET).name
    path.write_bytes(packed[: len(packed) * 6 // 10])
    return path, packed


def test_a_real_gzip_trace_cut_at_60_percent_is_reported(
    tmp_path: Path, resnet_cut: tuple[Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path, packed = resnet_cut
    text = _text(path.read_bytes())
    events, end = corpus.complete_events(text)
    in_part = corpus.kernel_count(events)
    in_whole = corpus.kernel_count(json.loads(gzip.decompress(packed))["traceEvents"])
    out = tmp_path / "out"
    args = [
        "report",
        str(path),
        "-o",
        str(out / "r.html"),
        "--json",
        str(out / "r.json"),
        "--markdown",
        str(out / "r.md"),
    ]
    assert main(args) == 0
    stdout = capsys.readouterr().out
    report = json.loads((out / "r.json").read_text())
    assert 0 < report["totals"]["kernel_count"] == in_part < in_whole
    warning = truncation_warning(path, end, len(text), "bytes of inflated JSON")
    assert _truncation_warnings(report) == [warning]
    assert warning in stdout
    assert str(escape(warning)) in (out / "r.html").read_text()
    assert warning in (out / "r.md").read_text()


def test_strict_refuses_a_report_from_part_of_a_file(
    tmp_path: Path, resnet_cut: tuple[Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path, packed = resnet_cut
    out = tmp_path / "out"
    assert main(["report", str(path), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "--strict"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"traceinsight: error: {path}: ends early") and "--strict" in captured.err
    assert not out.exists()
    timeline = ["report", str(path), "--trace-out", str(out / "t.json.gz"), "-o", str(out / "r.html"), "--strict"]
    assert main(timeline) == 2 and "--strict" in capsys.readouterr().err
    assert not out.exists()  # the timeline, written while the analysis runs, is refused before it is written
    whole = tmp_path / "whole.pt.trace.json.gz"
    whole.write_bytes(packed)
    diff = ["diff", str(whole), str(path), "-o", str(out / "d.html"), "-q"]
    assert main([*diff, "--strict"]) == 2 and "--strict" in capsys.readouterr().err
    assert not out.exists()
    assert main(diff) == 0
