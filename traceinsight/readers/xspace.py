"""Read TensorFlow / JAX / XLA profiler output (XSpace ``.xplane.pb``) into the event table.

How the bytes are read is `xspace_wire`'s: plane by plane, a batch of lines at a time,
every event's fields decoded with numpy (never a Python object per event), so a
gigabyte file needs memory for its table, not for its bytes. Here each batch becomes
rows, and the rows of all batches one table once the file's clock is known. A run of
lines read in one piece (a unit) is read by any process: a large file's units go to
worker processes as well (`_unit_rows`), which send back numpy columns, their names
coded in the order they met them; `_Table` recodes them as one process reading the
units in file order would have, so the table does not depend on who read what.

Mapping (model.py has the columns and kinds; the name rules live in `_classify`, shared
with the Kineto and XProf-JSON readers):

* ``/device:GPU:N`` (NVIDIA and ROCm): ``Stream #...`` lines are device activity:
  ``Memcpy{H2D,D2H,D2D,P2P,Other}`` -> memcpy, ``Memset*`` -> memset, CUPTI's
  bookkeeping records (``MemoryAlloc``, ``MemoryFree``, ...) -> other, the rest ->
  kernel; stream = line id, correlation = ``correlation_id``. Copies get bytes and the
  host-side memory kind from ``memcpy_details``, memsets bytes from ``Memset_details``,
  kernels occupancy (``theoretical_occupancy_pct`` stat, else ``occ_pct`` of
  ``kernel_details``) and blocks per SM (``grid`` / the plane's ``core_count``), and
  every stream event the op type its ``level 0`` annotation names.
  The converter-derived ``Steps`` line -> step rows (step id = event name). Other
  derived lines (``TensorFlow Ops``, ``XLA Ops``, ``_counters_``, ...) repeat or
  summarise the stream events and are not read.
* ``/device:TPU:N``: ``XLA Ops`` -> kernel, ``XLA Modules`` -> annotation, ``Steps``
  -> step, other lines -> other, all with the device set.
* ``/host:*`` except ``/host:metadata`` (thread = line id): an event with a
  ``correlation_id`` stat is a CUDA/HIP API call -> runtime (``*Synchronize`` ->
  sync); ``train*`` / ``test*`` / ``TraceContext*`` without ``/`` (xprof's explicit
  step markers) or ``Profiled batch`` (Keras) with a ``step_num`` stat -> step;
  names starting ``$`` (the Python tracer) -> python; TF ops ``<node>:<OpType>`` ->
  cpu_op; the rest -> other (`make_event_table` turns tf.data waits into input_wait).
  Allocator events (``MemoryAllocation`` / ``MemoryDeallocation``) also make the
  memory table.
* Time: start = line.timestamp_ns + offset_ps // 1000 (the exact integer form of
  (ns * 1000 + ps) // 1000), plus ``Task Environment``'s ``profile_start_time`` when
  the lines are relative to it (saved files are), giving epoch ns; dur =
  duration_ps // 1000. Events with ``num_occurrences`` instead of an offset are
  aggregates without a time: skipped and counted in the warnings.
* Damage (`_repair`; each kind counted once in the warnings): an event whose bytes
  are not protobuf is skipped, a field of the wrong wire type ignored (as protobuf
  does), a stat that is not protobuf ignored; events with an impossible time, a
  duration over 7 days, far outside the profiling window, or repeating another
  exactly are skipped; device properties of the wrong type are left unknown. Only
  a file whose every event is corrupt is refused.
* A file cut short (a job killed mid-write) is read up to its last whole plane, with
  one `truncation_warning`; one with no event before the cut is refused.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from traceinsight.errors import TraceError, truncation_warning
from traceinsight.memory import release_free_memory
from traceinsight.model import (
    COPY_KINDS,
    KINDS,
    MEMORY_KINDS,
    DeviceInfo,
    InputInfo,
    TraceRead,
    make_event_table,
    make_memory_table,
    narrowed_ints,
)
from traceinsight.parallel import Parcel, SharedFile, default_jobs, start_context, worker_pool
from traceinsight.readers import xplane_schema
from traceinsight.readers._classify import copy_kind as _copy_kind
from traceinsight.readers._classify import (
    details_bytes,
    details_copy_memory,
    details_occupancy,
    device_activity_kind,
    is_sync_api,
    step_number,
    xprof_framework,
    xprof_host_kind,
)
from traceinsight.readers._repair import (
    TS_MAX_NS,
    drop_duplicates,
    near_window,
    possible_ts,
    usable_times,
    valid_occupancy,
)
from traceinsight.readers.xspace_wire import (
    LINE_BATCH_BYTES,
    NOT_XSPACE,
    ST_DOUBLE,
    ST_INT,
    ST_REF,
    ST_STR,
    ST_UINT,
    WORD_STRING,
    EventFields,
    LineBatch,
    Source,
    SpaceLayout,
    Wire,
    line_runs,
    raw_events_pool,
    run_batch,
    walk_space,
)
from traceinsight.rules import STEP_MARKER_PATTERN

if TYPE_CHECKING:
    from traceinsight.parallel import Context

# Line roles: what the events of a line become.
_STREAM, _DEVICE_STEPS, _DEVICE_KERNEL, _DEVICE_ANNOTATION, _DEVICE_OTHER, _HOST = range(6)
_TPU_LINE_ROLES = {"XLA Ops": _DEVICE_KERNEL, "XLA Modules": _DEVICE_ANNOTATION, "Steps": _DEVICE_STEPS}
_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU):(\d+)$")

_GRID = re.compile(r"(?:^|\s)grid:([0-9]{1,10}),([0-9]{1,10}),([0-9]{1,10})(?![0-9])")

# The stats the table needs; all others stay in the file.
_INT_STATS = ("correlation_id", "step_num")
_FLOAT_STATS = ("theoretical_occupancy_pct",)
# Read on device streams only; ``level 0`` is the outermost annotation: TF's ``<op name>:<op type>``.
_STR_STATS = ("memcpy_details", "Memset_details", "kernel_details", "level 0")
# The allocator events (TF / XLA BFC allocators, TPU runtime) and the stats the memory table needs.
_MEMORY_EVENTS = {"MemoryAllocation": 1, "MemoryDeallocation": -1}  # the sign of their bytes
_MEMORY_INT_STATS = (
    "bytes_allocated",
    "bytes_reserved",
    "bytes_available",
    "allocation_bytes",
    "addr",
    "index_on_host",
    "device_ordinal",
)
_MEMORY_FLOAT_STATS = ("fragmentation",)
_MEMORY_STR_STATS = ("allocator_name", "tf_op")
_DEVICE_ALLOCATOR = re.compile(r"^GPU_(\d+)_bfc$")  # not gpu_host_bfc (pinned host memory) nor CPU allocators
_READ_STATS = frozenset(
    (
        *_INT_STATS,
        *_FLOAT_STATS,
        *_STR_STATS,
        *_MEMORY_INT_STATS,
        *_MEMORY_FLOAT_STATS,
        *_MEMORY_STR_STATS,
    )
)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# From this much of a file's lines on, its runs of lines are read by several processes when the cores allow.
PARALLEL_MIN_BYTES = 16 << 20
_CORRUPT_STATS = "xspace: corrupt event stats (bad protobuf wire data) ignored"


def _space_class() -> Any:
    """The XSpace message class with ``XLine.events`` declared ``repeated bytes``: how tests reach the
    events' raw bytes to damage them."""
    pool, package = raw_events_pool()
    return xplane_schema.get_message_class(pool.FindMessageTypeByName(f"{package}.XSpace"))


# --------------------------------------------------------------------------- planes and lines


def _device_id(plane_name: str) -> tuple[str, str] | None:
    """("GPU", "GPU:3") for ``/device:GPU:3``; None for any other plane."""
    match = _DEVICE_PLANE.match(plane_name)
    return (match[1], f"{match[1]}:{match[2]}") if match else None


def _line_role(device_type: str | None, line_name: str) -> int | None:
    """What the events of a line are; None for lines that are not read."""
    if device_type is None:
        return _HOST
    if device_type == "GPU":
        if line_name.startswith("Stream #"):
            return _STREAM
        return _DEVICE_STEPS if line_name == "Steps" else None
    return _TPU_LINE_ROLES.get(line_name, _DEVICE_OTHER)


def _ref_name(stat_names: Any, ref: int) -> str | None:
    """The string a stat metadata id stands for (its name), None if there is no such entry."""
    if not _INT64_MIN <= ref <= _INT64_MAX:  # the map's keys are int64; upb raises on others
        return None
    meta = stat_names.get(ref)
    return meta.name if meta is not None else None


def _stat_value(stat: Any, stat_names: Any) -> Any:
    """The Python value of one XStat message, ``ref_value`` resolved to its string."""
    which = stat.WhichOneof("value")
    if which == "ref_value":
        return _ref_name(stat_names, stat.ref_value)
    return getattr(stat, which) if which else None


def _plane_stats(plane: Any) -> dict[str, Any]:
    """A plane's own stats by name (device properties, profile start and stop time)."""
    return {
        name: _stat_value(stat, plane.stat_metadata)
        for stat in plane.stats
        if (name := _ref_name(plane.stat_metadata, stat.metadata_id)) is not None
    }


def _device_info(device: str, stats: dict[str, Any]) -> DeviceInfo:
    """What a device plane says about its device (GPU: CUPTI / ROCm properties, TPU: peak figures).

    A property of the wrong type (bytes for a name, a NaN clock, a negative SM count) is left unknown.
    """

    def number(key: str) -> float | None:
        value = stats.get(key)
        return value if isinstance(value, int | float) and math.isfinite(value) and value >= 0 else None

    def whole(key: str) -> int | None:
        value = number(key)
        return None if value is None else int(value)

    def text(key: str) -> str | None:
        value = stats.get(key)
        return value if isinstance(value, str) and value else None

    major = whole("compute_cap_major")
    bandwidth = number("memory_bandwidth")
    if bandwidth is None and (peak_gbps := number("peak_hbm_bw_gigabytes_per_second")) is not None:
        bandwidth = peak_gbps * 1e9
    return DeviceInfo(
        id=device,
        name=text("gpu_device_name") or text("device_type_string"),
        vendor=text("device_vendor"),
        compute_capability=f"{major}.{whole('compute_cap_minor') or 0}" if major is not None else None,
        sm_count=whole("core_count") or None,
        memory_bytes=whole("memory_size"),
        clock_khz=whole("clock_rate"),
        memory_bandwidth_bps=None if bandwidth is None else float(bandwidth),
    )


@dataclass
class _Plane:
    """What the events of one plane share, and what was learnt of its metadata so far."""

    meta: Any  # the XPlane message without its lines
    device_type: str | None  # "GPU", "TPU"; None for a host plane
    device_code: int  # index into the file's device labels; -1 for a host plane
    sm_count: float  # of its device; NaN if unknown
    stat_ids: dict[str, list[int]]  # the stat metadata ids of each stat name read
    wanted_ids: np.ndarray  # all of them
    # event metadata id -> its name code, whether it has no entry, its metadata if that carries stats
    metadata: dict[int, tuple[int, bool, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, meta: Any, device_type: str | None, device_code: int, sm_count: float) -> _Plane:
        """The plane `meta`, its stat metadata looked up once for the names read."""
        stat_ids: dict[str, list[int]] = {}
        for key, stat in meta.stat_metadata.items():
            if stat.name in _READ_STATS:
                stat_ids.setdefault(stat.name, []).append(key)
        wanted_ids = np.array([md for ids in stat_ids.values() for md in ids], np.int64)
        return cls(meta, device_type, device_code, sm_count, stat_ids, wanted_ids)


# --------------------------------------------------------------------------- names


class _NameRule:
    """A rule on event names, evaluated once per distinct name of a file (its name codes)."""

    def __init__(self, rule: Callable[[str], Any], dtype: Any) -> None:
        self.rule = rule
        self.dtype = dtype
        self.known: dict[int, Any] = {}

    def __call__(self, codes: np.ndarray, names: list[str]) -> np.ndarray:
        """The rule's value for each name code in `codes`."""
        used = np.flatnonzero(np.bincount(codes, minlength=1)).tolist()
        values = np.zeros(max(used, default=0) + 1, self.dtype)
        for code in used:
            if code not in self.known:
                self.known[code] = self.rule(names[code])
            values[code] = self.known[code]
        return values[codes]


@dataclass
class _NameRules:
    """The rules the rows' kinds follow, each remembering its value per name code of one file."""

    activity_kind: _NameRule = field(default_factory=lambda: _NameRule(_activity_kind, np.int8))
    copy_kind: _NameRule = field(default_factory=lambda: _NameRule(_copy_kind_code, np.int8))
    step_number: _NameRule = field(default_factory=lambda: _NameRule(step_number, np.int64))
    host_kind: _NameRule = field(default_factory=lambda: _NameRule(_host_kind, np.int8))
    step_marker: _NameRule = field(default_factory=lambda: _NameRule(_is_step_marker, bool))
    sync_api: _NameRule = field(default_factory=lambda: _NameRule(is_sync_api, bool))


def _activity_kind(name: str) -> int:
    return KINDS.index(device_activity_kind(name))


def _copy_kind_code(name: str) -> int:
    return COPY_KINDS.index(_copy_kind(name))


def _host_kind(name: str) -> int:
    return KINDS.index(xprof_host_kind(name))


def _is_step_marker(name: str) -> bool:
    return bool(STEP_MARKER_PATTERN.match(name))


# --------------------------------------------------------------------------- stats


@dataclass
class _Stats:
    """Per event, the wanted stats (event stats win over event-metadata stats)."""

    ints: dict[str, np.ndarray]  # int64, meaningful where present
    floats: dict[str, np.ndarray]  # float64, NaN where absent
    strings: dict[str, np.ndarray]  # object, None where absent
    present: dict[str, np.ndarray]  # bool

    @classmethod
    def empty(
        cls,
        n: int,
        ints: tuple[str, ...] = _INT_STATS,
        floats: tuple[str, ...] = _FLOAT_STATS,
        strings: tuple[str, ...] = _STR_STATS,
    ) -> _Stats:
        return cls(
            ints={s: np.zeros(n, np.int64) for s in ints},
            floats={s: np.full(n, np.nan) for s in floats},
            strings={s: np.full(n, None, object) for s in strings},
            present={s: np.zeros(n, bool) for s in (*ints, *floats, *strings)},
        )

    def put(self, name: str, rows: np.ndarray, value: Any) -> None:
        """Give `rows` one Python value of stat `name` (dropped if of another type)."""
        if name in self.ints and isinstance(value, int):
            self.ints[name][rows] = value if value <= _INT64_MAX else value - 2**64  # uint64 as the wire path reads it
        elif name in self.floats and isinstance(value, int | float):
            self.floats[name][rows] = value
        elif name in self.strings and isinstance(value, str):
            self.strings[name][rows] = value
        else:
            return
        self.present[name][rows] = True

    def put_wire(self, name: str, rows: np.ndarray, field: np.ndarray, value: np.ndarray) -> None:
        """Give `rows` the values of numeric stat `name` as decoded (value field number, raw 64 bits)."""
        is_int = (field == ST_INT) | (field == ST_UINT)
        if name in self.ints:
            ok = is_int
            self.ints[name][rows[ok]] = value[ok].view(np.int64)
        else:
            ok = is_int | (field == ST_DOUBLE)
            as_int = value[ok].view(np.int64).astype(np.float64)
            self.floats[name][rows[ok]] = np.where(is_int[ok], as_int, value[ok].view(np.float64))
        self.present[name][rows[ok]] = True


@dataclass
class _FoundStats:
    """The stats of a batch's events that a table may want (by metadata id), found once for both tables."""

    index: np.ndarray  # into the events' stats, in stat order
    md: np.ndarray  # their metadata ids
    value_at: np.ndarray  # where their value field starts (-1: unknown)

    @classmethod
    def of(cls, plane: _Plane, wire: Wire, events: EventFields, warnings: Counter[str]) -> _FoundStats:
        """The stats of `events` named like a stat either table reads; corrupt ones are counted."""
        index, md, value_at, corrupt = wire.stat_ids(events, plane.wanted_ids)
        if corrupt:
            warnings[_CORRUPT_STATS] += corrupt
        return cls(index, md, value_at)


def _read_stats(
    plane: _Plane,
    wire: Wire,
    events: EventFields,
    found: _FoundStats,
    rows: np.ndarray | None,
    string_rows: np.ndarray,
    with_stats: list[tuple[int, Any]],
    warnings: Counter[str],
    stats: _Stats,
) -> _Stats:
    """The stats `stats` wants of the events `rows` (None: all) of `plane`, string stats only on `string_rows`
    (positions in `rows`): from the events' metadata (`with_stats`: id, metadata), then from the events' own
    (`found`). Corrupt stats are ignored (counted)."""
    stat_names = plane.meta.stat_metadata
    row_of = np.arange(len(events.md)) if rows is None else np.full(len(events.md), -1, np.int64)
    if rows is not None:
        row_of[rows] = np.arange(len(rows))
    want_string = np.zeros(len(row_of) if rows is None else len(rows), bool)
    want_string[string_rows] = True

    # Stats on the event metadata first (rare: TPU XLA Ops), so the events' own stats overwrite them.
    if with_stats:
        md = events.md if rows is None else events.md[rows]
        order = np.argsort(md, kind="stable")
        ordered = md[order]
        for meta_id, meta in with_stats:
            with_meta = order[np.searchsorted(ordered, meta_id) : np.searchsorted(ordered, meta_id, side="right")]
            for stat in meta.stats:
                name = _ref_name(stat_names, stat.metadata_id)
                if name in stats.present:
                    to = with_meta[want_string[with_meta]] if name in stats.strings else with_meta
                    stats.put(name, to, _stat_value(stat, stat_names))

    # The events' own: those of `found` with a metadata id of a name `stats` has.
    names = [name for name in stats.present if name in plane.stat_ids]
    ids = np.array([md for name in names for md in plane.stat_ids[name]], np.int64)
    id_name = np.array([i for i, name in enumerate(names) for _ in plane.stat_ids[name]], np.int64)
    order = np.argsort(ids)
    mine = np.flatnonzero(np.isin(found.md, ids))
    mine = mine[row_of[events.stat_event[found.index[mine]]] >= 0]
    name_of = id_name[order][np.searchsorted(ids[order], found.md[mine])]
    row = row_of[events.stat_event[found.index[mine]]]
    is_string = np.array([name in stats.strings for name in names], bool)
    chosen = np.flatnonzero(~is_string[name_of] | want_string[row])
    index, name_of, row, value_at = (
        found.index[mine[chosen]],
        name_of[chosen],
        row[chosen],
        found.value_at[mine[chosen]],
    )
    for i, name in enumerate(names):  # a name at a time: the values' arrays stay small
        part = np.flatnonzero(name_of == i)
        if not part.size:
            continue
        at = index[part]
        field, value, length, corrupt = wire.stat_values(events.stat_start[at], events.stat_end[at], value_at[part])
        if corrupt:
            warnings[_CORRUPT_STATS] += corrupt
        if name not in stats.strings:
            stats.put_wire(name, row[part], field, value)
            continue
        texts = _texts(wire, stat_names, field, value, length)
        ok = pd.notna(texts)
        stats.strings[name][row[part][ok]] = texts[ok]
        stats.present[name][row[part][ok]] = True
    return stats


def _texts(wire: Wire, stat_names: Any, field: np.ndarray, value: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The strings of string stats (inline ``str_value`` or interned ``ref_value``), each decoded once."""
    texts = np.full(len(field), None, object)
    refs = np.flatnonzero(field == ST_REF)
    if refs.size:
        codes, distinct = pd.factorize(value[refs])
        texts[refs] = np.array([_ref_name(stat_names, ref) for ref in distinct.tolist()], object)[codes]
    inline = np.flatnonzero(field == ST_STR)
    start = value[inline].astype(np.int64)
    end = start + length[inline]
    short = length[inline] <= WORD_STRING
    grouped = wire.distinct_strings(start[short], end[short]) if short.any() else None
    if grouped is not None:
        codes, first = grouped
        texts[inline[short]] = _decoded(wire.strings(start[short][first], end[short][first]))[codes]
        inline, start, end = inline[~short], start[~short], end[~short]
    if inline.size:
        codes, distinct = pd.factorize(np.array(wire.strings(start, end), object))
        texts[inline] = _decoded(distinct)[codes]
    return texts


def _decoded(raws: Any) -> np.ndarray:
    """Byte strings as text (object array); bytes that are not UTF-8 replaced."""
    return np.array([raw.decode("utf-8", "replace") for raw in raws], object)


def _per_distinct(values: np.ndarray, rule: Callable[[str], Any], missing: Any, dtype: Any) -> np.ndarray:
    """``rule(value)`` per row, evaluated once per distinct value; rows without one (None) get `missing`."""
    if not len(values):  # many a batch has no copy, no kernel: no need for pandas' hashing machinery
        return np.zeros(0, dtype)
    codes, distinct = pd.factorize(values)
    return np.array([*(rule(v) for v in distinct), missing], dtype)[codes]


def _op_type(annotation: str) -> str:
    """``MatMul`` of TF's ``dense/MatMul:MatMul``; an annotation without a type is kept whole."""
    return annotation.rsplit(":", 1)[-1] or annotation


def _memory_code(name: str, details: str) -> int:
    """Index in MEMORY_KINDS of the host-side memory of copy `name` with ``memcpy_details`` `details`."""
    return MEMORY_KINDS.index(details_copy_memory(name, details))


def _blocks(details: str) -> float:
    """Thread blocks launched, from ``grid:x,y,z`` of ``kernel_details`` (NaN if absent)."""
    grid = _GRID.search(details)
    return float(int(grid[1]) * int(grid[2]) * int(grid[3])) if grid else np.nan


def _allocator_device(allocator: str) -> str:
    """``GPU:3`` for the device allocator ``GPU_3_bfc``; "" for any other (host) allocator."""
    match = _DEVICE_ALLOCATOR.match(allocator)
    return f"GPU:{int(match[1])}" if match else ""


# --------------------------------------------------------------------------- time


def _clock_time(value: Any) -> int | None:
    """A Task Environment time stat (epoch ns) if it is a possible one."""
    return value if isinstance(value, int) and 0 < value < TS_MAX_NS else None


def _settle_times(part: _Part, shift: int, warnings: Counter[str]) -> None:
    """Put the rows of `part` on the file's clock, in place: starts moved by `shift` (ns), `keep` narrowed to
    rows whose times are possible, negative durations set to 0 (counted).

    A start is line timestamp + offset_ps // 1000 + `shift`; int64 wraps silently, so
    the same sum in float64 decides whether it is a possible time.
    """
    line_ts = part.line_ts[part.event_line]
    offset_ns = part.columns["ts_ns"] - line_ts  # the batch's wrapped sum, undone exactly
    approx = line_ts.astype(np.float64) + offset_ns.astype(np.float64) + shift
    dur_ns = part.columns["dur_ns"]
    rows = np.flatnonzero(part.keep)
    part.keep[rows] = usable_times(possible_ts(approx[rows]), dur_ns[rows], warnings, "xspace")
    negative = part.keep & (dur_ns < 0)
    if negative.any():
        warnings["xspace: negative durations set to 0"] += int(negative.sum())
    np.maximum(dur_ns, 0, out=dur_ns)
    part.columns["ts_ns"] += shift


# --------------------------------------------------------------------------- the reader


def read_xspace(path: Path, data: bytes | None = None, jobs: int | None = None) -> TraceRead:
    """Read one ``.xplane.pb`` (or its bytes, when the caller already has them) into a `TraceRead`.

    `jobs`: processes reading its runs of lines. By default, for a large file (`PARALLEL_MIN_BYTES` of lines)
    read from disk by a process that forks its workers (`start_context`) and is not itself a worker (its pool
    uses the cores already), the cores the machine leaves idle (`idle_cores`); else one: a worker started
    otherwise would import and walk it all anew.
    """
    path = Path(path)
    with Source(path, data) as source:
        if not source.size:
            raise TraceError(path, "not an XSpace protobuf (empty file)")
        layout = walk_space(source)
        if not layout.planes and layout.used_bytes == source.size:
            raise TraceError(path, "not an XSpace protobuf (no planes)")
        file = _File(path, layout)
        units = file.units()
        if jobs is None:
            line_bytes = sum(size for unit in units for _, size in unit.lines)
            forks = multiprocessing.parent_process() is None and start_context().get_start_method() == "fork"
            jobs = idle_cores() if forks and line_bytes >= PARALLEL_MIN_BYTES else 1
        table = _Table(file)
        for rows in _unit_rows(source, file, units, jobs if data is None else 1):
            table.add(rows)
    return table.result(source.size)


def idle_cores() -> int:
    """The cores this process may run on that the 1-minute load average leaves idle, rounded up (as
    ``make -l`` judges a machine): a worker on a core another process keeps busy slows both, and the
    reader's numpy passes, memory-bound, lose more than they gain from it (benchmarks/README.md)."""
    cores = default_jobs()
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # not known here (not a Unix)
        return cores
    return max(1, min(cores, math.ceil(cores - load)))


@dataclass
class _Memory:
    """Memory-table rows of one batch: which of its events are allocator events, and their columns."""

    events: np.ndarray  # rows of the batch that are allocator events
    usable: np.ndarray  # per such event: it names a device of this file, with a possible level
    columns: dict[str, np.ndarray]  # per usable event


@dataclass
class _Part:
    """The rows of one batch of lines, before the file's clock is known."""

    line_ts: np.ndarray  # per line of the batch: its timestamp_ns
    event_line: np.ndarray  # per row: its line in the batch
    line_ids: np.ndarray  # per line of the batch: its id (the rows' stream on a device plane, else their thread)
    keep: np.ndarray  # per row: neither an aggregate nor corrupt; then also with possible times
    device_code: int  # the plane's device (-1: host)
    columns: dict[str, np.ndarray]  # the table's columns but stream and thread (`line_ids`); ts_ns and dur_ns
    # as the lines say (`_settle_times`)
    memory: _Memory | None = None


# The table's columns a batch makes, and their dtypes (codes for the categorical ones).
_PART_COLUMNS = {
    "ts_ns": np.int64,
    "dur_ns": np.int64,
    "kind": np.int8,
    "name": np.int32,
    "correlation": np.int64,
    "bytes": np.int64,
    "copy_kind": np.int8,
    "src_memory": np.int8,
    "step_id": np.int32,
    "blocks_per_sm": np.float32,
    "occupancy_pct": np.float32,
    "op": np.int32,
}


def _rows_kept(arrays: list[np.ndarray], keeps: list[np.ndarray], kept: list[int], dtype: Any) -> np.ndarray:
    """The kept rows of each batch's array (`kept` of them), one after another: copied into the column, each
    batch's array freed once copied (`arrays` is emptied)."""
    column = np.empty(sum(kept), dtype)
    at = 0
    arrays.reverse()  # popped from the end: the first batch first
    for keep, count in zip(keeps, kept, strict=True):
        values = arrays.pop()
        if count == len(values):
            column[at : at + count] = values
        else:
            np.compress(keep, values, out=column[at : at + count])
        del values
        at += count
    return column


@dataclass(frozen=True)
class _Unit:
    """A run of one plane's lines (`line_runs`), read in one piece: the work one process does at a time."""

    plane: int  # index in the layout
    lines: list[tuple[int, int]]  # (offset, size) of each line


class _File:
    """What reading any of a file's lines needs to know of the whole file: its layout, devices and clock."""

    def __init__(self, path: Path, layout: SpaceLayout) -> None:
        self.path = path
        self.layout = layout
        planes = [p.plane for p in layout.planes]
        self.device_of_plane = {i: device for i, p in enumerate(planes) if (device := _device_id(p.name))}
        self.device_labels = sorted({label for _, label in self.device_of_plane.values()})
        self.devices = {
            label: _device_info(label, _plane_stats(planes[i])) for i, (_, label) in self.device_of_plane.items()
        }
        self.task = next((_plane_stats(p) for p in planes if p.name == "Task Environment"), {})
        self._planes: dict[int, _Plane] = {}

    def units(self) -> list[_Unit]:
        """The runs of lines of every plane that has rows (device planes, host planes), in file order."""
        return [
            _Unit(index, run)
            for index, layout in enumerate(self.layout.planes)
            if index in self.device_of_plane or layout.plane.name.startswith("/host:")
            for run in line_runs(layout)
        ]

    def plane(self, index: int) -> _Plane:
        """Plane `index` of the layout, its stat metadata looked up once per process for the names read (a big
        plane has thousands of entries, and many runs of lines); each unit gets metadata of its own to learn."""
        if index not in self._planes:
            meta = self.layout.planes[index].plane
            device = self.device_of_plane.get(index)
            if device is None:
                self._planes[index] = _Plane.of(meta, None, -1, np.nan)
            else:
                sm_count = self.devices[device[1]].sm_count or np.nan
                self._planes[index] = _Plane.of(meta, device[0], self.device_labels.index(device[1]), sm_count)
        return replace(self._planes[index], metadata={})


@dataclass
class _Rows:
    """What one unit's lines give, its names and annotations coded in the order the unit met them; the
    table (`_Table.add`) recodes them in the file's order."""

    parts: list[_Part]
    names: list[str]  # event name by code
    annotations: list[str]  # ``level 0`` annotation by code
    host_name_codes: set[int]
    host_threads: list[str]  # names of every host line
    line_timestamps: list[int]  # of the lines whose events are read
    has_cpu_ops: bool
    events: int
    corrupt: int
    warnings: Counter[str]


class _Claims:
    """A file's units, largest first (one long line is a unit of its own), each claimed once by whichever reading
    process is free: this one and its workers alike, so none waits to be handed work and none is left with a big
    one at the end. (This process used to hand the units out, and could not while it read one: its worker then
    idled.) The count of units claimed is a `multiprocessing.Value` shared with the workers (`worker_pool`)."""

    def __init__(self, units: list[_Unit], context: Context) -> None:
        self.units = units
        self.order = sorted(range(len(units)), key=lambda i: -sum(size for _, size in units[i].lines))
        self._claimed = context.Value("q", 0)

    def next(self) -> int | None:
        """The index of the next unit to read, now this process's; None when every one is claimed."""
        with self._claimed.get_lock():
            at = self._claimed.value
            self._claimed.value = at + 1
        return self.order[at] if at < len(self.order) else None


# The files whose runs of lines the worker processes read, by path (set before the pool forks them), and
# their claims and the file the workers' rows go back in (given to each worker as it starts). A pool's
# workers end with the file's read.
_FILES: dict[str, _File] = {}
_CLAIMS: dict[str, tuple[_Claims, SharedFile]] = {}


def _unit_rows(source: Source, file: _File, units: list[_Unit], jobs: int) -> list[_Rows]:
    """The rows of every unit, in file order. With `jobs` > 1, ``jobs - 1`` worker processes read units too
    (`_Claims`), and only their rows' numpy columns come back, each worker's once it finds none left: sent
    unit by unit, a worker waited (0.1-0.15 s a unit) for this process, busy reading, to take them in."""
    if jobs <= 1 or len(units) < 2:
        return [_read_unit(source, file, unit) for unit in units]
    key = str(file.path)
    context = start_context()
    claims, shared = _Claims(units, context), SharedFile(context)
    _FILES[key] = file
    rows: dict[int, _Rows] = {}
    try:
        with worker_pool(jobs - 1, context, _share, (key, claims, shared)) as pool:
            theirs = [pool.submit(_read_claimed_units, key) for _ in range(jobs - 1)]
            while (i := claims.next()) is not None:
                rows[i] = _read_unit(source, file, units[i])
            for future in theirs:
                outcome = future.result()
                if isinstance(outcome, str):
                    raise TraceError(file.path, outcome)
                rows.update(outcome.open(shared))
    finally:
        del _FILES[key]
        shared.close()
    return [rows[i] for i in range(len(units))]


def _share(key: str, claims: _Claims, shared: SharedFile) -> None:
    """A worker's start: the claims on the units of the file at `key`, and the file its rows go back in."""
    _CLAIMS[key] = claims, shared


def _read_claimed_units(key: str) -> Parcel | str:
    """In a worker: the rows of every unit it claims of the file at `key`, by unit, until none is left; a
    `TraceError` comes back as its reason (it does not pickle)."""
    claims, shared = _CLAIMS[key]
    try:
        with Source(Path(key)) as source:
            file = _FILES.get(key)
            if file is None:  # a worker not forked from the reader (spawned, from a fork server): walked again here
                file = _FILES[key] = _File(Path(key), walk_space(source))
            rows: dict[int, _Rows] = {}
            while (i := claims.next()) is not None:
                rows[i] = _read_unit(source, file, claims.units[i])
            return shared.pack(rows)
    except TraceError as error:
        return error.reason


def _read_unit(source: Source, file: _File, unit: _Unit) -> _Rows:
    """The rows of one unit, read batch by batch."""
    reader = _LineReader(file, file.plane(unit.plane))
    reader.read(source, unit)
    return reader.rows()


class _LineReader:
    """One unit of a file's lines, read a batch (of events) at a time."""

    def __init__(self, file: _File, plane: _Plane) -> None:
        self.plane = plane
        self.device_labels = file.device_labels
        self.warnings: Counter[str] = Counter()
        self.names: dict[str, int] = {}  # event name -> code, in order of first appearance
        self.name_list: list[str] = []
        self.rules = _NameRules()
        self.annotations: dict[str, int] = {}  # ``level 0`` annotation -> code, in order of first appearance
        self.parts: list[_Part] = []
        self.line_timestamps: list[int] = []  # of the lines whose events are read
        self.host_threads: list[str] = []
        self.host_name_codes: set[int] = set()
        self.has_cpu_ops = False
        self.events = self.corrupt = 0

    def read(self, source: Source, unit: _Unit) -> None:
        """The rows of the unit's lines; a host plane's thread names."""
        plane = self.plane
        host = plane.device_type is None
        has_rows = plane.meta.name != "/host:metadata"
        self._read_lines(
            run_batch(
                source,
                unit.lines,
                lambda line: has_rows and _line_role(plane.device_type, line.name) is not None,
                lambda line: self.host_threads.append(line.name) if host else None,
            )
        )
        if sum(size for _, size in unit.lines) > LINE_BATCH_BYTES:
            release_free_memory()  # a long line's scratch, gone with `_read_lines`: not kept mapped

    def _read_lines(self, batch: LineBatch | None) -> None:
        """The rows of a batch of lines, a chunk of events at a time (each chunk's scratch arrays freed to the
        heap, which the next reuses)."""
        if batch is None:
            return
        self.line_timestamps.extend(line.timestamp_ns for line in batch.lines)
        line_ts = np.array([line.timestamp_ns for line in batch.lines], np.int64)
        for chunk in batch.chunks():
            self._read_batch(self.plane, chunk, line_ts)

    def rows(self) -> _Rows:
        """What the unit gave, to send back."""
        return _Rows(
            self.parts,
            self.name_list,
            list(self.annotations),
            self.host_name_codes,
            self.host_threads,
            self.line_timestamps,
            self.has_cpu_ops,
            self.events,
            self.corrupt,
            self.warnings,
        )

    def _read_batch(self, plane: _Plane, batch: LineBatch, line_ts: np.ndarray) -> None:
        """The rows of (a chunk of) a batch of lines of `plane`, whose lines are stamped `line_ts`."""
        lines = batch.lines
        events = batch.wire.events(batch.starts, batch.ends, plane.wanted_ids)
        n = len(events.md)
        self.events += n
        self.corrupt += int(events.corrupt.sum())
        if events.corrupt.any():
            self.warnings["xspace: corrupt events (bad protobuf wire data) skipped"] += int(events.corrupt.sum())
        if events.mistyped:
            self.warnings["xspace: events with fields of the wrong wire type (fields ignored)"] += events.mistyped
        if events.aggregated.any():
            self.warnings["xspace: aggregated events (num_occurrences, no timestamp) skipped"] += int(
                events.aggregated.sum()
            )
        role = np.array([_line_role(plane.device_type, line.name) for line in lines], np.int8)[batch.event_line]
        line_ids = np.array([line.id for line in lines], np.int64)
        line_id = line_ids[batch.event_line]
        name_code, unnamed, with_stats = self._names(plane, events.md)
        unnamed &= ~events.corrupt
        if unnamed.any():
            self.warnings["xspace: events whose metadata id has no entry (name left empty)"] += int(unnamed.sum())
        stream = np.flatnonzero(role == _STREAM)
        found = _FoundStats.of(plane, batch.wire, events, self.warnings)
        stats = _read_stats(plane, batch.wire, events, found, None, stream, with_stats, self.warnings, _Stats.empty(n))
        columns = self._columns(plane, role, name_code, stream, stats)
        on_device = plane.device_code >= 0
        columns["name"] = name_code
        columns["ts_ns"] = line_ts[batch.event_line] + events.offset_ps // 1000
        columns["dur_ns"] = events.duration_ps // 1000
        part = _Part(
            line_ts,
            batch.event_line.astype(np.int32),
            line_ids,
            ~(events.aggregated | events.corrupt),
            plane.device_code,
            columns,
        )
        if not on_device:
            part.memory = self._read_memory(plane, batch.wire, events, found, name_code, line_id, with_stats)
        self.parts.append(part)

    def _names(self, plane: _Plane, md: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[int, Any]]]:
        """Name code of every event, which events have no metadata entry, and the metadata with stats
        (id, metadata) among theirs. An event whose metadata id has no entry gets the empty name."""
        inverse, ids = pd.factorize(md)
        codes = np.zeros(len(ids), np.int32)
        unnamed = np.zeros(len(ids), bool)
        with_stats = []
        for j, md_id in enumerate(ids.tolist()):
            if md_id not in plane.metadata:
                meta = plane.meta.event_metadata.get(md_id)
                name = "" if meta is None else meta.name
                if name not in self.names:
                    self.names[name] = len(self.name_list)
                    self.name_list.append(name)
                plane.metadata[md_id] = (
                    self.names[name],
                    meta is None,
                    meta if meta is not None and meta.stats else None,
                )
            codes[j], unnamed[j], meta = plane.metadata[md_id]
            if meta is not None:
                with_stats.append((md_id, meta))
        return codes[inverse], unnamed[inverse], with_stats

    def _columns(
        self, plane: _Plane, role: np.ndarray, name_code: np.ndarray, stream: np.ndarray, stats: _Stats
    ) -> dict[str, np.ndarray]:
        """The batch's kind, correlation, bytes, copy, step, kernel and op columns."""
        n = len(role)
        names = self.name_list
        kind = np.full(n, KINDS.index("other"), np.int8)
        copy_kind = np.full(n, -1, np.int8)
        src_memory = np.full(n, -1, np.int8)
        n_bytes = np.full(n, -1, np.int64)
        occupancy = np.full(n, np.nan)
        blocks_per_sm = np.full(n, np.nan)
        step_id = np.full(n, -1, np.int64)

        # Device streams.
        stream_kind = self.rules.activity_kind(name_code[stream], names)
        kind[stream] = stream_kind
        copies = stream[stream_kind == KINDS.index("memcpy")]
        memsets = stream[stream_kind == KINDS.index("memset")]
        kernels = stream[stream_kind == KINDS.index("kernel")]
        copy_kind[copies] = self.rules.copy_kind(name_code[copies], names)
        n_bytes[copies] = _per_distinct(stats.strings["memcpy_details"][copies], details_bytes, -1, np.int64)
        for code in np.unique(name_code[copies]).tolist():  # MemcpyH2D, MemcpyD2H, ...: the host side differs
            rows = copies[name_code[copies] == code]
            src_memory[rows] = _per_distinct(
                stats.strings["memcpy_details"][rows],
                partial(_memory_code, names[code]),
                MEMORY_KINDS.index("unknown"),
                np.int8,
            )
        n_bytes[memsets] = _per_distinct(stats.strings["Memset_details"][memsets], details_bytes, -1, np.int64)
        details = stats.strings["kernel_details"][kernels]
        theoretical = stats.floats["theoretical_occupancy_pct"][kernels]
        theoretical = valid_occupancy(theoretical, self.warnings, "xspace")  # the stat if possible, else details'
        fallback = np.isnan(theoretical)
        from_details = _per_distinct(details[fallback], details_occupancy, np.nan, np.float64)
        theoretical[fallback] = valid_occupancy(from_details, self.warnings, "xspace")
        occupancy[kernels] = theoretical
        blocks_per_sm[kernels] = _per_distinct(details, _blocks, np.nan, np.float64) / plane.sm_count
        annotation = np.full(n, -1, np.int32)
        annotation[stream] = self._annotation_codes(stats.strings["level 0"][stream])

        # Other device lines.
        kind[role == _DEVICE_KERNEL] = KINDS.index("kernel")
        kind[role == _DEVICE_ANNOTATION] = KINDS.index("annotation")
        device_steps = np.flatnonzero(role == _DEVICE_STEPS)
        kind[device_steps] = KINDS.index("step")
        step_id[device_steps] = self.rules.step_number(name_code[device_steps], names)

        # Host events.
        host = np.flatnonzero(role == _HOST)
        kind[host] = self.rules.host_kind(name_code[host], names)
        marker = host[stats.present["step_num"][host]]
        marker = marker[self.rules.step_marker(name_code[marker], names)]
        kind[marker] = KINDS.index("step")
        step_id[marker] = stats.ints["step_num"][marker]
        api = host[stats.present["correlation_id"][host]]
        kind[api] = np.where(self.rules.sync_api(name_code[api], names), KINDS.index("sync"), KINDS.index("runtime"))
        self.host_name_codes.update(np.flatnonzero(np.bincount(name_code[host], minlength=1)).tolist())
        self.has_cpu_ops |= bool((kind[host] == KINDS.index("cpu_op")).any())
        return {
            "kind": kind,
            "correlation": np.where(stats.present["correlation_id"], stats.ints["correlation_id"], -1),
            "bytes": n_bytes,
            "copy_kind": copy_kind,
            "src_memory": src_memory,
            "step_id": narrowed_ints(step_id, np.int32),  # the table's type (8 bytes a row less to keep)
            "blocks_per_sm": blocks_per_sm.astype(np.float32),
            "occupancy_pct": occupancy.astype(np.float32),
            "op": annotation,
        }

    def _annotation_codes(self, annotations: np.ndarray) -> np.ndarray:
        """Per event, the code of its ``level 0`` annotation (-1: none)."""
        if not len(annotations):
            return np.zeros(0, np.int32)
        codes, distinct = pd.factorize(annotations)
        known = [self.annotations.setdefault(a, len(self.annotations)) for a in distinct]
        return np.array([*known, -1], np.int32)[codes]

    def _read_memory(
        self,
        plane: _Plane,
        wire: Wire,
        events: EventFields,
        found: _FoundStats,
        name_code: np.ndarray,
        line_id: np.ndarray,
        with_stats: list[tuple[int, Any]],
    ) -> _Memory | None:
        """Memory-table rows of the batch's allocator events (a host plane's); None if it has none.

        The device is ``GPU:<n>`` for allocator ``GPU_<n>_bfc``; without an allocator
        name (TPU runtime), the ``index_on_host`` / ``device_ordinal`` stat names it
        among this file's device planes. Host allocators (``gpu_host_bfc``, CPU) are
        not device memory. Their stats are read from these few events only.
        """
        sign = np.zeros(len(self.name_list), np.int64)  # by name code
        for name, direction in _MEMORY_EVENTS.items():
            if name in self.names:
                sign[self.names[name]] = direction
        rows = np.flatnonzero(sign[name_code] != 0)
        if not rows.size:
            return None
        used = set(events.md[rows].tolist())
        with_stats = [(md, meta) for md, meta in with_stats if md in used]
        stats = _read_stats(
            plane,
            wire,
            events,
            found,
            rows,
            np.arange(len(rows)),
            with_stats,
            Counter(),  # damage to these events' stats is counted with the table's
            _Stats.empty(len(rows), _MEMORY_INT_STATS, _MEMORY_FLOAT_STATS, _MEMORY_STR_STATS),
        )
        labels = {label: code for code, label in enumerate(self.device_labels)}
        allocators = stats.strings["allocator_name"]
        device = _per_distinct(allocators, lambda name: labels.get(_allocator_device(name), -1), -1, np.int64)
        device_type = "TPU" if any(d.startswith("TPU:") for d in self.device_labels) else "GPU"
        for index in ("index_on_host", "device_ordinal"):  # no allocator name: the TPU runtime's
            by_index = (device < 0) & stats.present[index] & pd.isna(allocators)
            device[by_index] = [labels.get(f"{device_type}:{i}", -1) for i in stats.ints[index][by_index].tolist()]
        ok = (device >= 0) & stats.present["bytes_allocated"]
        ok &= (stats.ints["bytes_allocated"] >= 0) & ~(
            stats.present["allocation_bytes"] & (stats.ints["allocation_bytes"] < 0)
        )

        def known(name: str) -> np.ndarray:
            return np.where(stats.present[name], stats.ints[name], -1)[ok]

        delta = np.where(stats.present["allocation_bytes"], stats.ints["allocation_bytes"], 0) * sign[name_code[rows]]
        columns = {
            "device": np.array(self.device_labels, object)[device[ok]],
            "thread": line_id[rows][ok],
            "allocated": stats.ints["bytes_allocated"][ok],
            "stack_reserved": known("bytes_reserved"),
            "available": known("bytes_available"),
            "fragmentation": stats.floats["fragmentation"][ok],
            "delta": delta[ok],
            "addr": known("addr"),
            "op": stats.strings["tf_op"][ok],
        }
        return _Memory(rows, ok, columns)


class _Table:
    """A file's rows, unit by unit, their names and annotations coded in the file's order; then its tables."""

    def __init__(self, file: _File) -> None:
        self.path = file.path
        self.layout = file.layout
        self.devices = file.devices
        self.device_labels = file.device_labels
        self.task = file.task
        space = file.layout.space
        self.warnings: Counter[str] = Counter(
            f"xspace: profiler reported: {m}" for m in (*space.errors, *space.warnings)
        )
        self.names: dict[str, int] = {}  # event name -> code, in order of first appearance in the file
        self.name_list: list[str] = []
        self.annotations: dict[str, int] = {}  # ``level 0`` annotation -> code, likewise
        self.parts: list[_Part] = []
        self.line_timestamps: list[int] = []
        self.host_threads: list[str] = []
        self.host_name_codes: set[int] = set()
        self.has_cpu_ops = False
        self.events = self.corrupt = 0

    def add(self, rows: _Rows) -> None:
        """The rows of the file's next unit, recoded: the codes are those one reader of every unit in turn gives."""
        for name in rows.names:
            if name not in self.names:
                self.names[name] = len(self.name_list)
                self.name_list.append(name)
        name_code = np.array([self.names[name] for name in rows.names], np.int32)
        annotation_code = np.array(
            [*(self.annotations.setdefault(a, len(self.annotations)) for a in rows.annotations), -1], np.int32
        )
        for part in rows.parts:
            part.columns["name"] = name_code[part.columns["name"]]
            part.columns["op"] = annotation_code[part.columns["op"]]
        self.parts.extend(rows.parts)
        self.host_name_codes.update(name_code[list(rows.host_name_codes)].tolist())
        self.line_timestamps.extend(rows.line_timestamps)
        self.host_threads.extend(rows.host_threads)
        self.has_cpu_ops |= rows.has_cpu_ops
        self.events += rows.events
        self.corrupt += rows.corrupt
        self.warnings.update(rows.warnings)

    def result(self, file_bytes: int) -> TraceRead:
        """The `TraceRead` of the events read: the clock decided, unusable rows dropped, the tables made."""
        path = self.path
        if self.events and self.corrupt == self.events:  # nothing left to read: not a trace with a few damaged events
            raise TraceError(path, f"corrupt XSpace event data (all {self.events:,} events are bad protobuf wire data)")
        start_time = _clock_time(self.task.get("profile_start_time"))
        stop_time = _clock_time(self.task.get("profile_stop_time"))
        line_ts = np.asarray(self.line_timestamps, np.int64)
        # A line stamped at an impossible time (its events are skipped) does not decide the clock of the others.
        sane = line_ts[possible_ts(line_ts)]
        relative = start_time is not None and bool((sane < start_time).all())
        # Lines already on the epoch clock (unsaved captures) stay as they are; 10**17 ns is in 1973.
        epoch = relative or bool(sane.size and sane.min() > 10**17)
        shift = (start_time or 0) if relative else 0
        for part in self.parts:
            _settle_times(part, shift, self.warnings)
            if epoch and start_time is not None and stop_time is not None and stop_time > start_time:
                ts_ns, dur_ns = part.columns["ts_ns"], part.columns["dur_ns"]
                part.keep &= near_window(ts_ns, dur_ns, part.keep, start_time, stop_time, self.warnings, "xspace")
        release_free_memory()  # the heap the lines' decoding left free (kept while reading: no page faults anew)
        memory = self._memory_table()
        columns, n = self._table_columns()
        self.parts.clear()
        table = make_event_table(columns, n)
        del columns  # what the table did not take as it is (codes narrowed): gone before the duplicate check
        release_free_memory()
        table = drop_duplicates(table, self.warnings, "xspace", in_line_order=True)
        release_free_memory()  # the duplicate check's hashes: the analyses come next
        if self.layout.used_bytes < file_bytes:
            if table.empty:
                raise TraceError(path, NOT_XSPACE)
            self.warnings[truncation_warning(path, self.layout.used_bytes, file_bytes)] += 1

        space = self.layout.space
        host_names = {self.name_list[code] for code in self.host_name_codes}
        return TraceRead(
            events=table,
            input=InputInfo(path=str(path), format="xspace", host=self._host_label(), rank=None, events=len(table)),
            framework=xprof_framework(self.host_threads, host_names, self.has_cpu_ops),
            devices=self.devices,
            metadata={
                "planes": [p.plane.name for p in self.layout.planes],
                "hostnames": list(space.hostnames),
                "profile_start_time_ns": start_time,
                "profile_stop_time_ns": stop_time,
                "clock": "epoch" if epoch else "relative",
                "errors": list(space.errors),
                "warnings": list(space.warnings),
            },
            warnings=self.warnings,
            memory=memory,
        )

    def _table_columns(self) -> tuple[dict[str, Any], int]:
        """The event table's columns from the batches' kept rows (each batch's column freed once joined)."""
        keeps = [part.keep for part in self.parts]
        kept = [int(keep.sum()) for keep in keeps]
        n = sum(kept)
        columns: dict[str, Any] = {}
        for name, dtype in _PART_COLUMNS.items():
            columns[name] = _rows_kept([part.columns.pop(name) for part in self.parts], keeps, kept, dtype)
            release_free_memory()  # the batches' pieces of the column, so the next column can reuse their pages
        for name, on_device in (("stream", True), ("thread", False)):  # the rows' line ids, -1 on the other planes
            column = columns[name] = np.full(n, -1, np.int64)
            at = 0
            for part, keep, count in zip(self.parts, keeps, kept, strict=True):
                if (part.device_code >= 0) == on_device:
                    lines = part.event_line if count == len(keep) else part.event_line[keep]
                    column[at : at + count] = part.line_ids[lines]
                at += count
        device = np.repeat(np.array([part.device_code for part in self.parts], np.int16), kept)
        columns["device"] = pd.Categorical.from_codes(device, self.device_labels)
        columns["kind"] = pd.Categorical.from_codes(columns["kind"], KINDS)
        columns["copy_kind"] = pd.Categorical.from_codes(columns["copy_kind"], COPY_KINDS)
        columns["src_memory"] = pd.Categorical.from_codes(columns["src_memory"], MEMORY_KINDS)
        columns["name"] = pd.Categorical.from_codes(columns["name"], self.name_list)
        columns["host"] = pd.Categorical.from_codes(np.zeros(n, np.int8), [self._host_label()])
        types, type_codes = np.unique(np.array([_op_type(a) for a in self.annotations], object), return_inverse=True)
        columns["op"] = pd.Categorical.from_codes(np.append(type_codes, -1)[columns["op"]], types)
        return columns, n

    def _memory_table(self) -> pd.DataFrame:
        """The memory table (model.py) of the kept allocator events."""
        parts = [(part, part.memory) for part in self.parts if part.memory is not None]
        if not any(part.keep[memory.events].any() for part, memory in parts):
            return make_memory_table()
        pieces: list[dict[str, np.ndarray]] = []
        for part, memory in parts:
            kept = part.keep[memory.events[memory.usable]]
            piece = {name: values[kept] for name, values in memory.columns.items()}
            piece["ts_ns"] = part.columns["ts_ns"][memory.events[memory.usable][kept]]
            pieces.append(piece)
        columns: dict[str, Any] = {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}
        columns["device"] = pd.Categorical(columns["device"])
        columns["op"] = pd.Categorical(columns["op"])
        return make_memory_table(columns)

    def _host_label(self) -> str:
        """The XSpace's first host name, else the file name without ``.xplane.pb``."""
        hostnames = self.layout.space.hostnames
        if len(hostnames) and hostnames[0]:
            return str(hostnames[0])
        return self.path.name.removesuffix(".xplane.pb")
