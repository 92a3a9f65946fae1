"""When, and by which process, a trace file was captured: told from the head and the tail of its text (JSON), its
``Task Environment`` plane (XSpace) or its session tables (Nsight Systems), without reading its events.

Why: a folder can hold the ranks of one run or several captures of one process (a repeating profiler schedule,
a script run twice); discovery tells them apart by the captures' windows and processes (`discover.find_runs`),
and orders runs by when they were captured, on the trace's own clock (copied files share their modification
times).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from traceinsight.errors import TraceError
from traceinsight.readers import REPORT_SUFFIX, SQLITE_SUFFIX, XSPACE_SUFFIX
from traceinsight.readers.json_files import FileText
from traceinsight.readers.regular import open_regular

# How much of each end of a JSON file's text is read: a few hundred events, and the keys Kineto writes before
# and after them (`distributedInfo` first; `baseTimeNanoseconds` last, or first in some writers).
EDGE_BYTES = 1 << 16
# ts at or beyond this are wall-clock epoch ns (2001-09); `readers.kineto` decides its clock alike.
_EPOCH_NS_MIN = 10**18
_EPOCH_NS_MAX = 4_102_444_800 * 10**9  # 2100
# A number cut by the edge of a block is no ts: each must be followed by what ends a JSON value.
_TS = re.compile(rb'"ts"\s*:\s*"?(-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?=[\s,}"])')
_PID = re.compile(rb'"pid"\s*:\s*"?(\d+)(?=[\s,}"])')
_BASE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_HOST = re.compile(rb'"host_name"\s*:\s*"((?:[^"\\]|\\.)*)"')  # the top-level key `readers.kineto` reads


class CaptureStamp(msgspec.Struct, frozen=True):
    """A file's capture window on the epoch clock (None: it has no wall clock) and who captured it: the rank
    (`distributedInfo`), the process (its largest pid: Kineto's device rows use small ids) or the host (XSpace)."""

    start_ns: int | None = None
    end_ns: int | None = None
    rank: int | None = None
    pid: int | None = None
    host: str | None = None

    @property
    def process(self) -> tuple[object, ...] | None:
        """Who captured the file, as far as it says (None: it does not say)."""
        if self.rank is None and self.pid is None and self.host is None:
            return None
        return (self.rank, self.pid, self.host)


def capture_stamp(path: Path, window: bool = True) -> CaptureStamp:
    """The stamp of one trace file; an empty one when it cannot be read (reading it then says why). Without
    `window` (a lone file: its start orders it, nothing is grouped with it), a JSON file's tail is read only when
    its head does not give the start on the epoch (a gzip tail costs inflating the whole file); its end may then
    be its head's last event."""
    name = path.name.lower()
    try:
        if name.endswith(XSPACE_SUFFIX):
            return _xspace_stamp(path)
        if name.endswith((SQLITE_SUFFIX, REPORT_SUFFIX)):
            if name.endswith(REPORT_SUFFIX):  # exported only when read
                return CaptureStamp()
            from traceinsight.readers.nsys import capture_window  # pandas: only for a folder holding an export

            start, end, pid, host, rank = capture_window(path)
            return CaptureStamp(start, end, rank, pid, host)
        return _json_stamp(path, window)
    except TraceError:
        return CaptureStamp()


def _json_edges(path: Path, tail: bool = True) -> tuple[bytes, bytes]:
    """The first and last `EDGE_BYTES` of a JSON file's text (a gzip file is inflated to its end); without `tail`,
    the head alone (and an empty tail)."""
    text = FileText(path)
    if not tail:
        return next(iter(text.blocks(EDGE_BYTES)), b""), b""
    if not text.packed:
        try:
            with open_regular(path) as file:
                head = file.read(EDGE_BYTES)
                size = file.seek(0, 2)
                file.seek(max(len(head), size - EDGE_BYTES))
                return head, file.read()
        except OSError as exc:
            raise TraceError(path, f"cannot read file: {exc.strerror or exc}") from None
    head, last, before = b"", b"", b""
    for block in text.blocks(EDGE_BYTES):
        if not head:
            head = block
        else:
            before, last = last, block
    return head, (before + last)[-EDGE_BYTES:]


def _json_stamp(path: Path, window: bool) -> CaptureStamp:
    if not window:
        stamp = _edges_stamp(*_json_edges(path, tail=False))
        if stamp.start_ns is not None:
            return stamp
    return _edges_stamp(*_json_edges(path))


def _edges_stamp(head: bytes, tail: bytes) -> CaptureStamp:
    """The stamp the head and tail of a JSON file's text give."""
    starts = [float(t) for t in _TS.findall(head)]
    ends = [float(t) for t in _TS.findall(tail)] or starts
    base = next((int(m) for m in (*_BASE.findall(head), *_BASE.findall(tail))), 0)
    rank = next((int(m) for m in (*_RANK.findall(head), *_RANK.findall(tail))), None)
    host = next((m.decode(errors="replace") for m in (*_HOST.findall(head), *_HOST.findall(tail))), None)
    pids = [int(p) for p in _PID.findall(head)]
    pid = max(pids) if pids else None
    if not starts:
        return CaptureStamp(rank=rank, pid=pid, host=host)
    # ts are µs: on the epoch, or (Kineto since 2023) after `baseTimeNanoseconds`; the profiler's own rows
    # at the end can be on the epoch while the events are after the base.
    times = [round(us * 1000) + (base if 0 < us * 1000 < base else 0) for us in (*starts, *ends)]
    start_ns, end_ns = min(times[: len(starts)]), max(times)
    if not _EPOCH_NS_MIN <= start_ns < _EPOCH_NS_MAX:
        return CaptureStamp(rank=rank, pid=pid, host=host)
    return CaptureStamp(start_ns, end_ns, rank, pid, host)


def _xspace_stamp(path: Path) -> CaptureStamp:
    """The profile's start and stop (``Task Environment``) and the host, from the file's layout (no lines read)."""
    from traceinsight.readers.xspace_stats import plane_stats  # protobuf: only for XSpace
    from traceinsight.readers.xspace_wire import Source, walk_space

    with Source(path) as source:
        layout = walk_space(source)
    task = next((plane_stats(p.plane) for p in layout.planes if p.plane.name == "Task Environment"), {})
    # XProf writes one file per host into a session's folder, named by the host: the name tells the hosts apart
    # (a renamed copy keeps the `hostnames` it was captured on).
    host = path.name[: -len(XSPACE_SUFFIX)]
    start, stop = task.get("profile_start_time"), task.get("profile_stop_time")
    if not (isinstance(start, int) and _EPOCH_NS_MIN <= start < _EPOCH_NS_MAX):
        return CaptureStamp(host=host)
    end = stop if isinstance(stop, int) and stop >= start else start
    return CaptureStamp(start, end, host=host)
