"""The JSON text of a trace file, plain ``.json`` or gzip-compressed: whole, in blocks, or a byte range of it.

Gzip is told by a file's magic bytes, not its name, and inflated as it is read
(by ISA-L where its wheels are installed); a gzip stream cut short (a job killed
while writing it) gives what it inflates to. `read_json_text` gives the whole
text (for json_document.py), `FileText` the text in blocks (for the stream,
json_stream.py), and `ByteRange` a part of a plain file that a worker process
reads itself. Decoding the text is json_events.py's work.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import cast

import msgspec

from traceinsight.errors import TraceError
from traceinsight.limits import WHOLE_JSON_FACTOR, MemoryLimit
from traceinsight.readers.regular import open_regular
from traceinsight.rules import GZIP_JSON_RATIO_GUESS

fast_zlib: ModuleType = zlib  # the standard library's, where ISA-L's wheels are missing
_CORRUPT_GZIP: tuple[type[Exception], ...] = (zlib.error,)
_GzipFile: type[gzip.GzipFile] = gzip.GzipFile
try:  # ISA-L inflates about three times as fast as zlib (benchmarks/README.md), and into a buffer given to it
    from isal import igzip, isal_zlib

    fast_zlib, _CORRUPT_GZIP = isal_zlib, (zlib.error, cast(type[Exception], isal_zlib.error))  # stubs: an instance
    _GzipFile = igzip.IGzipFile
except ImportError:
    pass

# Bytes of JSON read at a time: a gzip file's blocks as inflated, the chunks a stream decodes (json_stream.py).
CHUNK_BYTES = 4 << 20
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib's code for a gzip stream (header and trailer)
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_MIN_BYTES = 18  # a 10-byte header and an 8-byte trailer (CRC-32, ISIZE)
_PACKED_BLOCK = 1 << 20  # bytes of a .gz file read at a time


class JsonText(msgspec.Struct, frozen=True):
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


def truncation_unit(inflated: bool) -> str:
    """What a truncation warning counts: the file's bytes, or a gzip file's inflated JSON (its whole size is
    unknown, so the share is of what the part before the cut inflates to)."""
    return "bytes of inflated JSON" if inflated else "bytes"


def inflate_into(path: Path | str, buffer: memoryview) -> int | None:
    """A ``.gz`` file's whole text inflated into `buffer` (by ISA-L, with no copy between): its length, or None when
    it does not fit (a gzip trailer that said less: several members, a bomb). A stream cut short or damaged raises
    (EOFError, OSError, zlib's error), as the reader that then reads the file says."""
    with open_regular(path) as raw, _GzipFile(fileobj=raw) as file:
        at = 0
        while at < len(buffer):
            if not (inflated := file.readinto(buffer[at : at + CHUNK_BYTES])):
                return at
            at += inflated
        return None if file.read(1) else at


class FileText:
    """The JSON text of a ``.json`` or ``.json.gz`` file (or of its bytes, `data`), in blocks; gzip is told by
    its magic bytes and inflated as read. `views` of a text given as a view (of shared memory) are views of it.
    `inflated`: `data` is a gzip file's text, inflated already (what a truncation warning counts).

    A gzip stream cut short (a job killed while writing it) gives what it inflates
    to, and `cut` says so. `size` is the file's, `consumed` how much of it has
    been inflated and `given` how many bytes of JSON were handed out, so far:
    what the whole inflates to is guessed from them (`size_guess`). `on_bytes(n)`:
    told `consumed` as each block is handed out.
    """

    def __init__(
        self,
        path: Path | str,
        data: bytes | memoryview | None = None,
        on_bytes: Callable[[int], None] | None = None,
        inflated: bool = False,
    ) -> None:
        self.path = path
        self.on_bytes = on_bytes
        self.data = data
        self.packed = (data[:2] if data is not None else _gzip_head_and_tail(path)[0]) == _GZIP_MAGIC
        self.inflated = self.packed or inflated
        self.cut = False
        self.size = 0
        self.consumed = 0
        self.given = 0

    def size_guess(self) -> float:
        """The bytes of JSON in the whole file: its size, or (gzip) what the part inflated so far suggests."""
        return self.given * self.size / max(1, self.consumed) if self.packed else self.size

    def views(self, size: int) -> Iterator[bytes | memoryview]:
        """`blocks`, but those of a text given as a view (of shared memory) are views of it, not copies."""
        if isinstance(self.data, memoryview) and not self.packed:
            return self._views(self.data, size)
        return self.blocks(size)

    def blocks(self, size: int) -> Iterator[bytes]:
        """The text in blocks of at most `size` bytes (-1: a plain file in one block)."""
        try:
            file = io.BytesIO(self.data) if self.data is not None else open_regular(self.path)
        except OSError as exc:
            raise TraceError(self.path, f"cannot read file: {exc.strerror or exc}") from None
        with file:
            self.size = len(self.data) if self.data is not None else os.fstat(file.fileno()).st_size
            for block in self._inflated(file, size) if self.packed else self._plain(file, size):
                self.given += len(block)
                self._tell()
                yield block
            self._tell()

    def _views(self, data: memoryview, size: int) -> Iterator[memoryview]:
        """Blocks of text held in memory (shared with another process): views of it, not copies."""
        self.size = len(data)
        step = size if size > 0 else max(1, len(data))
        for at in range(0, len(data), step):
            block = data[at : at + step]
            self.consumed += len(block)
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


def _gzip_head_and_tail(path: Path | str) -> tuple[bytes, int]:
    """The first two bytes of a regular file, and for gzip its trailer's ISIZE (the text's size modulo 2**32,
    that of its last member); (b"", 0) when it cannot be read: reading it then says why."""
    try:
        with open_regular(path) as file:
            magic = file.read(2)
            if magic != _GZIP_MAGIC or file.seek(0, os.SEEK_END) < _GZIP_MIN_BYTES:
                return magic, 0
            file.seek(-4, os.SEEK_END)
            return magic, int.from_bytes(file.read(4), "little")
    except OSError:
        return b"", 0


class ByteRange(msgspec.Struct, frozen=True):
    """Bytes [start, end) of a file: a chunk of events that a worker process reads itself."""

    path: str
    start: int
    end: int

    def read_bracketed(self) -> bytearray:
        """``[`` + the bytes + ``]``: the chunk as a JSON array, read straight into one buffer."""
        size = self.end - self.start
        buffer = bytearray(size + 2)
        buffer[0], buffer[-1] = ord("["), ord("]")
        with open_regular(self.path) as file:
            file.seek(self.start)
            if file.readinto(memoryview(buffer)[1:-1]) != size:
                raise OSError(f"{self.path} changed while it was read")
        return buffer


def json_size_guess(path: Path | str) -> int:
    """About how many bytes of JSON a file holds (0 when it cannot be read: the reader then says why).

    For ``.gz``, the size its trailer gives (exact for one member of less than 4 GiB), and at least
    `GZIP_JSON_RATIO_GUESS` times its size on disk (a bigger text, whose size the trailer gives modulo 4 GiB).
    """
    try:
        on_disk = os.stat(path).st_size
    except OSError:
        return 0
    magic, text_size = _gzip_head_and_tail(path)
    return max(text_size, on_disk * GZIP_JSON_RATIO_GUESS) if magic == _GZIP_MAGIC else on_disk
