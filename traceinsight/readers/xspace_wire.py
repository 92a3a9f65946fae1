"""The XSpace wire format, read piece by piece, its events decoded with numpy (for `xspace`).

Why piece by piece: parsed whole, a 114 MB ``.xplane.pb`` took 1.3 GB (the bytes, upb's
copy, a bytes object per event, then the decoded fields of every event at once). Here
the file is walked from its field headers: ``XSpace.planes`` is field 1, ``XPlane.lines``
field 3, ``XLine.events`` field 4. A plane's other fields (its metadata and stats, small)
are parsed by upb on their own; its lines are read a batch at a time (`LINE_BATCH_BYTES`),
so memory is bounded by a batch or the largest line, not by the file. A plane that runs
past the end of the file (a job killed mid-write) is left out; the planes before it are
read (`SpaceLayout.used_bytes`).

Why numpy: touching an XEvent from Python costs ~0.2 µs for the wrapper plus ~0.1 µs
per field, i.e. under 1 M events/s before a single stat is read. upb parses each line
with ``XLine.events`` declared ``repeated bytes`` only for its header and the events'
lengths; the events are then found in the line's own bytes, and `Wire.events` decodes
their fields (and finds their stats) for a whole batch at once: the usual layout (fields
in number order, one-byte tags) in a few numpy passes, anything else by `Wire.scan`,
which follows protobuf's rules field by field.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import cache
from io import BufferedReader
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
import numpy as np
import pandas as pd
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from traceinsight.errors import TraceError
from traceinsight.limits import MemoryLimit
from traceinsight.readers import xplane_schema
from traceinsight.readers.regular import open_regular

MAX_PROTOBUF_BYTES = 2**31 - 1  # protobuf refuses messages of 2 GiB and more: one line or one plane's metadata
LINE_BATCH_BYTES = 8 << 20  # lines read together: large enough that numpy's per-call cost vanishes
EVENT_CHUNK = 1 << 16  # events decoded together (of one long line, too): what bounds the decoding's memory
NOT_XSPACE = "not an XSpace protobuf (corrupt or truncated protobuf wire format)"

# Field numbers (tsl/profiler/protobuf/xplane.proto).
_SPACE_PLANES, _PLANE_LINES, _LINE_EVENTS = 1, 3, 4
EV_METADATA, EV_OFFSET, EV_DURATION, EV_STATS, EV_OCCURRENCES = 1, 2, 3, 4, 5
# The wire type each XEvent field must have (varint 0, fixed64 1, length-delimited 2); any other is ignored,
# as protobuf does.
EV_WIRE = np.array([-1, 0, 0, 0, 2, 0])  # by XEvent field number
ST_METADATA, ST_DOUBLE, ST_UINT, ST_INT, ST_STR, ST_REF = 1, 2, 3, 4, 5, 7
ST_VALUE_WIRE = np.array([-1, -1, 1, 0, 0, 2, 2, 0])  # by XStat field number: double, uint64, int64, str, bytes, ref
_VARINT, _FIXED64, _DELIMITED, _FIXED32 = 0, 1, 2, 5
_PAD = 16
WORD_STRING = 256  # bytes: strings up to this long are told apart by their words (`Wire.distinct_strings`)
_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)  # the low k bytes of a word
_BAD_VARINT = 1 << 40  # the "size" of a varint over 10 bytes: runs past any message, so it is caught as such
_WALK_BLOCK = 1 << 16  # bytes read at a time while walking field headers
_FIELD_HEADER_BYTES = 11  # at most: a one-byte tag and a length
# Packing the 7-bit groups of a varint read as a little-endian word: (shift, bits kept, bits moved) per step.
_MERGE_7BIT_GROUPS = [
    (np.uint64(1), np.uint64(0x007F007F007F007F), np.uint64(0x7F007F007F007F00)),  # 14-bit groups
    (np.uint64(2), np.uint64(0x00003FFF00003FFF), np.uint64(0x3FFF00003FFF0000)),  # 28-bit groups
    (np.uint64(4), np.uint64(0x000000000FFFFFFF), np.uint64(0x0FFFFFFF00000000)),  # 56 bits
]


# --------------------------------------------------------------------------- the file


class Source:
    """The bytes of one ``.xplane.pb``, read in pieces: from the file, or from bytes the caller already has."""

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        self.path = path
        self._data = memoryview(data) if data is not None else None
        self._file: BufferedReader | None = None
        self._buffer = bytearray()
        try:
            if data is None:
                self._file = open_regular(path)
                self.size = os.fstat(self._file.fileno()).st_size
            else:
                self.size = len(data)
        except OSError as exc:
            raise TraceError(path, f"cannot read file ({exc.strerror or exc})") from exc

    def read_run(self, offset: int, length: int) -> memoryview:
        """`length` bytes from `offset` (zeros past the end of the file), in a buffer this source reuses: they
        stay valid until its next call. Reused, its pages are not mapped anew for every batch of lines."""
        if not length <= len(self._buffer) <= max(4 * length, 2 * LINE_BATCH_BYTES):  # a long line's: let go
            self._buffer = bytearray(length)
        view = memoryview(self._buffer)[:length]
        if self._data is not None:
            got = len(self._data[offset : offset + length])
            view[:got] = self._data[offset : offset + got]
        else:
            assert self._file is not None
            try:
                self._file.seek(offset)
                got = self._file.readinto(view)
            except OSError as exc:
                raise TraceError(self.path, f"cannot read file ({exc.strerror or exc})") from exc
        view[got:] = bytes(length - got)
        return view

    def read(self, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` (fewer at the end of the file)."""
        if self._data is not None:
            return bytes(self._data[offset : offset + length])
        assert self._file is not None
        try:
            self._file.seek(offset)
            return self._file.read(length)
        except OSError as exc:
            raise TraceError(self.path, f"cannot read file ({exc.strerror or exc})") from exc

    def __enter__(self) -> Source:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._buffer = bytearray()
        if self._file is not None:
            self._file.close()


class _Cut(Exception):
    """A field runs past the end of the bytes it should lie in."""


class _Corrupt(Exception):
    """Bytes that are no protobuf field: tag 0, a group or an unknown wire type, a varint over 10 bytes."""


class _Field(msgspec.Struct):
    """One field of a message, where it lies in the source."""

    number: int
    wire: int
    start: int  # its tag
    body: int  # its value
    end: int  # just past it


def _py_varint(block: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at `pos` of `block` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(block):
            raise _Cut
        byte = block[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise _Corrupt


def _fields(source: Source, start: int, end: int) -> Iterator[_Field]:
    """The top-level fields of the message in ``source[start:end]``, from their headers alone.

    Reads a block of `_WALK_BLOCK` bytes at a time, so walking a plane's thousands of
    metadata entries costs few reads, and skipping its lines none.
    """
    block, block_start = b"", start
    pos = start
    while pos < end:
        at = pos - block_start
        if at < 0 or (at + 20 > len(block) and block_start + len(block) < end):  # a header may not be in the block
            block, block_start, at = source.read(pos, min(_WALK_BLOCK, end - pos)), pos, 0
        tag, at = _py_varint(block, at)
        number, wire = tag >> 3, tag & 7
        if number == 0 or wire not in (_VARINT, _FIXED64, _DELIMITED, _FIXED32):
            raise _Corrupt
        if wire == _VARINT:
            body = block_start + at
            after = block_start + _py_varint(block, at)[1]
        elif wire == _DELIMITED:
            length, at = _py_varint(block, at)
            body = block_start + at
            after = body + length
        else:
            body = block_start + at
            after = body + (8 if wire == _FIXED64 else 4)
        if after > end:
            raise _Cut
        yield _Field(number, wire, pos, body, after)
        pos = after


def _parse(source: Source, message: Any, pieces: list[tuple[int, int]]) -> Any:
    """`message` parsed from the source's bytes in `pieces` ((start, end), one after another in the message)."""
    if sum(end - start for start, end in pieces) > MAX_PROTOBUF_BYTES:
        raise TraceError(source.path, "an XSpace plane's metadata is 2 GiB or more; protobuf cannot parse that")
    try:
        message.ParseFromString(b"".join(source.read(start, end - start) for start, end in _joined(pieces)))
    except DecodeError as exc:
        raise TraceError(source.path, NOT_XSPACE) from exc
    return message


def _joined(pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`pieces`, those that follow each other in the file as one (one read each)."""
    out: list[tuple[int, int]] = []
    for start, end in pieces:
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


class PlaneLayout(msgspec.Struct):
    """One whole plane: its fields but the lines (parsed), and where its serialized lines lie."""

    plane: Any  # XPlane message without lines: id, name, event and stat metadata, plane stats
    lines: list[tuple[int, int]]  # (offset, size) of each XLine in the source, in file order


class SpaceLayout(msgspec.Struct):
    """An XSpace's whole planes, its other fields, and how much of the file they take."""

    planes: list[PlaneLayout]
    space: Any  # XSpace message without planes: errors, warnings, hostnames
    used_bytes: int  # up to the end of its last whole field: the file's size, unless it was cut short


_CHECK_PLANES = 4096  # planes walked between memory checks: a check costs little, a plane 700 bytes


def walk_space(source: Source, limit: MemoryLimit | None = None) -> SpaceLayout:
    """The layout of the XSpace in `source`, stopping at a field cut short by the end of the file.

    A plane within the file that is not valid protobuf is a TraceError, as is a
    file that is not protobuf at all. `limit`: a TraceError as soon as the planes, lines and metadata walked
    would not fit (`MemoryLimit.check_xspace_layout`), checked every `_CHECK_PLANES` planes and at the end.
    """
    planes: list[PlaneLayout] = []
    other: list[tuple[int, int]] = []
    used = lines = metadata = 0
    try:
        for field in _fields(source, 0, source.size):
            if field.number == _SPACE_PLANES and field.wire == _DELIMITED:
                planes.append(_walk_plane(source, field.body, field.end))
                lines += len(planes[-1].lines)
                metadata += field.end - field.body - sum(size for _, size in planes[-1].lines)
                if limit is not None and (len(planes) % _CHECK_PLANES == 0 or len(planes[-1].lines) > _CHECK_PLANES):
                    limit.check_xspace_layout(source.path, len(planes), lines, metadata)
            else:
                other.append((field.start, field.end))
            used = field.end
    except _Cut:
        pass  # the file ends inside this field: what came before is whole
    except _Corrupt as exc:
        raise TraceError(source.path, NOT_XSPACE) from exc
    if limit is not None:
        limit.check_xspace_layout(source.path, len(planes), lines, metadata)
    return SpaceLayout(planes, _parse(source, xplane_schema.XSpace(), other), used)


def _walk_plane(source: Source, start: int, end: int) -> PlaneLayout:
    """Where a plane's lines lie, and its other fields parsed.

    Writers put the lines before the metadata: from the first field that is not a
    line on, upb parses the rest of the plane in one go; only if lines come after it
    (which protobuf allows) is every field walked.
    """
    lines: list[tuple[int, int]] = []
    other: list[tuple[int, int]] = []
    tried = False
    try:
        for field in _fields(source, start, end):
            if field.number == _PLANE_LINES and field.wire == _DELIMITED:
                lines.append((field.body, field.end - field.body))
                continue
            if lines and not tried:  # the first field after lines: the rest is metadata, unless lines follow
                tried = True
                rest = _parse(source, _raw_plane_class()(), [*other, (field.start, end)])
                if not len(rest.lines):
                    return PlaneLayout(rest, lines)
            other.append((field.start, field.end))
    except (_Cut, _Corrupt) as exc:  # inside a plane the file holds whole: damage
        raise TraceError(source.path, NOT_XSPACE) from exc
    return PlaneLayout(_parse(source, _raw_plane_class()(), other), lines)


# --------------------------------------------------------------------------- lines


@cache
def raw_events_pool() -> tuple[descriptor_pool.DescriptorPool, str]:
    """A copy of the XSpace schema whose ``XLine.events`` is ``repeated bytes`` (same wire format), and its
    package name."""
    proto = descriptor_pb2.FileDescriptorProto()
    xplane_schema.message_class("XSpace").DESCRIPTOR.file.CopyToProto(proto)
    old, new = f".{proto.package}.", f".{proto.package}.raw_events."
    proto.name = "traceinsight/xplane_raw_events.proto"
    proto.package += ".raw_events"
    for message in proto.message_type:
        for fld in [*message.field, *(f for nested in message.nested_type for f in nested.field)]:
            if fld.type_name:
                fld.type_name = fld.type_name.replace(old, new)
            if message.name == "XLine" and fld.name == "events":
                fld.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                fld.ClearField("type_name")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return pool, proto.package


@cache
def _raw_line_class() -> Any:
    pool, package = raw_events_pool()
    return xplane_schema.get_message_class(pool.FindMessageTypeByName(f"{package}.XLine"))


@cache
def _raw_plane_class() -> Any:
    pool, package = raw_events_pool()
    return xplane_schema.get_message_class(pool.FindMessageTypeByName(f"{package}.XPlane"))


class LineHeader(msgspec.Struct):
    """What is read of a line besides its events."""

    id: int
    name: str
    timestamp_ns: int


class LineBatch(msgspec.Struct):
    """Lines of one plane decoded together: their headers, and where their events lie in `wire`."""

    lines: list[LineHeader]
    wire: Wire  # the lines' bytes, one after another
    event_line: np.ndarray  # per event: index into `lines`
    starts: np.ndarray  # per event: where its bytes start in `wire`
    ends: np.ndarray  # ... and end

    def chunks(self) -> Iterator[LineBatch]:
        """This batch, `EVENT_CHUNK` events at a time (the lines and their bytes shared)."""
        for first in range(0, len(self.starts), EVENT_CHUNK):
            rows = slice(first, first + EVENT_CHUNK)
            yield LineBatch(self.lines, self.wire, self.event_line[rows], self.starts[rows], self.ends[rows])


def line_runs(plane: PlaneLayout) -> list[list[tuple[int, int]]]:
    """The plane's lines (offset, size) in runs of about `LINE_BATCH_BYTES` (a larger line alone) that follow
    each other in the file (nothing between them but their field headers): each is read in one piece, and is
    the work one process does at a time."""
    runs: list[list[tuple[int, int]]] = []
    run: list[tuple[int, int]] = []
    total = 0
    for offset, size in plane.lines:
        if run and (total + size > LINE_BATCH_BYTES or offset - sum(run[-1]) > _FIELD_HEADER_BYTES):
            runs.append(run)
            run, total = [], 0
        run.append((offset, size))
        total += size
    if run:
        runs.append(run)
    return runs


def run_batch(
    source: Source,
    run: list[tuple[int, int]],
    wanted: Callable[[LineHeader], bool],
    on_line: Callable[[LineHeader], None],
) -> LineBatch | None:
    """The lines of `run` (`line_runs`) whose events are `wanted` (judged from the line's header); None if
    there are none. `on_line(header)` sees every line's header first."""
    start = run[0][0]
    raw = source.read_run(start, run[-1][0] + run[-1][1] - start + _PAD)  # and what follows, as `Wire` needs
    lines: list[tuple[LineHeader, int, int, np.ndarray]] = []  # header, where in `raw`, size, event sizes
    for offset, size in run:
        header, sizes = _read_line(source, raw[offset - start : offset - start + size], wanted)
        on_line(header)
        if sizes is not None:
            lines.append((header, offset - start, size, sizes))
    return _batch(source, raw, lines) if lines else None


def _read_line(
    source: Source, raw: memoryview, wanted: Callable[[LineHeader], bool]
) -> tuple[LineHeader, np.ndarray | None]:
    """A line's header, and its events' sizes if it has events and they are `wanted` (upb's copy of them is
    let go on return)."""
    line = _parse_line(source, raw)
    header = LineHeader(line.id, line.name, line.timestamp_ns)
    if not len(line.events) or not wanted(header):
        return header, None
    return header, np.fromiter(map(len, line.events), np.int64, len(line.events))


def _parse_line(source: Source, raw: memoryview) -> Any:
    """A line's XLine message, its events as bytes."""
    if len(raw) > MAX_PROTOBUF_BYTES:
        raise TraceError(source.path, f"an XSpace line is {len(raw):,} bytes; protobuf cannot parse 2 GiB or more")
    line = _raw_line_class()()
    try:
        line.ParseFromString(raw)
    except DecodeError as exc:
        raise TraceError(source.path, NOT_XSPACE) from exc
    return line


def _batch(source: Source, raw: memoryview, lines: list[tuple[LineHeader, int, int, np.ndarray]]) -> LineBatch:
    """The batch of `lines` (header, where in `raw`, size, event sizes), events located in their bytes.

    Writers put a line's events one after another; a line whose bytes say otherwise
    (fields between events, a tag written long) is re-serialized by upb first.
    """
    sizes = [event_sizes for _, _, _, event_sizes in lines]
    wire = Wire(raw)
    event_line, starts, ends, misplaced = _located(wire, [(at, at + size) for _, at, size, _ in lines], sizes)
    if misplaced.any():
        raws = [bytes(raw[at : at + size]) for _, at, size, _ in lines]
        for i in np.flatnonzero(misplaced).tolist():
            line = _raw_line_class()()
            line.ParseFromString(raws[i])
            raws[i] = line.SerializeToString()
        wire = Wire.joined(raws)
        ends_of = np.cumsum([len(line) for line in raws]).tolist()
        spans = list(zip([0, *ends_of[:-1]], ends_of, strict=True))
        event_line, starts, ends, misplaced = _located(wire, spans, sizes)
        if misplaced.any():
            raise TraceError(source.path, NOT_XSPACE)
    return LineBatch([header for header, _, _, _ in lines], wire, event_line, starts, ends)


def _located(
    wire: Wire, lines: list[tuple[int, int]], sizes: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per event of the lines at `lines` ((start, end) in `wire`), given their events' `sizes`: its line, start
    and end; and per line, whether its bytes are not events one after another (then those locations are wrong)."""
    firsts = np.array([_first_event(wire.raw, start, end) for start, end in lines], np.int64)
    counts = np.array([len(s) for s in sizes], np.int64)
    size = np.concatenate(sizes)
    event_line = np.repeat(np.arange(len(counts)), counts)
    header = 1 + _varint_sizes(size)  # the tag (one byte for field 4) and the length
    field_end = np.cumsum(header + size)
    before_line = np.concatenate([[0], field_end[np.cumsum(counts)[:-1] - 1]])  # every line has events
    field_start = firsts[event_line] + field_end - header - size - before_line[event_line]
    field_start = np.minimum(field_start, len(wire.raw) - _PAD)  # misplaced: still read inside the bytes
    length, length_size = wire.varints(field_start + 1)
    good = (wire.buf[field_start] == (_LINE_EVENTS << 3 | _DELIMITED)) & (length == size.astype(np.uint64))
    good &= length_size == header - 1
    misplaced = np.zeros(len(counts), bool)
    misplaced[event_line[~good]] = True
    starts = field_start + header
    return event_line, starts, starts + size, misplaced


def _first_event(raw: bytes | memoryview, position: int, end: int) -> int:
    """Where the first event field of the line ``raw[position:end]`` starts (its tag); `end` if no field before
    it is one this walk knows (a group, say: `_batch` then has upb lay the line out anew)."""
    try:
        while position < end:
            tag, at = _py_varint(raw, position)
            if tag == (_LINE_EVENTS << 3 | _DELIMITED):
                return position
            wire = tag & 7
            if wire == _DELIMITED:
                length, at = _py_varint(raw, at)
                position = at + length
            elif wire == _VARINT:
                position = _py_varint(raw, at)[1]
            elif wire in (_FIXED64, _FIXED32):
                position = at + (8 if wire == _FIXED64 else 4)
            else:
                break
    except (_Cut, _Corrupt):
        pass
    return end


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of the varint encoding of each (non-negative) value."""
    sizes = np.ones(len(values), np.int64)
    for bits in range(7, 64, 7):
        sizes += values >= (1 << bits)
    return sizes


# --------------------------------------------------------------------------- fields of many messages


class Fields(msgspec.Struct):
    """Top-level fields of many messages, one row per field occurrence."""

    msg: np.ndarray  # which message (index into the scanned ranges)
    number: np.ndarray  # field number
    wire: np.ndarray  # wire type
    value: np.ndarray  # uint64: the varint or fixed value, or the start of a length-delimited field
    length: np.ndarray  # int64: length of a length-delimited field, else 0
    corrupt: np.ndarray  # per scanned message: not valid protobuf (none of its fields are above)

    def last(self, number: int, n: int, wire: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Per message: the value of scalar field `number` (0 if absent, last one wins) and its presence.

        Occurrences with another wire type than `wire` are not the field (protobuf keeps them as unknown fields).
        """
        sel = (self.number == number) & (self.wire == wire)
        value = np.zeros(n, np.uint64)
        present = np.zeros(n, bool)
        value[self.msg[sel]] = self.value[sel]
        present[self.msg[sel]] = True
        return value, present


class EventFields(msgspec.Struct):
    """The fields of many XEvents, and where their stats lie."""

    md: np.ndarray  # int64 metadata id (0 if absent)
    offset_ps: np.ndarray  # int64
    duration_ps: np.ndarray  # int64
    aggregated: np.ndarray  # bool: num_occurrences instead of a time
    corrupt: np.ndarray  # bool: not valid protobuf (its other fields are 0)
    mistyped: int  # events with a field of the wrong wire type (that field ignored)
    stat_event: np.ndarray  # per stat that may be wanted (`Wire.events`): its event
    stat_start: np.ndarray  # ... where its bytes start
    stat_end: np.ndarray  # ... and end


class Wire:
    """Protobuf decoding of many messages at once, over their bytes laid one after another."""

    def __init__(self, raw: bytes | memoryview) -> None:
        """Over `raw`, which has `_PAD` bytes (of any value) after its last message: reads just past a
        message stay inside."""
        self.raw = raw
        self.buf = np.frombuffer(raw, np.uint8)
        # The little-endian word of the 8 bytes from each position: a view with a stride of one byte, no copy.
        self._words = np.ndarray((len(self.buf) - 7,), "<u8", self.raw, strides=(1,))

    @classmethod
    def joined(cls, messages: list[bytes]) -> Wire:
        """Over `messages` laid one after another."""
        return cls(b"".join([*messages, bytes(_PAD)]))

    def strings(self, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
        """The bytes ``raw[starts[i]:ends[i]]``."""
        return list(map(bytes, map(self.raw.__getitem__, map(slice, starts.tolist(), ends.tolist()))))

    def distinct_strings(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Which distinct string each ``raw[starts[i]:ends[i]]`` is, and the first of each, without a Python
        object each: strings (of at most `WORD_STRING` bytes) are told apart by their length and words (bytes
        past their end masked off), grouped by a hash of those and checked word by word; None if two different
        strings share a hash (then they are compared as bytes)."""
        size = ends - starts
        last = len(self._words) - 1
        words = [size.astype(np.uint64)]
        for k in range(0, int(size.max(initial=0)), 8):
            words.append(self._words[np.minimum(starts + k, last)] & _BYTE_MASKS[np.clip(size - k, 0, 8)])
        hashed = np.zeros(len(starts), np.uint64)
        with np.errstate(over="ignore"):
            for word in words:
                hashed = (hashed ^ word) * np.uint64(0x9E3779B97F4A7C15)
                hashed ^= hashed >> np.uint64(31)
        codes, _ = pd.factorize(hashed)
        first = np.unique(codes, return_index=True)[1]
        return (codes, first) if all(np.array_equal(word, word[first][codes]) for word in words) else None

    def varints(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
        """The varint at each position: (values as uint64, sizes in bytes; `_BAD_VARINT` for one over 10 bytes).

        One-byte varints (tags, small ids) cost one gather. Longer ones are read as the
        little-endian word of the 8 bytes there: the first byte without the continuation
        bit ends the varint, and three shift-and-merge steps pack its 7-bit groups. The
        rare 9- and 10-byte ones (negative int64) go byte by byte.
        """
        byte = self.buf[pos]
        todo = np.flatnonzero(byte >= 0x80)
        value = byte.astype(np.uint64)
        if not todo.size:
            return value, 1
        words = self._words[pos[todo]]
        stops = ~words & np.uint64(0x8080808080808080)
        last = stops & (~stops + np.uint64(1))  # the stop bit of the varint's last byte; 0 if not within 8 bytes
        long = last.astype(np.float64)
        sizes = np.frexp(long)[1].astype(np.int64) >> 3  # bit 8k+7 -> k+1 bytes; 0 -> 0
        words &= (last | (last - np.uint64(1))) & np.uint64(0x7F7F7F7F7F7F7F7F)
        for bits, keep, move in _MERGE_7BIT_GROUPS:
            words = (words & keep) | ((words & move) >> bits)
        size = np.ones(len(pos), np.int64)
        value[todo], size[todo] = words, sizes
        over_8 = todo[sizes == 0]
        if over_8.size:
            value[over_8], size[over_8] = self._long_varints(pos[over_8])
        return value, size

    def _long_varints(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`varints` byte by byte, over the shrinking set of varints not yet ended."""
        value = np.zeros(len(pos), np.uint64)
        size = np.full(len(pos), _BAD_VARINT, np.int64)
        todo, acc, at = np.arange(len(pos)), np.zeros(len(pos), np.uint64), pos
        for k in range(10):
            byte = self.buf[at]
            acc |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            done = byte < 0x80
            value[todo[done]], size[todo[done]] = acc[done], k + 1
            todo, acc, at = todo[~done], acc[~done], at[~done] + 1
        return value, size

    def scan(self, starts: np.ndarray, ends: np.ndarray) -> Fields:
        """Decode the top-level fields of the messages ``raw[starts[i]:ends[i]]``.

        Pass k reads the k-th field of every message not yet finished, so the number
        of numpy passes is the largest field count of one message. A message that is
        not valid protobuf (a bad tag, a varint over 10 bytes, a field running past
        its end) is marked corrupt and none of its fields are returned.
        """
        corrupt = np.zeros(len(starts), bool)
        parts: list[tuple[np.ndarray, ...]] = []
        idx = np.flatnonzero(starts < ends)
        pos, end = starts[idx], ends[idx]
        while idx.size:
            first = self.buf[pos]
            if (first < 0x80).all():  # one-byte tags (field numbers < 16): the usual case
                wire, number, pos = first & 7, (first >> 3).astype(np.int64), pos + 1
            else:
                tag, used = self.varints(pos)
                wire, number = (tag & np.uint64(7)).astype(np.uint8), (tag >> np.uint64(3)).astype(np.int64)
                pos = pos + used
            ok = (number > 0) & ((wire <= 2) | (wire == 5)) & (pos <= end)  # groups (3, 4) are long gone
            if not ok.all():
                corrupt[idx[~ok]] = True
                idx, pos, end, wire, number = idx[ok], pos[ok], end[ok], wire[ok], number[ok]
            value = np.zeros(len(idx), np.uint64)
            length = np.zeros(len(idx), np.int64)
            counts = np.bincount(wire, minlength=8)
            for wire_type, width in ((0, 0), (1, 8), (2, 0), (5, 4)):
                if not counts[wire_type]:
                    continue
                sel = slice(None) if counts[wire_type] == len(idx) else np.flatnonzero(wire == wire_type)
                at = pos[sel]
                if wire_type == 0:
                    value[sel], used = self.varints(at)
                    pos[sel] = at + used
                elif wire_type == 2:
                    size, used = self.varints(at)
                    start = at + used
                    fits = size <= np.maximum(end[sel] - start, 0).astype(np.uint64)
                    length[sel] = np.where(fits, size, 0).astype(np.int64)
                    value[sel] = start.astype(np.uint64)
                    pos[sel] = np.where(fits, start + length[sel], end[sel] + 1)
                else:
                    window = self.buf[at[:, None] + np.arange(width)]
                    value[sel] = np.ascontiguousarray(window).view(f"<u{width}")[:, 0]
                    pos[sel] = at + width
            ok = pos <= end
            if not ok.all():
                corrupt[idx[~ok]] = True
                idx, pos, end, wire, number = idx[ok], pos[ok], end[ok], wire[ok], number[ok]
                value, length = value[ok], length[ok]
            parts.append((idx, number, wire, value, length))
            more = pos < end
            if not more.all():
                idx, pos, end = idx[more], pos[more], end[more]
        if not parts:
            none = np.zeros(0, np.int64)
            return Fields(none, none, none.astype(np.uint8), none.astype(np.uint64), none, corrupt)
        msg, number, wire, value, length = (np.concatenate(column) for column in zip(*parts, strict=True))
        if corrupt.any():  # fields read from a message before its damage was found
            good = ~corrupt[msg]
            msg, number, wire, value, length = msg[good], number[good], wire[good], value[good], length[good]
        return Fields(msg, number, wire.astype(np.uint8), value, length, corrupt)

    def events(self, starts: np.ndarray, ends: np.ndarray, stat_ids: np.ndarray) -> EventFields:
        """Decode the XEvents ``raw[starts[i]:ends[i]]`` and find their stats that may have a metadata id in
        `stat_ids` (`stat_ids` says which do).

        Writers put an event's fields in number order with one-byte tags: metadata id,
        offset, duration, the stats, (num_occurrences). Such events are read in a pass
        per field and one per stat (the k-th stat of every event at once); an event
        laid out any other way, or damaged, is read again by `scan`.
        """
        pos = starts.copy()
        md = self._optional_varint(pos, ends, EV_METADATA)[0]
        offset_ps = self._optional_varint(pos, ends, EV_OFFSET)[0]
        duration_ps = self._optional_varint(pos, ends, EV_DURATION)[0]
        first_bytes = np.zeros(256, bool)
        first_bytes[[_first_varint_byte(stat_id) for stat_id in stat_ids.tolist()]] = True
        stat_event, stat_start, stat_end = self._stat_spans(pos, ends, first_bytes)
        aggregated = self._optional_varint(pos, ends, EV_OCCURRENCES)[1]
        unusual = pos != ends
        fields = EventFields(
            md.view(np.int64),
            offset_ps.view(np.int64),
            duration_ps.view(np.int64),
            aggregated,
            np.zeros(len(starts), bool),
            0,
            stat_event,
            stat_start,
            stat_end,
        )
        if unusual.any():
            self._rescan(fields, np.flatnonzero(unusual), starts, ends)
        return fields

    def _optional_varint(self, pos: np.ndarray, ends: np.ndarray, number: int) -> tuple[np.ndarray, np.ndarray]:
        """Varint field `number` where it comes next: its value (0 if absent) and presence; `pos` moves past it
        (past the end, for a varint that does not end in time)."""
        has = np.flatnonzero((pos < ends) & (self.buf[pos] == (number << 3 | _VARINT)))
        found, size = self.varints(pos[has] + 1)
        pos[has] = np.minimum(pos[has] + 1 + size, ends[has] + 1)
        value = np.zeros(len(pos), np.uint64)
        value[has] = found
        present = np.zeros(len(pos), bool)
        present[has] = True
        return value, present

    def _stat_spans(
        self, pos: np.ndarray, ends: np.ndarray, first_bytes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stats that come next in each event, one after another: per stat its event, start and end, for
        those whose metadata id may be wanted (its first byte is in `first_bytes`, a table by byte value) or
        is laid out unusually. `pos` moves past all (and stays at a stat that runs past its event's end)."""
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        tag = EV_STATS << 3 | _DELIMITED
        idx = np.flatnonzero((pos < ends) & (self.buf[pos] == tag))
        while idx.size:
            size, used = self.varints(pos[idx] + 1)
            body = pos[idx] + 1 + used
            stop = body + size.view(np.int64)  # wraps for an impossible size: then before `body`
            end = ends[idx]
            fits = (stop >= body) & (stop <= end)
            if not fits.all():
                idx, body, stop, end = idx[fits], body[fits], stop[fits], end[fits]
            usual = (self.buf[body] == (ST_METADATA << 3 | _VARINT)) & (stop - body > 1)
            kept = np.flatnonzero(~usual | first_bytes[self.buf[body + 1]])
            parts.append((idx[kept], body[kept], stop[kept]))
            pos[idx] = stop
            idx = idx[(stop < end) & (self.buf[stop] == tag)]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        event, start, stat_end = (np.concatenate(column) for column in zip(*parts, strict=True))
        return event, start, stat_end

    def _rescan(self, fields: EventFields, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        """Read events `rows` of `fields` again by `scan`: protobuf's rules for any layout, damage marked."""
        scanned = self.scan(starts[rows], ends[rows])
        n = len(rows)
        fields.md[rows] = scanned.last(EV_METADATA, n, EV_WIRE[EV_METADATA])[0].view(np.int64)
        fields.offset_ps[rows] = scanned.last(EV_OFFSET, n, EV_WIRE[EV_OFFSET])[0].view(np.int64)
        fields.duration_ps[rows] = scanned.last(EV_DURATION, n, EV_WIRE[EV_DURATION])[0].view(np.int64)
        fields.aggregated[rows] = scanned.last(EV_OCCURRENCES, n, EV_WIRE[EV_OCCURRENCES])[1]
        fields.corrupt[rows] = scanned.corrupt
        known = scanned.number < len(EV_WIRE)
        expected = EV_WIRE[np.where(known, scanned.number, 0)]
        fields.mistyped = len(np.unique(scanned.msg[known & (expected >= 0) & (scanned.wire != expected)]))
        is_stat = (scanned.number == EV_STATS) & (scanned.wire == EV_WIRE[EV_STATS])
        rescanned = np.zeros(len(fields.md), bool)
        rescanned[rows] = True
        kept = ~rescanned[fields.stat_event]
        start = scanned.value[is_stat].astype(np.int64)
        fields.stat_event = np.concatenate([fields.stat_event[kept], rows[scanned.msg[is_stat]]])
        fields.stat_start = np.concatenate([fields.stat_start[kept], start])
        fields.stat_end = np.concatenate([fields.stat_end[kept], start + scanned.length[is_stat]])

    def stat_ids(self, events: EventFields, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The stats of `events` whose metadata id is in `wanted`: their indices (in stat order), ids and where
        their value field starts (-1: unknown); and how many stats are not protobuf (counted here once).

        Writers put the id (field 1) first; a stat laid out otherwise is read by `scan`.
        """
        starts, ends = events.stat_start, events.stat_end
        usual = (self.buf[starts] == (ST_METADATA << 3 | _VARINT)) & (ends - starts > 1)
        index = np.flatnonzero(usual)
        found, size = self.varints(starts[index] + 1)
        md = found.view(np.int64)
        value_at = starts[index] + 1 + size
        unusual = np.flatnonzero(~usual)
        corrupt = 0
        if unusual.size:
            fields = self.scan(starts[unusual], ends[unusual])
            corrupt = int(fields.corrupt.sum())
            order = np.argsort(np.concatenate([index, unusual]), kind="stable")  # back in stat order
            index = np.concatenate([index, unusual])[order]
            scanned = fields.last(ST_METADATA, unusual.size)[0].view(np.int64)
            md = np.concatenate([md, np.where(fields.corrupt, -1, scanned)])[order]
            value_at = np.concatenate([value_at, np.full(unusual.size, -1, np.int64)])[order]
        hit = np.flatnonzero(np.isin(md, wanted))
        return index[hit], md[hit], value_at[hit], corrupt

    def stat_values(
        self, starts: np.ndarray, ends: np.ndarray, value_at: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The value of each XStat ``raw[starts[i]:ends[i]]``, whose value field starts at `value_at` (-1:
        unknown): its field number (0: none), raw 64 bits (the varint, the double's bits, a string's start)
        and length (strings); and how many stats are not protobuf.

        The usual stat, its id then one value field, is read here; any other by `scan`
        (protobuf's rules: the last value field wins; damage makes the stat corrupt).
        """
        n = len(starts)
        field = np.zeros(n, np.int64)
        value = np.zeros(n, np.uint64)
        length = np.zeros(n, np.int64)
        inside = (value_at >= 0) & (value_at < ends)  # not so after an id that is no varint
        at = np.where(inside, value_at, 0)
        tag = self.buf[at].astype(np.int64)
        number, wire = tag >> 3, tag & 7
        usual = inside & (number < len(ST_VALUE_WIRE))
        usual &= wire == ST_VALUE_WIRE[np.where(usual, number, 0)]
        done = np.zeros(n, bool)
        for wire_type in (_VARINT, _FIXED64, _DELIMITED):
            rows = np.flatnonzero(usual & (wire == wire_type))
            body = at[rows] + 1
            size_of_string = np.zeros(len(rows), np.uint64)
            if wire_type == _FIXED64:
                found, stop = self._words[body], body + 8
            else:
                found, size = self.varints(body)
                stop = body + size
            if wire_type == _DELIMITED:  # found: the string's length; it starts at `stop`
                fits = found <= np.maximum(ends[rows] - stop, 0).astype(np.uint64)
                size_of_string, found = found, stop.astype(np.uint64)
                stop = np.where(fits, stop + np.where(fits, size_of_string, 0).astype(np.int64), -1)
            good = np.flatnonzero(stop == ends[rows])
            mine = rows[good]
            field[mine], value[mine], length[mine] = number[mine], found[good], size_of_string[good].astype(np.int64)
            done[mine] = True
        rest = np.flatnonzero(~done)
        fields = self.scan(starts[rest], ends[rest])
        is_value = (fields.number > ST_METADATA) & (fields.number < len(ST_VALUE_WIRE))
        is_value[is_value] = fields.wire[is_value] == ST_VALUE_WIRE[fields.number[is_value]]
        holder = rest[fields.msg[is_value]]
        field[holder], value[holder] = fields.number[is_value], fields.value[is_value]
        length[holder] = fields.length[is_value]
        return field, value, length, int(fields.corrupt.sum())


def _first_varint_byte(value: int) -> int:
    """The first byte of the varint encoding of int64 `value`."""
    unsigned = value & (2**64 - 1)
    return unsigned & 0x7F | (0x80 if unsigned >= 0x80 else 0)
