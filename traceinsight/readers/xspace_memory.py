"""Device memory as the allocators report it: XSpace's allocator events (``MemoryAllocation`` /
``MemoryDeallocation`` on the host planes) and their stats, read into the memory table (events.py)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.events import make_memory_table
from traceinsight.readers.xspace_classify import MEMORY_FLOAT_STATS, MEMORY_INT_STATS, MEMORY_STR_STATS, Plane
from traceinsight.readers.xspace_stats import FoundStats, Stats, per_distinct, read_stats
from traceinsight.readers.xspace_wire import EventFields, Wire

# The allocator events (TF / XLA BFC allocators, TPU runtime); the stats of theirs read are `xspace_classify`'s.
_MEMORY_EVENTS = {"MemoryAllocation": 1, "MemoryDeallocation": -1}  # the sign of their bytes
_DEVICE_ALLOCATOR = re.compile(r"^GPU_(\d+)_bfc$")  # not gpu_host_bfc (pinned host memory) nor CPU allocators


class Memory(msgspec.Struct):
    """Memory-table rows of one batch: which of its events are allocator events, and their columns."""

    events: np.ndarray  # rows of the batch that are allocator events
    usable: np.ndarray  # per such event: it names a device of this file, with a possible level
    columns: dict[str, np.ndarray]  # per usable event


def read_memory(
    plane: Plane,
    wire: Wire,
    events: EventFields,
    found: FoundStats,
    name_code: np.ndarray,
    line_id: np.ndarray,
    with_stats: list[tuple[int, Any]],
    names: dict[str, int],
    device_labels: list[str],
) -> Memory | None:
    """Memory-table rows of the batch's allocator events (a host plane's); None if it has none.

    The device is ``GPU:<n>`` for allocator ``GPU_<n>_bfc``; without an allocator
    name (TPU runtime), the ``index_on_host`` / ``device_ordinal`` stat names it
    among this file's device planes. Host allocators (``gpu_host_bfc``, CPU) are
    not device memory. Their stats are read from these few events only. `names`: the code of each event name
    met so far (`name_code`'s), `device_labels`: the file's devices.
    """
    sign = np.zeros(len(names), np.int64)  # by name code
    for name, direction in _MEMORY_EVENTS.items():
        if name in names:
            sign[names[name]] = direction
    rows = np.flatnonzero(sign[name_code] != 0)
    if not rows.size:
        return None
    used = set(events.md[rows].tolist())
    with_stats = [(md, meta) for md, meta in with_stats if md in used]
    stats = read_stats(
        plane,
        wire,
        events,
        found,
        rows,
        np.arange(len(rows)),
        with_stats,
        Counter(),  # damage to these events' stats is counted with the table's
        Stats.empty(len(rows), MEMORY_INT_STATS, MEMORY_FLOAT_STATS, MEMORY_STR_STATS),
    )
    labels = {label: code for code, label in enumerate(device_labels)}
    allocators = stats.strings["allocator_name"]
    device = per_distinct(allocators, lambda name: labels.get(_allocator_device(name), -1), -1, np.int64)
    device_type = "TPU" if any(d.startswith("TPU:") for d in device_labels) else "GPU"
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
        "device": np.array(device_labels, object)[device[ok]],
        "thread": line_id[rows][ok],
        "allocated": stats.ints["bytes_allocated"][ok],
        "stack_reserved": known("bytes_reserved"),
        "available": known("bytes_available"),
        "fragmentation": stats.floats["fragmentation"][ok],
        "delta": delta[ok],
        "addr": known("addr"),
        "op": stats.strings["tf_op"][ok],
    }
    return Memory(rows, ok, columns)


def _allocator_device(allocator: str) -> str:
    """``GPU:3`` for the device allocator ``GPU_3_bfc``; "" for any other (host) allocator."""
    match = _DEVICE_ALLOCATOR.match(allocator)
    return f"GPU:{int(match[1])}" if match else ""


def memory_table(parts: list[tuple[Memory, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """The memory table (events.py) of the kept allocator events: `parts` has, per batch with allocator events,
    its `Memory`, which of its rows are kept and their starts (ns, on the file's clock)."""
    if not any(keep[memory.events].any() for memory, keep, _ in parts):
        return make_memory_table()
    pieces: list[dict[str, np.ndarray]] = []
    for memory, keep, ts_ns in parts:
        kept = keep[memory.events[memory.usable]]
        piece = {name: values[kept] for name, values in memory.columns.items()}
        piece["ts_ns"] = ts_ns[memory.events[memory.usable][kept]]
        pieces.append(piece)
    columns: dict[str, Any] = {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}
    columns["device"] = pd.Categorical(columns["device"])
    columns["op"] = pd.Categorical(columns["op"])
    return make_memory_table(columns)
