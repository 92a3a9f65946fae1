"""Load Chrome-trace JSON (Kineto, XProf's trace_viewer export) fast and without a dict per event.

Events are decoded by msgspec straight into small typed structs holding only the
fields the readers use; every other key is skipped by the decoder, and the structs
are not tracked by the garbage collector (which, not parsing, dominates dict-based
loading of big traces). On the 55.6 MB (unzipped) H100 OWLv2 trace, best of 3 on a
2-core VM: this loader 147 ms (378 MB/s), ``orjson.loads`` 251 ms with the collector
off / 527 ms with it on, ``json.loads`` 575 / 920 ms. benchmarks/bench_json.py repeats the comparison.

Big files are streamed (`TraceStream`): the ``traceEvents`` array is cut into
chunks of a few MB at event boundaries and each chunk is decoded on its own, so a
reader turns one chunk's structs into numpy columns and drops them before the next
is decoded; memory is the columns, not the events. ``.gz`` is decompressed as it
is read; `TraceStream.map` has worker processes decode the chunks while this one
reads on. Any file the stream cannot take apart (no top-level ``traceEvents``
array, a syntax error) is handed to `load_trace_json`, which decodes it whole and
says what is wrong in the same words as always.

Damaged events (a list where a number belongs, ...) do not sink the file: the
strict decode falls back to decoding event by event and counts what it skipped.
"""

from __future__ import annotations

import gc
import io
import itertools
import math
import os
import re
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, cast

import msgspec
import numpy as np
import pandas as pd

from traceinsight.limits import WHOLE_JSON_FACTOR, MemoryLimit
from traceinsight.model import TraceError, truncation_warning
from traceinsight.parallel import worker_pool
from traceinsight.readers._repair import floats, usable_json_times

fast_zlib: ModuleType = zlib  # the standard library's, where ISA-L's wheels are missing
_CORRUPT_GZIP: tuple[type[Exception], ...] = (zlib.error,)
try:  # ISA-L inflates about three times as fast as zlib (benchmarks/README.md)
    from isal import isal_zlib

    fast_zlib, _CORRUPT_GZIP = isal_zlib, (zlib.error, cast(type[Exception], isal_zlib.error))  # stubs: an instance
except ImportError:
    pass

# Numbers some writers put in strings (ROCm: "size": "2560", "stream": "0x0").
Number = int | float | str | None

# Beyond 2**43 µs (~102 days) a double holds a µs timestamp to worse than 1 ns, so
# an absolute-epoch float like 1712195495519689.047 cannot be read exactly as one.
_EXACT_LIMIT_US = 2.0**43
_EXACT_LIMIT_NS_US = 2.0**62 / 1000  # µs beyond which ns leave int64 (such events are dropped as impossible)
_EXACT_BLOCK = 1 << 15  # rows whose ts literals are read at a time
# Old Kineto thread ids ("stream 7"), hex ids ("0x0"), plain numbers in strings.
_ID_TEXT = re.compile(r"^\s*(?:[A-Za-z]+\s+)?([-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?))\s*$")
_BYTE_POSITION = re.compile(r"^(.*?)\s*\(byte (\d+)\)$")
# Streaming: bytes decoded at a time, the key that opens the events, what follows the `}` ending an event.
CHUNK_BYTES = 4 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_NEXT_EVENT = re.compile(rb"\s*,\s*\{")
_GZIP_RATIO_GUESS = 8
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib's code for a gzip stream (header and trailer)
_PACKED_BLOCK = 1 << 20  # bytes of a .gz file read at a time
# +1 for the opening bracket and brace of an object or array, -1 for the closing ones (`_last_event_end`).
_NESTING = np.zeros(256, np.int8)
_NESTING[[ord("{"), ord("[")]], _NESTING[[ord("}"), ord("]")]] = 1, -1
_CUT_LOOKBEHIND = 1 << 16  # bytes before a chunk's end searched for its cut point
_CUTS_PER_FILL = 8  # cut points tried (a `},{` inside an event's args is no cut) before reading on
T = TypeVar("T")
R = TypeVar("R")
# One warning for all damaged events (a per-message key would list every field and type seen).
DAMAGED_EVENTS = "skipped damaged events (missing or wrong-typed fields)"
# Top-level keys worth keeping; others (e.g. TraceLens' environment dump, which can
# hold secrets) are never decoded.
TOP_LEVEL_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "computeProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
    "host_name",
    "trace_id",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
)


class Args(msgspec.Struct, gc=False):
    """The event args the readers use: Kineto's names, then XProf's (stats as strings).

    Absent numbers default to -1 (ids, counts) or NaN (ratios), the table's own
    "unknown", so most columns are plain lists of numbers for numpy.

    Fields are in the order Kineto writes its keys: msgspec looks a key up from
    the field after the last one found, and goes through every field for a key
    it does not know (most of Kineto's), so each field costs every event a little.
    """

    external_id: Number = msgspec.field(name="External id", default=-1)
    device: Number = -1
    stream: Number = -1
    correlation: Number = -1
    external_id_old: Number = msgspec.field(name="external id", default=-1)
    bytes: Number = -1
    blocks_per_sm: Number = msgspec.field(name="blocks per SM", default=math.nan)
    occupancy_pct: Number = msgspec.field(name="est. achieved occupancy %", default=math.nan)
    size: Number = -1
    # Kineto's `[memory]` instant events (profile_memory=True).
    total_reserved: Number = msgspec.field(name="Total Reserved", default=-1)
    total_allocated: Number = msgspec.field(name="Total Allocated", default=-1)
    memory_bytes: Number = msgspec.field(name="Bytes", default=0)
    addr: Number = msgspec.field(name="Addr", default=-1)
    device_id: Number = msgspec.field(name="Device Id", default=-1)
    device_type: Number = msgspec.field(name="Device Type", default=-1)
    # XProf's trace_viewer export.
    name: Any = None
    correlation_id: Number = -1
    memcpy_details: str | None = None
    memset_details: str | None = msgspec.field(name="Memset_details", default=None)
    kernel_details: str | None = None
    long_name: str | None = None
    theoretical_occupancy_pct: Number = math.nan
    step_num: Number = -1


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event, only the fields the readers use."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = -1
    tid: int | str | None = -1
    ts: int | float | None = None
    dur: int | float | None = None
    args: Args | None = None


class ExactEvent(Event, gc=False):
    """`Event` whose ts is the literal as written (absolute-epoch float µs, see `_EXACT_LIMIT_US`):
    `exact_times` reads its digits. Empty when the event has no ts."""

    ts: msgspec.Raw = msgspec.Raw()  # type: ignore[assignment]


@dataclass
class TraceDoc:
    """A decoded trace: all events in file order, the kept top-level keys, load warnings."""

    events: list[Event]
    top: dict[str, Any]
    warnings: Counter[str] = field(default_factory=Counter)
    exact_ts: bool = False


@dataclass
class CompleteEvents:
    """The complete (``ph == "X"``) events with a timestamp, and their times in int64 ns."""

    events: list[Event]
    ts_ns: np.ndarray
    dur_ns: np.ndarray


@contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the garbage collector off while millions of objects are created."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class JsonText:
    """A file's JSON text; `inflated`: from a gzip stream, `cut`: which ended before its end marker."""

    data: bytes
    inflated: bool = False
    cut: bool = False


def read_json_text(path: Path | str, data: bytes | None = None, limit: MemoryLimit | None = None) -> JsonText:
    """The JSON text of a ``.json`` or ``.json.gz`` file (or of its bytes, `data`); gzip is told by its magic
    bytes, and a gzip stream cut short (a killed job's) gives what it inflates to. `limit`: refuse a text too
    large to decode whole (`WHOLE_JSON_FACTOR`), a gzip bomb as soon as its inflated part is."""
    text = FileText(path, data)
    if limit is not None and not text.packed:  # a plain file is read in one go: its size says at once
        limit.check(path, (json_size_guess(path) if data is None else len(data)) * WHOLE_JSON_FACTOR)
    blocks = []
    for block in text.blocks(CHUNK_BYTES if text.packed else -1):
        blocks.append(block)
        if limit is not None:
            limit.check(path, text.given * WHOLE_JSON_FACTOR)
    raw = b"".join(blocks)
    if not raw or raw.isspace():
        raise TraceError(path, "truncated gzip stream" if text.cut else "empty file")
    return JsonText(raw, text.packed, text.cut)


def read_json_bytes(path: Path | str, data: bytes | None = None) -> bytes:
    """`read_json_text`'s bytes."""
    return read_json_text(path, data).data


def load_trace_json(path: Path | str, data: bytes | None = None, limit: MemoryLimit | None = None) -> TraceDoc:
    """Decode a Chrome-trace JSON file (or its bytes, `data`) into a `TraceDoc`.

    A file cut short (a job killed while writing it) gives the complete events before the cut and a
    truncation warning (`model.truncation_warning`); one cut before its first event is a `TraceError`.
    `limit`: see `read_json_text`.
    """
    text = read_json_text(path, data, limit)
    raw, cut_at = text.data, None
    try:
        doc = _decode_document(path, raw)
    except _EndsEarly as error:
        cut_at, closing = _complete_part(path, raw, limit)
        if not cut_at:
            raise TraceError(error.path, error.reason) from None
        doc = _decode_document(path, raw[:cut_at] + closing)
    if cut_at is not None or text.cut:
        used = len(raw) if cut_at is None else cut_at
        doc.warnings[truncation_warning(path, used, len(raw), _unit(text.inflated))] = 1
    return doc


def _decode_document(path: Path | str, raw: bytes) -> TraceDoc:
    """`load_trace_json` of a whole text; `_EndsEarly` when it is cut short."""
    warnings: Counter[str] = Counter()
    with gc_paused():
        try:
            doc, skipped = _decode(path, raw, Event)
        except msgspec.DecodeError:  # only invalid UTF-8 gets here
            # Names written by a profiler without escaping; keep the file readable.
            raw = raw.decode("utf-8", "replace").encode()
            warnings["invalid UTF-8 replaced"] += 1
            doc, skipped = _decode(path, raw, Event)
        exact = _needs_exact_ts(doc.traceEvents)
        if exact:
            doc, skipped = _decode(path, raw, ExactEvent)
    warnings.update(skipped)
    return TraceDoc(events=doc.traceEvents, top=_top(doc), warnings=warnings, exact_ts=exact)


def _complete_part(path: Path | str, raw: bytes, limit: MemoryLimit | None) -> tuple[int | None, bytes]:
    """Where the complete events of a text cut short end (None when the stream cannot tell: the cut is before
    them), and what closes the document there: ``]}``, or ``}`` when the cut came after the events' array."""
    stream = TraceStream(path, data=raw, limit=limit)
    try:
        chunks = sum(1 for _ in stream)  # each chunk of events is checked, then dropped: only where they end is kept
    except StreamFallback:
        return None, b""
    return (stream.cut_at if chunks else None), b"}" if stream.array_closed else b"]}"


def _unit(inflated: bool) -> str:
    """What a truncation warning counts: the file's bytes, or a gzip file's inflated JSON (its whole size is
    unknown, so the share is of what the part before the cut inflates to)."""
    return "bytes of inflated JSON" if inflated else "bytes"


def _top(doc: Any) -> dict[str, Any]:
    """The kept top-level keys that a decoded document has."""
    return {key: getattr(doc, key) for key in TOP_LEVEL_KEYS if getattr(doc, key) is not None}


class StreamFallback(Exception):
    """The stream cannot take this file apart (no top-level traceEvents array, a syntax error):
    decode it whole with `load_trace_json`, which says what is wrong."""


class StreamRestart(Exception):
    """`TraceStream.map` met a chunk that is not whole events: read the file again by plain iteration."""


class TraceStream:
    """The events of a Chrome-trace JSON file (or of its text, `data`), decoded chunk by chunk; iterate once.

    Each item is ``(events, exact_ts)`` for one chunk of about `chunk_bytes` of
    JSON, in file order (`exact_ts` as in `TraceDoc`, decided per chunk). `top`
    holds the kept top-level keys (complete once the iteration has ended: Kineto
    writes some after the events) and `warnings` what was skipped or replaced.
    `on_bytes(n)` is told how many bytes of the file (compressed, for ``.gz``)
    have been read, for a progress bar. `limit`: refuse a file whose text would
    not fit (an event longer than the limit, a gzip bomb of blanks); the reader
    checks its events against it (`projected`).

    A chunk ends at a ``}`` followed by ``, {``, which is where one event ends
    unless the brace closes an object nested in an event's args (a list of
    objects). Decoding ``[chunk]`` settles which: it succeeds exactly when the cut
    is an event boundary, since the chunk starts at one; otherwise the error lies
    at the end, and an earlier cut point is tried. An error before the end means
    the array closed inside the chunk (then the keys after it are decoded) or the
    file is broken (`StreamFallback`). `map` spreads the decoding over processes.

    A file cut short (a job killed while writing it, a gzip stream that ends
    early) gives every complete event before the cut and a truncation warning;
    `cut_at` is then where the complete part ends, and `array_closed` whether
    the events' array had closed there.
    """

    def __init__(
        self,
        path: Path | str,
        chunk_bytes: int = CHUNK_BYTES,
        on_bytes: Callable[[int], None] | None = None,
        limit: MemoryLimit | None = None,
        data: bytes | None = None,
    ) -> None:
        self.path = path
        self.chunk_bytes = max(1, chunk_bytes)
        self.limit = limit
        self.top: dict[str, Any] = {}
        self.warnings: Counter[str] = Counter()
        self.cut_at: int | None = None
        self.array_closed = False
        self.done = 0  # bytes of JSON up to the end of the last event handed out
        self._text = FileText(path, data, on_bytes)
        self._blocks: Iterator[bytes] | None = None  # None once the array has been read
        self._buf = b""
        self._eof = False
        self._header = b""
        self._read = 0  # bytes of JSON read into the buffer so far
        self._exact = False  # whether the last chunk decoded needed exact ts

    def __iter__(self) -> Iterator[tuple[list[Event], bool]]:
        self._blocks = self._text.blocks(self.chunk_bytes)
        self._find_events()
        while self._blocks is not None:
            self._fill(self.chunk_bytes)
            events, exact = self._next_chunk()
            if events:
                yield events, exact

    def projected(self, count: int) -> float:
        """`count` things found in the chunks handed out so far, scaled to the whole file (for a ``.gz`` file,
        whose size inflated is unknown, by the share of it inflated so far)."""
        if self._blocks is None:
            return count
        return count * self._text.size_guess() / max(1, self.done)

    def _fill(self, size: float) -> None:
        """Read on until the buffer holds `size` bytes or the file has ended."""
        parts, have = [self._buf], len(self._buf)
        while have < size and not self._eof:
            block = next(self._blocks, None) if self._blocks is not None else None
            if block is None:
                self._eof = True
            else:
                parts.append(block)
                have += len(block)
                self._read += len(block)
                if self.limit is not None and have > 2 * self.chunk_bytes:  # one event (or blank) longer than that
                    self.limit.check(self.path, have)
        self._buf = b"".join(parts)

    def _position(self, offset: int) -> int:
        """Where byte `offset` of the buffer lies in the JSON text."""
        return self._read - len(self._buf) + offset

    def _find_events(self) -> None:
        """Move past ``"traceEvents": [``, keeping what came before it (the top-level keys so far)."""
        start = 0
        while (found := _events_array(self._buf, start)) is None:
            if self._eof:
                raise StreamFallback
            start = max(0, len(self._buf) - 4096)  # a key cut at the block end is found again
            self._fill(len(self._buf) + self.chunk_bytes)
        key, events_start, self.top = found
        self._header, self._buf = self._buf[:key], self._buf[events_start:]
        self.done = self._position(0)

    def _next_chunk(self) -> tuple[list[Event], bool]:
        """Decode the next chunk of events."""
        while True:
            if self._eof:
                cuts: Iterator[tuple[int, int]] = iter([(len(self._buf), len(self._buf))])
            else:
                cuts = itertools.islice(_cut_points(self._buf), _CUTS_PER_FILL)
            for end, next_start in cuts:
                try:
                    chunk = self._decode(memoryview(self._buf)[:end])
                except msgspec.DecodeError as exc:
                    if "UTF-8" in str(exc):  # names written without escaping: keep the file readable
                        self._buf = self._buf[:end].decode("utf-8", "replace").encode() + self._buf[end:]
                        self.warnings["invalid UTF-8 replaced"] = 1
                        break  # offsets have moved: look for cut points again
                    at = _error_offset(str(exc), end)
                    if at < end or self._eof:
                        return self._last_chunk(at)
                    continue  # the cut was inside an event
                if self._eof:  # the events run to the end of the file: it was cut right after one
                    self._end(self._position(len(self._buf[:end].rstrip())))
                else:
                    self.done = self._position(end)
                    self._buf = self._buf[next_start:]
                return chunk
            else:
                self._fill(len(self._buf) + self.chunk_bytes)  # an event longer than the buffer

    def _last_chunk(self, at: int) -> tuple[list[Event], bool]:
        """The array closes just before byte `at` of the buffer: its last events, then the keys after it. Or,
        when the file ends at `at` (cut short), the complete events before the cut."""
        close = self._buf.rfind(b"]", 0, at)  # not checked against `at`: msgspec's offsets vary by error
        try:
            if close < 0:
                raise StreamFallback
            chunk = self._decode(self._buf[:close])
        except (msgspec.DecodeError, StreamFallback):
            if self._eof and at == len(self._buf):
                return self._cut_short()
            raise StreamFallback from None
        self._fill(math.inf)
        tail = self._header + b'"traceEvents":[]' + self._buf[close + 1 :]
        doc = _try_decode(tail)
        self.array_closed = True
        if doc is not None:
            self.top = _top(doc)
            self._end(None)
        elif _ends_early(tail):  # cut among the keys after the events: those before them are kept
            self._end(self._position(close + 1))
        else:
            raise StreamFallback
        return chunk

    def _cut_short(self) -> tuple[list[Event], bool]:
        """The file ends inside an event: the complete events before it."""
        end = _last_event_end(self._buf)
        try:
            chunk = self._decode(memoryview(self._buf)[:end])
        except msgspec.DecodeError:
            raise StreamFallback from None
        self._end(self._position(end) if end else self.done)
        return chunk

    def _end(self, cut_at: int | None) -> None:
        """The events have all been read; `cut_at`: where the complete part of a file cut short ends (or a
        gzip stream cut after its JSON), which a truncation warning then says."""
        self._buf, self._blocks = b"", None
        if cut_at is None and self._text.cut:
            cut_at = self._read
        if cut_at is not None:
            self.cut_at = cut_at
            self.warnings[truncation_warning(self.path, cut_at, self._read, _unit(self._text.packed))] = 1

    def _decode(self, piece: bytes | memoryview) -> tuple[list[Event], bool]:
        """The events of one chunk; raises msgspec.DecodeError when `piece` is not whole events."""
        events, self._exact, skipped = _decode_piece(piece, self._exact)
        self.warnings.update(skipped)
        return events, self._exact

    def map(self, convert: Callable[[list[Event], bool], R], jobs: int) -> Iterator[R]:
        """``convert(events, exact_ts)`` of every chunk, in order, decoded and converted by `jobs` processes.

        This process cuts the array at the last cut point before each chunk's end,
        unchecked, hands the chunks to ``jobs - 1`` worker processes and decodes one
        itself whenever they are all busy. A plain file's chunks go out as byte
        ranges that the workers read themselves (no copy through a pipe); a
        ``.gz`` file's are decompressed here and sent. A chunk that is not whole
        events (a cut inside one, invalid UTF-8) raises `StreamRestart`: iterate a
        new stream instead, which sorts those out. The end of the array is decoded
        here. `convert` and its results must pickle.
        """
        workers = max(1, jobs - 1)
        self._blocks = self._text.blocks(self.chunk_bytes)
        self._find_events()
        pieces = self._pieces() if self._text.packed else self._ranges()
        with worker_pool(workers) as pool:
            pending: deque[tuple[Future[tuple[R, Counter[str], bool] | None], int]] = deque()
            for piece, end in pieces:
                if sum(not f.done() for f, _ in pending) < 2 * workers:  # one running, one queued each
                    pending.append((pool.submit(_decode_and_convert, piece, convert, self._exact), end))
                else:  # every worker is busy: decode this one here meanwhile
                    pending.append((Future(), end))
                    pending[-1][0].set_result(_decode_and_convert(piece, convert, self._exact))
                while pending and (pending[0][0].done() or len(pending) > 3 * jobs):
                    yield self._result(*pending.popleft())
            while pending:
                yield self._result(*pending.popleft())
        while self._blocks is not None:
            events, exact = self._next_chunk()
            if events:
                yield convert(events, exact)

    def _result(self, future: Future[tuple[R, Counter[str], bool] | None], end: int) -> R:
        outcome = future.result()
        if outcome is None:
            raise StreamRestart
        result, skipped, self._exact = outcome
        self.warnings.update(skipped)
        self.done = end
        return result

    def _pieces(self) -> Iterator[tuple[bytes, int]]:
        """Chunks of the buffer, each up to the last cut point in it, until the file has been read; with where
        each ends in the JSON text."""
        while not self._eof:
            self._fill(self.chunk_bytes)
            cut = None if self._eof else next(_cut_points(self._buf), None)
            if cut is not None:
                piece, end = self._buf[: cut[0]], self._position(cut[0])
                self._buf = self._buf[cut[1] :]
                yield piece, end
            elif not self._eof:
                self._fill(len(self._buf) + self.chunk_bytes)  # an event longer than the buffer

    def _ranges(self) -> Iterator[tuple[ByteRange, int]]:
        """Byte ranges of a plain file, each up to the last cut point before its end, with that end; the file's
        last chunk is left in the buffer. Here only a little text before each end is read, to find the cut."""
        start = self._position(0)
        with open(self.path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            while (cut := _cut_before(file.fileno(), start, start + self.chunk_bytes, size)) is not None:
                yield ByteRange(str(self.path), start, cut[0]), cut[0]
                start = cut[1]
                if self._text.on_bytes is not None:
                    self._text.on_bytes(start)
            self._buf = os.pread(file.fileno(), size - start, start)
        self._read = size
        self._blocks, self._eof = iter(()), True


class FileText:
    """The JSON text of a ``.json`` or ``.json.gz`` file (or of its bytes, `data`), in blocks; gzip is told by
    its magic bytes and inflated as read.

    A gzip stream cut short (a job killed while writing it) gives what it inflates
    to, and `cut` says so. `size` is the file's, `consumed` how much of it has
    been inflated and `given` how many bytes of JSON were handed out, so far:
    what the whole inflates to is guessed from them (`size_guess`). `on_bytes(n)`:
    told `consumed` as each block is handed out.
    """

    def __init__(
        self, path: Path | str, data: bytes | None = None, on_bytes: Callable[[int], None] | None = None
    ) -> None:
        self.path = path
        self.on_bytes = on_bytes
        self._data = data
        self.packed = (data[:2] if data is not None else _magic(path)) == b"\x1f\x8b"
        self.cut = False
        self.size = 0
        self.consumed = 0
        self.given = 0

    def size_guess(self) -> float:
        """The bytes of JSON in the whole file: its size, or (gzip) what the part inflated so far suggests."""
        return self.given * self.size / max(1, self.consumed) if self.packed else self.size

    def blocks(self, size: int) -> Iterator[bytes]:
        """The text in blocks of at most `size` bytes (-1: a plain file in one block)."""
        try:
            file = io.BytesIO(self._data) if self._data is not None else open(self.path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise TraceError(self.path, f"cannot read file: {exc.strerror or exc}") from None
        with file:
            self.size = len(self._data) if self._data is not None else os.fstat(file.fileno()).st_size
            for block in self._inflated(file, size) if self.packed else self._plain(file, size):
                self.given += len(block)
                self._tell()
                yield block
            self._tell()

    def _tell(self) -> None:
        if self.on_bytes is not None:
            self.on_bytes(self.consumed)

    def _read(self, file: io.BufferedIOBase, size: int) -> bytes:
        try:
            return file.read(size)
        except OSError as exc:
            raise TraceError(self.path, f"cannot read file: {exc.strerror or exc}") from None

    def _plain(self, file: io.BufferedIOBase, size: int) -> Iterator[bytes]:
        while block := self._read(file, size):
            self.consumed += len(block)
            yield block

    def _inflated(self, file: io.BufferedIOBase, size: int) -> Iterator[bytes]:
        """Inflate the members of a gzip file (gzip allows several, and zero bytes after them) as they are read,
        in blocks of `size` bytes but the last (any size, for `size` < 1): larger ones would make larger chunks."""
        inflater = fast_zlib.decompressobj(wbits=_GZIP_WBITS)
        pending, parts, have = b"", [], 0
        try:
            while pending or (pending := self._read(file, _PACKED_BLOCK)):
                if inflater.eof:  # the member ended: another follows, or padding
                    pending = pending.lstrip(b"\0")
                    if not pending:
                        continue
                    inflater = fast_zlib.decompressobj(wbits=_GZIP_WBITS)
                parts.append(inflater.decompress(pending, max(0, size - have)))
                have += len(parts[-1])
                pending = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                self.consumed = file.tell() - len(pending)
                if 0 < size <= have:
                    yield b"".join(parts)
                    parts, have = [], 0
            if not inflater.eof:
                parts.append(inflater.flush())  # output held back for want of input, then the stream ended
                self.cut = not inflater.eof
        except _CORRUPT_GZIP as exc:
            raise TraceError(self.path, f"corrupt gzip stream ({exc})") from None
        if rest := b"".join(parts):
            yield rest


def _magic(path: Path | str) -> bytes:
    """The first two bytes of a file (none when it cannot be read: reading it then says why)."""
    try:
        with open(path, "rb") as file:
            return file.read(2)
    except OSError:
        return b""


def _events_array(buf: bytes, start: int = 0) -> tuple[int, int, dict[str, Any]] | None:
    """Where the top-level ``"traceEvents": [`` lies in `buf` (from `start` on), where its events start, and
    the kept keys before it; None when it is not there (nor a key in a nested object or a string)."""
    while (match := _EVENTS_KEY.search(buf, start)) is not None:
        doc = _try_decode(buf[: match.start()] + b'"traceEvents":[]}')
        if doc is not None:
            return match.start(), match.end(), _top(doc)
        start = match.start() + 1
    return None


def _last_event_end(text: bytes) -> int:
    """Where the last complete event in `text` ends (0: none): whole events, then the start of one more, cut.

    The text is valid JSON as far as it goes, so its brackets outside strings tell:
    an event ends at a ``}`` back at depth 0. A quote preceded by an odd number of
    backslashes is inside a string; whether a bracket is, the count of quotes
    before it says.
    """
    chars = np.frombuffer(text, np.uint8)
    quotes = np.flatnonzero(chars == ord('"'))
    after_backslash = quotes[(quotes > 0) & (chars[np.maximum(quotes - 1, 0)] == ord("\\"))]
    if len(after_backslash):
        plain = np.flatnonzero(chars != ord("\\"))  # the run of backslashes before a quote ends at one of these
        run = after_backslash - plain[np.maximum(np.searchsorted(plain, after_backslash) - 1, 0)] - 1
        quotes = np.setdiff1d(quotes, after_backslash[run % 2 == 1], assume_unique=True)
    step = _NESTING[chars]
    brackets = np.flatnonzero(step)
    brackets = brackets[np.searchsorted(quotes, brackets) % 2 == 0]
    depth = np.cumsum(step[brackets], dtype=np.int64)
    ends = brackets[(depth == 0) & (chars[brackets] == ord("}"))]
    return int(ends[-1]) + 1 if len(ends) else 0


def _cut_before(fd: int, start: int, end: int, size: int) -> tuple[int, int] | None:
    """The last cut point (end of a chunk, start of the next) in bytes [start, end) of a file, else past
    `end` for an event longer than a chunk; None when the rest of the file from `start` is the last chunk."""
    look = _CUT_LOOKBEHIND
    while end < size:
        back = min(look, end - start)
        window = os.pread(fd, back, end - back)
        cut = next(_cut_points(window), None)
        if cut is not None:
            return end - back + cut[0], end - back + cut[1]
        if back < end - start:
            look *= 4
        else:
            end += end - start  # no cut point in the whole chunk: take a longer one
    return None


@dataclass(frozen=True)
class ByteRange:
    """Bytes [start, end) of a file: a chunk of events that a worker process reads itself."""

    path: str
    start: int
    end: int

    def read_bracketed(self) -> bytearray:
        """``[`` + the bytes + ``]``: the chunk as a JSON array, read straight into one buffer."""
        size = self.end - self.start
        buffer = bytearray(size + 2)
        buffer[0], buffer[-1] = ord("["), ord("]")
        with open(self.path, "rb") as file:
            file.seek(self.start)
            if file.readinto(memoryview(buffer)[1:-1]) != size:
                raise OSError(f"{self.path} changed while it was read")
        return buffer


def _decode_piece(
    piece: bytes | memoryview | ByteRange, exact_hint: bool = False
) -> tuple[list[Event], bool, Counter[str]]:
    """Events of a chunk of the array, whether their ts are exact, what was skipped; msgspec.DecodeError if broken.

    `exact_hint`: the chunk before needed exact ts, so this one is decoded that way
    at once (a writer keeps one format); otherwise a sample of the chunk decides.
    """
    wrapped = piece.read_bracketed() if isinstance(piece, ByteRange) else b"".join((b"[", piece, b"]"))
    if exact_hint:
        events, skipped = _decode_chunk(wrapped, ExactEvent)
        return events, True, skipped
    events, skipped = _decode_chunk(wrapped, Event)
    exact = _needs_exact_ts(events, sample=256)
    if exact:
        events, skipped = _decode_chunk(wrapped, ExactEvent)
    return events, exact, skipped


def _decode_and_convert(
    piece: bytes | ByteRange, convert: Callable[[list[Event], bool], R], exact_hint: bool
) -> tuple[R, Counter[str], bool] | None:
    """`TraceStream.map`'s work in a worker process; None when the piece is not whole events, or its
    byte range could not be read (the file changed): the plain re-read then says what is wrong."""
    with gc_paused():
        try:
            events, exact, skipped = _decode_piece(piece, exact_hint)
        except (msgspec.DecodeError, OSError):
            return None
        return convert(events, exact), skipped, exact


def _cut_points(buf: bytes) -> Iterator[tuple[int, int]]:
    """(end of a chunk, start of the next) at each ``}`` followed by ``, {``, last first."""
    end = len(buf)
    while (end := buf.rfind(b"}", 0, end)) >= 0:
        after = _NEXT_EVENT.match(buf, end + 1)
        if after is not None:
            yield end + 1, after.end() - 1


def _decode_chunk(wrapped: bytes | bytearray, event_type: type[Event]) -> tuple[list[Event], Counter[str]]:
    """Events of a JSON array; damaged ones skipped and counted. Syntax errors raise msgspec.DecodeError."""
    try:
        return _list_decoder(event_type).decode(wrapped), Counter()
    except msgspec.ValidationError:
        return _decode_items(_list_decoder(msgspec.Raw).decode(wrapped), event_type)


def _try_decode(doc: bytes) -> Any:
    """The document decoded with its events left raw, or None when it is no JSON object."""
    try:
        return _doc_decoder(msgspec.Raw).decode(doc)
    except msgspec.MsgspecError:
        return None


def _error_offset(message: str, size: int) -> int:
    """Where in a bracketed chunk of `size` bytes a decode error lies (`size` when at its end or truncated)."""
    match = _BYTE_POSITION.match(message)
    return min(int(match.group(2)) - 1, size) if match else size


@cache
def _doc_decoder(item_type: type) -> msgspec.json.Decoder[Any]:
    """Decoder of the whole document with `item_type` elements in traceEvents."""
    events = ("traceEvents", list[item_type])  # type: ignore[valid-type]
    fields = [events] + [(key, Any, None) for key in TOP_LEVEL_KEYS]
    return msgspec.json.Decoder(msgspec.defstruct("Doc", fields, gc=False), strict=False)


@cache
def _event_decoder(event_type: type[Event]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(event_type, strict=False)


@cache
def _list_decoder(item_type: type) -> msgspec.json.Decoder[Any]:
    """Decoder of a JSON array of `item_type` (a chunk of events in brackets)."""
    return msgspec.json.Decoder(list[item_type], strict=False)  # type: ignore[valid-type]


def _decode_items(items: list[msgspec.Raw], event_type: type[Event]) -> tuple[list[Event], Counter[str]]:
    """Decode events one by one, skipping (and counting) the damaged ones."""
    decoder = _event_decoder(event_type)
    events = []
    skipped: Counter[str] = Counter()
    for item in items:
        try:
            events.append(decoder.decode(item))
        except msgspec.ValidationError:
            skipped[DAMAGED_EVENTS] += 1
    return events, skipped


class _EndsEarly(TraceError):
    """The text is valid JSON as far as it goes, and ends too soon: a file cut short."""


def _decode(path: Path | str, raw: bytes, event_type: type[Event]) -> tuple[Any, Counter[str]]:
    """Strict decode; on a damaged event, decode event by event and count the skipped ones.

    Syntax errors raise `TraceError` (`_EndsEarly` for a text cut short), except invalid UTF-8, which is left
    to the caller.
    """
    try:
        return _doc_decoder(event_type).decode(raw), Counter()
    except msgspec.ValidationError as exc:
        if "$.traceEvents[" not in str(exc):
            raise TraceError(path, f"top level is not an object with traceEvents ({exc})") from None
    except msgspec.DecodeError as exc:
        if "UTF-8" in str(exc):
            raise
        raise _syntax_error(path, str(exc), len(raw)) from None
    try:
        doc = _doc_decoder(msgspec.Raw).decode(raw)
    except msgspec.DecodeError as exc:  # a syntax error after the damaged event
        raise _syntax_error(path, str(exc), len(raw)) from None
    doc.traceEvents, skipped = _decode_items(doc.traceEvents, event_type)
    return doc, skipped


def _syntax_error(path: Path | str, message: str, size: int) -> TraceError:
    """``invalid JSON at byte N: what`` from msgspec's message about a text of `size` bytes; `_EndsEarly` when
    the text only ends too soon."""
    match = _BYTE_POSITION.match(message)
    if match:
        what = match.group(1).removeprefix("JSON is malformed: ")
        # At the end, a number or word cut short; msgspec puts trailing characters there too.
        error = _EndsEarly if int(match.group(2)) >= size and "trailing" not in what else TraceError
        return error(path, f"invalid JSON at byte {match.group(2)}: {what}")
    if "truncated" in message:
        return _EndsEarly(path, f"invalid JSON at byte {size}: the document ends early (truncated file?)")
    return TraceError(path, f"invalid JSON: {message}")


def _ends_early(doc: bytes) -> bool:
    """Whether `doc` is valid JSON as far as it goes and ends too soon (a file cut short)."""
    try:
        _doc_decoder(msgspec.Raw).decode(doc)
    except msgspec.DecodeError as exc:
        return isinstance(_syntax_error("", str(exc), len(doc)), _EndsEarly)
    return False


def _needs_exact_ts(events: list[Event], sample: int = 4096) -> bool:
    """Whether ts are float µs too large for a double to keep their ns digits.

    A writer uses one format for all its timestamps, so a stride sample of a few
    thousand events decides for the file (a few hundred for a streamed chunk).
    """
    step = max(1, len(events) // sample)
    return any(type(e.ts) is float and abs(e.ts) >= _EXACT_LIMIT_US for e in events[::step])


def complete_events(doc: TraceDoc) -> CompleteEvents:
    """The ``X`` events of a whole document that have a ts (`complete_of`)."""
    return complete_of(doc.events, doc.exact_ts, doc.warnings)


def complete_of(events: list[Event], exact_ts: bool, warnings: Counter[str]) -> CompleteEvents:
    """The ``X`` events that have a ts, with ts/dur as int64 ns; a missing dur is 0.

    Conversion is exact: whole µs and the fraction are scaled separately, so no
    ``ts * 1000`` product ever exceeds a double's integer range (`exact_ts`: ts
    are literals, read digit by digit by `exact_times`). Negative durations become
    0 (counted in warnings).
    """
    return timed_of([e for e in events if e.ph == "X"], exact_ts, warnings)


def complete_and_instants(
    events: list[Event], exact_ts: bool, warnings: Counter[str]
) -> tuple[CompleteEvents, list[Event]]:
    """`complete_of`, and the instant (``i``) events as decoded, from one pass over the events (a second
    pass would cost Kineto's streamed reader about 2 % more time)."""
    instants: list[Event] = []
    keep = instants.append  # returns None: an instant goes there, not among the complete events
    complete = [e for e in events if (ph := e.ph) == "X" or (ph == "i" and keep(e))]
    return timed_of(complete, exact_ts, warnings), instants


def timed_of(timed: list[Event], exact_ts: bool, warnings: Counter[str], what: str = "complete") -> CompleteEvents:
    """`complete_of` of events already chosen (`what` they are, for the warnings): instants have no dur (0)."""
    if exact_ts:
        return _complete_exact(timed, warnings, what)
    ts_us = floats([e.ts for e in timed])  # once: checked, then converted
    present = ~np.isnan(ts_us)
    if not present.all():
        warnings[f"{what} events without ts skipped"] += int((~present).sum())
    dur_us: list[Any] = [e.dur for e in timed]
    keep = present & usable_json_times(ts_us, dur_us, warnings, "kineto")
    if not keep.all():  # 1e300 or inf would break the conversion; > 7 days is a counter overflow
        timed = list(itertools.compress(timed, keep.tolist()))
        dur_us = list(itertools.compress(dur_us, keep.tolist()))
        ts_us = ts_us[keep]
    return CompleteEvents(events=timed, ts_ns=us_to_ns(ts_us), dur_ns=_dur_ns(dur_us, warnings))


def _complete_exact(timed: list[Any], warnings: Counter[str], what: str) -> CompleteEvents:
    """`timed_of` for events whose ts are literals (`ExactEvent`)."""
    ts_ns, ts_us, numbers = exact_times([e.ts for e in timed])
    present = ~np.isnan(ts_us)
    if not numbers.all():
        warnings[DAMAGED_EVENTS] += int((~numbers).sum())
    if not (present | ~numbers).all():
        warnings[f"{what} events without ts skipped"] += int((~present & numbers).sum())
    dur_us: list[Any] = [e.dur for e in timed]
    keep = present & usable_json_times(ts_us, dur_us, warnings, "kineto")
    if not keep.all():
        timed = list(itertools.compress(timed, keep.tolist()))
        dur_us = list(itertools.compress(dur_us, keep.tolist()))
        ts_ns = ts_ns[keep]
    return CompleteEvents(events=timed, ts_ns=ts_ns, dur_ns=_dur_ns(dur_us, warnings))


def _dur_ns(dur_us: list[Any], warnings: Counter[str]) -> np.ndarray:
    """Durations (µs as decoded, None when absent: 0) as int64 ns; negative ones become 0, counted."""
    if None in dur_us:
        dur_us = [0 if d is None else d for d in dur_us]
    dur_ns = us_to_ns(dur_us)
    negative = int((dur_ns < 0).sum())
    if negative:
        warnings["negative durations set to 0"] += negative
        dur_ns = np.maximum(dur_ns, 0)
    return dur_ns


def exact_times(literals: Sequence[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """JSON µs literals as int64 ns, exactly as written; their float µs (NaN where absent or not a
    number); whether each is a number or absent (False: a string of no number, a list, ...).

    A double rounds epoch µs to a quarter µs, and Decimal is slow, so numpy reads
    the digits: block by block of rows, the text as a matrix of characters, the
    integer part by Horner's rule over its columns, then up to three decimals.
    Literals of another shape (an exponent, more decimals, a number in a string)
    go one by one through Decimal.
    """
    n = len(literals)
    ns, us, numbers = np.zeros(n, np.int64), np.full(n, np.nan), np.ones(n, bool)
    for start in range(0, n, _EXACT_BLOCK):
        block = slice(start, min(n, start + _EXACT_BLOCK))
        ns[block], us[block], plain = _plain_literals(literals[block])
        for i in (np.flatnonzero(~plain) + start).tolist():
            ns[i], us[i], numbers[i] = _literal(bytes(literals[i]))
    return ns, us, numbers


def _plain_literals(literals: Sequence[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ns and float µs of literals like ``-1712195495519689.047`` (up to 2**62 ns, at most 3 decimals),
    and which literals have that shape (the others' figures are meaningless)."""
    text = np.frombuffer(b"\n".join(literals) + b"\n", np.uint8)
    uniform = _uniform_literals(text, len(literals))
    if uniform is not None:
        return uniform
    ends = np.flatnonzero(text == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts
    columns = np.arange(max(1, int(lengths.max())))
    inside = columns < lengths[:, None]
    chars = np.where(inside, text[np.minimum(starts[:, None] + columns, len(text) - 1)], 0).astype(np.int64)
    negative = chars[:, 0] == ord("-")
    is_dot = chars == ord(".")
    dot = np.where(is_dot.any(1), is_dot.argmax(1), lengths)
    int_digits, decimals = dot - negative, np.maximum(lengths - dot - 1, 0)
    is_digit = (chars >= ord("0")) & (chars <= ord("9"))
    stray = inside & ~is_digit & ~is_dot
    stray[:, 0] &= ~negative
    plain = ~stray.any(1) & (is_dot.sum(1) <= 1) & (int_digits >= 1) & (int_digits <= 18) & (decimals <= 3)
    digits = np.where(is_digit, chars - ord("0"), 0)
    whole = np.zeros(len(lengths), np.int64)
    for column in columns.tolist():  # Horner's rule, one column of characters at a time
        part = (column >= negative) & (column < dot)
        whole = np.where(part, whole * 10 + digits[:, column], whole)
    rows = np.arange(len(lengths))
    fraction = np.zeros(len(lengths), np.int64)
    for place in (1, 2, 3):
        at = dot + place
        fraction = fraction * 10 + np.where(at < lengths, digits[rows, np.minimum(at, columns[-1])], 0)
    plain &= whole < _EXACT_LIMIT_NS_US  # beyond, ns would overflow: `_literal` calls the time impossible
    ns = np.where(negative, -1, 1) * (np.where(plain, whole, 0) * 1000 + fraction)
    return ns, ns / 1000, plain


def _uniform_literals(text: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`_plain_literals` of `count` newline-ended literals when all have one layout (``1712195495519689.047``:
    same length, the dot in the same place, no sign), as a writer of epoch µs gives them; else None."""
    width = len(text) // count if count else 0
    if width < 2 or width * count != len(text):
        return None
    chars = text.reshape(count, width)
    dot = int(np.argmax(chars[0] == ord("."))) if ord(".") in chars[0] else width - 1
    decimals = width - 2 - dot
    layout = np.full(width, ord("0"), np.uint8)
    layout[dot], layout[-1] = ord("."), ord("\n")
    fixed = layout != ord("0")  # the dot and newline columns, which must hold exactly those
    digits = chars - np.uint8(ord("0"))  # wraps below "0": any non-digit is then above 9
    if not (
        0 < dot <= 16 and decimals <= 3 and (chars[:, fixed] == layout[fixed]).all() and (digits[:, ~fixed] <= 9).all()
    ):
        return None
    whole = digits[:, :dot].astype(np.int64) @ (10 ** np.arange(dot - 1, -1, -1, dtype=np.int64))
    fraction = digits[:, dot + 1 : dot + 1 + decimals].astype(np.int64) @ (10 ** np.arange(2, 2 - decimals, -1))
    if (whole >= _EXACT_LIMIT_NS_US).any():
        return None
    ns = whole * 1000 + fraction
    return ns, ns / 1000, np.ones(count, dtype=bool)


def _literal(text: bytes) -> tuple[int, float, bool]:
    """ns, float µs and whether it is a number (or absent) for one literal `_plain_literals` could not read."""
    if text in (b"", b"null"):
        return 0, math.nan, True
    try:
        value = msgspec.json.decode(text)
        exact = Decimal(value.strip() if isinstance(value, str) else text.decode())
        if isinstance(value, bool) or not isinstance(value, int | float | str) or not exact.is_finite():
            raise ValueError
    except (msgspec.DecodeError, ArithmeticError, ValueError):
        return 0, math.nan, False
    us = float(exact)
    return (round(exact * 1000) if abs(us) < _EXACT_LIMIT_NS_US else 0), us, True


def us_to_ns(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """µs (int or float) to int64 ns, rounding to the nearest ns without float overflow."""
    us = np.asarray(values, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def int_column(values: Sequence[Any], missing: int = -1) -> np.ndarray:
    """int64 column from decoded numbers, numeric strings ("0x0", "stream 7") and None (`missing`).

    Strings are parsed once per distinct value, so a tid column of "stream 7" stays cheap.
    """
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        parsed = np.array([_parse_number(v, missing) for v in uniques] + [missing], np.float64)[codes]
        fits = ~np.isnan(parsed) & (np.abs(parsed) < 2.0**63)  # beyond int64 is no id we can use
        return np.where(fits, parsed, missing).astype(np.int64)


def float_column(values: Sequence[Any]) -> np.ndarray:
    """float64 column from decoded numbers, numeric strings and None (NaN)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        return np.array([_parse_number(v, math.nan) for v in uniques] + [math.nan], np.float64)[codes]


def category_column(values: Sequence[str | None]) -> pd.Categorical:
    """Categorical of strings, hashing each value once (pd.Categorical on a list is 2-3x slower)."""
    pool = StringPool()
    return pool.categorical(pool.encode(values))


class StringPool:
    """The strings of one column, met chunk by chunk, as codes into one category list.

    Categories are in order of first appearance, as `category_column` of the whole
    column would give, and get pandas' default string dtype, as every reader's do,
    so tables of different formats can be concatenated.
    """

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self.strings: list[str] = []

    def encode(self, values: Sequence[str | None]) -> np.ndarray:
        """int32 codes of `values` (-1 for None), adding strings not met before."""
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        return self.add(uniques)[codes]

    def add(self, strings: Iterable[str]) -> np.ndarray:
        """The codes of `strings` (added when new), then -1: index it with another pool's codes to translate them."""
        known = []
        for value in strings:
            code = self._codes.get(value)
            if code is None:
                code = self._codes[value] = len(self.strings)
                self.strings.append(value)
            known.append(code)
        return np.array(known + [-1], np.int32)

    def lookup(self, rule: Callable[[str], T], missing: T, dtype: Any) -> np.ndarray:
        """`rule` of every string by code, `missing` last (so code -1 finds it): index it with codes."""
        return np.array([rule(value) for value in self.strings] + [missing], dtype=dtype)

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=self.strings)


class ColumnBuffers:
    """Named numpy columns filled chunk by chunk, in buffers that grow by doubling.

    Capacity not yet written costs address space, not memory (the OS maps a page
    in when it is first written), so buffers sized for the whole file up front
    (`expected_rows`) are filled without ever being copied, and `column` returns a
    view. Joining per-chunk arrays at the end instead would hold each column twice.
    """

    def __init__(self, expected_rows: int = 1 << 16) -> None:
        self._capacity = max(1, expected_rows)
        self._buffers: dict[str, np.ndarray] = {}
        self._sizes: dict[str, int] = {}

    def append(self, **columns: np.ndarray) -> None:
        for name, values in columns.items():
            size = self._sizes.get(name, 0)
            end = size + len(values)
            buffer = self._buffers.get(name)
            if buffer is None or end > len(buffer):
                grown = np.empty(max(end, 2 * len(buffer) if buffer is not None else self._capacity), values.dtype)
                if buffer is not None:
                    grown[:size] = buffer[:size]
                self._buffers[name] = buffer = grown
            buffer[size:end] = values
            self._sizes[name] = end

    def column(self, name: str, dtype: Any) -> np.ndarray:
        """The rows appended to one column, in order (a view of its buffer; empty `dtype` if none were)."""
        buffer = self._buffers.get(name)
        return np.zeros(0, dtype) if buffer is None else buffer[: self._sizes[name]]


def json_size_guess(path: Path | str) -> int:
    """About how many bytes of JSON a file holds (0 when it cannot be read: the reader then says why).

    For ``.gz``, guessed from the size on disk: Kineto JSON packs about eightfold.
    """
    try:
        return os.stat(path).st_size * (_GZIP_RATIO_GUESS if _magic(path) == b"\x1f\x8b" else 1)
    except OSError:
        return 0


def _parse_number(value: Any, missing: float) -> float:
    try:
        return _number(value, missing)
    except OverflowError:  # an integer beyond a double
        return missing


def _number(value: Any, missing: float) -> float:
    if isinstance(value, int | float):
        return float(value)
    match = _ID_TEXT.match(value) if isinstance(value, str) else None
    if match is None:
        return missing
    text = match.group(1)
    return float(int(text, 16)) if "x" in text.lower() else float(text)
