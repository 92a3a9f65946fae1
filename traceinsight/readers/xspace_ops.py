"""Device ops' costs as the compiler counted them: the ``flops``, ``bytes_accessed`` and ``model_flops`` stats
of an XSpace's device ops (TPU ``XLA Ops`` carry them on their event metadata), read into the op table
(events.py) for FLOP rates, MFU and the roofline.

Only kernels and copies (device work, one row per execution) with one of these stats are rows: a plane without any such
stat costs nothing more to read. An op's time is the device's own count, ``device_duration_ps``, where the
event has it (TPU): the event's duration is on the host's clock, a few percent off for some ops (7.6 % for
one fusion of ``tpu_inference_2``), and XProf's op statistics and roofline take the device's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.events import KINDS, make_op_table
from traceinsight.readers._repair import MAX_DURATION_NS
from traceinsight.readers.xspace_classify import OP_FLOAT_STATS, OP_INT_STATS, Plane
from traceinsight.readers.xspace_stats import FoundStats, Stats, read_stats
from traceinsight.readers.xspace_wire import EventFields, Wire


class Ops(msgspec.Struct):
    """Op-table rows of one batch: which of its events are ops with a cost, and their columns."""

    events: np.ndarray  # rows of the batch
    device_ns: np.ndarray  # per op: its device time; -1 unknown (the event's duration stands)
    costs: dict[str, np.ndarray]  # per op: flops, bytes_accessed, model_flops (NaN unknown)


def read_ops(
    plane: Plane,
    wire: Wire,
    events: EventFields,
    found: FoundStats,
    kind: np.ndarray,
    with_stats: list[tuple[int, Any]],
) -> Ops | None:
    """Op-table rows of the batch's kernels (a device plane's) that carry a cost stat; None if none does.

    `kind`: the event table's column of the batch. Their stats are read from these kernels only. A negative
    count is unknown, and so is an impossible device time (negative, over 7 days).
    """
    if not any(name in plane.stat_ids for name in OP_FLOAT_STATS):
        return None
    # XLA's asynchronous copies on a TPU's ops line are copies in the event table, but ops of the compiler's all
    # the same: XProf's op statistics and roofline list them (a GPU's copies are CUPTI's, not the compiler's).
    ops = kind == KINDS.index("kernel")
    if plane.device_type == "TPU":
        ops |= kind == KINDS.index("memcpy")
    rows = np.flatnonzero(ops)
    used = set(np.unique(events.md[rows]).tolist())
    stats = read_stats(
        plane,
        wire,
        events,
        found,
        rows,
        np.zeros(0, np.int64),
        [(md, meta) for md, meta in with_stats if md in used],
        Counter(),  # damage to these events' stats is counted with the table's
        Stats.empty(len(rows), OP_INT_STATS, OP_FLOAT_STATS, ()),
    )
    costed = np.logical_or.reduce([stats.present[name] for name in OP_FLOAT_STATS])
    if not costed.any():
        return None
    device_ns = stats.ints["device_duration_ps"][costed] // 1000
    possible = stats.present["device_duration_ps"][costed] & (device_ns >= 0) & (device_ns <= MAX_DURATION_NS)
    costs = {}
    for name in OP_FLOAT_STATS:
        values = stats.floats[name][costed]
        costs[name] = np.where(values >= 0, values, np.nan)
    return Ops(rows[costed], np.where(possible, device_ns, -1), costs)


def op_table(
    parts: list[tuple[Ops, np.ndarray, dict[str, np.ndarray], int]], devices: list[str], names: list[str]
) -> pd.DataFrame:
    """The op table (events.py) of the kept ops: `parts` has, per batch with ops, its `Ops`, which of its rows
    are kept, its columns on the file's clock (ts_ns, dur_ns, name codes into `names`) and its device's code in
    `devices`."""
    pieces = []
    for ops, keep, columns, device in parts:
        kept = keep[ops.events]
        rows = ops.events[kept]
        device_ns = ops.device_ns[kept]
        pieces.append(
            {
                "ts_ns": columns["ts_ns"][rows],
                "dur_ns": np.where(device_ns >= 0, device_ns, columns["dur_ns"][rows]),
                "device": np.full(len(rows), device, np.int16),
                "name": columns["name"][rows],
                **{name: values[kept] for name, values in ops.costs.items()},
            }
        )
    if not pieces:
        return make_op_table()
    table: dict[str, Any] = {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}
    table["device"] = pd.Categorical.from_codes(table["device"], devices).remove_unused_categories()
    table["name"] = pd.Categorical.from_codes(table["name"], names).remove_unused_categories()
    return make_op_table(table)
