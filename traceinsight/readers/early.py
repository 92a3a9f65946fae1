"""A Kineto file read by a process of its own while this one imports pandas and the analyses, and by both once
the imports are done.

`traceinsight report FILE` (or FOLDER, of that one file: `discover.lone_trace`) spends 0.25-0.3 s importing before
it can read anything, and reading a Kineto file of 30-60 MB of JSON takes as long again. Where a core is idle,
`early_read` starts a process (`parallel.Child`, forked before pandas is imported) that cuts the file's events into
pieces (`TraceStream.pieces`) and decodes them into columns (`kineto_chunks.convert`, which needs numpy and msgspec
only) meanwhile. The read here
(`kineto.read_kineto_json`) then takes those columns (`take`) and builds the table from them as from its own. Each
piece is claimed once (`parallel.Tickets`) by whichever process gets to it: once its imports are done, this one
decodes the pieces the other has not reached yet, where it used to wait for them (issue 38).

The early read is only a head start: whatever goes wrong in it (a damaged file, no Kineto trace, the file changed,
the process died), it gives nothing back, and the file is read here as always, which says what is wrong. It runs
only where it gains (`worth_reading_early`): the fork start method, an idle core (`--jobs` over 1), no memory
limit or cluster, and a text of `EARLY_READ_MIN_BYTES` to `EARLY_READ_MAX_BYTES`.
"""

from __future__ import annotations

import mmap
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from traceinsight.limits import STREAM_BUFFER_FACTOR, MemoryLimit
from traceinsight.parallel import (
    Child,
    Parcel,
    SharedFile,
    Tickets,
    forks_workers,
    inherit,
    inherited,
    start_context,
)
from traceinsight.readers import JSON_SUFFIXES
from traceinsight.readers.json_files import CHUNK_BYTES, ByteRange, FileText, inflate_into, json_size_guess
from traceinsight.rules import EARLY_READ_MAX_BYTES, EARLY_READ_MIN_BYTES

if TYPE_CHECKING:
    from traceinsight.readers.json_stream import TraceStream
    from traceinsight.readers.kineto_chunks import Chunk


class EarlyRead(msgspec.Struct):
    """A Kineto file's chunks as columns, with the top-level keys and warnings of its stream (`kineto._Rows`)."""

    chunks: list[Chunk]
    top: dict[str, Any]
    warnings: Counter[str]


class _Cut(msgspec.Struct):
    """Where the pieces of the events array lie in the JSON text (start, end), as the early read's process cut
    them: what this one needs to decode those it claims, from the file or (a .gz file) the text they share."""

    pieces: list[tuple[int, int]]
    shared: bool  # every piece can be read here: a plain file's, or in the shared text


class _Decoded(msgspec.Struct):
    """The early read's process's part: the pieces it claimed, converted (by number), and what follows the last
    piece (its chunks, the top-level keys, the warnings of the whole stream and of its pieces)."""

    chunks: dict[int, Chunk]
    tail: list[Chunk]
    top: dict[str, Any]
    warnings: Counter[str]


class _Pending(msgspec.Struct):
    """An early read under way: its process, the file as it was when the read began, what the two processes share,
    and the process that began it (a worker forked meanwhile inherits the entry, not the right to the pipe)."""

    child: Child
    stat: tuple[int, int]  # size and mtime_ns
    sharing: _Sharing
    owner: int = msgspec.field(default_factory=os.getpid)

    def stop(self) -> None:
        """Kill the process and reap it, letting go of what it shared (`let_go`; arrays read keep their pages)."""
        self.let_go()
        self.child.stop()

    def let_go(self) -> None:
        """Kill the process, and let go of the shared text and of the file its result came back through; `stop`
        reaps it. The text is unmapped here first: the process killed, the last to map it, then frees its pages as it
        ends, on a core of its own (35 MB: 5 ms)."""
        if self.sharing.text is not None:
            with suppress(BufferError):  # a view of it still held: it goes with the view
                self.sharing.text.close()
        self.child.kill()
        if self.sharing.results is not None:
            self.sharing.results.close()


class _Sharing(msgspec.Struct):
    """What the early read's process shares with the one that forked it, made before the fork: the tickets its
    pieces are claimed with, the buffer a .gz file's text is inflated into, and the file its result's arrays come
    back through (`parallel.SharedFile`: 5 MB through the pipe took 0.04 s)."""

    tickets: Tickets
    text: mmap.mmap | None
    results: SharedFile | None


_pending: dict[Path, _Pending] = {}  # by the file's resolved path; `early_read` empties it as it ends
_to_reap: list[_Pending] = []  # taken, their processes killed (not waited for): `early_read` reaps them as it ends
_SHARED = "early-read"  # what the early read's process inherits its `_Sharing` under
# In the early read's process: the stream and the pieces the first call cut, for the second to decode.
_cut: dict[str, tuple[TraceStream, list[memoryview | ByteRange]]] = {}


def worth_reading_early(path: Path, jobs: int) -> bool:
    """Whether reading `path` early gains: see the module's docstring (`jobs`: the processes the run may use)."""
    if jobs < 2 or not forks_workers() or not path.name.lower().endswith(JSON_SUFFIXES) or not path.is_file():
        return False
    return EARLY_READ_MIN_BYTES <= json_size_guess(path) <= EARLY_READ_MAX_BYTES


@contextmanager
def early_read(path: Path | None, jobs: int) -> Iterator[None]:
    """Begin reading `path` in a process of its own where that gains (`worth_reading_early`), for `take` to collect
    within the block; a read not taken by the block's end is stopped. None: nothing to read early."""
    key = _start(path, jobs) if path is not None else None
    try:
        yield
    finally:
        pending = _pending.pop(key, None) if key is not None else None
        if pending is not None:  # not taken
            _to_reap.append(pending)
        while _to_reap:
            _to_reap.pop().stop()


def _start(path: Path, jobs: int) -> Path | None:
    """The early read of `path` begun (its key in `_pending`), where it gains and a process can be had."""
    key = _key(path)
    if key is None or not worth_reading_early(path, jobs):
        return None
    context = start_context()
    # A .gz file's text goes to memory both processes share, as the other inflates it: this one decodes pieces
    # of it without inflating it again (0.04 s for 35 MB). Sized by the gzip trailer: past it (a file of several
    # gzip members) the other process decodes every piece.
    text = None
    if FileText(key).packed:
        with suppress(OSError, ValueError):  # no memory to be had: the other process decodes every piece
            text = mmap.mmap(-1, json_size_guess(key))
    results = SharedFile(context)
    sharing = _Sharing(Tickets(context), text, results)
    with inherit(_SHARED, sharing):
        try:
            child = Child("early read", context)
        except OSError:  # no process to be had (a limit on processes, say): the read here is the read
            results.close()
            return None
    _pending[key] = _Pending(child, _stat(key), sharing)
    with suppress(OSError):  # it died at once: `take` finds no result and the file is read here
        child.submit(cut_pieces, str(key))
        child.submit(decode_claimed, str(key))
    return key


def take(path: Path | str) -> EarlyRead | None:
    """The early read of `path` (its columns), when one was begun and the file has not changed since; None
    otherwise, or when it failed: the caller then reads the file itself. The pieces the early read's process has
    not claimed yet are decoded here meanwhile."""
    key = _key(Path(path)) if _pending else None
    pending = _pending.pop(key, None) if key is not None else None
    if key is None or pending is None or pending.owner != os.getpid():
        return None
    try:
        early = _joined(key, pending)
    except Exception:  # noqa: BLE001  # the process died or raised: the read here says what is wrong
        early = None
    finally:  # reaped as the early read ends, not waited for here
        pending.let_go()
        _to_reap.append(pending)
    return early if early is not None and _stat(key) == pending.stat else None


def _joined(key: Path, pending: _Pending) -> EarlyRead | None:
    """The pieces not claimed yet, decoded here, and those of the early read's process; None when either failed
    or the file is no Kineto trace."""
    from traceinsight.readers.kineto_chunks import has_kineto_keys

    sharing = pending.sharing
    cut: _Cut | None = pending.child.result()
    if cut is None:
        return None
    warnings: Counter[str] = Counter()
    mine: dict[int, Chunk] = {}
    if cut.shared:  # else the other process decodes every piece
        text = sharing.text
        pieces = [ByteRange(str(key), *span) if text is None else memoryview(text)[slice(*span)] for span in cut.pieces]
        claimed = _decode_claimed(pieces, sharing.tickets, warnings)
        if claimed is None:
            return None
        mine = claimed[0]
    outcome: Parcel | _Decoded | None = pending.child.result()
    theirs = outcome.open(sharing.results) if isinstance(outcome, Parcel) and sharing.results else outcome
    if not isinstance(theirs, _Decoded):
        return None
    chunks = [mine[i] if i in mine else theirs.chunks[i] for i in range(len(cut.pieces))] + theirs.tail
    if not (any(chunk.kineto_cats for chunk in chunks) or has_kineto_keys(theirs.top)):
        return None
    warnings.update(theirs.warnings)
    return EarlyRead(chunks, theirs.top, warnings)


def cut_pieces(path: str) -> _Cut | None:
    """The early read's process, first: the file's events cut into pieces, kept for `decode_claimed`, and a .gz
    file's put in the text it shares with the process that forked it; None when the stream cannot take the file
    apart, or when anything fails."""
    from traceinsight.readers.json_stream import TraceStream

    text = _shared().text
    # Past twice the largest text read early, the file is not what its size said (a gzip trailer that lies: a bomb,
    # several members): given up, before the pieces it holds or one growing buffer take the memory the read here
    # would have refused.
    bound = 2 * EARLY_READ_MAX_BYTES
    limit = MemoryLimit(STREAM_BUFFER_FACTOR * bound, "the early read")
    try:
        inflated = _inflated(path, text)
        if inflated is None:
            stream = TraceStream(path, CHUNK_BYTES, None, limit)
        else:  # its pieces are views of the shared text: neither copied there nor kept twice
            stream = TraceStream(path, CHUNK_BYTES, None, limit, data=inflated, inflated=True)
        pieces = []
        shared = True
        for piece, end in stream.pieces():
            if end > bound:
                return None
            start, end = _span(piece, end)
            if inflated is None and isinstance(piece, memoryview):
                shared &= text is not None and end <= len(text)
                if shared and text is not None:
                    text[start:end] = piece
            pieces.append((piece, (start, end)))
    except Exception:  # noqa: BLE001  # a damaged file, a fallback to the whole document: read it there
        return None
    _cut[path] = (stream, [piece for piece, _ in pieces])
    return _Cut([span for _, span in pieces], shared)


def _inflated(path: str, text: mmap.mmap | None) -> memoryview | None:
    """A .gz file's whole text inflated into the text both processes share, where it fits (as the gzip trailer said
    it would): 3 copies of it fewer than the stream's blocks make (0.02-0.05 s for 35-55 MB). None otherwise, or when
    the gzip stream is cut short or damaged: the stream then inflates the file as it goes, and says what it holds."""
    if text is None:
        return None
    try:
        size = inflate_into(path, memoryview(text))
    except Exception:  # noqa: BLE001  # cut short, damaged: the stream reads what it can
        return None
    return None if size is None else memoryview(text)[:size]


def decode_claimed(path: str) -> Parcel | _Decoded | None:
    """The early read's process, then: the pieces no process has claimed as it gets to them, decoded and
    converted, and what follows the last (`TraceStream.rest`); None when a piece is not whole events, when the
    first says the file is no Kineto trace (nor do its keys), or when anything fails."""
    from traceinsight.readers.json_events import gc_paused
    from traceinsight.readers.kineto_chunks import convert, has_kineto_keys

    sharing = _shared()
    if path not in _cut:
        return None
    stream, pieces = _cut.pop(path)
    warnings: Counter[str] = Counter()
    try:
        # Kineto's first events carry its cats: a first piece without them nor Kineto's keys is no Kineto trace,
        # read here as what it is.
        claimed = _decode_claimed(
            pieces, sharing.tickets, warnings, lambda c: c.kineto_cats or has_kineto_keys(stream.top)
        )
        if claimed is None:
            return None
        chunks, exact = claimed
        with gc_paused():
            tail = [convert(events, tail_exact) for events, tail_exact in stream.rest(exact)]
    except Exception:  # noqa: BLE001  # a damaged end, a fallback to the whole document: read it there
        return None
    warnings.update(stream.warnings)
    result = _Decoded(chunks, tail, stream.top, warnings)
    return sharing.results.pack(result) if sharing.results is not None else result


def _decode_claimed(
    pieces: Sequence[memoryview | ByteRange],
    tickets: Tickets,
    warnings: Counter[str],
    first_is_kineto: Callable[[Chunk], bool] | None = None,
) -> tuple[dict[int, Chunk], bool] | None:
    """The pieces no process has claimed yet, each claimed with `tickets` as this process gets to it, decoded and
    converted (by number; what they skipped added to `warnings`), and whether the last needed exact timestamps (the
    hint each passes to the next); None when a piece is not whole events, or the first this process decodes fails
    `first_is_kineto`. The loop of both processes."""
    from traceinsight.readers.json_events import gc_paused
    from traceinsight.readers.json_stream import decode_and_convert
    from traceinsight.readers.kineto_chunks import convert

    chunks: dict[int, Chunk] = {}
    exact = False
    with gc_paused():
        while (i := tickets.take()) < len(pieces):
            decoded = decode_and_convert(pieces[i], convert, exact)
            if decoded is None:
                return None
            chunks[i], skipped, exact = decoded
            warnings.update(skipped)
            if first_is_kineto is not None and len(chunks) == 1 and not first_is_kineto(chunks[i]):
                return None
    return chunks, exact


def _span(piece: memoryview | ByteRange, end: int) -> tuple[int, int]:
    """Where a piece cut by `TraceStream.pieces` lies in the JSON text."""
    return (piece.start, piece.end) if isinstance(piece, ByteRange) else (end - len(piece), end)


def _shared() -> _Sharing:
    """What the early read's process shares with the one that forked it (`_start`); called alone, not forked:
    tickets of its own, nothing else."""
    return inherited(_SHARED, lambda: _Sharing(Tickets(start_context()), None, None))


def _key(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of links, say: no early read
        return None


def _stat(path: Path) -> tuple[int, int]:
    try:
        info = os.stat(path)
    except OSError:
        return (-1, -1)
    return (info.st_size, info.st_mtime_ns)
