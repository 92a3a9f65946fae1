"""The streamed JSON loader: the same events, keys, warnings and table as decoding the whole document.

`TraceStream` cuts the traceEvents array into chunks at ``}`` + ``, {``, which can
also sit inside an event (a list of objects in its args, a string); tiny chunk
sizes put a cut attempt at every such place. The reference is the whole-document
decode (`load_trace_json`), itself checked against plain ``json.loads`` arithmetic
in tests/readers/test_kineto.py; the stream is also checked against that
arithmetic directly. Speed and memory figures are in benchmarks/, not here.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests import corpus
from tests.conftest import KINETO_TRACES, shared_trace
from traceinsight.discover import discover
from traceinsight.errors import TraceError, is_truncation_warning, truncation_warning
from traceinsight.events import TraceRead
from traceinsight.load import Progress, load_run, progress_stream
from traceinsight.readers import _read_document as read_whole_document
from traceinsight.readers import json_files, json_stream, read_trace
from traceinsight.readers.json_document import load_trace_json
from traceinsight.readers.json_events import decode_chunk
from traceinsight.readers.json_files import read_json_bytes
from traceinsight.readers.json_stream import StreamFallback, TraceStream
from traceinsight.readers.kineto import read_kineto, read_kineto_json

CHUNKS = (1, 2, 3, 5, 8, 13, 64, 333, 4096, 1 << 20)
SMALL_REAL = (
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "kineto/gpu_metrics/gpu_metrics_input.json",
)


def _stream(path: Path, chunk: int) -> tuple[list[Any], dict[str, Any], dict[str, int], int]:
    """All events of the stream, its top-level keys and warnings, and how many chunks it took."""
    stream = TraceStream(path, chunk)
    events: list[Any] = []
    chunks = 0
    for part, _ in stream:
        events += part
        chunks += 1
    return events, stream.top, dict(stream.warnings), chunks


def _assert_same_read(got: TraceRead, want: TraceRead) -> None:
    pd.testing.assert_frame_equal(got.events, want.events)
    assert got.metadata == want.metadata
    assert got.warnings == want.warnings
    assert got.devices == want.devices and got.input == want.input and got.framework == want.framework


# --------------------------------------------------------------------------- real traces


# One trace per writer and schema (the others repeat them at more seconds of test time).
STREAMED = tuple(
    rel
    for rel in KINETO_TRACES
    if not rel.startswith(("kineto/resnet50_num_workers_4", "hta/trace_diff/test", "tracelens/h100/google_owlv2"))
    and not rel.endswith("gpu_metrics_expected.json")
)


@pytest.mark.parametrize("rel", STREAMED)
def test_real_trace_streamed_in_small_chunks_reads_like_the_whole_document(rel: str) -> None:
    path = shared_trace(rel)
    want = read_kineto(path, load_trace_json(path))
    blocks: list[int] = []
    got = read_kineto_json(path, chunk_bytes=1 << 18, on_bytes=blocks.append)
    assert got is not None and len(blocks) > len(read_json_bytes(path)) // (1 << 18)  # read bit by bit
    _assert_same_read(got, want)


@pytest.mark.parametrize("rel", SMALL_REAL)
@pytest.mark.parametrize("chunk", (1, 7, 100))
def test_small_real_traces_with_a_cut_tried_at_every_byte(rel: str, chunk: int) -> None:
    path = shared_trace(rel)
    whole = load_trace_json(path)
    events, top, warnings, _ = _stream(path, chunk)
    assert events == whole.events and top == whole.top and warnings == dict(whole.warnings)
    _assert_same_read(read_kineto_json(path, chunk_bytes=chunk), read_kineto(path, whole))


@pytest.mark.parametrize(
    "rel",
    [
        "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # µs with ns digits past 2**43
        "hta/nccl_parser_config/nccl_data.json.gz",  # baseTimeNanoseconds after the events
    ],
)
def test_streamed_times_match_plain_json_arithmetic(rel: str) -> None:
    path = shared_trace(rel)
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    rows = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e and e.get("cat") != "Trace"]
    base = doc.get("baseTimeNanoseconds", 0)
    read = read_kineto_json(path, chunk_bytes=1 << 15)
    assert read is not None
    ns = [int((Decimal(e["ts"]) * 1000).to_integral_value()) for e in rows]
    np.testing.assert_array_equal(read.events["ts_ns"].to_numpy(), [base + t for t in ns])
    assert list(read.events["name"].astype(str)) == [e["name"] for e in rows]


# --------------------------------------------------------------------------- hand-made documents

KERNEL = {
    "ph": "X",
    "cat": "kernel",
    "name": 'gemm "quoted" },{ \\ é',
    "pid": 0,
    "tid": 7,
    "ts": 14.25,
    "dur": 5.5,
    "args": {"device": 0, "stream": 7, "correlation": 5, "blocks per SM": 1.5, "est. achieved occupancy %": 40},
}
EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 0, "ts": 9, "dur": 30},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 9.5, "dur": 20},
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": 10.5,
        "dur": 3,
        # Objects in a list, one holding the cut pattern in a string: cut points that are no event boundary.
        "args": {"External id": 1, "Input Dims": [[2, 3], [3]], "extra": [{"a": 1}, {"b": {"c": "},{"}}, {}]},
    },
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": 11,
        "dur": 2,
        "args": {"correlation": 5, "External id": 1},
    },  # fmt: skip
    {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 11, "cat": "ac2g", "name": "ac2g"},
    KERNEL,
    {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD (Pageable -> Device)",
        "pid": 0,
        "tid": 7,
        "ts": 20,
        "dur": 1,
        "args": {"device": 0, "stream": 7, "correlation": 6, "bytes": 4096},
    },  # fmt: skip
    {"ph": "X", "cat": "cpu_op", "name": '"traceEvents": [', "pid": 1, "tid": 1, "ts": 12, "dur": 1},
]


def _events(copies: int = 3) -> list[Any]:
    return [{**e, "ts": e["ts"] + 100 * k} if "ts" in e else e for k in range(copies) for e in EVENTS]


DOCS: dict[str, bytes] = {
    "compact": json.dumps({"schemaVersion": 1, "traceEvents": _events()}, separators=(",", ":")).encode(),
    "spaced": json.dumps({"schemaVersion": 1, "traceEvents": _events()}).encode(),
    "indented": json.dumps({"schemaVersion": 1, "traceEvents": _events()}, indent=2).encode(),
    # A nested "traceEvents" key first; after the array, keys whose values hold `]` and `},{`.
    "keys around": json.dumps(
        {
            "meta": {"traceEvents": [1, {"x": 2}]},
            "note": 'a "traceEvents": [ in a string',
            "traceEvents": _events(),
            "deviceProperties": [{"id": 0, "name": "A100"}, {"id": 1, "name": "A100"}],
            "INFO": ["a]b", "}, {", "]"],
            "baseTimeNanoseconds": 1_000_000_000,
        },
        indent=1,
    ).encode(),
    "empty": b'{"schemaVersion": 1, "traceEvents": [ ], "traceName": "x"}',
    "one event": json.dumps({"traceEvents": [KERNEL]}).encode(),
    "huge event": json.dumps(
        {"traceEvents": [{**KERNEL, "args": {**KERNEL["args"], "l": [{"i": i} for i in range(100)]}}, *_events(1)]}
    ).encode(),
    "damaged": json.dumps(
        {
            "schemaVersion": 1,
            "traceEvents": [
                *_events(1),
                {**KERNEL, "ts": [1, 2]},
                42,
                *_events(1),
                {**KERNEL, "args": {"stream": {"id": 7}}},
            ],
        }  # fmt: skip
    ).encode(),
    "exact ts": b'{"schemaVersion": 1, "traceEvents": ['
    + b",".join(
        b'{"ph": "X", "cat": "cpu_op", "name": "op%d", "ts": 1712195495519689.%03d, "dur": 0.5}' % (i, i)
        for i in range(40)
    )
    + b"]}",
    "invalid utf-8": b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op\xff", "ts": 1},'
    b' {"ph": "X", "cat": "cpu_op", "name": "ok", "ts": 2}]}',
}


def _write(tmp_path: Path, data: bytes, gz: bool = False, name: str = "t.pt.trace.json") -> Path:
    path = tmp_path / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("name", DOCS)
def test_hand_made_documents_stream_to_the_same_events_at_every_chunk_size(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, DOCS[name])
    whole = load_trace_json(path)
    decoded_warnings = dict(whole.warnings)  # read_kineto adds its own to the document's
    reference = read_kineto(path, whole)
    for chunk in CHUNKS:
        events, top, warnings, _ = _stream(path, chunk)
        assert events == whole.events, chunk
        assert top == whole.top and warnings == decoded_warnings, chunk
        _assert_same_read(read_kineto_json(path, chunk_bytes=chunk), reference)


def test_a_chunk_whose_first_events_need_exact_ts_is_decoded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Epoch µs with ns digits in the first events: the chunk is decoded as exact ts at once, its events never
    decoded as floats first; the ts are the digits as written."""
    decoded: list[tuple[str, int]] = []

    def counting(wrapped: bytes, event_type: type) -> Any:
        decoded.append((event_type.__name__, len(wrapped)))
        return decode_chunk(wrapped, event_type)

    monkeypatch.setattr(json_stream, "decode_chunk", counting)
    read = read_kineto_json(_write(tmp_path, DOCS["exact ts"]), chunk_bytes=1 << 20)
    assert read is not None and list(read.events["ts_ns"]) == [1712195495519689000 + i for i in range(40)]
    whole = max(size for _, size in decoded)
    assert [kind for kind, size in decoded if size == whole] == ["ExactEvent"]


@pytest.mark.parametrize("name", DOCS)
def test_hand_made_documents_decoded_by_two_processes(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks decoded by worker processes; a cut inside an event makes the stream start over, one by one."""
    path = _write(tmp_path, DOCS[name])
    reference = read_kineto(path, load_trace_json(path))
    opened = _count_opens(monkeypatch)
    for chunk in (64, 4096):
        _assert_same_read(read_kineto_json(path, chunk_bytes=chunk, jobs=2), reference)
    if name == "huge event":  # its first event holds many cut points: some chunk starts inside it
        assert len(opened) > 2


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every file the streams open (a restart opens it again)."""
    opened: list[Path] = []
    real = json_files.FileText.blocks

    def counting(self: json_files.FileText, size: int) -> Any:
        opened.append(Path(self.path))
        return real(self, size)

    monkeypatch.setattr(json_files.FileText, "blocks", counting)
    return opened


def test_real_trace_decoded_by_two_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    path = shared_trace("hta/nccl_parser_config/nccl_data.json.gz")
    want = read_kineto(path, load_trace_json(path))
    opened = _count_opens(monkeypatch)
    _assert_same_read(read_kineto_json(path, chunk_bytes=1 << 16, jobs=2), want)
    assert len(opened) == 1  # no restart


def test_real_plain_trace_decoded_from_byte_ranges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain file's chunks go to the workers as byte ranges they read themselves; same read, no restart."""
    plain = tmp_path / "nccl.pt.trace.json"
    plain.write_bytes(gzip.decompress(shared_trace("hta/nccl_parser_config/nccl_data.json.gz").read_bytes()))
    ranges: list[json_files.ByteRange] = []
    real = json_files.ByteRange.read_bracketed

    def recording(self: json_files.ByteRange) -> bytearray:
        ranges.append(self)
        return real(self)

    monkeypatch.setattr(json_files.ByteRange, "read_bracketed", recording)
    want = read_kineto(plain, load_trace_json(plain))
    opened = _count_opens(monkeypatch)
    _assert_same_read(read_kineto_json(plain, chunk_bytes=1 << 16, jobs=2), want)
    assert len(opened) == 1  # no restart
    # The ranges decoded here, if any (the workers' are in other processes), are chunks in file order.
    assert all(r.end - r.start <= 1 << 16 for r in ranges)
    assert all(a.end < b.start for a, b in zip(ranges, ranges[1:], strict=False))


def test_what_the_hand_made_documents_hold(tmp_path: Path) -> None:
    """The cases above are what they claim to be (counted by hand from EVENTS)."""
    read = read_kineto_json(_write(tmp_path, DOCS["keys around"]), chunk_bytes=5)
    assert read is not None and len(read.events) == 3 * 6  # 7 X events a copy, less the Trace span
    assert read.metadata["ts_offset_ns"] == 1_000_000_000 and read.metadata["trace_span_ns"][0] == 1_000_009_000
    damaged = read_kineto_json(_write(tmp_path, DOCS["damaged"]), chunk_bytes=3)
    # the two copies of _events(1) are exact duplicates: the second is skipped and counted
    assert damaged is not None and len(damaged.events) == 6
    assert damaged.warnings["kineto: exact duplicate events skipped"] == 6
    assert sum(v for k, v in damaged.warnings.items() if k.startswith("skipped damaged event")) == 3
    exact = read_kineto_json(_write(tmp_path, DOCS["exact ts"]), chunk_bytes=64)
    assert exact is not None and list(exact.events["ts_ns"]) == [1712195495519689000 + i for i in range(40)]
    bad = read_kineto_json(_write(tmp_path, DOCS["invalid utf-8"]), chunk_bytes=2)
    assert bad is not None and list(bad.events["name"]) == ["op\ufffd", "ok"]
    assert bad.warnings["invalid UTF-8 replaced"] == 1


def test_gzip_is_streamed_too(tmp_path: Path) -> None:
    data = DOCS["indented"]
    seen: list[int] = []
    stream = TraceStream(_write(tmp_path, data, gz=True), 100, on_bytes=seen.append)
    events = [e for part, _ in stream for e in part]
    assert events == load_trace_json(_write(tmp_path, data)).events
    size = (tmp_path / "t.pt.trace.json.gz").stat().st_size
    assert seen == sorted(seen) and seen[-1] == size and len(seen) > 3


# Files cut short are read as far as they go: test_truncated.py.
BROKEN = {
    "syntax error mid-file": DOCS["spaced"].replace(b'"dur": 20', b'"dur": 20,,', 1),
    "trailing garbage": DOCS["spaced"] + b" x",
    "no traceEvents": b'{"schemaVersion": 1, "events": []}',
    "traceEvents not an array": b'{"traceEvents": {}}',
    "top level array": b"[1, 2]",
    "empty": b"  \n ",
}


@pytest.mark.parametrize("name", BROKEN)
@pytest.mark.parametrize("gz", (False, True))
def test_broken_files_fail_as_the_whole_document_does(tmp_path: Path, name: str, gz: bool) -> None:
    path = _write(tmp_path, BROKEN[name], gz)
    with pytest.raises(StreamFallback):
        _stream(path, 50)
    with pytest.raises(TraceError) as want:
        read_whole_document(path, None)
    with pytest.raises(TraceError) as got:
        read_trace(path)
    assert got.value.reason == want.value.reason


def test_gzip_damage_is_reported_while_streaming(tmp_path: Path) -> None:
    packed = gzip.compress(DOCS["indented"] * 1)
    damaged = tmp_path / "damaged.json.gz"
    damaged.write_bytes(packed[:2] + b"\x09" + packed[3:])  # compression method 9: none that exists
    with pytest.raises(TraceError, match="corrupt gzip stream"):
        _stream(damaged, 64)
    with pytest.raises(TraceError, match="cannot read file"):
        _stream(tmp_path / "missing.json", 64)


def test_chrome_exports_are_left_to_the_chrome_reader(tmp_path: Path) -> None:
    doc = {
        "displayTimeUnit": "ns",
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "Stream #5(Compute)"}},
            {"ph": "X", "name": "volta_sgemm", "pid": 1, "tid": 5, "ts": 1, "dur": 2},
        ],
    }
    path = _write(tmp_path, json.dumps(doc).encode(), name="tv.trace.json")
    assert read_kineto_json(path, chunk_bytes=16) is None
    read = read_trace(path)
    assert read.input.format == "chrome" and list(read.events["kind"]) == ["kernel"]


# --------------------------------------------------------------------------- progress


def test_progress_bar_counts_the_bytes_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The module itself: the package's `traceinsight.load` is the API's function of that name.
    monkeypatch.setattr(sys.modules[load_run.__module__], "PROGRESS_MIN_BYTES", 0)
    path = _write(tmp_path, DOCS["indented"])
    out = io.StringIO()
    load_run(discover(path), path, progress=out)
    text = out.getvalue()
    size = path.stat().st_size
    shown = [int(p) for p in re.findall(r"(\d+) % of", text)]
    assert shown and shown[-1] == 100 and shown == sorted(shown)
    assert f"of {size / 1e6:,.0f} MB" in text and text.endswith("\r")  # the line is cleared at the end


def test_progress_bar_only_on_a_terminal_and_not_when_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Tty())
    assert progress_stream(quiet=False) is not None and progress_stream(quiet=True) is None
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert progress_stream(quiet=False) is None


def test_progress_draws_at_most_ten_times_a_second() -> None:
    out = io.StringIO()
    bar = Progress(1000, out)
    for done in range(0, 1000, 10):
        bar.show(done)
    bar.show(1000)
    assert out.getvalue().count("\r") <= 3


def test_a_file_cut_short_while_it_is_read_is_read_as_far_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte range that can no longer be read (the file shrank) sends the read back to the plain stream,
    which reads the file as it now is, as any truncated trace: what one plain read of the half gives."""
    half = DOCS["spaced"][: len(DOCS["spaced"]) // 2]
    want = read_kineto_json(_write(tmp_path, half, name="half.pt.trace.json"))
    path = _write(tmp_path, DOCS["spaced"])
    real = json_files.ByteRange.read_bracketed

    def shrinking(self: json_files.ByteRange) -> bytearray:
        os.truncate(path, len(half))  # the half is the document's prefix: never an empty file in between
        return real(self)

    monkeypatch.setattr(json_files.ByteRange, "read_bracketed", shrinking)
    got = read_kineto_json(path, chunk_bytes=64, jobs=2)
    assert got is not None and want is not None and len(got.events) > 0
    pd.testing.assert_frame_equal(got.events, want.events)
    assert [k for k in got.warnings if is_truncation_warning(k)] == [
        truncation_warning(path, corpus.complete_events(half)[1], len(half), "bytes")
    ]


def test_the_event_table_is_freed_before_the_page_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """`analyze_path` hands renderers the results only: nothing keeps the trace's event table alive."""
    import gc
    import weakref

    from traceinsight import workflow

    tables: list[weakref.ref[Any]] = []
    real = workflow.load_run

    def recording(*args: Any) -> Any:
        profile = real(*args)
        tables.append(weakref.ref(profile.events))
        return profile

    monkeypatch.setattr(workflow, "load_run", recording)
    analyzed = workflow.analyze_path(shared_trace("hta/nccl_parser_config/nccl_data.json.gz"))
    gc.collect()
    assert analyzed.report.totals.kernel_count > 0 and analyzed.analysis.profile.events.empty
    assert tables and tables[0]() is None
