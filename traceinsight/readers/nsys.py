"""Read Nsight Systems exports (``nsys export --type sqlite``) into the canonical event table.

The schema is NVIDIA's "SQLite Schema Reference"; column names moved between nsys versions, so every table's
columns are probed (``PRAGMA table_info``) and tables a run did not record (no memsets, no NVTX) are simply absent:

=====================================  ====================================================================
table                                  rows
=====================================  ====================================================================
``CUPTI_ACTIVITY_KIND_KERNEL``         ``kernel`` (name: ``demangledName``, else ``shortName``,
                                       ``mangledName``, ids into ``StringIds``)
``CUPTI_ACTIVITY_KIND_MEMCPY``         ``memcpy``, named as Kineto names copies (``Memcpy HtoD (Pageable ->
                                       Device)``) from ``copyKind``, ``srcKind``, ``dstKind``
``CUPTI_ACTIVITY_KIND_MEMSET``         ``memset`` (``Memset (Device)``)
``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` device ``sync`` rows (``Stream Sync``, ...), as Kineto's ``cuda_sync``
``CUPTI_ACTIVITY_KIND_RUNTIME``        host ``runtime`` calls (``sync`` for ``*Synchronize``); thread from
                                       ``globalTid``; a call and its device work share ``correlationId``
``NVTX_EVENTS``                        host ``annotation`` ranges (push/pop and start/end); ``ProfilerStep#N``
                                       ranges become steps (`events.make_event_table`)
``TARGET_INFO_GPU``                    the devices' `DeviceInfo` (name, SM count, memory, clock, bandwidth)
=====================================  ====================================================================

Times are ns since the session's start, put on the epoch by ``TARGET_INFO_SESSION_START_TIME`` where the export
has it, so the exports of several ranks line up. A ``.nsys-rep`` report is first exported to SQLite by the
``nsys`` binary on PATH (`export_report`). Everything is read with `pd.read_sql_query`, column by column: no
Python loop over events.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.errors import TraceError
from traceinsight.events import COPY_KINDS, KINDS, MEMORY_KINDS, DeviceInfo, InputInfo, TraceRead, make_event_table
from traceinsight.limits import MemoryLimit
from traceinsight.readers import REPORT_SUFFIX, SQLITE_SUFFIX
from traceinsight.readers._classify import is_sync_api
from traceinsight.readers._repair import drop_duplicates, usable_times
from traceinsight.readers.regular import not_regular, open_regular, refusal
from traceinsight.rules import NSYS_API_VERSION_SUFFIX, NSYS_PYTORCH_RANGE, NSYS_RANK_VARIABLES

_SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_BYTES = 100  # the SQLite file header: page size at 16, page count at 28
KERNEL, MEMCPY, MEMSET, SYNC, RUNTIME, NVTX = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)
GPU_INFO, STRINGS, SESSION_START = "TARGET_INFO_GPU", "StringIds", "TARGET_INFO_SESSION_START_TIME"
SYSTEM_ENV = "TARGET_INFO_SYSTEM_ENV"
# Any of these makes a SQLite file an nsys export (a run without CUDA still has its GPUs or NVTX).
NSYS_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, NVTX, GPU_INFO)
# What each table's rows need to become events (the schema reference's columns since nsys 2020): a table present
# without them is another schema, not an empty run.
_REQUIRED_COLUMNS = {
    KERNEL: ("start", "end"),
    MEMCPY: ("start", "end"),
    MEMSET: ("start", "end"),
    RUNTIME: ("start", "end", "globalTid", "nameId"),
    NVTX: ("start", "end", "eventType", "globalTid"),
}
# Kernel name columns, best first: the demangled name is what Kineto shows.
_KERNEL_NAME_COLUMNS = ("demangledName", "shortName", "mangledName")
# NVTX eventType of ranges: NvtxPushPopRange, NvtxStartEndRange (ENUM_NSYS_EVENT_TYPE). Marks have no duration.
_NVTX_RANGES = (59, 60)
# globalTid = (pid << 24 | tid) in its low 48 bits (the schema reference; pipit's reader reads it so).
_TID_MASK = 0xFFFFFF
_NO_STREAM = 0xFFFFFFFF  # CUPTI's stream id of a device-wide event (Context Sync)
_NVIDIA = "Nvidia"  # vendor spelled as XSpace's ``device_vendor`` stat
# CUPTI's enums, fixed by CUDA (ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND, ENUM_CUPTI_SYNC_TYPE): the exports of
# older nsys versions lack the ENUM tables, so they are spelled here. copyKind -> (Kineto's word, direction).
_COPY_KINDS = {
    1: ("HtoD", "h2d"),
    2: ("DtoH", "d2h"),
    3: ("HtoA", "h2d"),
    4: ("AtoH", "d2h"),
    5: ("AtoA", "d2d"),
    6: ("AtoD", "d2d"),
    7: ("DtoA", "d2d"),
    8: ("DtoD", "d2d"),
    9: ("HtoH", "other"),
    10: ("PtoP", "p2p"),
    11: ("HtoD", "h2d"),  # unified memory
    12: ("DtoH", "d2h"),
    13: ("DtoD", "d2d"),
}
# memory kind -> (Kineto's word, the table's src_memory)
_MEMORY = {
    0: ("Pageable", "pageable"),
    1: ("Pinned", "pinned"),
    2: ("Device", "device"),
    3: ("Array", "device"),
    4: ("Managed", "unknown"),
    5: ("Device Static", "device"),
    6: ("Managed Static", "unknown"),
}
_SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}  # Kineto's
# One table's rows as event-table columns (`_joined` puts the tables' parts together).
Part = dict[str, Any]


def is_nsys_export(path: Path | str) -> bool:
    """Whether `path` is a SQLite file holding an nsys export's tables (told by its tables, not its name).
    False for anything that cannot be opened as SQLite."""
    try:
        with _open(Path(path)) as db:
            return bool(_tables(db) & set(NSYS_TABLES))
    except (sqlite3.Error, OSError):
        return False


def _host_and_rank(db: sqlite3.Connection) -> tuple[str | None, int | None]:
    """The profiled machine's name and the process's rank, as the launcher's environment gave it to nsys
    (``TARGET_INFO_SYSTEM_ENV``: ``Hostname``; ``DeviceEnvironment``, NUL-separated ``NAME=value`` pairs, read as
    bytes: the environment need not be UTF-8). None where the export does not say."""
    if not {"name", "value"} <= _columns(db, SYSTEM_ENV):
        return None, None
    rows = dict(
        db.execute(
            f"SELECT name, CAST(value AS BLOB) FROM {SYSTEM_ENV} WHERE name IN ('Hostname', 'DeviceEnvironment')"
        ).fetchall()
    )
    host = rows.get("Hostname")
    environment = dict(
        pair.split(b"=", 1) for pair in (rows.get("DeviceEnvironment") or b"").split(b"\0") if b"=" in pair
    )
    rank = next((environment[name] for name in NSYS_RANK_VARIABLES if name in environment), b"")
    return (host.decode(errors="replace") or None) if host else None, int(rank) if rank.isdigit() else None


def capture_window(path: Path) -> tuple[int | None, int | None, int | None, str | None, int | None]:
    """The capture's start and stop on the epoch (the session's start plus ``ANALYSIS_DETAILS``'s times), the
    profiled process (the pid in the first runtime call's ``globalTid``), its host and its rank, without reading
    the events: what discovery needs to group and order runs (`readers.stamp`). Nones where the export does not
    say."""
    try:
        with _open(path) as db:
            tables = _tables(db)
            host, rank = _host_and_rank(db) if SYSTEM_ENV in tables else (None, None)
            epoch = _first_row(db, f"SELECT utcEpochNs FROM {SESSION_START}", SESSION_START in tables)
            span = _first_row(db, "SELECT startTime, stopTime FROM ANALYSIS_DETAILS", "ANALYSIS_DETAILS" in tables)
            tid = _first_row(db, f"SELECT globalTid FROM {RUNTIME}", RUNTIME in tables)
    except (sqlite3.Error, OSError):
        return None, None, None, None, None
    pid = (tid[0] >> 24) & 0xFFFFFF if tid and isinstance(tid[0], int) else None
    if not epoch or not isinstance(epoch[0], int) or epoch[0] <= 0:
        return None, None, pid, host, rank
    start, stop = (span[0], span[1]) if span and isinstance(span[0], int) and isinstance(span[1], int) else (0, 0)
    return epoch[0] + start, epoch[0] + max(start, stop), pid, host, rank


def _first_row(db: sqlite3.Connection, query: str, present: bool) -> tuple[object, ...] | None:
    """The first row of `query` when its table is `present`, else None."""
    return db.execute(f"{query} LIMIT 1").fetchone() if present else None


def read_nsys(path: Path | str, limit: MemoryLimit | None = None) -> TraceRead:
    """Read an nsys SQLite export, or a ``.nsys-rep`` report through `export_report`. Raises TraceError, naming
    the file, for a file that is no SQLite database, is cut short or holds no nsys tables, and (`limit`) before
    reading the rows of one whose events would not fit (the tables' row counts say how many)."""
    path = Path(path)
    if path.name.lower().endswith(REPORT_SUFFIX):
        with export_report(path) as exported:
            read = _read_export(exported, path, limit)
        return read
    return _read_export(path, path, limit)


@contextmanager
def export_report(report: Path) -> Iterator[Path]:
    """The SQLite export of a ``.nsys-rep`` report, written by ``nsys export --type sqlite`` into a temporary
    folder that is removed afterwards. One short child process: `parallel` has no helper for those."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError(
            report,
            "an Nsight Systems report needs the `nsys` binary on PATH to be read (or pass the "
            "file `nsys export --type sqlite` writes)",
        )
    with tempfile.TemporaryDirectory(prefix="traceinsight-nsys-") as folder:
        out = Path(folder) / (report.stem + SQLITE_SUFFIX)
        command = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.is_file():
            said = (done.stderr or done.stdout).strip().splitlines()
            raise TraceError(report, f"`nsys export` failed ({said[-1] if said else f'exit {done.returncode}'})")
        yield out


def _read_export(path: Path, named: Path, limit: MemoryLimit | None) -> TraceRead:
    """The `TraceRead` of the SQLite export at `path` (`named`: the file the user gave, for messages)."""
    _check_header(path, named)
    try:
        with _open(path) as db:
            export = _Export(db, named)
            rows = export.checked_rows()
            if limit is not None:
                limit.check_events(named, rows)
            return export.read()
    except sqlite3.DatabaseError as error:
        raise TraceError(named, f"not a readable SQLite database ({error})") from None
    except (ValueError, TypeError) as error:  # a column of another type than the schema's: text for a time, say
        raise TraceError(named, f"the export's columns do not hold what nsys writes ({error})") from None


def _check_header(path: Path, named: Path) -> None:
    """Refuse an empty file, one that is no SQLite database, and one shorter than its header says (cut short):
    SQLite itself would only fail on the first page past the cut, if a query reads it."""
    try:
        with open_regular(path) as f:
            header = f.read(_HEADER_BYTES)
        size = path.stat().st_size
    except OSError as error:
        raise TraceError(named, f"cannot be read ({error.strerror or error})") from None
    if not header:
        raise TraceError(named, "empty file (an nsys SQLite export was expected)")
    if not header.startswith(_SQLITE_MAGIC) or len(header) < _HEADER_BYTES:
        raise TraceError(named, "not a SQLite database (an nsys SQLite export was expected)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and size < pages * page_size:
        raise TraceError(
            named,
            f"the SQLite file ends early (truncated file?): {size:,} bytes of the {pages * page_size:,} "
            "its header says",
        )


@contextmanager
def _open(path: Path) -> Iterator[sqlite3.Connection]:
    """The database read-only and immutable (no lock, no journal: the file may sit on a read-only disk); an OSError
    for a file that is not a regular one (SQLite would wait on a FIFO)."""
    if kind := not_regular(path):
        raise OSError(errno.EINVAL, refusal(kind))
    uri = f"{path.absolute().as_uri()}?mode=ro&immutable=1"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        yield db


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    """The columns of `table` (empty when there is no such table)."""
    return {row[1] for row in db.execute(f'PRAGMA table_info("{table}")')}


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


class _Export:
    """One open export: its tables and columns, read into event rows part by part."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path
        self.tables = _tables(db)
        if not self.tables & set(NSYS_TABLES):
            raise TraceError(
                path, f"a SQLite file without Nsight Systems tables (wrong schema: none of {', '.join(NSYS_TABLES)})"
            )
        self.warnings: Counter[str] = Counter()
        self.strings = self._strings()

    def columns(self, table: str) -> set[str]:
        """The columns of `table` (empty when the export has no such table)."""
        return _columns(self.db, table) if table in self.tables else set()

    def query(self, sql: str) -> pd.DataFrame:
        return pd.read_sql_query(sql, self.db)

    def _strings(self) -> pd.Series:
        """``StringIds``: id -> text."""
        if STRINGS not in self.tables:
            return pd.Series([], dtype=object)
        table = self.query(f"SELECT id, value FROM {STRINGS}")
        return pd.Series(table["value"].to_numpy(), index=table["id"].to_numpy())

    def rows(self) -> int:
        """How many rows the tables read hold: at most the events they give."""
        read = [table for table in (KERNEL, MEMCPY, MEMSET, SYNC, RUNTIME, NVTX) if table in self.tables]
        return sum(self.db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0] for table in read)

    def names(self, ids: np.ndarray) -> pd.Categorical:
        """The `StringIds` text of each id (NaN when unknown), as a categorical built per distinct id."""
        distinct, inverse = np.unique(ids, return_inverse=True)
        return _spread(self.strings.reindex(distinct).to_numpy(), inverse)

    def checked_rows(self) -> int:
        """`rows`, once the export is known to be readable: refuse one whose tables lack the columns their rows
        need (another schema version), and one with no row to read (a report of nothing would look like an idle
        GPU)."""
        version = self._export_info().get("export_schema_version")
        said = f" (export schema {version})" if version else ""
        for table, needed in _REQUIRED_COLUMNS.items():
            missing = [column for column in needed if table in self.tables and column not in self.columns(table)]
            if missing:
                raise TraceError(
                    self.path, f"wrong schema{said}: {table} has no {', '.join(missing)} column (not an nsys export?)"
                )
        if not (rows := self.rows()):
            raise TraceError(self.path, f"an Nsight Systems export with no kernel, copy, runtime or NVTX rows{said}")
        return rows

    def read(self) -> TraceRead:
        gpus = self._gpus()
        parts = [
            part
            for part in (
                self._kernels(gpus),
                self._copies(),
                self._memsets(),
                self._syncs(),
                self._runtime(),
                self._nvtx(),
            )
            if part is not None and len(part["ts_ns"])
        ]
        offset, clock = self._clock()
        columns = _joined(parts)
        keep = usable_times(np.ones(len(columns["ts_ns"]), bool), columns["dur_ns"], self.warnings, "nsys")
        columns = {key: value[keep] for key, value in columns.items()}
        columns["ts_ns"] = columns["ts_ns"] + offset
        columns["dur_ns"] = np.maximum(columns["dur_ns"], 0)
        table = drop_duplicates(make_event_table(columns), self.warnings, "nsys")
        seen = table["device"].cat.categories
        devices = {device: gpus.get(device, DeviceInfo(id=device)) for device in seen}
        host, rank = _host_and_rank(self.db)
        return TraceRead(
            events=table,
            input=InputInfo(path=str(self.path), format="nsys", host=host, rank=rank, events=len(table)),
            framework=_framework(table),
            devices=devices,
            metadata={**self._export_info(), "clock": clock, "ts_offset_ns": offset},
            warnings=self.warnings,
        )

    # ----------------------------------------------------------------------- device work

    def _device_query(self, table: str, extra: str) -> pd.DataFrame | None:
        """start, end, deviceId, streamId, correlationId and `extra` (a select list) of a device activity table,
        if present."""
        have = self.columns(table)
        if not {"start", "end"} <= have:
            return None
        fields = _fields(have, ("deviceId", "streamId", "correlationId"))
        return self.query(f'SELECT start, end, {fields}, {extra} FROM "{table}" WHERE end IS NOT NULL')

    def _kernels(self, gpus: dict[str, DeviceInfo]) -> Part | None:
        have = self.columns(KERNEL)
        names = [column for column in _KERNEL_NAME_COLUMNS if column in have]
        grid = all(f"grid{axis}" in have for axis in "XYZ")
        extra = f"COALESCE({', '.join(names)}, -1) AS nameId" if names else "-1 AS nameId"
        extra += ", gridX * gridY * gridZ AS blocks" if grid else ", NULL AS blocks"
        rows = self._device_query(KERNEL, extra)
        if rows is None:
            return None
        part = self._device_part(rows, "kernel", self.names(rows["nameId"].to_numpy()))
        sms = pd.Series({device: info.sm_count for device, info in gpus.items() if info.sm_count})
        device_sms = sms.reindex(np.asarray(part["device"].astype(object))).to_numpy(dtype=np.float64)
        part["blocks_per_sm"] = rows["blocks"].to_numpy(dtype=np.float64) / device_sms
        return part

    def _copies(self) -> Part | None:
        rows = self._device_query(MEMCPY, _fields(self.columns(MEMCPY), ("bytes", "copyKind", "srcKind", "dstKind")))
        if rows is None:
            return None
        kinds = rows[["copyKind", "srcKind", "dstKind"]].fillna(-1).to_numpy(np.int64)
        distinct, inverse = np.unique(kinds, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        names = [_copy_name(*combo) for combo in distinct.tolist()]
        part = self._device_part(rows, "memcpy", _spread(np.array(names, dtype=object), inverse))
        part["copy_kind"] = _spread(
            np.array([_COPY_KINDS.get(c, ("", "other"))[1] for c in distinct[:, 0].tolist()], object),
            inverse,
            COPY_KINDS,
        )
        part["src_memory"] = _spread(
            np.array([_MEMORY.get(m, ("", "unknown"))[1] for m in distinct[:, 1].tolist()], object),
            inverse,
            MEMORY_KINDS,
        )
        part["bytes"] = rows["bytes"].fillna(-1).to_numpy(np.int64)
        return part

    def _memsets(self) -> Part | None:
        rows = self._device_query(MEMSET, _fields(self.columns(MEMSET), ("bytes", "memKind")))
        if rows is None:
            return None
        kinds = rows["memKind"].fillna(-1).to_numpy(np.int64)
        distinct, inverse = np.unique(kinds, return_inverse=True)
        names = np.array([f"Memset ({_MEMORY.get(k, ('Unknown', ''))[0]})" for k in distinct.tolist()], object)
        part = self._device_part(rows, "memset", _spread(names, inverse))
        part["bytes"] = rows["bytes"].fillna(-1).to_numpy(np.int64)
        return part

    def _syncs(self) -> Part | None:
        rows = self._device_query(SYNC, _fields(self.columns(SYNC), ("syncType",)))
        if rows is None:
            return None
        kinds = rows["syncType"].fillna(-1).to_numpy(np.int64)
        distinct, inverse = np.unique(kinds, return_inverse=True)
        names = np.array([_SYNC_NAMES.get(k, "Synchronization") for k in distinct.tolist()], object)
        return self._device_part(rows, "sync", _spread(names, inverse))

    def _device_part(self, rows: pd.DataFrame, kind: str, names: pd.Categorical) -> Part:
        """The columns every device row has, from a `_device_query`."""
        start = rows["start"].to_numpy(np.int64)
        device_id = rows["deviceId"].fillna(-1).to_numpy(np.int64)
        stream = rows["streamId"].fillna(-1).to_numpy(np.int64)
        stream = np.where(stream == _NO_STREAM, -1, stream)
        return {
            "ts_ns": start,
            "dur_ns": rows["end"].to_numpy(np.int64) - start,
            "kind": _constant(kind, len(rows), KINDS),
            "device": _device_labels(device_id),
            "stream": stream,
            "thread": np.full(len(rows), -1, np.int64),
            "name": names,
            "correlation": rows["correlationId"].fillna(-1).to_numpy(np.int64),
        }

    # ----------------------------------------------------------------------- host rows

    def _runtime(self) -> Part | None:
        have = self.columns(RUNTIME)
        if not {"start", "end", "globalTid", "nameId"} <= have:
            return None
        fields = _fields(have, ("correlationId",))
        rows = self.query(f"SELECT start, end, globalTid, {fields}, nameId FROM {RUNTIME} WHERE end IS NOT NULL")
        rows = _innermost_per_correlation(rows)
        names = self.names(rows["nameId"].to_numpy())
        names = names.rename_categories(names.categories.str.replace(NSYS_API_VERSION_SUFFIX, "", regex=True))
        sync = np.append(names.categories.map(is_sync_api).to_numpy(bool), False)[names.codes]
        kind = np.where(sync, KINDS.index("sync"), KINDS.index("runtime")).astype(np.int8)
        return self._host_part(rows, pd.Categorical.from_codes(kind, KINDS), names)

    def _nvtx(self) -> Part | None:
        have = self.columns(NVTX)
        if not {"start", "end", "eventType", "globalTid"} <= have:
            return None
        texts = _fields(have, ("text", "textId"), "NULL")
        ranges = ", ".join(str(t) for t in _NVTX_RANGES)
        rows = self.query(
            f"SELECT start, end, globalTid, -1 AS correlationId, {texts} FROM {NVTX} "
            f"WHERE eventType IN ({ranges}) AND end IS NOT NULL"
        )
        by_id = self.strings.reindex(rows["textId"].fillna(-1).to_numpy(np.int64)).to_numpy()
        names = pd.Categorical(np.where(rows["text"].notna().to_numpy(), rows["text"].to_numpy(), by_id))
        return self._host_part(rows, _constant("annotation", len(rows), KINDS), names)

    def _host_part(self, rows: pd.DataFrame, kind: pd.Categorical, names: pd.Categorical) -> Part:
        """The columns of host rows (start, end, globalTid, correlationId of a query)."""
        start = rows["start"].to_numpy(np.int64)
        global_tid = rows["globalTid"].fillna(-1).to_numpy(np.int64)
        n = len(rows)
        return {
            "ts_ns": start,
            "dur_ns": rows["end"].to_numpy(np.int64) - start,
            "kind": kind,
            "device": pd.Categorical.from_codes(np.full(n, -1, np.int8), categories=pd.Index([], dtype=object)),
            "stream": np.full(n, -1, np.int64),
            "thread": np.where(global_tid >= 0, global_tid & _TID_MASK, -1),
            "name": names,
            "correlation": rows["correlationId"].fillna(-1).to_numpy(np.int64),
        }

    # ----------------------------------------------------------------------- devices, clock, export

    def _gpus(self) -> dict[str, DeviceInfo]:
        """`TARGET_INFO_GPU`'s devices by the event table's id (``GPU:<id>``, CUPTI's device id)."""
        have = self.columns(GPU_INFO)
        if "id" not in have:
            return {}
        wanted = ("name", "smCount", "totalMemory", "clockRate", "memoryBandwidth", "computeMajor", "computeMinor")
        rows = self.query(f"SELECT id, {_fields(have, wanted, 'NULL')} FROM {GPU_INFO}")
        return {f"GPU:{int(row['id'])}": _device_info(row) for row in rows.to_dict("records")}

    def _clock(self) -> tuple[int, str]:
        """The offset that puts the export's times on the epoch (its session's start), and the clock it gives."""
        if "utcEpochNs" in self.columns(SESSION_START):
            start = self.db.execute(f"SELECT utcEpochNs FROM {SESSION_START} LIMIT 1").fetchone()
            if start and isinstance(start[0], int) and start[0] > 0:
                return start[0], "epoch"
        return 0, "relative"

    def _export_info(self) -> dict[str, str]:
        """The nsys version that exported the file and its schema (``META_DATA_EXPORT``, older ``EXPORT_META_DATA``)."""
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if {"name", "value"} <= self.columns(table):
                rows = self.db.execute(
                    f"SELECT name, value FROM {table} WHERE name IN ('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')"
                ).fetchall()
                return {str(name).lower(): str(value) for name, value in rows}
        return {}


def _fields(have: set[str], wanted: tuple[str, ...], missing: str = "-1") -> str:
    """A select list of the `wanted` columns, `missing` in place of each the table lacks (another nsys version's
    schema)."""
    return ", ".join(column if column in have else f"{missing} AS {column}" for column in wanted)


def _innermost_per_correlation(rows: pd.DataFrame) -> pd.DataFrame:
    """One host call per correlation id: nsys records a call traced with its backtrace twice (a "CUDA backtrace"
    row around the runtime row, same id); the launch a kernel links to is the inner one, which starts last."""
    linked = rows["correlationId"].fillna(-1).to_numpy(np.int64) > 0
    repeated = linked & rows["correlationId"].duplicated(keep=False).to_numpy()
    if not repeated.any():
        return rows
    inner = rows[repeated].sort_values("start", kind="stable").drop_duplicates("correlationId", keep="last")
    return pd.concat([rows[~repeated], inner]).sort_values("start", kind="stable").reset_index(drop=True)


def _copy_name(copy_kind: int, src: int, dst: int) -> str:
    """Kineto's name of a copy: ``Memcpy HtoD (Pageable -> Device)``."""
    word = _COPY_KINDS.get(copy_kind, ("Unknown", ""))[0]
    if src < 0 and dst < 0:
        return f"Memcpy {word}"
    return f"Memcpy {word} ({_MEMORY.get(src, ('Unknown', ''))[0]} -> {_MEMORY.get(dst, ('Unknown', ''))[0]})"


def _spread(values: np.ndarray, inverse: np.ndarray, categories: tuple[str, ...] | None = None) -> pd.Categorical:
    """A categorical of ``values[inverse]`` built from the distinct `values` (several may be equal), without a
    string per row."""
    distinct = pd.Categorical(values, categories=categories)
    return pd.Categorical.from_codes(distinct.codes[inverse.reshape(-1)], categories=distinct.categories)


def _constant(value: str, n: int, categories: tuple[str, ...]) -> pd.Categorical:
    return pd.Categorical.from_codes(np.full(n, categories.index(value), np.int8), categories=categories)


def _device_labels(ids: np.ndarray) -> pd.Categorical:
    """``GPU:<id>`` of each device row (CUPTI's device id, as Kineto labels it)."""
    distinct, inverse = np.unique(ids, return_inverse=True)
    labels = np.array([f"GPU:{d}" if d >= 0 else "GPU:?" for d in distinct.tolist()], dtype=object)
    return _spread(labels, inverse)


def _joined(parts: list[Part]) -> dict[str, Any]:
    """The parts' columns one after another; a column some part lacks is unknown there."""
    if not parts:
        return {"ts_ns": np.zeros(0, np.int64), "dur_ns": np.zeros(0, np.int64)}
    counts = [len(part["ts_ns"]) for part in parts]
    keys = list(dict.fromkeys(key for part in parts for key in part))
    joined: dict[str, Any] = {}
    for key in keys:
        pieces = [part.get(key) for part in parts]
        sample = next(piece for piece in pieces if piece is not None)
        if isinstance(sample, pd.Categorical):
            empty = sample.categories[:0]
            filled = [
                piece if piece is not None else pd.Categorical.from_codes(np.full(n, -1, np.int8), categories=empty)
                for piece, n in zip(pieces, counts, strict=True)
            ]
            joined[key] = pd.api.types.union_categoricals(_same_dtype(filled), ignore_order=True)
        else:
            missing = np.nan if np.asarray(sample).dtype.kind == "f" else -1
            joined[key] = np.concatenate(
                [
                    np.asarray(piece) if piece is not None else np.full(n, missing, np.asarray(sample).dtype)
                    for piece, n in zip(pieces, counts, strict=True)
                ]
            )
    if "kind" in joined:  # union_categoricals reorders: back to the fixed kinds
        joined["kind"] = joined["kind"].set_categories(KINDS)
    for key, categories in (("copy_kind", COPY_KINDS), ("src_memory", MEMORY_KINDS)):
        if key in joined:
            joined[key] = pd.Categorical(joined[key], categories=categories)
    return joined


def _same_dtype(columns: list[pd.Categorical]) -> list[pd.Categorical]:
    """Categoricals whose categories share the object dtype, so `union_categoricals` takes them all."""
    return [
        c if c.categories.dtype == object else pd.Categorical.from_codes(c.codes, c.categories.astype(object))
        for c in columns
    ]


def _device_info(row: dict[str, Any]) -> DeviceInfo:
    major, minor = _int(row["computeMajor"]), _int(row["computeMinor"], smallest=0)
    clock_hz = _int(row["clockRate"])
    bandwidth = _int(row["memoryBandwidth"])
    name = row["name"] if isinstance(row["name"], str) else None
    return DeviceInfo(
        id=f"GPU:{int(row['id'])}",
        name=name,
        vendor=_NVIDIA,
        compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
        sm_count=_int(row["smCount"]),
        memory_bytes=_int(row["totalMemory"]),
        clock_khz=None if clock_hz is None else clock_hz // 1000,
        memory_bandwidth_bps=None if bandwidth is None else float(bandwidth),
    )


def _int(value: object, smallest: int = 1) -> int | None:
    """A whole number of the export from `smallest` up, else None (NULL, NaN from pandas; 0 is "not recorded" but
    for a compute capability's minor)."""
    if isinstance(value, int | float | np.integer | np.floating) and np.isfinite(value) and value >= smallest:
        return int(value)
    return None


def _framework(table: pd.DataFrame) -> str:
    """``pytorch`` when its host ranges are PyTorch's (``ProfilerStep#N``, ``emit_nvtx``'s ``aten::`` ops), else
    ``unknown``: an nsys export does not say which framework ran."""
    names = table["name"].cat.categories
    return "pytorch" if len(names) and bool(names.str.match(NSYS_PYTORCH_RANGE).any()) else "unknown"
