"""Big Chrome-trace JSON files streamed: the events decoded chunk by chunk (`TraceStream`), in worker processes too.

The ``traceEvents`` array is cut into chunks of a few MB at event boundaries and
each chunk is decoded on its own, so a reader turns one chunk's structs into numpy
columns and drops them before the next is decoded; memory is the columns, not the
events. ``.gz`` is decompressed as it is read (json_files.py); `TraceStream.map`
has worker processes decode the chunks while this one reads on. Any file the
stream cannot take apart (neither a top-level ``traceEvents`` array nor a top-level
array of event objects, a syntax error) raises `StreamFallback`: json_document.load_trace_json then decodes it whole and
says what is wrong.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np

from traceinsight.errors import truncation_warning
from traceinsight.limits import STREAM_BUFFER_FACTOR, MemoryLimit
from traceinsight.parallel import worker_pool
from traceinsight.readers.json_events import (
    Event,
    ExactEvent,
    decode_chunk,
    ends_early,
    error_offset,
    gc_paused,
    needs_exact_ts,
    top_keys,
    try_decode_document,
)
from traceinsight.readers.json_files import CHUNK_BYTES, ByteRange, FileText, truncation_unit
from traceinsight.readers.regular import open_regular

# The key that opens the events, the array form's start (its first event follows), what follows the `}` ending an
# event, what ends an array form's text when its closing `]` was left off (as the format allows).
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ARRAY_OF_EVENTS = re.compile(rb"\s*\[(?=\s*\{)")
_OPEN_ARRAY_END = re.compile(rb"[\s,]*")
_NEXT_EVENT = re.compile(rb"\s*,\s*\{")
# +1 for the opening bracket and brace of an object or array, -1 for the closing ones (`_last_event_end`).
_NESTING = np.zeros(256, np.int8)
_NESTING[[ord("{"), ord("[")]], _NESTING[[ord("}"), ord("]")]] = 1, -1
_CUT_LOOKBEHIND = 1 << 16  # bytes before a chunk's end searched for its cut point
_SAMPLE_BYTES = 1 << 16  # a chunk's first bytes, whose events tell whether its ts need exact reading
_CUTS_PER_FILL = 8  # cut points tried (a `},{` inside an event's args is no cut) before reading on
R = TypeVar("R")
P = TypeVar("P")  # a piece of the events array: a view of the text, or a byte range of the file


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

    The array form (the document is the events' array, `array_form`) is read
    alike, with no keys; its text may end without the closing ``]`` (the format
    allows it), after the last event and maybe a comma, and is then not cut short.
    """

    def __init__(
        self,
        path: Path | str,
        chunk_bytes: int = CHUNK_BYTES,
        on_bytes: Callable[[int], None] | None = None,
        limit: MemoryLimit | None = None,
        data: bytes | memoryview | None = None,
        inflated: bool = False,
    ) -> None:
        self.path = path
        self.chunk_bytes = max(1, chunk_bytes)
        self.limit = limit
        self.top: dict[str, Any] = {}
        self.warnings: Counter[str] = Counter()
        self.cut_at: int | None = None
        self.array_closed = False
        self.array_form = False
        self.done = 0  # bytes of JSON up to the end of the last event handed out
        self._text = FileText(path, data, on_bytes, inflated)
        self._blocks: Iterator[bytes | memoryview] | None = None  # None once the array has been read
        self._buf = b""
        self._eof = False
        self._header = b""
        self._read = 0  # bytes of JSON read into the buffer so far
        self._exact = False  # whether the last chunk decoded needed exact ts
        self._blanks = 0  # blanks dropped before the first event

    def __iter__(self) -> Iterator[tuple[list[Event], bool]]:
        self._blocks = self._text.views(self.chunk_bytes)
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
        parts: list[bytes | memoryview] = [self._buf]
        have = len(self._buf)
        while have < size and not self._eof:
            block = next(self._blocks, None) if self._blocks is not None else None
            if block is None:
                self._eof = True
            else:
                parts.append(block)
                have += len(block)
                self._read += len(block)
                if self.limit is not None and have > 2 * self.chunk_bytes:  # one event (or blank) longer than that
                    self.limit.check(self.path, have * STREAM_BUFFER_FACTOR)
        self._buf = b"".join(parts)

    def _position(self, offset: int) -> int:
        """Where byte `offset` of the buffer lies in the JSON text."""
        return self._read - len(self._buf) + offset

    def _find_events(self) -> None:
        """Move past ``"traceEvents": [``, keeping what came before it (the top-level keys so far), or past the
        ``[`` that opens the array form."""
        start = 0
        while (found := self._events_start(start)) is None:
            if self._eof:
                raise StreamFallback
            start = max(0, len(self._buf) - 4096)  # a key cut at the block end is found again
            self._fill(_grown(len(self._buf), self.chunk_bytes))
        key, events_start, self.top = found
        self._header, self._buf = self._buf[:key], self._buf[events_start:]
        self.done = self._position(0)

    def _events_start(self, start: int) -> tuple[int, int, dict[str, Any]] | None:
        """`_events_array` of the buffer from `start`, or the array form's events at its start."""
        if not start and (array := _ARRAY_OF_EVENTS.match(self._buf)) is not None:
            self.array_form = True
            return 0, array.end(), {}
        return _events_array(self._buf, start)

    def _next_chunk(self) -> tuple[list[Event], bool]:
        """Decode the next chunk of events."""
        while True:
            if not self._eof and self._buf[:1].isspace():  # blanks before the first event (a bomb of them)
                kept = self._buf.lstrip()
                self._blanks += len(self._buf) - len(kept)
                self._buf = kept
                self._check_span(self._blanks)  # let go, yet a bomb all the same: stopped as it inflates
                if not self._buf:
                    self._fill(self.chunk_bytes)
                    continue
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
                    at = error_offset(str(exc), end)
                    if at < end or self._eof:
                        return self._last_chunk(at)
                    continue  # the cut was inside an event
                if self._eof:  # the events run to the end of the file: an open array, or cut right after one
                    self._end(None if self.array_form else self._position(len(self._buf[:end].rstrip())))
                else:
                    self.done = self._position(end)
                    self._buf = self._buf[next_start:]
                return chunk
            else:
                self._fill(_grown(len(self._buf), self.chunk_bytes))  # an event longer than the buffer

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
        if self.array_form:
            if self._buf[close + 1 :].strip():
                raise StreamFallback  # something after the array: the whole document's decode says what
            self.array_closed = True
            self._end(None)
            return chunk
        tail = self._header + b'"traceEvents":[]' + self._buf[close + 1 :]
        doc = try_decode_document(tail)
        self.array_closed = True
        if doc is not None:
            self.top = top_keys(doc)
            self._end(None)
        elif ends_early(tail):  # cut among the keys after the events: those before them are kept
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
        if self.array_form and end and _OPEN_ARRAY_END.fullmatch(self._buf, end) is not None:
            self._end(None)  # an open array: its last event, then a comma
        else:
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
            self.warnings[truncation_warning(self.path, cut_at, self._read, truncation_unit(self._text.inflated))] = 1

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
        pieces = self.pieces()
        with worker_pool(workers) as pool:
            pending: deque[tuple[Future[tuple[R, Counter[str], bool] | None], int]] = deque()
            for piece, end in pieces:
                if sum(not f.done() for f, _ in pending) < 2 * workers:  # one running, one queued each
                    sent = bytes(piece) if isinstance(piece, memoryview) else piece  # a view does not pickle
                    pending.append((pool.submit(decode_and_convert, sent, convert, self._exact), end))
                else:  # every worker is busy: decode this one here meanwhile
                    pending.append((Future(), end))
                    pending[-1][0].set_result(decode_and_convert(piece, convert, self._exact))
                while pending and (pending[0][0].done() or len(pending) > 3 * jobs):
                    yield self._result(*pending.popleft())
            while pending:
                yield self._result(*pending.popleft())
        for events, exact in self.rest():
            yield convert(events, exact)

    def pieces(self) -> Iterator[tuple[memoryview | ByteRange, int]]:
        """The events array in chunks, each cut at the last cut point before its end, unchecked (`map`'s and the
        early read's), with where each ends in the JSON text: a ``.gz`` file's text as inflated, a text given as a
        view as views of it, a plain file's as byte ranges (read by whoever decodes them). What follows the last is
        left to `rest`."""
        self._blocks = self._text.views(self.chunk_bytes)
        self._find_events()
        if self._text.packed:
            return self._pieces()
        if isinstance(self._text.data, memoryview):
            return self._views(self._text.data)
        return self._ranges()

    def rest(self, exact: bool | None = None) -> Iterator[tuple[list[Event], bool]]:
        """The events left after `pieces`, decoded and checked as iterating does: the array's end, the top-level
        keys after it, a file cut short. `exact`: whether the piece before needed exact timestamps, when it was
        decoded elsewhere (`map` learns it from the pieces' results)."""
        if exact is not None:
            self._exact = exact
        while self._blocks is not None:
            events, exact = self._next_chunk()
            if events:
                yield events, exact

    def _check_span(self, size: int) -> None:
        """Refuse a chunk (one event, or blanks) of `size` bytes that the limit could not hold decoded."""
        if self.limit is not None and size > 2 * self.chunk_bytes:
            self.limit.check(self.path, size * STREAM_BUFFER_FACTOR)

    def _result(self, future: Future[tuple[R, Counter[str], bool] | None], end: int) -> R:
        outcome = future.result()
        if outcome is None:
            raise StreamRestart
        result, skipped, self._exact = outcome
        self.warnings.update(skipped)
        self.done = end
        return result

    def _pieces(self) -> Iterator[tuple[memoryview, int]]:
        """Chunks of the buffer, each up to the last cut point in it, until the file has been read; with where
        each ends in the JSON text. Views of the buffer, not copies (the buffer is replaced, not changed)."""
        while not self._eof:
            self._fill(self.chunk_bytes)
            cut = None if self._eof else next(_cut_points(self._buf), None)
            if cut is not None:
                piece, end = memoryview(self._buf)[: cut[0]], self._position(cut[0])
                self._buf = self._buf[cut[1] :]
                yield piece, end
            elif not self._eof:
                self._fill(_grown(len(self._buf), self.chunk_bytes))  # an event longer than the buffer

    def _ranges(self) -> Iterator[tuple[ByteRange, int]]:
        """Byte ranges of a plain file, each up to the last cut point before its end, with that end; the file's
        last chunk is left in the buffer. Here only a little text before each end is read, to find the cut."""
        with open_regular(self.path) as file:
            fd = file.fileno()
            yield from self._cut(partial(os.pread, fd), os.fstat(fd).st_size, partial(ByteRange, str(self.path)))

    def _views(self, text: memoryview) -> Iterator[tuple[memoryview, int]]:
        """Views of a text held in memory, cut as `_ranges` cuts a plain file: no copy but of the last chunk, left
        in the buffer."""

        def read(size: int, at: int) -> bytes:
            return text[at : at + size].tobytes()

        yield from self._cut(read, len(text), lambda start, end: text[start:end])

    def _cut(
        self, read: Callable[[int, int], bytes], size: int, piece: Callable[[int, int], P]
    ) -> Iterator[tuple[P, int]]:
        """``piece(start, end)`` of each chunk of a text of `size` bytes that ``read(n, at)`` reads, up to the last
        cut point before its end, with that end; the last chunk is read into the buffer."""
        start = self._position(0)
        while (cut := _cut_before(read, start, start + self.chunk_bytes, size, self._check_span)) is not None:
            yield piece(start, cut[0]), cut[0]
            start = cut[1]
            if self._text.on_bytes is not None:
                self._text.on_bytes(start)
        self._buf = read(size - start, start)
        self._read = size
        self._blocks, self._eof = iter(()), True


def _events_array(buf: bytes, start: int = 0) -> tuple[int, int, dict[str, Any]] | None:
    """Where the top-level ``"traceEvents": [`` lies in `buf` (from `start` on), where its events start, and
    the kept keys before it; None when it is not there (nor a key in a nested object or a string)."""
    while (match := _EVENTS_KEY.search(buf, start)) is not None:
        doc = try_decode_document(buf[: match.start()] + b'"traceEvents":[]}')
        if doc is not None:
            return match.start(), match.end(), top_keys(doc)
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


def _grown(have: int, chunk_bytes: int) -> int:
    """The buffer size to read on to when `have` bytes hold no cut point: twice as much, so that an event (or a
    run of blanks) of n bytes costs the searches and copies of a buffer O(n) in all, not O(n**2 / chunk)."""
    return max(2 * have, have + chunk_bytes)


def _cut_before(
    read: Callable[[int, int], bytes], start: int, end: int, size: int, check: Callable[[int], None] | None = None
) -> tuple[int, int] | None:
    """The last cut point (end of a chunk, start of the next) in bytes [start, end) of a text of `size` bytes that
    ``read(n, at)`` reads from (a file's `os.pread`), else past `end` for an event longer than a chunk; None when
    the rest of the text from `start` is the last chunk. `check(n)` is told the size of a chunk before n bytes of it
    are read (the memory limit)."""
    look = _CUT_LOOKBEHIND
    while end < size:
        back = min(look, end - start)
        if check is not None:
            check(end - start)
        window = read(back, end - back)
        cut = next(_cut_points(window), None)
        if cut is not None:
            return end - back + cut[0], end - back + cut[1]
        if back < end - start:
            look *= 4
        else:
            end += end - start  # no cut point in the whole chunk: take a longer one
    return None


def _decode_piece(
    piece: bytes | memoryview | ByteRange, exact_hint: bool = False
) -> tuple[list[Event], bool, Counter[str]]:
    """Events of a chunk of the array, whether their ts are exact, what was skipped; msgspec.DecodeError if broken.

    `exact_hint`: the chunk before needed exact ts, so this one is decoded that way
    at once (a writer keeps one format); otherwise a sample of the chunk decides.
    """
    wrapped = piece.read_bracketed() if isinstance(piece, ByteRange) else b"".join((b"[", piece, b"]"))
    if exact_hint or _first_events_need_exact_ts(wrapped):
        events, skipped = decode_chunk(wrapped, ExactEvent)
        return events, True, skipped
    events, skipped = decode_chunk(wrapped, Event)
    exact = needs_exact_ts(events, sample=256)
    if exact:
        events, skipped = decode_chunk(wrapped, ExactEvent)
    return events, exact, skipped


def _first_events_need_exact_ts(wrapped: bytes | bytearray) -> bool:
    """Whether the events of a bracketed chunk's first `_SAMPLE_BYTES` have ts that need exact reading: then the
    chunk is decoded that way at once, not decoded twice (a Kineto trace's first chunk: 20 ms of a 4 MB one).
    False also when the sample says nothing (metadata first, a cut that is no event's end): the whole chunk tells."""
    cut = next(_cut_points(wrapped[:_SAMPLE_BYTES]), None)
    if cut is None:
        return False
    try:
        sample, _ = decode_chunk(wrapped[: cut[0]] + b"]", Event)
    except msgspec.DecodeError:
        return False
    return needs_exact_ts(sample, sample=256)


def decode_and_convert(
    piece: bytes | memoryview | ByteRange, convert: Callable[[list[Event], bool], R], exact_hint: bool
) -> tuple[R, Counter[str], bool] | None:
    """One piece of `TraceStream.pieces` decoded and converted (in a worker of `TraceStream.map`, or by the early
    read); None when the piece is not whole events, or its byte range could not be read (the file changed): the
    plain re-read then says what is wrong."""
    with gc_paused():
        try:
            events, exact, skipped = _decode_piece(piece, exact_hint)
        except (msgspec.DecodeError, OSError):
            return None
        return convert(events, exact), skipped, exact


def _cut_points(buf: bytes | bytearray) -> Iterator[tuple[int, int]]:
    """(end of a chunk, start of the next) at each ``}`` followed by ``, {``, last first."""
    end = len(buf)
    while (end := buf.rfind(b"}", 0, end)) >= 0:
        after = _NEXT_EVENT.match(buf, end + 1)
        if after is not None:
            yield end + 1, after.end() - 1
