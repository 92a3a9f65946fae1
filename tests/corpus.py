"""Small valid traces of every format, and broken files derived from them, for the robustness tests.

Nothing broken is committed: every damaged file is made at test time from the small
traces in sample_traces/ or from the hand-built XProf export below, so a change to a
writer never leaves a stale corpus behind.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import zlib
from pathlib import Path
from typing import Any

from tests.conftest import SAMPLE_TRACES

_BLANKS = re.compile(r"[ \t\n\r]*")
KINETO_SEED = SAMPLE_TRACES / "synthetic_gpu" / "healthy" / "sample_1.1767229323456.pt.trace.json.gz"
XSPACE_SEED = next((SAMPLE_TRACES / "synthetic_gpu_xspace" / "healthy").rglob("*.xplane.pb"))
CHROME_KERNELS = 30


def kineto_doc(events: int | None = None) -> dict[str, Any]:
    """The healthy synthetic Kineto trace as a dict; with `events`, only its first that many events."""
    doc = json.loads(gzip.decompress(KINETO_SEED.read_bytes()))
    if events is not None:
        doc["traceEvents"] = doc["traceEvents"][:events]
    return doc


def meta(kind: str, pid: int, name: str, tid: int | None = None) -> dict[str, Any]:
    """A Chrome-trace ``M`` event naming a process or thread."""
    event = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    return event if tid is None else {**event, "tid": tid}


def complete(pid: int, tid: int, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    """A Chrome-trace ``X`` event."""
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, "args": args}


def chrome_export(kernel: str = "gemm", host_op: str = "model/dense/MatMul:MatMul") -> dict[str, Any]:
    """A small XProf trace_viewer export: one GPU stream of `CHROME_KERNELS` 5 µs kernels 10 µs apart
    (so busy 150 µs of a 295 µs span), their launches, a Steps line and a TF op.
    """
    events = [
        meta("process_name", 1, "/device:GPU:0"),
        meta("thread_name", 1, "Stream #7(Compute)", 7),
        meta("thread_name", 1, "Steps", 9),
        meta("process_name", 9, "/host:CPU"),
        meta("thread_name", 9, "tf_Compute", 1234),
        *(
            complete(1, 7, kernel, 10.0 * i, 5.0, correlation_id=str(i), kernel_details="grid:160,1,1 occ_pct:50")
            for i in range(CHROME_KERNELS)
        ),
        *(complete(9, 1234, "cudaLaunchKernel", 10.0 * i - 2, 1.5, correlation_id=str(i)) for i in range(30)),
        complete(9, 1234, host_op, 0.0, 300.0),
        complete(1, 9, "1", 0.0, 300.0),
    ]
    return {"displayTimeUnit": "ns", "traceEvents": events}


def complete_events(text: bytes) -> tuple[list[Any], int]:
    """The events of a Chrome-trace text cut anywhere that are complete before the cut, and the byte offset
    where the complete part ends (after the last of them, or after the events' array when it closed).

    Independent of the readers: the standard library's JSON decoder, one top-level key and then one event
    at a time. The text is taken as Latin-1, so offsets are byte offsets (names outside ASCII come out
    garbled, which the structure does not care about)."""
    s = text.decode("latin-1")
    decoder = json.JSONDecoder()

    def skip(pos: int) -> int:  # past JSON's whitespace
        return _BLANKS.match(s, pos).end()  # type: ignore[union-attr]  # matches anywhere, even at the end

    pos = skip(0) + 1  # past the top-level {
    while True:  # the keys before the events, whole (a cut among them leaves no event)
        key, pos = decoder.raw_decode(s, skip(pos))
        pos = skip(pos) + 1  # past the :
        if key == "traceEvents":
            break
        _, pos = decoder.raw_decode(s, skip(pos))
        pos = skip(pos) + 1  # past the ,
    pos = end = skip(pos) + 1  # past the [
    events: list[Any] = []
    while (pos := skip(pos)) < len(s):
        if s[pos] == "]":
            return events, pos + 1
        try:
            event, pos = decoder.raw_decode(s, pos)
        except ValueError:
            break
        events.append(event)
        end = pos
        pos = skip(pos)
        if pos < len(s) and s[pos] == ",":
            pos += 1
    return events, end


def kernel_count(events: list[Any]) -> int:
    """Kernel events among complete `events` of the seeds here: Kineto's by their cat; the XProf export's (no
    cats) are those on its one GPU stream line (`chrome_export`)."""
    return sum(
        e.get("ph") == "X"
        and (str(e["cat"]).lower() == "kernel" if "cat" in e else (e.get("pid"), e.get("tid")) == (1, 7))
        for e in events
    )


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def cut_gzip(text: bytes) -> bytes:
    """A gzip stream of `text` that ends right after it: no end marker, no trailer (a writer killed there)."""
    packer = zlib.compressobj(wbits=31)
    return packer.compress(text) + packer.flush(zlib.Z_SYNC_FLUSH)


def truncated_files() -> dict[str, bytes]:
    """File name -> content: Kineto and XProf-export JSON cut short (a job killed while writing), plain and
    gzip, at shares of the file and at awkward places; each holds complete events before its cut."""
    cases: dict[str, bytes] = {}
    kineto = gzip.decompress(KINETO_SEED.read_bytes())
    for label, text, name in (("kineto", kineto, "pt.trace.json"), ("xprof", _json(chrome_export()), "trace.json")):
        packed = gzip.compress(text)
        for share in (50, 75, 90, 99):
            cases[f"{label}-{share}pc.{name}"] = text[: len(text) * share // 100]
            cases[f"{label}-{share}pc.{name}.gz"] = packed[: len(packed) * share // 100]
        middle = len(text) // 2
        cases[f"{label}-in-a-name.{name}"] = text[: text.index(b'"name": "', middle) + 11]
        cases[f"{label}-after-an-event.{name}"] = text[: text.index(b"}, {", middle) + 1]
        cases[f"{label}-after-a-comma.{name}"] = text[: text.index(b"}, {", middle) + 2]
        cases[f"{label}-at-the-end-marker.{name}.gz"] = cut_gzip(text)
        cases[f"{label}-in-the-trailer.{name}.gz"] = packed[:-4]
    after = kineto.rindex(b"]") + 1  # Kineto writes keys after the events: a cut among them loses only them
    cases["kineto-after-the-events.pt.trace.json"] = kineto[:after]
    cases["kineto-in-the-last-key.pt.trace.json"] = kineto[: after + 12]
    return cases


def broken_files() -> dict[str, tuple[bytes, str]]:
    """File name -> (content, what the one-line error must say), for files no reader can use."""
    kineto_gz = KINETO_SEED.read_bytes()
    kineto = gzip.decompress(kineto_gz)
    xspace = XSPACE_SEED.read_bytes()
    chrome = _json(chrome_export())
    noise = random.Random(20261202)
    random_bytes = bytes(noise.randrange(256) for _ in range(4096))
    impossible = chrome_export()
    for event in impossible["traceEvents"]:
        if event["ph"] == "X":
            event["ts"] = 1e300
    cases: dict[str, tuple[bytes, str]] = {
        "empty.pt.trace.json": (b"", "empty file"),
        "empty.pt.trace.json.gz": (b"", "empty file"),
        "empty-stream.pt.trace.json.gz": (gzip.compress(b""), "empty file"),
        "blank.trace.json": (b" \n\t\n", "empty file"),
        "empty.xplane.pb": (b"", "not an XSpace protobuf"),
        "random.pt.trace.json": (random_bytes, "invalid JSON at byte 0"),
        "random-gzip.pt.trace.json.gz": (b"\x1f\x8b" + random_bytes, "corrupt gzip stream"),
        "random.xplane.pb": (random_bytes, "XSpace"),
        "nul.pt.trace.json": (bytes(64), "invalid JSON at byte 0"),
        "nul-inside.pt.trace.json": (kineto[:100] + b"\x00" + kineto[100:], "invalid JSON at byte 100"),
        "nul.xplane.pb": (bytes(64), "not an XSpace protobuf"),
        "list.pt.trace.json": (b"[1, 2, 3]", "nor an array of trace events (an array of 3 items"),
        "empty-array.trace.json": (b"[]", "nor an array of trace events (an array of 0 items"),
        "objects-array.trace.json": (b'[{"foo": 1}]', "nor an array of trace events (an array of 1 item,"),
        "open-objects-array.trace.json.gz": (gzip.compress(b'[{"foo": 1},\n'), "nor an array of trace events"),
        "begin-without-end.trace.json": (
            b'[{"name": "Paint", "ph": "B", "ts": 1, "pid": 1, "tid": 1}]',
            "no timed events: no complete ('X') event, nor a begin ('B') with its end ('E')",
        ),
        "string.pt.trace.json": (b'"traceEvents"', "top level is not an object with traceEvents"),
        "number.pt.trace.json": (b"42", "top level is not an object with traceEvents"),
        "null.pt.trace.json": (b"null", "top level is not an object with traceEvents"),
        "no-events.pt.trace.json": (b'{"schemaVersion": 1}', "top level is not an object with traceEvents"),
        "events-object.pt.trace.json": (b'{"traceEvents": {}}', "top level is not an object with traceEvents"),
        "events-string.pt.trace.json": (b'{"traceEvents": "x"}', "top level is not an object with traceEvents"),
        "events-numbers.trace.json": (b'{"traceEvents": [1, 2, 3]}', "no timed events"),
        "json.xplane.pb": (kineto[:4096], "not an XSpace protobuf"),
        "huge-numbers.trace.json": (_json(impossible), "impossible"),
        "huge-literal.trace.json": (b'{"traceEvents": [' + b"9" * 5000 + b"]}", "no timed events"),
    }
    # Cut before any event (files cut later are read as far as they go: `truncated_files`).
    cases["cut-10.pt.trace.json.gz"] = (kineto_gz[:10], "truncated gzip stream")
    cases["cut-1.pt.trace.json"] = (kineto[:1], "invalid JSON at byte")
    first_event = kineto.index(b'"traceEvents": [') + 40
    cases["cut-in-first-event.pt.trace.json"] = (kineto[:first_event], "ends early (truncated file?)")
    cases["cut-in-first-event.pt.trace.json.gz"] = (cut_gzip(kineto[:first_event]), "ends early (truncated file?)")
    first_event = chrome.index(b'"traceEvents": [') + 40
    cases["cut-in-first-event.trace.json"] = (chrome[:first_event], "ends early (truncated file?)")
    # Only metadata events (process and thread names) before the cut: nothing to report.
    cases["cut-before-timed-events.trace.json.gz"] = (gzip.compress(chrome)[:200], "ends early (truncated file?)")
    # Cut inside the first plane: no plane is whole (later cuts keep the whole planes: test_xspace_truncated.py).
    for label, cut in (("3", 3), ("half", len(xspace) // 2)):
        cases[f"cut-{label}.xplane.pb"] = (xspace[:cut], "not an XSpace protobuf")
    return cases


def move_capture(path: Path, start_ns: int) -> None:
    """Move a Kineto trace file's capture to start at `start_ns` on its own clock (its first event's ts, after
    `baseTimeNanoseconds` where it has one), in place: traces of different days then overlap like ranks."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    base = doc.get("baseTimeNanoseconds", 0)
    first = min(e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), int | float))
    shift_capture(path, (start_ns - (first * 1000 + (base if first * 1000 < base else 0))) / 1e9)


def shift_capture(path: Path, seconds: float) -> None:
    """Move a Kineto trace file's capture `seconds` later on its own clock (every event's ts), in place: runs
    copied from one sample then differ in capture time, which orders them (`discover.find_runs`)."""
    packed = path.name.endswith(".gz")
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if packed else raw)
    for event in doc["traceEvents"]:
        if isinstance(event.get("ts"), int | float):
            event["ts"] += seconds * 1e6
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if packed else text)
