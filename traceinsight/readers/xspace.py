"""Read TensorFlow / JAX / XLA profiler output (XSpace ``.xplane.pb``) into the event table.

Why the events are decoded by hand: touching an XEvent from Python costs ~0.2 µs for
the wrapper plus ~0.1 µs per field, i.e. under 1 M events/s before a single stat is
read. So upb parses the file with a variant of the schema whose ``XLine.events`` is
``repeated bytes`` (same wire format): planes, lines and metadata come out as
messages, each event as a bytes slice, and `_Wire.scan` decodes the fields of all
events (then of the stats we need) at once with numpy.

Mapping (model.py has the columns and kinds; the name rules live in `_classify`, shared
with the Kineto and XProf-JSON readers):

* ``/device:GPU:N`` (NVIDIA and ROCm): ``Stream #...`` lines are device activity:
  ``Memcpy{H2D,D2H,D2D,P2P,Other}`` -> memcpy, ``Memset*`` -> memset, CUPTI's
  bookkeeping records (``MemoryAlloc``, ``MemoryFree``, ...) -> other, the rest ->
  kernel; stream = line id, correlation = ``correlation_id``. Copies get bytes and the
  host-side memory kind from ``memcpy_details``, memsets bytes from ``Memset_details``,
  kernels occupancy (``theoretical_occupancy_pct`` stat, else ``occ_pct`` of
  ``kernel_details``) and blocks per SM (``grid`` / the plane's ``core_count``).
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
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from traceinsight.model import (
    COPY_KINDS,
    KINDS,
    MEMORY_KINDS,
    DeviceInfo,
    InputInfo,
    TraceError,
    TraceRead,
    make_event_table,
    make_memory_table,
)
from traceinsight.readers import xplane_schema
from traceinsight.readers._classify import (
    STEP_MARKER_PATTERN,
    details_bytes,
    details_copy_memory,
    details_occupancy,
    device_activity_kind,
    is_sync_api,
    per_category,
    step_number,
    xprof_framework,
    xprof_host_kind,
)
from traceinsight.readers._classify import copy_kind as _copy_kind
from traceinsight.readers._repair import (
    TS_MAX_NS,
    drop_duplicates,
    near_window,
    possible_ts,
    usable_times,
    valid_occupancy,
)

MAX_PROTOBUF_BYTES = 2**31 - 1  # protobuf refuses messages of 2 GiB and more

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

# Field numbers of XEvent and XStat (tsl/profiler/protobuf/xplane.proto).
_EV_METADATA, _EV_OFFSET, _EV_DURATION, _EV_STATS, _EV_OCCURRENCES = 1, 2, 3, 4, 5
_ST_METADATA, _ST_DOUBLE, _ST_UINT, _ST_INT, _ST_STR, _ST_REF = 1, 2, 3, 4, 5, 7
# The wire type each field must have (varint 0, fixed64 1, length-delimited 2); any other is ignored, as protobuf does.
_EV_WIRE = np.array([-1, 0, 0, 0, 2, 0])  # by XEvent field number
_ST_VALUE_WIRE = np.array([-1, -1, 1, 0, 0, 2, 2, 0])  # by XStat field number: double, uint64, int64, str, bytes, ref
_PAD = 16
_BAD_VARINT = 1 << 40  # the "size" of a varint over 10 bytes: runs past any message, so it is caught as such
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@cache
def _space_class() -> Any:
    """The XSpace message class with ``XLine.events`` declared ``repeated bytes``."""
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
    return xplane_schema.get_message_class(pool.FindMessageTypeByName(f"{proto.package}.XSpace"))


# --------------------------------------------------------------------------- wire decoding


@dataclass
class _Fields:
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


class _Wire:
    """Protobuf decoding of many messages at once, over the concatenated event bytes."""

    def __init__(self, messages: list[bytes]) -> None:
        self.raw = b"".join([*messages, bytes(_PAD)])  # zero bytes at the end: reads just past a message stay inside
        self.buf = np.frombuffer(self.raw, np.uint8)

    def varints(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
        """The varint at each position: (values as uint64, sizes in bytes; `_BAD_VARINT` for one over 10 bytes).

        Goes byte by byte over the shrinking set of varints not yet ended, so the
        common one-byte varints (tags, small ids) cost one gather.
        """
        byte = self.buf[pos]
        value = byte.astype(np.uint64)
        todo = np.flatnonzero(byte >= 0x80)
        if not todo.size:
            return value, 1
        size = np.ones(len(pos), np.int64)
        acc, at = value[todo] & np.uint64(0x7F), pos[todo]
        for k in range(1, 10):
            at = at + 1
            byte = self.buf[at]
            acc |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            going = byte >= 0x80
            if not going.any():
                value[todo], size[todo] = acc, k + 1
                return value, size
            done = ~going
            value[todo[done]], size[todo[done]] = acc[done], k + 1
            todo, acc, at = todo[going], acc[going], at[going]
        size[todo] = _BAD_VARINT
        return value, size

    def scan(self, starts: np.ndarray, ends: np.ndarray) -> _Fields:
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
            return _Fields(none, none, none.astype(np.uint8), none.astype(np.uint64), none, corrupt)
        msg, number, wire, value, length = (np.concatenate(column) for column in zip(*parts, strict=True))
        if corrupt.any():  # fields read from a message before its damage was found
            good = ~corrupt[msg]
            msg, number, wire, value, length = msg[good], number[good], wire[good], value[good], length[good]
        return _Fields(msg, number, wire.astype(np.uint8), value, length, corrupt)


# --------------------------------------------------------------------------- planes and lines


@dataclass
class _Lines:
    """The lines whose events become rows, in file order, and their serialized events."""

    plane: list[int]  # index into space.planes
    role: list[int]
    line_id: list[int]
    timestamp_ns: list[int]
    count: list[int]
    events: list[bytes]


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


def _collect_lines(space: Any) -> tuple[_Lines, dict[int, str]]:
    """The lines to read and the device id of each device plane (by plane index)."""
    lines = _Lines([], [], [], [], [], [])
    devices: dict[int, str] = {}
    for p, plane in enumerate(space.planes):
        device = _device_id(plane.name)
        if device is None and (not plane.name.startswith("/host:") or plane.name == "/host:metadata"):
            continue
        if device is not None:
            devices[p] = device[1]
        for line in plane.lines:
            role = _line_role(device[0] if device else None, line.name)
            events = line.events
            if role is None or not events:
                continue
            lines.plane.append(p)
            lines.role.append(role)
            lines.line_id.append(line.id)
            lines.timestamp_ns.append(line.timestamp_ns)
            lines.count.append(len(events))
            lines.events.extend(events)
    return lines, devices


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


# --------------------------------------------------------------------------- names


def _event_names(
    space: Any, event_plane: np.ndarray, event_md: np.ndarray
) -> tuple[np.ndarray, list[str], np.ndarray, list[tuple[int, int, Any]]]:
    """Name code of every event, the names, which events have no metadata entry, and the metadata with stats.

    An event whose metadata id has no entry gets the empty name.
    """
    local: list[str] = []
    segments: list[tuple[np.ndarray, np.ndarray, int]] = []
    with_stats: list[tuple[int, int, Any]] = []
    unnamed = np.zeros(len(event_md), bool)
    for p in np.flatnonzero(np.bincount(event_plane)).tolist():
        rows = np.flatnonzero(event_plane == p)
        inverse, ids = pd.factorize(event_md[rows])
        metadata = space.planes[p].event_metadata
        metas = [metadata.get(md) for md in ids.tolist()]
        segments.append((rows, inverse, len(local)))
        local.extend("" if m is None else m.name for m in metas)
        unnamed[rows] = np.array([m is None for m in metas], bool)[inverse]
        with_stats.extend((p, md, m) for md, m in zip(ids.tolist(), metas, strict=True) if m is not None and m.stats)
    local_codes, names = pd.factorize(np.array(local, dtype=object))
    codes = np.zeros(len(event_md), np.int64)
    for rows, inverse, offset in segments:
        codes[rows] = local_codes[offset + inverse]
    return codes, [str(name) for name in names], unnamed, with_stats


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
        is_int = (field == _ST_INT) | (field == _ST_UINT)
        if name in self.ints:
            ok = is_int
            self.ints[name][rows[ok]] = value[ok].view(np.int64)
        else:
            ok = is_int | (field == _ST_DOUBLE)
            as_int = value[ok].view(np.int64).astype(np.float64)
            self.floats[name][rows[ok]] = np.where(is_int[ok], as_int, value[ok].view(np.float64))
        self.present[name][rows[ok]] = True


def _read_stats(
    space: Any,
    wire: _Wire,
    events: _Fields,
    event_plane: np.ndarray,
    event_md: np.ndarray,
    string_rows: np.ndarray,
    with_stats: list[tuple[int, int, Any]],
    warnings: Counter[str],
    stats: _Stats | None = None,
) -> _Stats:
    """The wanted stats of every event (those `stats` has, empty, else the table's); string stats only on
    `string_rows`. Corrupt stats are ignored (counted)."""
    stats = stats or _Stats.empty(len(event_md))
    want_string = np.zeros(len(event_md), bool)
    want_string[string_rows] = True

    # Stats on the event metadata first (rare: TPU XLA Ops), so the events' own stats overwrite them.
    for p, md, meta in with_stats:
        stat_names = space.planes[p].stat_metadata
        for stat in meta.stats:
            name = _ref_name(stat_names, stat.metadata_id)
            if name in stats.present:
                rows = np.flatnonzero((event_plane == p) & (event_md == md))
                stats.put(
                    name, rows[want_string[rows]] if name in stats.strings else rows, _stat_value(stat, stat_names)
                )

    is_stat = (events.number == _EV_STATS) & (events.wire == _EV_WIRE[_EV_STATS])
    stat_event = events.msg[is_stat]
    starts = events.value[is_stat].astype(np.int64)
    ends = starts + events.length[is_stat]
    # The stat metadata ids: writers put field 1 first; the generic scan takes any other layout.
    stat_md = np.zeros(len(starts), np.int64)
    usual = (wire.buf[starts] == (_ST_METADATA << 3)) & (ends - starts > 1)
    stat_md[usual] = wire.varints(starts[usual] + 1)[0].view(np.int64)
    unusual = np.flatnonzero(~usual)
    corrupt = 0
    if unusual.size:
        fields = wire.scan(starts[unusual], ends[unusual])
        stat_md[unusual] = np.where(fields.corrupt, -1, fields.last(_ST_METADATA, unusual.size)[0].view(np.int64))
        corrupt += int(fields.corrupt.sum())

    # Which stats are wanted: resolve each plane's distinct stat ids to names.
    chosen: list[np.ndarray] = []
    chosen_names: list[tuple[int, str, int]] = []  # (plane, name, how many) in `chosen` order
    stat_plane = event_plane[stat_event]
    for p in np.flatnonzero(np.bincount(stat_plane)).tolist():
        in_plane = np.flatnonzero(stat_plane == p)
        inverse, ids = pd.factorize(stat_md[in_plane])
        for j, md in enumerate(ids.tolist()):
            name = _ref_name(space.planes[p].stat_metadata, md)
            if name in stats.present:
                sel = in_plane[inverse == j]
                if name in stats.strings:
                    sel = sel[want_string[stat_event[sel]]]
                chosen.append(sel)
                chosen_names.append((p, name, len(sel)))
    sel = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
    fields = wire.scan(starts[sel], ends[sel])
    corrupt += int(fields.corrupt.sum())
    if corrupt:
        warnings["xspace: corrupt event stats (bad protobuf wire data) ignored"] += corrupt
    if not chosen:
        return stats
    # The oneof: one value field per stat, of its own wire type.
    is_value = (fields.number > _ST_METADATA) & (fields.number < len(_ST_VALUE_WIRE))
    is_value[is_value] = fields.wire[is_value] == _ST_VALUE_WIRE[fields.number[is_value]]
    value_field = np.zeros(len(sel), np.int64)
    value = np.zeros(len(sel), np.uint64)
    length = np.zeros(len(sel), np.int64)
    holder = fields.msg[is_value]
    value_field[holder], value[holder], length[holder] = (
        fields.number[is_value],
        fields.value[is_value],
        fields.length[is_value],
    )
    first = 0
    for p, name, count in chosen_names:
        part = slice(first, first + count)
        first += count
        rows = stat_event[sel[part]]
        if name not in stats.strings:
            stats.put_wire(name, rows, value_field[part], value[part])
            continue
        texts = _texts(wire, space.planes[p].stat_metadata, value_field[part], value[part], length[part])
        ok = pd.notna(texts)
        stats.strings[name][rows[ok]] = texts[ok]
        stats.present[name][rows[ok]] = True
    return stats


@dataclass
class _EventColumns:
    """Per event: its plane, metadata id, line id, name code and start (ns)."""

    plane: np.ndarray
    md: np.ndarray
    line_id: np.ndarray
    name_code: np.ndarray
    ts_ns: np.ndarray

    def take(self, rows: np.ndarray) -> _EventColumns:
        columns = (self.plane, self.md, self.line_id, self.name_code, self.ts_ns)
        return _EventColumns(*(values[rows] for values in columns))


def _read_memory(
    space: Any,
    wire: _Wire,
    events: _Fields,
    every: _EventColumns,
    host: np.ndarray,
    names: list[str],
    with_stats: list[tuple[int, int, Any]],
    devices: list[str],
) -> pd.DataFrame:
    """The memory table (model.py) of the allocator events among the `host` rows (kept host events).

    The device is ``GPU:<n>`` for allocator ``GPU_<n>_bfc``; without an allocator
    name (TPU runtime), the ``index_on_host`` / ``device_ordinal`` stat names it
    among this file's device planes. Host allocators (``gpu_host_bfc``, CPU) are
    not device memory. Their stats are read from these few events only.
    """
    sign = np.zeros(len(names) + 1, np.int64)  # by name code; the last for code -1
    for name, direction in _MEMORY_EVENTS.items():
        if name in names:  # names are distinct: one code each
            sign[names.index(name)] = direction
    rows = host[sign[every.name_code[host]] != 0]
    if not rows.size:
        return make_memory_table()
    at = np.full(len(every.ts_ns), -1, np.int64)
    at[rows] = np.arange(len(rows))
    fields = at[events.msg] >= 0
    mine = _Fields(
        at[events.msg[fields]],
        events.number[fields],
        events.wire[fields],
        events.value[fields],
        events.length[fields],
        events.corrupt[rows],
    )
    chosen = every.take(rows)
    used = set(zip(chosen.plane.tolist(), chosen.md.tolist(), strict=True))
    stats = _read_stats(
        space,
        wire,
        mine,
        chosen.plane,
        chosen.md,
        np.arange(len(rows)),
        [(p, md, meta) for p, md, meta in with_stats if (p, md) in used],
        Counter(),  # damage to these events' stats is counted with the table's
        _Stats.empty(len(rows), _MEMORY_INT_STATS, _MEMORY_FLOAT_STATS, _MEMORY_STR_STATS),
    )
    device = _per_distinct(stats.strings["allocator_name"], _allocator_device, "", object)
    device_type = "TPU" if any(d.startswith("TPU:") for d in devices) else "GPU"
    for index in ("index_on_host", "device_ordinal"):  # no allocator name: the TPU runtime's
        by_index = (device == "") & stats.present[index] & pd.isna(stats.strings["allocator_name"])
        device[by_index] = [f"{device_type}:{i}" for i in stats.ints[index][by_index].tolist()]
    ok = np.isin(device, devices) & stats.present["bytes_allocated"]
    ok &= (stats.ints["bytes_allocated"] >= 0) & ~(
        stats.present["allocation_bytes"] & (stats.ints["allocation_bytes"] < 0)
    )

    def known(name: str) -> np.ndarray:
        return np.where(stats.present[name], stats.ints[name], -1)[ok]

    delta = np.where(stats.present["allocation_bytes"], stats.ints["allocation_bytes"], 0) * sign[chosen.name_code]
    return make_memory_table(
        {
            "ts_ns": chosen.ts_ns[ok],
            "device": pd.Categorical(device[ok]),
            "thread": chosen.line_id[ok],
            "allocated": stats.ints["bytes_allocated"][ok],
            "stack_reserved": known("bytes_reserved"),
            "available": known("bytes_available"),
            "fragmentation": stats.floats["fragmentation"][ok],
            "delta": delta[ok],
            "addr": known("addr"),
            "op": pd.Categorical(stats.strings["tf_op"][ok]),
        }
    )


def _allocator_device(allocator: str) -> str:
    """``GPU:3`` for the device allocator ``GPU_3_bfc``; "" for any other (host) allocator."""
    match = _DEVICE_ALLOCATOR.match(allocator)
    return f"GPU:{int(match[1])}" if match else ""


def _texts(wire: _Wire, stat_names: Any, field: np.ndarray, value: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The strings of string stats (inline ``str_value`` or interned ``ref_value``), each decoded once."""
    texts = np.full(len(field), None, object)
    refs = np.flatnonzero(field == _ST_REF)
    codes, distinct = pd.factorize(value[refs])
    texts[refs] = np.array([_ref_name(stat_names, ref) for ref in distinct.tolist()], object)[codes]
    inline = np.flatnonzero(field == _ST_STR)
    spans = zip(value[inline].tolist(), length[inline].tolist(), strict=True)
    codes, distinct = pd.factorize(np.array([wire.raw[start : start + n] for start, n in spans], object))
    texts[inline] = np.array([raw.decode("utf-8", "replace") for raw in distinct], object)[codes]
    return texts


def _per_distinct(values: np.ndarray, rule: Callable[[str], Any], missing: Any, dtype: Any) -> np.ndarray:
    """``rule(value)`` per row, evaluated once per distinct value; rows without one (None) get `missing`."""
    codes, distinct = pd.factorize(values)
    return np.array([*(rule(v) for v in distinct), missing], dtype)[codes]


def _stream_ops(annotations: np.ndarray, stream: np.ndarray) -> pd.Categorical:
    """Per event, the op type its ``level 0`` annotation names (device stream events only; else NaN)."""
    codes = np.full(len(annotations), -1, np.int32)
    distinct_codes, distinct = pd.factorize(annotations[stream])  # None: -1
    types, type_codes = np.unique(np.array([_op_type(a) for a in distinct], dtype=object), return_inverse=True)
    codes[stream] = np.append(type_codes, -1)[distinct_codes]
    return pd.Categorical.from_codes(codes, types)


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


# --------------------------------------------------------------------------- damage


def _count_damage(events: _Fields, warnings: Counter[str]) -> None:
    """Count corrupt events (skipped) and events with fields of the wrong wire type (those fields ignored)."""
    if events.corrupt.any():
        warnings["xspace: corrupt events (bad protobuf wire data) skipped"] += int(events.corrupt.sum())
    known = events.number < len(_EV_WIRE)
    expected = _EV_WIRE[np.where(known, events.number, 0)]
    mistyped = known & (expected >= 0) & (events.wire != expected)
    if mistyped.any():
        warnings["xspace: events with fields of the wrong wire type (fields ignored)"] += len(
            np.unique(events.msg[mistyped])
        )


def _clock_time(value: Any) -> int | None:
    """A Task Environment time stat (epoch ns) if it is a possible one."""
    return value if isinstance(value, int) and 0 < value < TS_MAX_NS else None


def _times(
    line_ts: np.ndarray,
    offset_ps: np.ndarray,
    duration_ps: np.ndarray,
    shift: int,
    keep: np.ndarray,
    warnings: Counter[str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start and duration (ns) of every event, and `keep` narrowed to events whose times are possible.

    start = line timestamp + offset_ps // 1000 + `shift`; int64 wraps silently, so
    the same sum in float64 decides whether it is a possible time. Negative
    durations become 0 (counted).
    """
    offset_ns = offset_ps // 1000
    ts_ns = line_ts + offset_ns + shift
    approx = line_ts.astype(np.float64) + offset_ns.astype(np.float64) + shift
    dur_ns = duration_ps // 1000
    rows = np.flatnonzero(keep)
    keep = keep.copy()
    keep[rows] = usable_times(possible_ts(approx[rows]), dur_ns[rows], warnings, "xspace")
    negative = keep & (dur_ns < 0)
    if negative.any():
        warnings["xspace: negative durations set to 0"] += int(negative.sum())
    return ts_ns, np.maximum(dur_ns, 0), keep


# --------------------------------------------------------------------------- the reader


def _read_bytes(path: Path, data: bytes | None) -> bytes:
    """The file's bytes, refusing what protobuf cannot parse."""
    try:
        size = len(data) if data is not None else path.stat().st_size
        if size > MAX_PROTOBUF_BYTES:
            raise TraceError(path, f"XSpace file is {size:,} bytes; protobuf cannot parse 2 GiB or more")
        return data if data is not None else path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read file ({exc.strerror or exc})") from exc


def _parse(path: Path, data: bytes) -> Any:
    """The parsed XSpace, or a TraceError saying why the bytes are not one."""
    if not data:
        raise TraceError(path, "not an XSpace protobuf (empty file)")
    space = _space_class()()
    try:
        space.ParseFromString(data)
    except DecodeError as exc:
        raise TraceError(path, "not an XSpace protobuf (corrupt or truncated protobuf wire format)") from exc
    if not len(space.planes):
        raise TraceError(path, "not an XSpace protobuf (no planes)")
    return space


def _host_label(path: Path, space: Any) -> str:
    """The XSpace's first host name, else the file name without ``.xplane.pb``."""
    if len(space.hostnames) and space.hostnames[0]:
        return str(space.hostnames[0])
    return path.name.removesuffix(".xplane.pb")


def read_xspace(path: Path, data: bytes | None = None) -> TraceRead:
    """Read one ``.xplane.pb`` (or its bytes, when the caller already has them) into a `TraceRead`."""
    path = Path(path)
    return _read_space(path, _parse(path, _read_bytes(path, data)))


def _read_space(path: Path, space: Any) -> TraceRead:
    """The `TraceRead` of a parsed XSpace."""
    warnings: Counter[str] = Counter(f"xspace: profiler reported: {m}" for m in (*space.errors, *space.warnings))
    lines, device_of_plane = _collect_lines(space)
    task = next((_plane_stats(p) for p in space.planes if p.name == "Task Environment"), {})
    devices = {d: _device_info(d, _plane_stats(space.planes[p])) for p, d in device_of_plane.items()}

    counts = np.asarray(lines.count, np.int64)
    n = int(counts.sum())
    lengths = np.fromiter(map(len, lines.events), np.int64, n)
    wire = _Wire(lines.events)
    ends = np.cumsum(lengths)
    events = wire.scan(ends - lengths, ends)
    event_md = events.last(_EV_METADATA, n, _EV_WIRE[_EV_METADATA])[0].view(np.int64)
    offset_ps = events.last(_EV_OFFSET, n, _EV_WIRE[_EV_OFFSET])[0].view(np.int64)
    duration_ps = events.last(_EV_DURATION, n, _EV_WIRE[_EV_DURATION])[0].view(np.int64)
    aggregated = events.last(_EV_OCCURRENCES, n, _EV_WIRE[_EV_OCCURRENCES])[1]
    if n and events.corrupt.all():  # nothing left to read: not a trace with a few damaged events
        raise TraceError(path, f"corrupt XSpace event data (all {n:,} events are bad protobuf wire data)")
    _count_damage(events, warnings)

    line_of = np.repeat(np.arange(len(counts)), counts)
    role = np.asarray(lines.role, np.int8)[line_of]
    event_plane = np.asarray(lines.plane, np.int64)[line_of]
    line_id = np.asarray(lines.line_id, np.int64)[line_of]
    name_code, names, unnamed, with_stats = _event_names(space, event_plane, event_md)
    unnamed &= ~events.corrupt
    if unnamed.any():
        warnings["xspace: events whose metadata id has no entry (name left empty)"] += int(unnamed.sum())
    stream = np.flatnonzero(role == _STREAM)
    stats = _read_stats(space, wire, events, event_plane, event_md, stream, with_stats, warnings)

    start_time, stop_time = _clock_time(task.get("profile_start_time")), _clock_time(task.get("profile_stop_time"))
    line_ts = np.asarray(lines.timestamp_ns, np.int64)
    # A line stamped at an impossible time (its events are skipped) does not decide the clock of the others.
    sane = line_ts[possible_ts(line_ts)]
    relative = start_time is not None and bool((sane < start_time).all())
    # Lines already on the epoch clock (unsaved captures) stay as they are; 10**17 ns is in 1973.
    epoch = relative or bool(sane.size and sane.min() > 10**17)
    ts_ns, dur_ns, keep = _times(
        line_ts[line_of],
        offset_ps,
        duration_ps,
        (start_time or 0) if relative else 0,
        ~(aggregated | events.corrupt),
        warnings,
    )
    if epoch and start_time is not None and stop_time is not None and stop_time > start_time:
        keep &= near_window(ts_ns, dur_ns, keep, start_time, stop_time, warnings, "xspace")

    memory = _read_memory(
        space,
        wire,
        events,
        _EventColumns(event_plane, event_md, line_id, name_code, ts_ns),
        np.flatnonzero(keep & (role == _HOST)),
        names,
        with_stats,
        sorted(set(device_of_plane.values())),
    )
    names_cat = pd.Categorical.from_codes(name_code, names)
    kind = np.full(n, KINDS.index("other"), np.int8)
    copy_kind = np.full(n, -1, np.int8)
    src_memory = np.full(n, -1, np.int8)
    n_bytes = np.full(n, -1, np.int64)
    occupancy = np.full(n, np.nan)
    blocks_per_sm = np.full(n, np.nan)
    step_id = np.full(n, -1, np.int64)

    def rule(rows: np.ndarray, fn: Callable[[str], Any], missing: Any, dtype: Any) -> np.ndarray:
        """A name rule applied to `rows`, once per distinct name among them."""
        codes = name_code[rows]
        used = np.flatnonzero(np.bincount(codes + 1, minlength=1)[1:])
        local = np.full(len(names) + 1, -1, np.int64)  # the last slot keeps code -1 (no name) at -1
        local[used] = np.arange(len(used))
        return per_category(pd.Categorical.from_codes(local[codes], [names[c] for c in used]), fn, missing, dtype)

    # Device streams.
    stream_kind = rule(stream, lambda c: KINDS.index(device_activity_kind(c)), KINDS.index("kernel"), np.int8)
    kind[stream] = stream_kind
    copies = stream[stream_kind == KINDS.index("memcpy")]
    memsets = stream[stream_kind == KINDS.index("memset")]
    kernels = stream[stream_kind == KINDS.index("kernel")]
    copy_kind[copies] = rule(copies, lambda c: COPY_KINDS.index(_copy_kind(c)), -1, np.int8)
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
    theoretical = valid_occupancy(theoretical, warnings, "xspace")  # the stat if possible, else kernel_details'
    fallback = np.isnan(theoretical)
    from_details = _per_distinct(details[fallback], details_occupancy, np.nan, np.float64)
    theoretical[fallback] = valid_occupancy(from_details, warnings, "xspace")
    occupancy[kernels] = theoretical
    sm_count = np.full(len(space.planes), np.nan)
    for p, d in device_of_plane.items():
        sm_count[p] = devices[d].sm_count or np.nan
    blocks_per_sm[kernels] = _per_distinct(details, _blocks, np.nan, np.float64) / sm_count[event_plane[kernels]]

    # Other device lines.
    kind[role == _DEVICE_KERNEL] = KINDS.index("kernel")
    kind[role == _DEVICE_ANNOTATION] = KINDS.index("annotation")
    device_steps = np.flatnonzero(role == _DEVICE_STEPS)
    kind[device_steps] = KINDS.index("step")
    step_id[device_steps] = rule(device_steps, step_number, -1, np.int64)

    # Host events.
    host = np.flatnonzero(role == _HOST)
    kind[host] = rule(host, lambda c: KINDS.index(xprof_host_kind(c)), KINDS.index("other"), np.int8)
    marker = host[stats.present["step_num"][host]]
    marker = marker[rule(marker, lambda c: bool(STEP_MARKER_PATTERN.match(c)), False, bool)]
    kind[marker] = KINDS.index("step")
    step_id[marker] = stats.ints["step_num"][marker]
    api = host[stats.present["correlation_id"][host]]
    kind[api] = np.where(rule(api, is_sync_api, False, bool), KINDS.index("sync"), KINDS.index("runtime"))

    device_labels = sorted(set(device_of_plane.values()))
    device_code = np.full(len(space.planes), -1, np.int64)
    for p, d in device_of_plane.items():
        device_code[p] = device_labels.index(d)
    on_device = role != _HOST
    columns: dict[str, Any] = {
        "ts_ns": ts_ns,
        "dur_ns": dur_ns,
        "kind": pd.Categorical.from_codes(kind, KINDS),
        "device": pd.Categorical.from_codes(np.where(on_device, device_code[event_plane], -1), device_labels),
        "stream": np.where(on_device, line_id, -1),
        "host": pd.Categorical.from_codes(np.zeros(n, np.int8), [_host_label(path, space)]),
        "thread": np.where(on_device, -1, line_id),
        "name": names_cat,
        "correlation": np.where(stats.present["correlation_id"], stats.ints["correlation_id"], -1),
        "bytes": n_bytes,
        "copy_kind": pd.Categorical.from_codes(copy_kind, COPY_KINDS),
        "src_memory": pd.Categorical.from_codes(src_memory, MEMORY_KINDS),
        "step_id": step_id,
        "blocks_per_sm": blocks_per_sm,
        "occupancy_pct": occupancy,
        "op": _stream_ops(stats.strings["level 0"], stream),
    }
    if aggregated.any():
        warnings["xspace: aggregated events (num_occurrences, no timestamp) skipped"] += int(aggregated.sum())
    if not keep.all():
        columns = {col: values[keep] for col, values in columns.items()}
    table = drop_duplicates(make_event_table(columns, int(keep.sum())), warnings, "xspace")

    host_threads = [line.name for plane in space.planes if plane.name.startswith("/host:") for line in plane.lines]
    host_names = {names[c] for c in np.flatnonzero(np.bincount(name_code[host] + 1, minlength=1)[1:])}
    framework = xprof_framework(host_threads, host_names, bool((kind[host] == KINDS.index("cpu_op")).any()))
    return TraceRead(
        events=table,
        input=InputInfo(path=str(path), format="xspace", host=_host_label(path, space), rank=None, events=len(table)),
        framework=framework,
        devices=devices,
        metadata={
            "planes": [p.name for p in space.planes],
            "hostnames": list(space.hostnames),
            "profile_start_time_ns": start_time,
            "profile_stop_time_ns": stop_time,
            "clock": "epoch" if epoch else "relative",
            "errors": list(space.errors),
            "warnings": list(space.warnings),
        },
        warnings=warnings,
        memory=memory,
    )
