"""An XSpace file's table: the rows of its units (`xspace_lines`), recoded as one reader of every unit in turn
would have coded them (`Table.add`), put on the file's clock once it is known (the ``Task Environment``'s
profile start time, when the lines are relative to it), rows with impossible times dropped, then joined into the
event table and the memory table (`Table.result`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.errors import TraceError, truncation_warning
from traceinsight.events import (
    COPY_KINDS,
    KINDS,
    MEMORY_KINDS,
    InputInfo,
    TraceRead,
    make_event_table,
)
from traceinsight.heap import release_free_memory
from traceinsight.readers._classify import xprof_framework
from traceinsight.readers._repair import TS_MAX_NS, drop_duplicates, near_window, possible_ts, usable_times
from traceinsight.readers.xspace_classify import op_type
from traceinsight.readers.xspace_file import SpaceFile
from traceinsight.readers.xspace_lines import PART_COLUMNS, Part, Rows
from traceinsight.readers.xspace_memory import memory_table
from traceinsight.readers.xspace_ops import op_table
from traceinsight.readers.xspace_wire import NOT_XSPACE


class Table:
    """A file's rows, unit by unit, their names and annotations coded in the file's order; then its tables."""

    def __init__(self, file: SpaceFile) -> None:
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
        self.parts: list[Part] = []
        self.line_timestamps: list[int] = []
        self.host_threads: list[str] = []
        self.host_name_codes: set[int] = set()
        self.has_cpu_ops = False
        self.events = self.corrupt = 0

    def add(self, rows: Rows) -> None:
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
        rows = sum(int(part.keep.sum()) for part in self.parts)  # before the times are checked
        for part in self.parts:
            _settle_times(part, shift, self.warnings)
            if epoch and start_time is not None and stop_time is not None and stop_time > start_time:
                ts_ns, dur_ns = part.columns["ts_ns"], part.columns["dur_ns"]
                part.keep &= near_window(ts_ns, dur_ns, part.keep, start_time, stop_time, self.warnings, "xspace")
        release_free_memory()  # the heap the lines' decoding left free (kept while reading: no page faults anew)
        memory = memory_table(
            [(part.memory, part.keep, part.columns["ts_ns"]) for part in self.parts if part.memory is not None]
        )
        ops = op_table(
            [(part.ops, part.keep, part.columns, part.device_code) for part in self.parts if part.ops is not None],
            self.device_labels,
            self.name_list,
        )
        columns, n = self._table_columns()
        if rows and not n:  # every event damaged (a length of 2**62): no report to make, and it says why
            said = "; ".join(f"{key.removeprefix('xspace: ')}: {count:,}" for key, count in self.warnings.items())
            raise TraceError(path, f"no usable event: all {rows:,} events were skipped ({said})")
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
            ops=ops,
        )

    def _table_columns(self) -> tuple[dict[str, Any], int]:
        """The event table's columns from the batches' kept rows (each batch's column freed once joined)."""
        keeps = [part.keep for part in self.parts]
        kept = [int(keep.sum()) for keep in keeps]
        n = sum(kept)
        columns: dict[str, Any] = {}
        for name, dtype in PART_COLUMNS.items():
            columns[name] = rows_kept([part.columns.pop(name) for part in self.parts], keeps, kept, dtype)
            release_free_memory()  # the batches' pieces of the column, so the next column can reuse their pages
        for name, on_device in (("stream", True), ("thread", False)):  # the rows' line ids, -1 on the other planes
            column = columns[name] = np.empty(n, np.int64)  # each row written once (a fill first took 0.05 s)
            at = 0
            for part, keep, count in zip(self.parts, keeps, kept, strict=True):
                if (part.device_code >= 0) != on_device:
                    column[at : at + count] = -1
                elif count == len(keep):
                    np.take(part.line_ids, part.event_line, out=column[at : at + count])
                else:
                    np.take(part.line_ids, part.event_line[keep], out=column[at : at + count])
                at += count
        device = np.repeat(np.array([part.device_code for part in self.parts], np.int16), kept)
        columns["device"] = pd.Categorical.from_codes(device, self.device_labels)
        columns["kind"] = pd.Categorical.from_codes(columns["kind"], KINDS)
        columns["copy_kind"] = pd.Categorical.from_codes(columns["copy_kind"], COPY_KINDS)
        columns["src_memory"] = pd.Categorical.from_codes(columns["src_memory"], MEMORY_KINDS)
        columns["name"] = pd.Categorical.from_codes(columns["name"], self.name_list)
        columns["host"] = pd.Categorical.from_codes(np.zeros(n, np.int8), [self._host_label()])
        types, type_codes = np.unique(np.array([op_type(a) for a in self.annotations], object), return_inverse=True)
        columns["op"] = pd.Categorical.from_codes(np.append(type_codes, -1)[columns["op"]], types)
        return columns, n

    def _host_label(self) -> str:
        """The XSpace's first host name, else the file name without ``.xplane.pb``."""
        hostnames = self.layout.space.hostnames
        if len(hostnames) and hostnames[0]:
            return str(hostnames[0])
        return self.path.name.removesuffix(".xplane.pb")


def rows_kept(arrays: list[np.ndarray], keeps: list[np.ndarray], kept: list[int], dtype: Any) -> np.ndarray:
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


# --------------------------------------------------------------------------- time


def _clock_time(value: Any) -> int | None:
    """A Task Environment time stat (epoch ns) if it is a possible one."""
    return value if isinstance(value, int) and 0 < value < TS_MAX_NS else None


def _settle_times(part: Part, shift: int, warnings: Counter[str]) -> None:
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
