"""The memory limit on loading (``--max-memory``): a trace too large for the machine is refused early, with one
line saying what to do, instead of being found out by the OOM killer once the machine swaps.

What is limited is what grows with a trace: its events, at `EVENT_BYTES` each while they are loaded and
analyzed (the event table holds about 80 bytes an event; decoding and the analyses' columns add the rest: on
benchmarks/bench_scale.py's 306 MB trace the peak above the imports is 150-180 bytes an event, on a million tiny
kernel events, all else a trace holds being none, 335: the estimate takes the worst). Readers project
the whole file's events from the part read so far (`MemoryLimit.check_events`), so a trace that cannot fit
stops after its first chunk, and a gzip bomb as soon as its inflated part shows how much it holds. A file read
whole (an XSpace, XProf's JSON export) is checked before it is read, from its size.

The default is `DEFAULT_SHARE` of the memory available to this process: the least of the cgroup's limit less
its usage (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, this process's group and those above it) and
``/proc/meminfo``'s MemAvailable. Processes that hold tables at once split the limit (`MemoryLimit.shared`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import msgspec
from msgspec.structs import replace

from traceinsight.errors import TraceError

EVENT_BYTES = 360
DEFAULT_SHARE = 0.75
# Memory a JSON file decoded whole takes per byte of its text: the text, its events as structs, the table.
WHOLE_JSON_FACTOR = 3
# Memory the stream (readers/json_stream.py) takes per byte of text it must hold at once (one event or a run of
# blanks longer than a chunk, the keys after the events): its buffer, the buffer joined anew, the bracketed copy a
# decode takes, and the decoded value.
STREAM_BUFFER_FACTOR = 4
# What walking an XSpace file holds besides its events (readers/xspace_wire.walk_space): each plane's layout and
# parsed fields (measured: 700 bytes an empty plane, `b"\x0a\x00" * 800_000` peaks 420 MB above 200k planes),
# each line's place, and the plane's metadata parsed (upb messages, a few times their bytes), all erring high.
XSPACE_PLANE_BYTES = 1000
XSPACE_LINE_BYTES = 100
XSPACE_METADATA_FACTOR = 8
# Bytes of an XSpace file per event, at the low end of real ones (32-130), so its estimate errs high.
XSPACE_BYTES_PER_EVENT = 32
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_NO_CGROUP_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC_CGROUP = Path("/proc/self/cgroup")  # which group of each hierarchy this process is in
_MEMINFO = Path("/proc/meminfo")
_CGROUP_FILES = (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes"))


def parse_size(text: str) -> int:
    """``64MB``, ``2GB``, ``1.5GiB``, ``512M`` or plain bytes as a number of bytes (MB, GB: powers of 1000; MiB, M:
    of 1024). ValueError for anything else, or nothing."""
    match = _SIZE.match(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ValueError(f"not a size: {text!r} (say 64MB, 2GB or a number of bytes)")
    size = int(float(match.group(1)) * unit)
    if size < 1:
        raise ValueError(f"not a size: {text!r} (must be at least 1 byte)")
    return size


def megabytes(size: float) -> str:
    """A size in MB (10**6 bytes, as sizes are given), two figures below 10 MB."""
    return f"{size / 1e6:,.0f} MB" if size >= 1e7 else f"{size / 1e6:.2g} MB"


class MemoryLimit(msgspec.Struct, frozen=True):
    """At most `total` bytes for the events of the traces read (`source` says where it came from: the option,
    the default), split among `holders` processes that hold tables at once; `used`: what the inputs this
    process read before take."""

    total: int
    source: str
    used: int = 0
    holders: int = 1

    @classmethod
    def of(cls, max_memory: str | int | None) -> MemoryLimit:
        """The limit a user asked for (a size, or bytes), else the default share of the memory available."""
        if max_memory is not None:
            size = parse_size(max_memory) if isinstance(max_memory, str) else int(max_memory)
            if size < 1:
                raise ValueError(f"max_memory must be at least 1 byte, not {max_memory!r}")
            return cls(size, f"--max-memory {max_memory}")
        available = available_memory()
        return cls(int(available * DEFAULT_SHARE), f"the default: {DEFAULT_SHARE:.0%} of {megabytes(available)} free")

    def after(self, events: int) -> MemoryLimit:
        """This limit once the events of an input read are held too."""
        return replace(self, used=self.used + events * EVENT_BYTES)

    def shared(self, holders: int) -> MemoryLimit:
        """This limit for each of `holders` processes that hold tables at once."""
        return replace(self, holders=self.holders * max(1, holders))

    def check(self, path: object, needed: int) -> None:
        """Raise `TraceError` (one line: the limit and what to do) when `needed` more bytes would pass the limit."""
        if self.used + needed <= self.total // self.holders:
            return
        before = f" besides the {megabytes(self.used)} of the inputs read before it" if self.used else ""
        split = f", split among {self.holders} processes reading at once" if self.holders > 1 else ""
        enough = (self.used + needed) * self.holders * 1.25
        more = f"{math.ceil(enough / 1e9)}GB" if enough >= 1e9 else f"{math.ceil(enough / 1e8) * 100}MB"
        raise TraceError(
            path,
            f"needs about {megabytes(needed)} of memory{before}, over the limit of {megabytes(self.total)} "
            f"({self.source}{split}); read fewer files at a time (--jobs), on a Dask cluster (--scheduler) or "
            f"one run only (--run), or raise the limit (--max-memory {more})",
        )

    def check_events(self, path: object, events: float) -> None:
        """`check` for holding `events` events (a projection for a whole file, say)."""
        self.check(path, int(events * EVENT_BYTES))

    def check_xspace_layout(self, path: object, planes: int, lines: int, metadata_bytes: int) -> None:
        """`check` for what an XSpace file's walk holds: `planes` planes, `lines` lines, `metadata_bytes` of
        the planes' other fields, however few events they carry (5 million empty planes are a 10 MB file)."""
        self.check(
            path, planes * XSPACE_PLANE_BYTES + lines * XSPACE_LINE_BYTES + metadata_bytes * XSPACE_METADATA_FACTOR
        )

    def check_xspace(self, path: Path) -> None:
        """`check` for an XSpace file before it is read: the events its size suggests (the reader holds their
        table and a batch of lines, never the whole file)."""
        try:
            size = path.stat().st_size
        except OSError:
            return  # the reader says why
        self.check(path, size // XSPACE_BYTES_PER_EVENT * EVENT_BYTES)


def available_memory() -> int:
    """Bytes of memory this process can still take: MemAvailable, or less where a cgroup limits it."""
    free = [_meminfo_available(), *_cgroup_room()]
    known = [f for f in free if f is not None]
    return max(0, min(known)) if known else _NO_CGROUP_LIMIT


def _meminfo_available() -> int | None:
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> list[int]:
    """Limit less usage of every cgroup level of this process that sets a memory limit (v2 and v1 alike)."""
    try:
        lines = _PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    rooms = []
    for line in lines:
        _, controllers, group = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one hierarchy for every controller
            base = _CGROUP_ROOT
        elif "memory" in controllers.split(","):  # v1: the memory controller's own
            base = _CGROUP_ROOT / "memory"
        else:
            continue
        folder = base / group.lstrip("/")
        for level in (folder, *folder.parents):  # a limit on any level above holds too
            if not level.is_relative_to(base):
                break
            rooms += [room for files in _CGROUP_FILES if (room := _room(level, *files)) is not None]
    return rooms


def _room(folder: Path, limit_file: str, usage_file: str) -> int | None:
    """The cgroup `folder`'s limit less its usage; None where it sets no limit (or cannot be read)."""
    try:
        text = (folder / limit_file).read_text().strip()
        limit = int(text) if text != "max" else None
        if limit is None or limit >= _NO_CGROUP_LIMIT:
            return None
        return limit - int((folder / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
