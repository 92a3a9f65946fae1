"""Readers: one per trace format, all returning a `TraceRead` with the canonical event table.

`read_trace` picks the reader from the file name and, for JSON, from the content:
Kineto (PyTorch profiler) writes its own top-level keys and event cats; anything
else in Chrome-trace JSON is read as XProf's trace_viewer export.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from traceinsight.limits import MemoryLimit
from traceinsight.model import TraceError, TraceRead
from traceinsight.readers.chrome import read_chrome
from traceinsight.readers.jsonload import load_trace_json
from traceinsight.readers.kineto import looks_like_kineto, read_kineto

XSPACE_SUFFIX = ".xplane.pb"
JSON_SUFFIXES = (".json", ".json.gz")
TRACE_SUFFIXES = (XSPACE_SUFFIX, *JSON_SUFFIXES)


def is_trace_file(path: Path | str) -> bool:
    """Whether the file name has a trace suffix (case-insensitive); the content is not opened.

    Any ``.json`` qualifies, so discovery must expect `read_trace` to refuse some
    (e.g. a run_info.json) with a `TraceError`.
    """
    return Path(path).name.lower().endswith(TRACE_SUFFIXES)


@contextmanager
def nesting_checked(path: Path | str) -> Iterator[None]:
    """Turn a decoder's RecursionError (JSON nested thousands deep) into a TraceError."""
    try:
        yield
    except RecursionError:
        raise TraceError(path, "nested too deeply to read (a damaged or hostile file)") from None


def read_trace(path: Path | str, limit: MemoryLimit | None = None) -> TraceRead:
    """Read one trace file with the reader its name and content call for; `limit`: refuse JSON too large to
    decode whole (`load_trace_json`)."""
    with nesting_checked(path):
        return _read_trace(Path(path), limit)


def _read_trace(path: Path, limit: MemoryLimit | None) -> TraceRead:
    name = path.name.lower()
    if name.endswith(XSPACE_SUFFIX):
        from traceinsight.readers.xspace import read_xspace  # protobuf is only needed here

        return read_xspace(path)
    if name.endswith(JSON_SUFFIXES):
        doc = load_trace_json(path, limit=limit)
        return read_kineto(path, doc) if looks_like_kineto(doc) else read_chrome(path, doc)
    raise TraceError(path, f"not a trace file (expected a name ending in {', '.join(TRACE_SUFFIXES)})")
