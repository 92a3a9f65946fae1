"""Read PyTorch profiler (Kineto) Chrome-trace JSON into the canonical event table.

Both Kineto schemas are handled: the 2021 one (cats ``Kernel``, ``Memcpy``,
``Runtime``, ``Operator``; device tids ``"stream 7"``; integer µs) and the current
one (``kernel``, ``gpu_memcpy``, ``cuda_runtime``, ``cpu_op``, ...; fractional µs;
``baseTimeNanoseconds``). AMD/ROCm traces use the same cats with HIP names.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.model import (
    COPY_KINDS,
    KINDS,
    MEMORY_KINDS,
    DeviceInfo,
    InputInfo,
    TraceRead,
    make_event_table,
)
from traceinsight.readers._classify import copy_kind, is_sync_api, kineto_copy_memory, per_category
from traceinsight.readers.jsonload import (
    NO_ARGS,
    TraceDoc,
    category_column,
    complete_events,
    float_column,
    int_column,
    load_trace_json,
)

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
_KIND_OTHER, _KIND_RUNTIME = KINDS.index("other"), KINDS.index("runtime")
_KIND_MEMCPY, _KIND_MEMSET = KINDS.index("memcpy"), KINDS.index("memset")
# Top-level keys only Kineto writes.
_KINETO_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "computeProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
)
_NO_STREAM = 0xFFFFFFFF  # CUPTI's stream id of a device-wide event (Context Sync)
_EPOCH_NS_2001 = 10**18  # ts at or beyond this are wall-clock epoch ns
_AMD = re.compile(r"\b(?:AMD|Radeon|Instinct)\b")
_NVIDIA = re.compile(r"NVIDIA|Tesla|Quadro|GeForce|TITAN", re.IGNORECASE)


def looks_like_kineto(doc: TraceDoc) -> bool:
    """Kineto writes its own top-level keys; failing those, its event cats give it away."""
    if any(key in doc.top for key in _KINETO_KEYS):
        return True
    return any(e.cat is not None and e.cat.lower() in _CATEGORIES for e in doc.events)


def read_kineto(path: Path | str, doc: TraceDoc | None = None) -> TraceRead:
    """Read a Kineto trace (``*.pt.trace.json[.gz]``); `doc` skips loading when already decoded."""
    doc = doc if doc is not None else load_trace_json(path)
    complete = complete_events(doc)
    offset, clock = _clock(doc.top, complete.ts_ns)
    all_cats = category_column([e.cat for e in complete.events])
    is_span = per_category(all_cats, lambda c: c.lower() == _SPAN_CAT, False, bool)
    keep = ~is_span
    events = list(itertools.compress(complete.events, keep))
    cats = all_cats[keep]

    names = category_column([e.name for e in events])
    kind, on_device = _kinds(cats, names)
    memcpy = kind == _KIND_MEMCPY

    args = [e.args or NO_ARGS for e in events]
    pid = int_column([e.pid for e in events])
    tid = int_column([e.tid for e in events])
    device_arg = int_column([a.device for a in args])
    stream = int_column([a.stream for a in args])
    stream = np.where(stream >= 0, stream, tid)  # old schema: only the tid says "stream 7"
    stream[stream == _NO_STREAM] = -1
    correlation = int_column([a.correlation for a in args])
    nbytes = _bytes_with_runtime_size(
        int_column([a.bytes for a in args]),
        memcpy,
        ~on_device,
        correlation,
        int_column([a.size for a in args]),
    )
    n = len(events)
    rank = _rank(doc.top)
    host = doc.top.get("host_name") if isinstance(doc.top.get("host_name"), str) else None
    table = make_event_table(
        {
            "ts_ns": complete.ts_ns[keep] + offset,
            "dur_ns": complete.dur_ns[keep],
            "kind": pd.Categorical.from_codes(kind, KINDS),
            "device": _device_labels(np.where(device_arg >= 0, device_arg, pid), on_device),
            "stream": np.where(on_device, stream, -1),
            "host": None if host is None else pd.Categorical.from_codes(np.zeros(n, np.int8), [host]),
            "rank": np.full(n, rank, dtype=np.int64),
            "thread": np.where(on_device, -1, tid),
            "name": names,
            "correlation": correlation,
            "external_id": int_column([a.external_id if a.external_id != -1 else a.external_id_old for a in args]),
            "bytes": np.where(memcpy | (kind == _KIND_MEMSET), nbytes, -1),
            **_copy_columns(names, memcpy),
            "blocks_per_sm": float_column([a.blocks_per_sm for a in args]),
            "occupancy_pct": float_column([a.occupancy_pct for a in args]),
        },
        n,
    )
    metadata = _metadata(doc.top, clock, offset)
    if is_span.any():
        starts = complete.ts_ns[is_span] + offset
        metadata["trace_span_ns"] = (int(starts.min()), int((starts + complete.dur_ns[is_span]).max()))
    return TraceRead(
        events=table,
        input=InputInfo(path=str(path), format="kineto", host=host, rank=rank if rank >= 0 else None, events=n),
        framework="pytorch",
        devices=_devices(doc.top, table["device"].cat.categories),
        metadata=metadata,
        warnings=doc.warnings,
    )


def _kinds(cats: pd.Categorical, names: pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """Kind code of every row and whether it runs on the device, from its cat (and name for syncs)."""
    kind = per_category(cats, lambda c: KINDS.index(_CATEGORIES.get(c.lower(), _OTHER)[0]), _KIND_OTHER, np.int8)
    on_device = per_category(cats, lambda c: _CATEGORIES.get(c.lower(), _OTHER)[1], False, bool)
    kind[(kind == _KIND_RUNTIME) & per_category(names, is_sync_api, False, bool)] = KINDS.index("sync")
    return kind, on_device


def _copy_columns(names: pd.Categorical, memcpy: np.ndarray) -> dict[str, pd.Categorical]:
    """copy_kind and src_memory of the copy rows, read from the copies' names."""
    kinds = per_category(names, lambda c: COPY_KINDS.index(copy_kind(c)), -1, np.int8)
    memory = per_category(names, lambda c: MEMORY_KINDS.index(kineto_copy_memory(c)), -1, np.int8)
    return {
        "copy_kind": pd.Categorical.from_codes(np.where(memcpy, kinds, -1), COPY_KINDS),
        "src_memory": pd.Categorical.from_codes(np.where(memcpy, memory, -1), MEMORY_KINDS),
    }


def _clock(top: dict[str, Any], ts_ns: np.ndarray) -> tuple[int, str]:
    """Offset that puts ts on the epoch, and what the resulting clock is.

    Since 2023 Kineto writes ts relative to ``baseTimeNanoseconds`` (the epoch
    time floored to a 7,889,238 s "trimester", to keep ts within a double's
    precision); older traces write epoch µs directly and have no such key.
    """
    base = top.get("baseTimeNanoseconds")
    first = int(ts_ns.min()) if len(ts_ns) else 0
    if isinstance(base, int) and base > 0 and first < base:
        return base, "epoch"
    return 0, "epoch" if first >= _EPOCH_NS_2001 else "relative"


def _bytes_with_runtime_size(
    nbytes: np.ndarray, memcpy: np.ndarray, host: np.ndarray, correlation: np.ndarray, size: np.ndarray
) -> np.ndarray:
    """Fill copy bytes the device event lacks from its host call's ``size`` arg.

    ROCm's gpu_memcpy has no ``bytes``; the hipMemcpy* call with the same
    correlation id carries ``size``. Copies with neither stay -1.
    """
    need = memcpy & (nbytes < 0) & (correlation >= 0)
    if not need.any():
        return nbytes
    known = host & (size >= 0) & (correlation >= 0)
    lookup = pd.Series(size[known], index=correlation[known])
    found = lookup[~lookup.index.duplicated()].reindex(correlation[need]).to_numpy(dtype=np.float64)
    filled = nbytes.copy()
    filled[need] = np.where(np.isnan(found), -1, found).astype(np.int64)
    return filled


def _device_labels(ids: np.ndarray, on_device: np.ndarray) -> pd.Categorical:
    """``GPU:<id>`` for device rows (``GPU:?`` when neither args nor pid say), NaN for host rows."""
    distinct = np.unique(ids[on_device])
    codes = np.full(len(ids), -1, dtype=np.int64)
    codes[on_device] = np.searchsorted(distinct, ids[on_device])
    return pd.Categorical.from_codes(codes, categories=[f"GPU:{d}" if d >= 0 else "GPU:?" for d in distinct])


def _rank(top: dict[str, Any]) -> int:
    info = top.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) else -1


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
