"""Make a big XSpace (``.xplane.pb``) out of a real one, for the benchmarks and the scaling test.

Every line's events are written `copies` times, each copy laid after the previous one
on the clock (shifted by the whole space's span plus 1 ms, a whole number of µs), so
the result is what a longer run of the same job would have written: the same planes,
lines, metadata and event mix, time growing instead of overlapping. Copies get fresh
``correlation_id`` values (launch and kernel stay paired) and step numbers (the device
``Steps`` line's names, host ``step_num`` stats); ``Task Environment``'s
``profile_stop_time`` moves to the new end.

The file is written as it is made, line by line, so making a gigabyte XSpace needs
memory for one line's copies, not for the file: the plane's lines go to a temporary
file first, since a plane's length is written before its lines.

    python -m benchmarks.replicate_xspace TARGET [--source SOURCE] [--copies 60 | --mb 1000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from traceinsight.readers.xplane_schema import XSpace, message_class

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT_SOURCE = SHARED_TRACES / "xprof" / "GPU-multi-worker" / "34.83.195.179_6003.xplane.pb"
_GAP_PS = 10**9  # 1 ms between copies
_SPACE_PLANES, _PLANE_LINES = 1, 3  # field numbers (tsl/profiler/protobuf/xplane.proto)
_XLine = message_class("XLine")
_XPlane = message_class("XPlane")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field_header(number: int, length: int) -> bytes:
    """Tag and length of a length-delimited field."""
    return _varint(number << 3 | 2) + _varint(length)


def _stat_ids(plane: Any, name: str) -> set[int]:
    """The stat metadata ids of `plane` called `name`."""
    return {key for key, meta in plane.stat_metadata.items() if meta.name == name}


def _int_stats(stats: Any, ids: set[int]) -> Iterator[Any]:
    """The stats among `stats` with one of the metadata `ids` that hold an integer."""
    for stat in stats:
        if stat.metadata_id in ids and stat.WhichOneof("value") in ("int64_value", "uint64_value"):
            yield stat


def _int_value(stat: Any) -> int:
    return int(getattr(stat, str(stat.WhichOneof("value"))))


def _step_numbers(plane: Any) -> list[int]:
    """The step numbers the plane's event metadata names (the device ``Steps`` line's events), sorted."""
    return sorted({int(meta.name) for meta in plane.event_metadata.values() if meta.name.isdigit()})


class _Renumbering:
    """The integer fields of one line's events that move on with each copy: original + copy * step."""

    def __init__(self) -> None:
        self.fields: list[tuple[Any, str, int, int]] = []  # (message, attribute, original, step per copy)

    def add(self, message: Any, attribute: str, step: int) -> None:
        self.fields.append((message, attribute, int(getattr(message, attribute)), step))

    def apply(self, copy: int) -> None:
        for message, attribute, original, step in self.fields:
            setattr(message, attribute, original + copy * step)


class XSpaceReplicator:
    """One source XSpace, ready to be written `copies` times over, end to end on the clock."""

    def __init__(self, source: Path) -> None:
        self.space = XSpace()
        self.space.ParseFromString(source.read_bytes())
        starts, ends, correlations, steps = [], [], [0], []
        for plane in self.space.planes:
            steps += _step_numbers(plane)
            correlation_ids, step_ids = _stat_ids(plane, "correlation_id"), _stat_ids(plane, "step_num")
            for line in plane.lines:
                for event in line.events:
                    if event.WhichOneof("data") == "offset_ps":
                        starts.append(line.timestamp_ns * 1000 + event.offset_ps)
                        ends.append(starts[-1] + event.duration_ps)
                    correlations += map(_int_value, _int_stats(event.stats, correlation_ids))
                    steps += map(_int_value, _int_stats(event.stats, step_ids))
        span_ps = max(ends) - min(starts) + _GAP_PS if starts else _GAP_PS
        self.shift_ps = -(-span_ps // 10**6) * 10**6  # whole µs: shifted times stay exact in ns
        self.correlation_shift = max(correlations) + 1
        self.step_shift = max(steps) - min(steps) + 1 if steps else 0
        self.copy_bytes = sum(_XLine(events=line.events).ByteSize() for p in self.space.planes for line in p.lines)
        self.once_bytes = source.stat().st_size - self.copy_bytes  # metadata and line headers: written once

    def copies_for(self, megabytes: float) -> int:
        """About how many copies make a file of `megabytes` MB."""
        return max(1, round((megabytes * 1e6 - self.once_bytes) / self.copy_bytes))

    def write(self, target: Path, copies: int) -> Path:
        """Write `copies` copies of every line's events to `target`."""
        with target.open("wb") as out, tempfile.TemporaryFile(dir=target.parent) as lines:
            for plane in self.space.planes:
                head, tail = self._plane_parts(plane, copies)
                lines.seek(0)
                lines.truncate()
                for line in plane.lines:
                    self._write_line(lines, plane, line, copies)
                out.write(_field_header(_SPACE_PLANES, len(head) + lines.tell() + len(tail)) + head)
                lines.seek(0)
                shutil.copyfileobj(lines, out)
                out.write(tail)
            rest = XSpace()
            rest.CopyFrom(self.space)
            rest.ClearField("planes")
            out.write(rest.SerializeToString())
        return target

    @staticmethod
    def _first_step_id(plane: Any) -> int:
        """The event metadata id of the first copy's first step name (the copies' names follow the plane's own)."""
        return max(plane.event_metadata, default=0) + 1

    def _plane_parts(self, plane: Any, copies: int) -> tuple[bytes, bytes]:
        """A plane's fields before its lines (id, name) and after them (event metadata with the copies' step
        names, plane stats with the new stop time), in field order, as writers put them."""
        head = _XPlane(id=plane.id, name=plane.name).SerializeToString()
        tail = _XPlane()
        tail.CopyFrom(plane)
        for field in ("id", "name", "lines"):
            tail.ClearField(field)
        for stat in _int_stats(tail.stats, _stat_ids(plane, "profile_stop_time")):
            kind = str(stat.WhichOneof("value"))
            setattr(stat, kind, getattr(stat, kind) + (copies - 1) * self.shift_ps // 1000)
        numbers = _step_numbers(plane)
        key = self._first_step_id(plane)
        for copy in range(copies):
            for number in numbers:
                tail.event_metadata[key].id = key
                tail.event_metadata[key].name = str(number + copy * self.step_shift)
                key += 1
        return head, tail.SerializeToString()

    def _write_line(self, out: BinaryIO, plane: Any, line: Any, copies: int) -> None:
        """One line: its own fields, then its events `copies` times, shifted and renumbered."""
        header = _XLine()
        header.CopyFrom(line)
        header.ClearField("events")
        if header.duration_ps:
            header.duration_ps += (copies - 1) * self.shift_ps
        events = _XLine()
        events.events.extend(line.events)  # serialized alone: exactly the events' part of a line
        renumbering = self._renumbering(plane, line, events)
        parts = []
        for copy in range(copies):
            renumbering.apply(copy)
            parts.append(events.SerializeToString())
        head = header.SerializeToString()
        out.write(_field_header(_PLANE_LINES, len(head) + sum(map(len, parts))) + head)
        out.writelines(parts)

    def _renumbering(self, plane: Any, line: Any, events: Any) -> _Renumbering:
        """What moves on in each copy of `events` (the line's events): offsets, correlation ids, step numbers;
        a ``Steps`` event names the copy's own step (metadata added by `_plane_parts`)."""
        renumbering = _Renumbering()
        numbers = _step_numbers(plane)
        correlation_ids, step_ids = _stat_ids(plane, "correlation_id"), _stat_ids(plane, "step_num")
        for event in events.events:
            if event.WhichOneof("data") == "offset_ps":
                renumbering.add(event, "offset_ps", self.shift_ps)
            for stat in _int_stats(event.stats, correlation_ids):
                renumbering.add(stat, str(stat.WhichOneof("value")), self.correlation_shift)
            for stat in _int_stats(event.stats, step_ids):
                renumbering.add(stat, str(stat.WhichOneof("value")), self.step_shift)
            meta = plane.event_metadata.get(event.metadata_id)
            if line.name == "Steps" and meta is not None and meta.name.isdigit():
                event.metadata_id = self._first_step_id(plane) + numbers.index(int(meta.name))
                renumbering.add(event, "metadata_id", len(numbers))
        return renumbering


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--copies", type=int, default=60, help="copies of every line's events (default 60)")
    size.add_argument("--mb", type=float, help="about this many MB instead")
    args = parser.parse_args()
    replicator = XSpaceReplicator(args.source)
    copies = replicator.copies_for(args.mb) if args.mb else args.copies
    replicator.write(args.target, copies)
    print(f"{args.target}: {copies} copies, {args.target.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
