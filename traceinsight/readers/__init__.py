"""Readers: one per trace format, all returning a `TraceRead` with the canonical event table.

`read_trace` is the one way in, for the CLI, the API and the tests alike. It picks
the reader from the file name and, for JSON, from the content: Kineto (PyTorch
profiler) JSON is streamed chunk by chunk (`read_kineto_json`), so a gigabyte trace
needs memory for its event table, not its text; any other Chrome-trace JSON (XProf's
trace_viewer export, a TF1 timeline, a legacy ``torch.autograd.profiler`` export, a
home-grown tracer's) is decoded whole (`_read_document`). Either form of the Trace
Event Format is read: an object with ``traceEvents``, or the array of events alone.
Nsight Systems' SQLite exports (and ``.nsys-rep`` reports, exported by ``nsys``) go to
`read_nsys`.

The package imports a reader when a file needs it, so that one reader module can be imported alone: the early
read's process (early.py) takes Kineto's chunk reader without pandas.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from traceinsight.errors import TraceError, is_truncation_warning
from traceinsight.readers.json_files import FileText, json_size_guess
from traceinsight.readers.regular import not_regular, refusal
from traceinsight.rules import NAME_MATCH_MAX_CHARS, PARALLEL_FILE_MIN_BYTES

if TYPE_CHECKING:
    from traceinsight.events import TraceRead
    from traceinsight.limits import MemoryLimit

XSPACE_SUFFIX = ".xplane.pb"
SQLITE_SUFFIX = ".sqlite"
REPORT_SUFFIX = ".nsys-rep"  # a report Nsight Systems exports to SQLite (`nsys.export_report`)
JSON_SUFFIXES = (".json", ".json.gz")
NSYS_SUFFIXES = (SQLITE_SUFFIX, REPORT_SUFFIX)
TRACE_SUFFIXES = (XSPACE_SUFFIX, *JSON_SUFFIXES, *NSYS_SUFFIXES)
# How much of a JSON file's text tells what it is: a trace names its events' array near its start.
SNIFF_BYTES = 1 << 16
# The key of the events in the object form of a trace (Kineto, XProf, TF1 timelines).
TRACE_EVENTS_KEY = b'"traceEvents"'
# The array form of a trace, as its head shows it: an array whose first item is an object, and the keys every
# event has, its phase and its time or name (the Trace Event Format's required fields).
_ARRAY_OF_OBJECTS = re.compile(rb"\s*\[\s*\{")
_PHASE_KEY = re.compile(rb'"ph"\s*:')
_TIME_OR_NAME_KEY = re.compile(rb'"(?:ts|name)"\s*:')
# A `--json` report of ours (or a diff): JSON that is no trace, whatever it mentions.
_OUR_SCHEMA = re.compile(rb'"schema"\s*:\s*"traceinsight\.')
NO_STEP_RANGE = "step_range_missing"  # the first word of the warning that --step-range named no range of a file
LONG_NAMES = f"names longer than {NAME_MATCH_MAX_CHARS:,} characters cut to that length"


def is_trace_file(path: Path | str) -> bool:
    """Whether the file name has a trace suffix (case-insensitive); the content is not opened.

    Any ``.json`` and ``.sqlite`` qualifies, so discovery looks at its content too (`looks_like_trace`), and
    at its type (`regular.not_regular`).
    """
    return Path(path).name.lower().endswith(TRACE_SUFFIXES)


def json_head(path: Path | str) -> bytes:
    """The first `SNIFF_BYTES` of a JSON file's text (inflated, for gzip): enough to tell what it is, without
    reading the rest. Raises TraceError when the file cannot be read or its gzip stream is corrupt."""
    return next(iter(FileText(path).blocks(SNIFF_BYTES)), b"")  # the blocks, let go, close the file


def looks_like_trace(path: Path | str) -> bool:
    """Whether a reader here takes the file, told cheaply: an XSpace file or an Nsight Systems report by its
    name, SQLite by its tables (an nsys export's), JSON by the head of its text (a `traceEvents` key, or an array
    of event objects; and no report of ours), so a trace is found whatever it is called. Raises TraceError when a
    JSON file's head cannot be read."""
    name = Path(path).name.lower()
    if name.endswith((XSPACE_SUFFIX, REPORT_SUFFIX)):
        return True
    if name.endswith(SQLITE_SUFFIX):
        from traceinsight.readers.nsys import is_nsys_export

        return is_nsys_export(path)
    if not name.endswith(JSON_SUFFIXES):
        return False
    head = json_head(path)
    return (TRACE_EVENTS_KEY in head or is_array_of_events(head)) and _OUR_SCHEMA.search(head) is None


def is_array_of_events(head: bytes) -> bool:
    """Whether the head of a JSON text is the array form of a trace: an array of objects with trace event keys."""
    return (
        _ARRAY_OF_OBJECTS.match(head) is not None
        and _PHASE_KEY.search(head) is not None
        and _TIME_OR_NAME_KEY.search(head) is not None
    )


@contextmanager
def nesting_checked(path: Path | str) -> Iterator[None]:
    """Turn a decoder's RecursionError (JSON nested thousands deep) into a TraceError."""
    try:
        yield
    except RecursionError:
        raise TraceError(path, "nested too deeply to read (a damaged or hostile file)") from None


def read_trace(
    path: Path | str,
    on_bytes: Callable[[int], None] | None = None,
    jobs: int = 1,
    limit: MemoryLimit | None = None,
    step_range: str | None = None,
) -> TraceRead:
    """Read one trace file with the reader its name and content call for.

    `on_bytes(n)`: bytes of a Kineto file read so far (a progress bar). A large Kineto file is decoded by
    `jobs` processes, chunk by chunk; a large XSpace file, with `jobs` over 1, by as many as the machine's
    idle cores allow. `limit`: a `TraceError` as soon as the file's events would not fit
    (an XSpace file: estimated from its size before it is read). A file cut short is read as far as it goes
    (a truncation warning says so); one with no complete event to report before the cut is a `TraceError`.
    `step_range`: the name of the host ranges that mark steps (`events.mark_step_ranges`; ``--step-range``); a
    warning when the file has none. Only a regular file is read (`readers.regular`): a FIFO is refused at once.
    Names longer than `NAME_MATCH_MAX_CHARS` are cut to it (a warning counts them).
    """
    from traceinsight.events import cut_long_names, mark_step_ranges

    path = Path(path)
    if kind := not_regular(path):
        raise TraceError(path, refusal(kind))
    with nesting_checked(path):
        read = _read_trace(path, on_bytes, jobs, limit)
    if not len(read.events) and any(is_truncation_warning(w) for w in read.warnings):
        raise TraceError(
            path, "the document ends early (truncated file?), with no complete event to report before the cut"
        )
    cut = cut_long_names(read.events, ("name", "op"), NAME_MATCH_MAX_CHARS) + cut_long_names(
        read.ops, ("name",), NAME_MATCH_MAX_CHARS
    )
    if cut:  # before any analysis matches a rule's pattern in them
        read.warnings[LONG_NAMES] += cut
    if step_range is not None and not mark_step_ranges(read.events, step_range):
        read.warnings[f"{NO_STEP_RANGE}: no host range named {step_range!r}"] += 1
    return read


def _read_trace(path: Path, on_bytes: Callable[[int], None] | None, jobs: int, limit: MemoryLimit | None) -> TraceRead:
    name = path.name.lower()
    if name.endswith(XSPACE_SUFFIX):
        from traceinsight.readers.xspace import read_xspace  # protobuf is only needed here

        if limit is not None:
            limit.check_xspace(path)
        # One process with --jobs 1; else as many as the machine's idle cores allow (`xspace.idle_cores`).
        return read_xspace(path, jobs=None if jobs > 1 else 1, limit=limit)
    if name.endswith(JSON_SUFFIXES):
        from traceinsight.readers.kineto import read_kineto_json

        jobs = jobs if json_size_guess(path) >= PARALLEL_FILE_MIN_BYTES else 1
        streamed = read_kineto_json(path, on_bytes=on_bytes, jobs=jobs, limit=limit)
        return streamed if streamed is not None else _read_document(path, limit)
    if name.endswith(NSYS_SUFFIXES):
        from traceinsight.readers.nsys import read_nsys

        return read_nsys(path, limit)
    raise TraceError(path, f"not a trace file (expected a name ending in {', '.join(TRACE_SUFFIXES)})")


def _read_document(path: Path, limit: MemoryLimit | None) -> TraceRead:
    """A JSON trace the streaming reader does not take (Chrome-trace JSON, XProf's export), decoded whole."""
    from traceinsight.readers.chrome import read_chrome
    from traceinsight.readers.json_document import load_trace_json
    from traceinsight.readers.kineto import looks_like_kineto, read_kineto

    doc = load_trace_json(path, limit=limit)
    return read_kineto(path, doc) if looks_like_kineto(doc) else read_chrome(path, doc)
