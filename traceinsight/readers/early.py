"""A Kineto file read by a process of its own while this one imports pandas and the analyses.

`traceinsight report FILE` spends 0.25-0.3 s importing before it can read anything, and reading a Kineto file of
30-60 MB of JSON takes as long again. Where a core is idle, `early_read` starts a process (`parallel.Child`,
forked before pandas is imported) that decodes the file's chunks into columns (`kineto_chunks.convert`, which
needs numpy and msgspec only) meanwhile; the read here (`kineto.read_kineto_json`) then takes those columns
(`take`) and builds the table from them as from its own.

The early read is only a head start: whatever goes wrong in it (a damaged file, no Kineto trace, the file changed,
the process died), it gives nothing back, and the file is read here as always, which says what is wrong. It runs
only where it gains (`worth_reading_early`): the fork start method, an idle core (`--jobs` over 1), no memory
limit or cluster, and a text of `EARLY_READ_MIN_BYTES` to `EARLY_READ_MAX_BYTES`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from traceinsight.parallel import Child, forks_workers
from traceinsight.readers import JSON_SUFFIXES
from traceinsight.readers.json_files import CHUNK_BYTES, json_size_guess
from traceinsight.rules import EARLY_READ_MAX_BYTES, EARLY_READ_MIN_BYTES

if TYPE_CHECKING:
    from traceinsight.readers.kineto_chunks import Chunk


class EarlyRead(msgspec.Struct):
    """A Kineto file's chunks as columns, with the top-level keys and warnings of its stream (`kineto._Rows`)."""

    chunks: list[Chunk]
    top: dict[str, Any]
    warnings: Counter[str]


class _Pending(msgspec.Struct):
    """An early read under way: its process, the file as it was when the read began, and the process that began
    it (a worker forked meanwhile inherits the entry, not the right to the pipe)."""

    child: Child
    stat: tuple[int, int]  # size and mtime_ns
    owner: int = msgspec.field(default_factory=os.getpid)


_pending: dict[Path, _Pending] = {}  # by the file's resolved path; `early_read` empties it as it ends


def worth_reading_early(path: Path, jobs: int) -> bool:
    """Whether reading `path` early gains: see the module's docstring (`jobs`: the processes the run may use)."""
    if jobs < 2 or not forks_workers() or not path.name.lower().endswith(JSON_SUFFIXES) or not path.is_file():
        return False
    return EARLY_READ_MIN_BYTES <= json_size_guess(path) <= EARLY_READ_MAX_BYTES


@contextmanager
def early_read(path: Path, jobs: int) -> Iterator[None]:
    """Begin reading `path` in a process of its own where that gains (`worth_reading_early`), for `take` to collect
    within the block; a read not taken by the block's end is stopped."""
    key = _start(path, jobs)
    try:
        yield
    finally:
        pending = _pending.pop(key, None) if key is not None else None
        if pending is not None:
            pending.child.stop()


def _start(path: Path, jobs: int) -> Path | None:
    """The early read of `path` begun (its key in `_pending`), where it gains and a process can be had."""
    key = _key(path)
    if key is None or not worth_reading_early(path, jobs):
        return None
    try:
        child = Child("early read")
    except OSError:  # no process to be had (a limit on processes, say): the read here is the read
        return None
    _pending[key] = _Pending(child, _stat(key))
    with suppress(OSError):  # it died at once: `take` finds no result and the file is read here
        child.submit(read_chunks, str(key))
    return key


def take(path: Path | str) -> EarlyRead | None:
    """The early read of `path` (its columns), when one was begun and the file has not changed since; None
    otherwise, or when it failed: the caller then reads the file itself."""
    key = _key(Path(path)) if _pending else None
    pending = _pending.pop(key, None) if key is not None else None
    if key is None or pending is None or pending.owner != os.getpid():
        return None
    try:
        early: EarlyRead | None = pending.child.result()
    except Exception:  # noqa: BLE001  # the process died or raised: the read here says what is wrong
        early = None
    finally:
        pending.child.stop()
    return early if early is not None and _stat(key) == pending.stat else None


def read_chunks(path: str) -> EarlyRead | None:
    """The early read's process: the file's chunks converted, as `kineto._Rows` reads a stream with one process;
    None when the stream cannot take the file apart, when it is no Kineto trace, or when anything fails."""
    from traceinsight.readers.json_events import gc_paused
    from traceinsight.readers.json_stream import TraceStream
    from traceinsight.readers.kineto_chunks import has_kineto_keys, streamed_chunks

    try:
        stream = TraceStream(path, CHUNK_BYTES, None, None)
        with gc_paused():
            chunks = list(streamed_chunks(stream, 1))
        kineto = any(chunk.kineto_cats for chunk in chunks) or has_kineto_keys(stream.top)
        return EarlyRead(chunks, stream.top, stream.warnings) if kineto else None
    except Exception:  # noqa: BLE001  # a damaged file, a fallback to the whole document: read it there
        return None


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
