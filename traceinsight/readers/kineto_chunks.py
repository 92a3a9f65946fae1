"""Kineto's events, chunk by chunk, as columns (`convert`): what kineto.py joins into the event table.

A chunk's decoded events become numpy columns and the args only some rows have (devices, copies, op costs,
collectives), and are dropped; kineto.py's `_Rows` does what needs every row. This module imports numpy and
msgspec only, not pandas: the early read's process (early.py) converts a file's chunks with it while the main
process imports pandas and the analyses.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import numpy as np

from traceinsight.kinds import COPY_KINDS, KINDS, MEMORY_KINDS
from traceinsight.readers._classify import copy_kind, is_sync_api, kineto_copy_memory
from traceinsight.readers.columns import StringPool, first_appearance, float_column, int_column
from traceinsight.readers.json_events import NO_ARGS, Args, Event
from traceinsight.readers.json_times import complete_and_instants, timed_of
from traceinsight.rules import COLLECTIVE_ENQUEUE_PATTERN, COLLECTIVE_HOST_PATTERN, COLLECTIVE_KERNEL_PATTERN

if TYPE_CHECKING:
    from traceinsight.readers.json_stream import TraceStream

# Kineto cat (lower-cased) -> (kind, runs on the device). Anything else is host "other".
_CATEGORIES: dict[str, tuple[str, bool]] = {
    "kernel": ("kernel", True),
    "gpu_memcpy": ("memcpy", True),
    "memcpy": ("memcpy", True),
    "gpu_memset": ("memset", True),
    "memset": ("memset", True),
    "cuda_sync": ("sync", True),
    "gpu_user_annotation": ("annotation", True),
    "cuda_runtime": ("runtime", False),
    "runtime": ("runtime", False),
    "cuda_driver": ("runtime", False),
    "cpu_op": ("cpu_op", False),
    "operator": ("cpu_op", False),
    "user_annotation": ("annotation", False),
    "python_function": ("python", False),
}
_SPAN_CAT = "trace"  # the profiler's own window: metadata, not a row
_OTHER = ("other", False)
_KIND_OTHER, _KIND_RUNTIME, _KIND_SYNC = KINDS.index("other"), KINDS.index("runtime"), KINDS.index("sync")
KIND_MEMCPY, _KIND_MEMSET = KINDS.index("memcpy"), KINDS.index("memset")
_KIND_CPU_OP = KINDS.index("cpu_op")
# Top-level keys only Kineto writes.
_KINETO_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "computeProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
)
# Complete events seen without a Kineto cat (nor Kineto's keys) before a streamed file is taken for another
# kind of Chrome trace: Kineto's first events already carry its cats.
_ROWS_TO_TELL_KINETO = 10_000
_NO_STREAM = 0xFFFFFFFF  # CUPTI's stream id of a device-wide event (Context Sync)
_MEMORY_EVENT = "[memory]"
_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA (ROCm builds report their GPUs as CUDA too)
T = TypeVar("T")
# The op args kept for costs (`_op_columns`), each as codes into its chunk's distinct texts under KEY + `TEXTS`.
OP_ARGS = ("input_dims", "input_types", "concrete_inputs")
TEXTS = "_texts"


def has_kineto_keys(top: dict[str, Any]) -> bool:
    return any(key in top for key in _KINETO_KEYS)


def has_kineto_cats(cats: Iterable[str | None]) -> bool:
    return any(cat is not None and cat.lower() in _CATEGORIES for cat in cats)


class Chunk(msgspec.Struct):
    """The rows of one chunk of events as columns: what `convert` sends back from a worker process.

    ``name`` codes index `names` (the chunk's own strings); ``*_row`` columns hold
    row numbers within the chunk for the sparse (row, value) columns.
    """

    columns: dict[str, np.ndarray]
    names: list[str]
    rows: int
    first_ts: int | None
    kineto_cats: bool
    warnings: Counter[str]
    ops: dict[str, np.ndarray]  # `_op_columns`: row numbers within the chunk, FLOPs, codes of arg texts
    collectives: dict[str, np.ndarray]  # `_collective_columns`: row numbers within the chunk, group, message


def convert(events: list[Event], exact_ts: bool) -> Chunk:
    """Turn one chunk of decoded events into columns: everything that needs one row only.

    Args only some rows have are read from those rows alone (stream, device,
    occupancy: device rows; bytes: copies and memsets; size: host calls with a
    correlation id) and kept sparse, as (row, value) pairs. Rules over names run
    once per distinct name of the rows they concern.
    """
    warnings: Counter[str] = Counter()
    complete, instants = complete_and_instants(events, exact_ts, warnings)
    memory = _memory_columns(instants, exact_ts, warnings)
    cats = StringPool()
    cat_codes = cats.encode([e.cat for e in complete.events])
    # Complete events' cats only; `looks_like_kineto` sees all, and `read_trace` asks it when this says no.
    kineto_cats = has_kineto_cats(cats.strings)
    is_span = cats.lookup(_is_span_cat, False, bool)[cat_codes]
    keep = ~is_span
    events = _select(complete.events, keep) if is_span.any() else complete.events
    cat_codes = cat_codes[keep]
    names = StringPool()
    name_codes = names.encode([e.name for e in events])
    kind = cats.lookup(_cat_kind, _KIND_OTHER, np.int8)[cat_codes]
    on_device = cats.lookup(_cat_on_device, False, bool)[cat_codes]
    runtime = kind == _KIND_RUNTIME
    kind[runtime & _by_name(names, name_codes, runtime, is_sync_api, False, bool)] = _KIND_SYNC
    memcpy = kind == KIND_MEMCPY

    args = [e.args or NO_ARGS for e in events]
    tid = int_column([e.tid for e in events])
    correlation = int_column([a.correlation for a in args])
    copies = memcpy | (kind == _KIND_MEMSET)
    calls = ~on_device & (correlation >= 0)
    size = int_column([a.size for a in _select(args, calls)])
    rows = np.arange(len(events))
    columns = {
        "ts_ns": complete.ts_ns[keep],
        "dur_ns": complete.dur_ns[keep],
        "kind": kind,
        "on_device": on_device,
        "thread": np.where(on_device, -1, tid),
        "name": name_codes,
        "correlation": correlation,
        "external_id": _external_ids(args),
        "copy_kind": _by_name(names, name_codes, memcpy, _copy_kind_code, -1, np.int8),
        "src_memory": _by_name(names, name_codes, memcpy, _copy_memory_code, -1, np.int8),
        "device_row": rows[on_device],
        **_device_columns(_select(events, on_device), _select(args, on_device), tid[on_device]),
        "copy_row": rows[copies],
        "copy_bytes": int_column([a.bytes for a in _select(args, copies)]),
        "call_correlation": correlation[calls][size >= 0],
        "call_size": size[size >= 0],
        "span_start": complete.ts_ns[is_span],
        "span_dur": complete.dur_ns[is_span],
        **memory,
    }
    first_ts = int(complete.ts_ns.min()) if len(complete.ts_ns) else None
    ops = _op_columns(_select(args, kind == _KIND_CPU_OP), rows[kind == _KIND_CPU_OP])
    collective = names.lookup(_is_collective_name, False, bool)[name_codes]
    collectives = _collective_columns(_select(args, collective), rows[collective])
    return Chunk(columns, names.strings, len(events), first_ts, kineto_cats, warnings, ops, collectives)


def _is_collective_name(name: str) -> bool:
    """A collective or its enqueue, by name (`rules.COLLECTIVE_*`): the events that carry `Collective name` args
    (NCCL kernels, ``record_param_comms``) are among them, so no other event's args are looked at."""
    return bool(
        COLLECTIVE_KERNEL_PATTERN.search(name)
        or COLLECTIVE_HOST_PATTERN.match(name)
        or COLLECTIVE_ENQUEUE_PATTERN.search(name)
    )


def _collective_columns(args: list[Args], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The collectives' args of a chunk's collective rows (their `args`, at `rows`). Where Kineto wrote no ``In msg
    nelems`` (gloo's ranges carry only ``record_shapes``' ``Input Dims``), the message is the first input's
    elements and its dtype the first ``Input type``."""
    nelems = int_column([a.in_msg_nelems for a in args])
    dtype = np.array([a.dtype for a in args], dtype=object)
    for i in np.flatnonzero(nelems < 0).tolist():
        nelems[i], shape_dtype = _first_input(args[i])
        if dtype[i] is None:
            dtype[i] = shape_dtype
    return {
        "row": rows,
        "collective": np.array([a.collective_name for a in args], dtype=object),
        "group": np.array([None if a.process_group is None else str(a.process_group) for a in args], dtype=object),
        "group_size": int_column([a.group_size for a in args]),
        "seq": int_column([a.seq for a in args]),
        "in_nelems": nelems,
        "out_nelems": int_column([a.out_msg_nelems for a in args]),
        "dtype": dtype,
    }


def _first_input(args: Args) -> tuple[int, str | None]:
    """Elements and dtype of an op's first input from ``Input Dims`` / ``Input type`` (a tensor list: its tensors'
    elements summed, dtype unknown); (-1, None) when they do not say."""
    try:
        dims = msgspec.json.decode(bytes(args.input_dims)) if bytes(args.input_dims) else None
        types = msgspec.json.decode(bytes(args.input_types)) if bytes(args.input_types) else None
    except msgspec.DecodeError:
        return -1, None
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list) or not dims[0]:
        return -1, None
    first = dims[0]
    tensors = first if all(isinstance(d, list) for d in first) else [first]
    if not all(isinstance(size, int) for tensor in tensors for size in tensor):
        return -1, None
    dtype = types[0] if isinstance(types, list) and types and isinstance(types[0], str) and types[0] else None
    return sum(int(np.prod(tensor)) for tensor in tensors), None if dtype == "TensorList" else dtype


def _op_columns(args: list[Args], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The op-cost columns of a chunk's CPU ops (their `args`, at `rows`): those with shapes or FLOPs only.

    Each arg (`OP_ARGS`) is a code per row into the chunk's distinct texts of it (``KEY_texts``), left undecoded:
    the file's chunks share most of them, so `kineto._Rows.op_table` decodes each distinct text once for the whole
    file (and a code array pickles in a fraction of the time of decoded values).
    """
    flops = float_column([a.flops for a in args])
    # An op without shapes nor FLOPs costs nothing to keep, and is told apart without copying its arg texts.
    shaped = np.fromiter(map(len, map(attrgetter("input_dims"), args)), np.int64, len(args)) > 0
    costed = shaped | ~np.isnan(flops)
    args, rows, flops = _select(args, costed), rows[costed], flops[costed]
    columns: dict[str, np.ndarray] = {}
    for key in OP_ARGS:
        codes, texts = first_appearance(list(map(bytes, map(attrgetter(key), args))))
        columns[key] = codes
        columns[key + TEXTS] = np.array(texts + [None], dtype=object)[:-1]  # a 1-d array of bytes, even of none
    return {"row": rows, "flops": flops, **columns}


def _memory_columns(instants: list[Event], exact_ts: bool, warnings: Counter[str]) -> dict[str, np.ndarray]:
    """The CUDA ``[memory]`` events among a chunk's instant events, as ``memory_*`` columns (ts not yet offset)."""
    memory = [e for e in instants if e.name == _MEMORY_EVENT]
    if not memory:
        return {}  # `_Rows.memory` finds no memory column then
    cuda = int_column([(e.args or NO_ARGS).device_type for e in memory]) == _CUDA_DEVICE_TYPE
    timed = timed_of(_select(memory, cuda), exact_ts, warnings, "memory")
    args = [e.args or NO_ARGS for e in timed.events]
    return {
        "memory_ts": timed.ts_ns,
        "memory_device": int_column([a.device_id for a in args]),
        "memory_thread": int_column([e.tid for e in timed.events]),
        "memory_bytes": int_column([a.memory_bytes for a in args], missing=0),
        "memory_allocated": int_column([a.total_allocated for a in args]),
        "memory_reserved": int_column([a.total_reserved for a in args]),
        "memory_addr": int_column([a.addr for a in args]),
    }


def _external_ids(args: list[Args]) -> np.ndarray:
    """Kineto's ``External id``, else the 2021 schema's ``external id`` (-1 when neither says)."""
    ids = int_column([a.external_id for a in args])
    missing = ids == -1
    if missing.any():
        ids[missing] = int_column([a.external_id_old for a in _select(args, missing)])
    return ids


def _device_columns(events: list[Event], args: list[Args], tid: np.ndarray) -> dict[str, np.ndarray]:
    """Device id, stream and kernel figures of the device rows of a chunk."""
    device_arg = int_column([a.device for a in args])
    stream = int_column([a.stream for a in args])
    stream = np.where(stream >= 0, stream, tid)  # old schema: only the tid says "stream 7"
    stream[stream == _NO_STREAM] = -1
    return {
        "device_id": np.where(device_arg >= 0, device_arg, int_column([e.pid for e in events])),
        "device_stream": stream,
        "device_blocks_per_sm": float_column([a.blocks_per_sm for a in args]),
        "device_occupancy_pct": float_column([a.occupancy_pct for a in args]),
    }


def _is_span_cat(cat: str) -> bool:
    return cat.lower() == _SPAN_CAT


def _cat_kind(cat: str) -> int:
    return KINDS.index(_CATEGORIES.get(cat.lower(), _OTHER)[0])


def _cat_on_device(cat: str) -> bool:
    return _CATEGORIES.get(cat.lower(), _OTHER)[1]


def _copy_kind_code(name: str) -> int:
    return COPY_KINDS.index(copy_kind(name))


def _copy_memory_code(name: str) -> int:
    return MEMORY_KINDS.index(kineto_copy_memory(name))


def _by_name(
    names: StringPool, codes: np.ndarray, rows: np.ndarray, rule: Callable[[str], T], missing: T, dtype: Any
) -> np.ndarray:
    """`rule` of the name of each row in `rows` (`missing` elsewhere), run once per distinct name there."""
    result = np.full(len(codes), missing, dtype=dtype)
    if rows.any():
        distinct, inverse = np.unique(codes[rows], return_inverse=True)
        values = [rule(names.strings[c]) if c >= 0 else missing for c in distinct.tolist()]
        result[rows] = np.array(values, dtype=dtype)[inverse.reshape(-1)]
    return result


def _select(items: list[T], mask: np.ndarray) -> list[T]:
    """The items where `mask` is true."""
    return list(itertools.compress(items, mask.tolist()))


def streamed_chunks(stream: TraceStream, jobs: int) -> Iterator[Chunk]:
    """The stream's chunks converted (here, or by `jobs` processes), in order; it stops once they tell the file is
    no Kineto trace: neither Kineto's keys before the events nor its cats in `_ROWS_TO_TELL_KINETO` rows (an XProf
    export, say, which `read_trace` then decodes once, as what it is)."""
    chunks = stream.map(convert, jobs) if jobs > 1 else (convert(*chunk) for chunk in stream)
    rows, kineto = 0, False
    for chunk in chunks:
        yield chunk
        rows, kineto = rows + chunk.rows, kineto or chunk.kineto_cats
        if rows >= _ROWS_TO_TELL_KINETO and not kineto and not has_kineto_keys(stream.top):
            return
