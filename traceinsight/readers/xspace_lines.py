"""The rows of a run of an XSpace file's lines (a `Unit`), read a batch of lines at a time: each batch's events
decoded with numpy (`xspace_wire`), their stats read (`xspace_stats`), their kinds and columns given by their
lines' roles and names (`xspace_classify`), allocator events also made memory rows (`xspace_memory`). The rows
(`Rows`) have their names and annotations coded in the order the unit met them, and their times as the lines
say: `xspace_table` puts the units' rows on the file's clock and in one table.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.events import KINDS, MEMORY_KINDS, narrowed_ints
from traceinsight.heap import release_free_memory
from traceinsight.readers._classify import details_bytes, details_occupancy
from traceinsight.readers._repair import valid_occupancy
from traceinsight.readers.xspace_classify import (
    DEVICE_ANNOTATION,
    DEVICE_KERNEL,
    DEVICE_STEPS,
    HOST,
    STREAM,
    NameRules,
    Plane,
    blocks,
    line_role,
    memory_code,
)
from traceinsight.readers.xspace_file import SpaceFile, Unit
from traceinsight.readers.xspace_memory import Memory, read_memory
from traceinsight.readers.xspace_ops import Ops, read_ops
from traceinsight.readers.xspace_stats import FoundStats, Stats, per_distinct, read_stats
from traceinsight.readers.xspace_wire import LINE_BATCH_BYTES, LineBatch, Source, run_batch


class Part(msgspec.Struct):
    """The rows of one batch of lines, before the file's clock is known."""

    line_ts: np.ndarray  # per line of the batch: its timestamp_ns
    event_line: np.ndarray  # per row: its line in the batch
    line_ids: np.ndarray  # per line of the batch: its id (the rows' stream on a device plane, else their thread)
    keep: np.ndarray  # per row: neither an aggregate nor corrupt; then also with possible times
    device_code: int  # the plane's device (-1: host)
    columns: dict[str, np.ndarray]  # the table's columns but stream and thread (`line_ids`); ts_ns and dur_ns
    # as the lines say (`xspace_table` puts them on the file's clock)
    memory: Memory | None = None
    ops: Ops | None = None


# The table's columns a batch makes, and their dtypes (codes for the categorical ones).
PART_COLUMNS = {
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


class Rows(msgspec.Struct):
    """What one unit's lines give, its names and annotations coded in the order the unit met them; the
    table (`Table.add`) recodes them in the file's order."""

    parts: list[Part]
    names: list[str]  # event name by code
    annotations: list[str]  # ``level 0`` annotation by code
    host_name_codes: set[int]
    host_threads: list[str]  # names of every host line
    line_timestamps: list[int]  # of the lines whose events are read
    has_cpu_ops: bool
    events: int
    corrupt: int
    warnings: Counter[str]


def read_unit(source: Source, file: SpaceFile, unit: Unit) -> Rows:
    """The rows of one unit, read batch by batch."""
    reader = _LineReader(file, file.plane(unit.plane))
    reader.read(source, unit)
    return reader.rows()


class _LineReader:
    """One unit of a file's lines, read a batch (of events) at a time."""

    def __init__(self, file: SpaceFile, plane: Plane) -> None:
        self.plane = plane
        self.device_labels = file.device_labels
        self.warnings: Counter[str] = Counter()
        self.names: dict[str, int] = {}  # event name -> code, in order of first appearance
        self.name_list: list[str] = []
        self.rules = NameRules()
        self.annotations: dict[str, int] = {}  # ``level 0`` annotation -> code, in order of first appearance
        self.parts: list[Part] = []
        self.line_timestamps: list[int] = []  # of the lines whose events are read
        self.host_threads: list[str] = []
        self.host_name_codes: set[int] = set()
        self.has_cpu_ops = False
        self.events = self.corrupt = 0

    def read(self, source: Source, unit: Unit) -> None:
        """The rows of the unit's lines; a host plane's thread names."""
        plane = self.plane
        host = plane.device_type is None
        has_rows = plane.meta.name != "/host:metadata"
        self._read_lines(
            run_batch(
                source,
                unit.lines,
                lambda line: has_rows and line_role(plane.device_type, line.name) is not None,
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

    def rows(self) -> Rows:
        """What the unit gave, to send back."""
        return Rows(
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

    def _read_batch(self, plane: Plane, batch: LineBatch, line_ts: np.ndarray) -> None:
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
        role = np.array([line_role(plane.device_type, line.name) for line in lines], np.int8)[batch.event_line]
        line_ids = np.array([line.id for line in lines], np.int64)
        line_id = line_ids[batch.event_line]
        name_code, unnamed, with_stats = self._names(plane, events.md)
        unnamed &= ~events.corrupt
        if unnamed.any():
            self.warnings["xspace: events whose metadata id has no entry (name left empty)"] += int(unnamed.sum())
        stream = np.flatnonzero(role == STREAM)
        found = FoundStats.of(plane, batch.wire, events, self.warnings)
        stats = read_stats(plane, batch.wire, events, found, None, stream, with_stats, self.warnings, Stats.empty(n))
        columns = self._columns(plane, role, name_code, stream, stats)
        on_device = plane.device_code >= 0
        columns["name"] = name_code
        columns["ts_ns"] = line_ts[batch.event_line] + events.offset_ps // 1000
        columns["dur_ns"] = events.duration_ps // 1000
        part = Part(
            line_ts,
            batch.event_line.astype(np.int32),
            line_ids,
            ~(events.aggregated | events.corrupt),
            plane.device_code,
            columns,
        )
        if on_device:
            part.ops = read_ops(plane, batch.wire, events, found, columns["kind"], with_stats)
        else:
            part.memory = read_memory(
                plane, batch.wire, events, found, name_code, line_id, with_stats, self.names, self.device_labels
            )
        self.parts.append(part)

    def _names(self, plane: Plane, md: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[int, Any]]]:
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
        self, plane: Plane, role: np.ndarray, name_code: np.ndarray, stream: np.ndarray, stats: Stats
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
        n_bytes[copies] = per_distinct(stats.strings["memcpy_details"][copies], details_bytes, -1, np.int64)
        for code in np.unique(name_code[copies]).tolist():  # MemcpyH2D, MemcpyD2H, ...: the host side differs
            rows = copies[name_code[copies] == code]
            src_memory[rows] = per_distinct(
                stats.strings["memcpy_details"][rows],
                partial(memory_code, names[code]),
                MEMORY_KINDS.index("unknown"),
                np.int8,
            )
        n_bytes[memsets] = per_distinct(stats.strings["Memset_details"][memsets], details_bytes, -1, np.int64)
        details = stats.strings["kernel_details"][kernels]
        theoretical = stats.floats["theoretical_occupancy_pct"][kernels]
        theoretical = valid_occupancy(theoretical, self.warnings, "xspace")  # the stat if possible, else details'
        fallback = np.isnan(theoretical)
        from_details = per_distinct(details[fallback], details_occupancy, np.nan, np.float64)
        theoretical[fallback] = valid_occupancy(from_details, self.warnings, "xspace")
        occupancy[kernels] = theoretical
        blocks_per_sm[kernels] = per_distinct(details, blocks, np.nan, np.float64) / plane.sm_count
        annotation = np.full(n, -1, np.int32)
        annotation[stream] = self._annotation_codes(stats.strings["level 0"][stream])

        # Other device lines.
        ops = np.flatnonzero(role == DEVICE_KERNEL)
        kind[ops] = KINDS.index("kernel")
        xla_copies = self.rules.xla_copy(name_code[ops], names)  # a TPU's async copies are transfers, not compute
        moved = xla_copies >= 0
        kind[ops[moved]] = KINDS.index("memcpy")
        copy_kind[ops[moved]] = xla_copies[moved]
        kind[role == DEVICE_ANNOTATION] = KINDS.index("annotation")
        device_steps = np.flatnonzero(role == DEVICE_STEPS)
        kind[device_steps] = KINDS.index("step")
        step_id[device_steps] = self.rules.step_number(name_code[device_steps], names)

        # Host events.
        host = np.flatnonzero(role == HOST)
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
