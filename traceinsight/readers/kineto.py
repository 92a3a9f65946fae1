"""Read PyTorch profiler (Kineto) Chrome-trace JSON into the canonical event table.

Both Kineto schemas are handled: the 2021 one (cats ``Kernel``, ``Memcpy``,
``Runtime``, ``Operator``; device tids ``"stream 7"``; integer µs) and the current
one (``kernel``, ``gpu_memcpy``, ``cuda_runtime``, ``cpu_op``, ...; fractional µs;
``baseTimeNanoseconds``). AMD/ROCm traces use the same cats with HIP names.

Device memory: the ``[memory]`` instant events of CUDA devices (``Device Type``
1; ``profile_memory=True``) become `TraceRead.memory` (events.py): ``Total
Allocated`` and ``Total Reserved`` where written, else (2021 schema: only
``Bytes``) the running sum of ``Bytes`` per device from 0 at its first event, with
``absolute`` False. The op of each is the outermost CPU op running on its thread.

Op costs: the CPU ops that record ``Input Dims`` (``record_shapes=True``) or
``flops`` (``with_flops=True``) become `TraceRead.ops` (events.py), with ``Input
type`` and ``Concrete Inputs``. The args are decoded once per distinct text of a
chunk (a model repeats a few thousand shapes over and over), into values the rows
share; a text that is no list stays as decoded, for analysis/flops.py to refuse.

Files are streamed (`read_kineto_json`, json_stream.TraceStream): each chunk of
decoded events becomes columns (`convert`, in a worker process when several
decode at once) and is dropped; `_Rows` joins the chunks and does what needs all
rows. A document already decoded whole (`read_kineto(path, doc)`, as `read_trace`
passes it) goes through the same conversion as one chunk.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.events import (
    COPY_KINDS,
    KINDS,
    MEMORY_KINDS,
    DeviceInfo,
    InputInfo,
    TraceRead,
    kind_mask,
    make_collective_table,
    make_event_table,
    make_memory_table,
    make_op_table,
    take_rows,
)
from traceinsight.limits import EVENT_BYTES, MemoryLimit
from traceinsight.ordering import tuple_codes
from traceinsight.readers._repair import drop_duplicates, valid_occupancy
from traceinsight.readers.columns import ColumnBuffers, StringPool, first_appearance
from traceinsight.readers.early import EarlyRead, take
from traceinsight.readers.json_document import load_trace_json
from traceinsight.readers.json_events import TraceDoc, gc_paused
from traceinsight.readers.json_files import CHUNK_BYTES, json_size_guess
from traceinsight.readers.json_stream import StreamFallback, StreamRestart, TraceStream
from traceinsight.readers.kineto_chunks import (
    KIND_MEMCPY,
    OP_ARGS,
    TEXTS,
    Chunk,
    convert,
    has_kineto_cats,
    has_kineto_keys,
    streamed_chunks,
)

# A lower bound on the JSON of one event (Kineto writes 200-400 bytes): sizes the column buffers.
_FEWEST_BYTES_PER_EVENT = 64
_EPOCH_NS_2001 = 10**18  # ts at or beyond this are wall-clock epoch ns
_AMD = re.compile(r"\b(?:AMD|Radeon|Instinct)\b")
_NVIDIA = re.compile(r"NVIDIA|Tesla|Quadro|GeForce|TITAN", re.IGNORECASE)


def looks_like_kineto(doc: TraceDoc) -> bool:
    """Kineto writes its own top-level keys; failing those, its event cats give it away."""
    return has_kineto_keys(doc.top) or has_kineto_cats({e.cat for e in doc.events})


def read_kineto(
    path: Path | str,
    doc: TraceDoc | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    on_bytes: Callable[[int], None] | None = None,
    jobs: int = 1,
    limit: MemoryLimit | None = None,
) -> TraceRead:
    """Read a Kineto trace (``*.pt.trace.json[.gz]``): `doc` when already decoded whole, else streamed from `path`."""
    rows = _Rows.of_doc(doc) if doc is not None else _Rows.of_file(path, chunk_bytes, on_bytes, jobs, limit)
    return rows.read(path)


def read_kineto_json(
    path: Path | str,
    chunk_bytes: int = CHUNK_BYTES,
    on_bytes: Callable[[int], None] | None = None,
    jobs: int = 1,
    limit: MemoryLimit | None = None,
) -> TraceRead | None:
    """Stream a Chrome-trace JSON file as Kineto; None when it is not a Kineto trace (an XProf export, say),
    which its first thousands of events tell.

    `jobs` > 1 decodes the chunks in that many processes (`TraceStream.map`); `on_bytes`: see `TraceStream`.
    `limit`: a `TraceError` as soon as the events of the whole file, projected from those read so far, would
    not fit (after the first chunk, for a file far too large).
    """
    early = take(path)  # read meanwhile by a process of its own (`early.early_read`), when it was
    rows = _Rows.of_early(early) if early is not None else _Rows.of_file(path, chunk_bytes, on_bytes, jobs, limit)
    return rows.read(path) if rows.kineto else None


def _decoded_args(parts: list[dict[str, np.ndarray]], key: str) -> np.ndarray:
    """Op arg `key` of every row of the chunks' `parts` (`kineto_chunks._op_columns`: codes into each chunk's
    distinct texts): each text met decoded once, and values equal however written made one object, as
    `flops.op_costs` tells signatures apart by object (resnet50's 2,507 signatures are 611)."""
    texts = [part[key + TEXTS] for part in parts]
    offsets = np.cumsum([0] + [len(t) for t in texts[:-1]])
    codes = np.concatenate([part[key] + offset for part, offset in zip(parts, offsets.tolist(), strict=True)])
    text_code, distinct = first_appearance(np.concatenate(texts).tolist())
    values = np.empty(len(distinct), dtype=object)
    for i, text in enumerate(distinct):
        values[i] = msgspec.json.decode(text) if text else None
    if len(values):
        value_code, first = tuple_codes(np.array([msgspec.json.encode(v) for v in values], dtype=object))
        values = values[first[value_code]]
    return values[text_code[codes]]


class _Rows:
    """The chunks of one file, gathered into columns, and what else the read needs.

    Chunks are converted one by one (`convert`, here or in worker processes), so
    a chunk's events can be dropped before the next is decoded; what spans chunks
    (the clock offset, device labels, copy sizes found on runtime calls, the name
    categories) is done here, once.
    """

    def __init__(self, top: dict[str, Any], warnings: Counter[str], expected_rows: int = 1 << 16) -> None:
        self.top = top
        self.warnings = warnings
        self.columns = ColumnBuffers(expected_rows)
        self.names = StringPool()
        self.kineto = False
        self.first_ts: int | None = None
        self.rows = 0
        self.ops: list[dict[str, np.ndarray]] = []  # each chunk's `_op_columns`, rows made file-wide
        self.collectives: list[dict[str, np.ndarray]] = []  # each chunk's `_collective_columns`, rows file-wide

    @classmethod
    def of_doc(cls, doc: TraceDoc) -> _Rows:
        rows = cls(doc.top, doc.warnings)
        with gc_paused():
            rows.add(convert(doc.events, doc.exact_ts))
        rows.kineto = rows.kineto or has_kineto_keys(doc.top)
        return rows

    @classmethod
    def of_early(cls, early: EarlyRead) -> _Rows:
        """The chunks an early read converted (`early.take`: those of `TraceStream.pieces`, then of `rest`, as
        `TraceStream.map` reads a stream)."""
        rows = cls(early.top, early.warnings, sum(chunk.rows for chunk in early.chunks))
        for chunk in early.chunks:
            rows.add(chunk)
        rows.kineto = rows.kineto or has_kineto_keys(early.top)
        return rows

    @classmethod
    def of_file(
        cls,
        path: Path | str,
        chunk_bytes: int,
        on_bytes: Callable[[int], None] | None,
        jobs: int,
        limit: MemoryLimit | None = None,
    ) -> _Rows:
        """Stream the file; one the stream cannot take apart is decoded whole (`load_trace_json`)."""
        rows = json_size_guess(path) // _FEWEST_BYTES_PER_EVENT
        if limit is not None:  # the buffers' capacity costs address space only, but no more than the limit allows
            rows = min(rows, limit.total // (limit.holders * EVENT_BYTES))
        try:
            try:
                return cls._of_stream(TraceStream(path, chunk_bytes, on_bytes, limit), jobs, rows)
            except StreamRestart:  # a chunk was cut inside an event: plain iteration sorts that out
                return cls._of_stream(TraceStream(path, chunk_bytes, on_bytes, limit), 1, rows)
        except StreamFallback:
            return cls.of_doc(load_trace_json(path, limit=limit))

    @classmethod
    def _of_stream(cls, stream: TraceStream, jobs: int, expected_rows: int) -> _Rows:
        rows = cls(stream.top, stream.warnings, expected_rows)
        with gc_paused():
            for chunk in streamed_chunks(stream, jobs):
                rows.add(chunk)
                if stream.limit is not None:
                    stream.limit.check_events(stream.path, stream.projected(rows.rows))
        rows.top = stream.top
        rows.kineto = rows.kineto or has_kineto_keys(stream.top)
        return rows

    def add(self, chunk: Chunk) -> None:
        """Append a converted chunk: names translated to this file's codes, row numbers shifted."""
        columns = chunk.columns
        columns["name"] = self.names.add(chunk.names)[columns["name"]]
        columns["device_row"] += self.rows
        columns["copy_row"] += self.rows
        if len(chunk.ops["row"]):
            chunk.ops["row"] += self.rows
            self.ops.append(chunk.ops)
        if len(chunk.collectives["row"]):
            chunk.collectives["row"] += self.rows
            self.collectives.append(chunk.collectives)
        self.columns.append(**columns)
        self.rows += chunk.rows
        if chunk.first_ts is not None:
            self.first_ts = chunk.first_ts if self.first_ts is None else min(self.first_ts, chunk.first_ts)
        self.kineto = self.kineto or chunk.kineto_cats
        self.warnings.update(chunk.warnings)

    def read(self, path: Path | str) -> TraceRead:
        """The `TraceRead` of all chunks added."""
        offset, clock = _clock(self.top, self.first_ts)
        column = self.columns.column
        n = self.rows
        kind = column("kind", np.int8)
        correlation = column("correlation", np.int64)
        nbytes = _scatter(n, column("copy_row", np.int64), column("copy_bytes", np.int64), -1)
        calls = column("call_correlation", np.int64), column("call_size", np.int64)
        _fill_copy_sizes(nbytes, kind == KIND_MEMCPY, correlation, *calls)
        on_device = column("on_device", bool)
        device_rows = column("device_row", np.int64)
        ts_ns = column("ts_ns", np.int64)
        ts_ns += offset
        rank = _rank(self.top)
        host = self.top.get("host_name") if isinstance(self.top.get("host_name"), str) else None
        table = make_event_table(
            {
                "ts_ns": ts_ns,
                "dur_ns": column("dur_ns", np.int64),
                "kind": pd.Categorical.from_codes(kind, KINDS),
                "device": _device_labels(column("device_id", np.int64), on_device),
                "stream": _scatter(n, device_rows, column("device_stream", np.int64), -1),
                "host": None if host is None else pd.Categorical.from_codes(np.zeros(n, np.int8), [host]),
                "rank": np.full(n, rank, dtype=np.int32),
                "thread": column("thread", np.int64),
                "name": self.names.categorical(column("name", np.int32)),
                "correlation": correlation,
                "external_id": column("external_id", np.int64),
                "bytes": nbytes,
                "copy_kind": pd.Categorical.from_codes(column("copy_kind", np.int8), COPY_KINDS),
                "src_memory": pd.Categorical.from_codes(column("src_memory", np.int8), MEMORY_KINDS),
                "blocks_per_sm": _valid_blocks_per_sm(
                    _scatter(n, device_rows, _float32(column("device_blocks_per_sm", np.float64)), np.nan),
                    self.warnings,
                ),
                "occupancy_pct": valid_occupancy(
                    _scatter(n, device_rows, _float32(column("device_occupancy_pct", np.float64)), np.nan),
                    self.warnings,
                    "kineto",
                ),
            },
            n,
        )
        collectives = self.collective_table(table)
        table = drop_duplicates(table, self.warnings, "kineto")
        metadata = _metadata(self.top, clock, offset)
        span_start, span_dur = column("span_start", np.int64), column("span_dur", np.int64)
        if len(span_start):
            metadata["trace_span_ns"] = (int(span_start.min()) + offset, int((span_start + span_dur).max()) + offset)
        return TraceRead(
            events=table,
            input=InputInfo(
                path=str(path), format="kineto", host=host, rank=rank if rank >= 0 else None, events=len(table)
            ),
            framework="pytorch",
            devices=_devices(self.top, table["device"].cat.categories),
            metadata=metadata,
            warnings=self.warnings,
            memory=self.memory(offset, table),
            ops=self.op_table(ts_ns),
            collectives=collectives,
        )

    def collective_table(self, table: pd.DataFrame) -> pd.DataFrame:
        """The collectives' args table of the collectives met (`table`: the events, row for row as read)."""
        if not self.collectives:
            return make_collective_table()
        rows = np.concatenate([part["row"] for part in self.collectives])
        taken = take_rows(table, rows, ["ts_ns", "dur_ns", "thread", "device", "stream", "name"])
        return make_collective_table(
            {
                **{key: taken[key].to_numpy() for key in ("ts_ns", "dur_ns", "thread", "stream")},
                **{key: taken[key].array.remove_unused_categories() for key in ("device", "name")},
                **{
                    key: np.concatenate([part[key] for part in self.collectives])
                    for key in ("collective", "group", "group_size", "seq", "in_nelems", "out_nelems", "dtype")
                },
            }
        )

    def op_table(self, ts_ns: np.ndarray) -> pd.DataFrame:
        """The op-cost table of the ops met (`ts_ns`: every row's start on the event table's clock)."""
        if not self.ops:
            return make_op_table()
        column = self.columns.column
        rows = np.concatenate([part["row"] for part in self.ops])
        names = self.names.categorical(column("name", np.int32)[rows])
        return make_op_table(
            {
                "ts_ns": ts_ns[rows],
                "dur_ns": column("dur_ns", np.int64)[rows],
                "thread": column("thread", np.int64)[rows],
                "name": names.remove_unused_categories(),
                "external_id": column("external_id", np.int64)[rows],
                **{key: _decoded_args(self.ops, key) for key in OP_ARGS},
                "flops": np.concatenate([part["flops"] for part in self.ops]),
            }
        )

    def memory(self, offset: int, table: pd.DataFrame) -> pd.DataFrame:
        """The memory table of the ``memory_*`` columns; `table` (the events) gives each row its op."""
        column = self.columns.column
        if not len(column("memory_ts", np.int64)):
            return make_memory_table()
        ts_ns = column("memory_ts", np.int64) + offset
        order = np.argsort(ts_ns, kind="stable")
        ts_ns = ts_ns[order]
        device_id, thread, delta, allocated, reserved, addr = (
            column(f"memory_{name}", np.int64)[order]
            for name in ("device", "thread", "bytes", "allocated", "reserved", "addr")
        )
        devices = _device_labels(device_id, np.ones(len(device_id), bool))
        absolute = np.ones(len(ts_ns), bool)
        for code in np.unique(devices.codes).tolist():
            rows = np.flatnonzero(devices.codes == code)
            if (allocated[rows] < 0).any():  # the 2021 schema: only Bytes
                allocated[rows] = np.cumsum(delta[rows])
                absolute[rows] = False
        return make_memory_table(
            {
                "ts_ns": ts_ns,
                "device": devices,
                "thread": thread,
                "allocated": allocated,
                "reserved": reserved,
                "delta": delta,
                "addr": addr,
                "op": _enclosing_ops(table, ts_ns, thread),
                "absolute": absolute,
            }
        )


def _enclosing_ops(table: pd.DataFrame, ts_ns: np.ndarray, thread: np.ndarray) -> pd.Categorical:
    """Name of the outermost CPU op running on `thread` at `ts_ns`, for each memory event (NaN if none).

    Per thread, the outermost ops are those starting after every op before them
    has ended (ops sorted by start, longer first); they do not overlap, so one
    binary search finds each event's.
    """
    names = table["name"].cat
    codes = np.full(len(ts_ns), -1, np.int64)
    cpu = np.flatnonzero(kind_mask(table, "cpu_op"))
    cpu_thread = table["thread"].to_numpy()[cpu]
    cpu_start = table["ts_ns"].to_numpy()[cpu]
    cpu_end = cpu_start + table["dur_ns"].to_numpy()[cpu]
    for tid in np.unique(thread).tolist():
        mine = cpu_thread == tid
        if not mine.any():
            continue
        rows, start, end = cpu[mine], cpu_start[mine], cpu_end[mine]
        order = np.lexsort((-end, start))
        rows, start, end = rows[order], start[order], end[order]
        outermost = np.ones(len(rows), bool)
        outermost[1:] = start[1:] >= np.maximum.accumulate(end)[:-1]
        rows, start, end = rows[outermost], start[outermost], end[outermost]
        events = np.flatnonzero(thread == tid)
        at = np.searchsorted(start, ts_ns[events], side="right") - 1
        inside = (at >= 0) & (ts_ns[events] <= end[np.maximum(at, 0)])
        codes[events[inside]] = names.codes.to_numpy()[rows[at[inside]]]
    return pd.Categorical.from_codes(codes, categories=names.categories).remove_unused_categories()


def _valid_blocks_per_sm(values: np.ndarray, warnings: Counter[str]) -> np.ndarray:
    """Blocks per SM are >= 0 and finite; anything else is unknown (NaN), counted."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isnan(values) & ~((values >= 0) & np.isfinite(values))
    if bad.any():
        warnings["kineto: impossible blocks-per-SM values ignored"] += int(bad.sum())
    return np.where(bad, np.nan, values)


def _clock(top: dict[str, Any], first_ts: int | None) -> tuple[int, str]:
    """Offset that puts ts on the epoch, and what the resulting clock is.

    Since 2023 Kineto writes ts relative to ``baseTimeNanoseconds`` (the epoch
    time floored to a 7,889,238 s "trimester", to keep ts within a double's
    precision); older traces write epoch µs directly and have no such key.
    """
    base = top.get("baseTimeNanoseconds")
    first = first_ts or 0
    if isinstance(base, int) and base > 0 and first < base:
        return base, "epoch"
    return 0, "epoch" if first >= _EPOCH_NS_2001 else "relative"


def _fill_copy_sizes(
    nbytes: np.ndarray, memcpy: np.ndarray, correlation: np.ndarray, call_correlation: np.ndarray, call_size: np.ndarray
) -> None:
    """Fill copy bytes the device event lacks from its host call's ``size`` arg, in place.

    ROCm's gpu_memcpy has no ``bytes``; the hipMemcpy* call with the same
    correlation id carries ``size`` (`call_*`: the host calls that have one).
    Copies with neither stay -1.
    """
    need = memcpy & (nbytes < 0) & (correlation >= 0)
    if not need.any():
        return
    lookup = pd.Series(call_size, index=call_correlation)
    found = lookup[~lookup.index.duplicated()].reindex(correlation[need]).to_numpy(dtype=np.float64)
    nbytes[need] = np.where(np.isnan(found), -1, found).astype(np.int64)


def _scatter(n: int, rows: np.ndarray, values: np.ndarray, missing: Any) -> np.ndarray:
    """A column of `n` rows holding `values` at `rows` and `missing` elsewhere."""
    column = np.full(n, missing, dtype=values.dtype)
    column[rows] = values
    return column


def _device_labels(ids: np.ndarray, on_device: np.ndarray) -> pd.Categorical:
    """``GPU:<id>`` for device rows (`ids`: theirs only; ``GPU:?`` when neither args nor pid say), NaN for host rows."""
    distinct = np.unique(ids)
    codes = np.full(len(on_device), -1, dtype=np.int64)
    codes[on_device] = np.searchsorted(distinct, ids)
    return pd.Categorical.from_codes(codes, categories=[f"GPU:{d}" if d >= 0 else "GPU:?" for d in distinct])


def _rank(top: dict[str, Any]) -> int:
    """``distributedInfo.rank``; -1 when absent or no rank (not an int32 >= 0)."""
    info = top.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < 2**31 else -1


def _float32(values: np.ndarray) -> np.ndarray:
    """The table's float columns are float32 (`model`); what a double holds beyond that range is infinite."""
    with np.errstate(over="ignore"):
        return values.astype(np.float32)


def _metadata(top: dict[str, Any], clock: str, offset: int) -> dict[str, Any]:
    """Scalar top-level keys, distributedInfo without its long lists, and the clock used."""
    metadata: dict[str, Any] = {k: v for k, v in top.items() if isinstance(v, str | int | float)}
    info = top.get("distributedInfo")
    if isinstance(info, dict):
        metadata["distributedInfo"] = {k: v for k, v in info.items() if not isinstance(v, list | dict)}
    metadata["clock"] = clock
    metadata["ts_offset_ns"] = offset
    return metadata


def _devices(top: dict[str, Any], seen: Iterable[str]) -> dict[str, DeviceInfo]:
    """Devices from ``deviceProperties`` (old schema: ``computeProperties``), plus any seen in events."""
    props = top.get("deviceProperties") or top.get("computeProperties") or []
    devices: dict[str, DeviceInfo] = {}
    for prop in props if isinstance(props, list) else []:
        if not isinstance(prop, dict) or not isinstance(prop.get("id"), int):
            continue
        name = prop.get("name") if isinstance(prop.get("name"), str) else None
        major = _int_or_none(prop.get("computeMajor", prop.get("major")))
        minor = _int_or_none(prop.get("computeMinor", prop.get("minor")))
        device_id = f"GPU:{prop['id']}"
        devices[device_id] = DeviceInfo(
            id=device_id,
            name=name,
            vendor=_vendor(name),
            compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
            sm_count=_int_or_none(prop.get("numSms", prop.get("multiProcessorCount"))),
            memory_bytes=_int_or_none(prop.get("totalGlobalMem")),
        )
    for device_id in seen:
        devices.setdefault(device_id, DeviceInfo(id=device_id))
    return devices


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _vendor(name: str | None) -> str | None:
    """Vendor spelled as XSpace's ``device_vendor`` stat ("Nvidia", "AMD")."""
    if name is None:
        return None
    if _AMD.search(name):
        return "AMD"
    return "Nvidia" if _NVIDIA.search(name) else None
