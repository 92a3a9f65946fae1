"""Which framework op launched each kernel, and the kernel time of each counted op (analysis/flops.py).

Kineto links a kernel to its host launch by ``correlation`` (the runtime call with the kernel's id) and the
launch to the op that made it by ``External id`` (the innermost op running then). Some traces (2022-era
Kineto) write the correlation id again as the launch's External id: there the op is the innermost op of
the op table running on the launch's thread when it started. Everything is sorts and binary searches.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.analysis.flops import thread_order
from traceinsight.events import kind_mask, names_matching
from traceinsight.ordering import search_pairs
from traceinsight.rules import (
    GRAPH_CAPTURE_BEGIN,
    GRAPH_CAPTURE_END,
    GRAPH_LAUNCH,
    KERNEL_LAUNCH,
    REPEATED_EXTERNAL_ID_SHARE,
)

_ID_BITS = 47  # ids below 2**47, input ids above them, in one int64 key


def kernel_ops(events: pd.DataFrame, ops: pd.DataFrame, kinds: tuple[str, ...] = ("kernel",)) -> np.ndarray:
    """Per event row: the position in `ops` of the op that launched it, for device rows of `kinds` (-1 for
    other rows, and for those whose launch or op is not found)."""
    found = np.full(len(events), -1, np.int64)
    work = np.flatnonzero(kind_mask(events, *kinds))
    runtime = np.flatnonzero(kind_mask(events, "runtime", "sync") & (events["correlation"].to_numpy() >= 0))
    if not len(work) or not len(runtime) or not len(ops):
        return found
    input_id = events["input_id"].to_numpy().astype(np.int64)
    correlation = events["correlation"].to_numpy()
    launch = _lookup(_key(input_id[runtime], correlation[runtime]), runtime, _key(input_id[work], correlation[work]))
    found[work[launch >= 0]] = launch_ops(events, ops, launch[launch >= 0])
    return found


def launch_ops(events: pd.DataFrame, ops: pd.DataFrame, launches: np.ndarray) -> np.ndarray:
    """Per host launch call (rows `launches` of the event table): the position in `ops` of the op that made it,
    by its External id, or where an input's External ids repeat its correlation ids, the innermost op running
    on its thread when it started; -1 where none is found."""
    runtime = np.flatnonzero(kind_mask(events, "runtime", "sync") & (events["correlation"].to_numpy() >= 0))
    input_id = events["input_id"].to_numpy().astype(np.int64)
    external = events["external_id"].to_numpy()
    by_id = _lookup(
        _key(ops["input_id"].to_numpy().astype(np.int64), ops["external_id"].to_numpy()),
        np.arange(len(ops)),
        _key(input_id[launches], external[launches]),
    )
    correlation = events["correlation"].to_numpy()
    repeated = _repeated_ids(input_id[runtime], external[runtime], correlation[runtime])
    contained = np.isin(input_id[launches], repeated)
    by_id[contained] = _innermost(
        ops,
        input_id[launches[contained]],
        events["thread"].to_numpy()[launches[contained]],
        events["ts_ns"].to_numpy()[launches[contained]],
    )
    return by_id


def counted_owner(ops: pd.DataFrame, op: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """Per op position in `op` (-1 allowed): the counted op (of `counted`) whose work it is, the op itself or the
    counted op it is nested in; -1 for none. Counted ops nest in no other counted op: on a thread they follow
    one another, so the innermost counted op containing the op's start is the one."""
    owner = np.full(len(op), -1, np.int64)
    known = op >= 0
    input_id, thread = ops["input_id"].to_numpy().astype(np.int64), ops["thread"].to_numpy()
    at = op[known]
    owner[known] = _innermost(ops, input_id[at], thread[at], ops["ts_ns"].to_numpy()[at], among=counted)
    return owner


def kernel_owners(events: pd.DataFrame, ops: pd.DataFrame, costs: pd.DataFrame) -> np.ndarray:
    """Per event row: the position in `ops` of the counted op (`flops.op_costs`) whose work the kernel did, the op
    that launched it or the counted op it is nested in; -1 for rows no counted op owns. A device op of the op
    table (XSpace: an XLA op's own execution) owns the kernel row it is: same input, device, start and name."""
    owner = np.full(len(events), -1, np.int64)
    counted = np.flatnonzero(np.isfinite(costs["flops"].to_numpy()))
    if not len(counted):
        return owner
    owner = counted_owner(ops, kernel_ops(events, ops), counted)
    on_device = counted[ops["device"].cat.codes.to_numpy()[counted] >= 0]
    if len(on_device):
        found = _same_rows(events, ops, on_device)
        owner[found[found >= 0]] = on_device[found >= 0]
    return owner


def replay_owners(
    events: pd.DataFrame, capture: pd.DataFrame, capture_ops: pd.DataFrame, counted: np.ndarray
) -> np.ndarray:
    """Per event row of a replay: the counted op (position in `capture_ops`, of `counted`) of the graph capture
    pass (`capture`: its event table) that launched the node the row is, -1 for rows of no replay or none found.

    A graph's nodes are the kernels launched on its stream between the capture's begin and end calls, in launch
    order; a replay runs them all under its launch's correlation id, in that order. A replay of N nodes takes the
    captured graphs of N launches in turn (a piecewise server captures many alike), its i-th kernel the i-th
    launch's op.
    """
    owner = np.full(len(events), -1, np.int64)
    graphs = _captured_graphs(capture, capture_ops, counted)
    if not graphs:
        return owner
    by_size: dict[int, list[np.ndarray]] = {}
    for nodes in graphs:
        by_size.setdefault(len(nodes), []).append(nodes)
    used = dict.fromkeys(by_size, 0)
    runtime = np.flatnonzero(names_matching(events, GRAPH_LAUNCH.pattern, kind_mask(events, "runtime")))
    kernels = np.flatnonzero(kind_mask(events, "kernel"))
    input_id = events["input_id"].to_numpy().astype(np.int64)
    correlation = events["correlation"].to_numpy()
    launch_of = _lookup(
        _key(input_id[runtime], correlation[runtime]), runtime, _key(input_id[kernels], correlation[kernels])
    )
    replayed = kernels[launch_of >= 0]
    launch_of = launch_of[launch_of >= 0]
    order = np.lexsort((events["ts_ns"].to_numpy()[replayed], events["ts_ns"].to_numpy()[launch_of]))
    replayed, launch_of = replayed[order], launch_of[order]
    starts = np.flatnonzero(np.r_[True, launch_of[1:] != launch_of[:-1]])
    for begin, end in zip(starts.tolist(), [*starts[1:].tolist(), len(replayed)], strict=True):
        candidates = by_size.get(end - begin)
        if candidates:
            owner[replayed[begin:end]] = candidates[used[end - begin] % len(candidates)]
            used[end - begin] += 1
    return owner


def _captured_graphs(capture: pd.DataFrame, ops: pd.DataFrame, counted: np.ndarray) -> list[np.ndarray]:
    """Each graph the capture pass records: per node (kernel launch between a begin and an end capture call on one
    thread, in order) the counted op whose work it is, -1 where none."""
    host = kind_mask(capture, "runtime", "sync")
    begins = np.flatnonzero(names_matching(capture, GRAPH_CAPTURE_BEGIN, host))
    ends = np.flatnonzero(names_matching(capture, GRAPH_CAPTURE_END, host))
    launches = np.flatnonzero(names_matching(capture, KERNEL_LAUNCH.pattern, host))
    if not len(begins) or not len(launches):
        return []
    ts, thread = capture["ts_ns"].to_numpy(), capture["thread"].to_numpy()
    launches = launches[np.argsort(ts[launches], kind="stable")]
    owners = counted_owner(ops, launch_ops(capture, ops, launches), counted)
    graphs = []
    for begin in begins[np.argsort(ts[begins], kind="stable")].tolist():
        closing = ends[(thread[ends] == thread[begin]) & (ts[ends] > ts[begin])]
        if not len(closing):
            continue
        inside = (thread[launches] == thread[begin]) & (ts[launches] > ts[begin]) & (ts[launches] < ts[closing].min())
        graphs.append(owners[inside])
    return graphs


def _same_rows(events: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For device ops `rows` of the op table: the kernel row of the event table that is each one (same input,
    device, start and name), -1 where none is; names are compared by the event table's category codes."""
    kernels = np.flatnonzero(kind_mask(events, "kernel"))

    def codes(column: str) -> np.ndarray:
        categories = events[column].cat.categories
        return pd.Categorical(ops[column].to_numpy()[rows], categories=categories).codes.astype(np.int64)

    left = pd.DataFrame(
        {
            "input_id": ops["input_id"].to_numpy()[rows],
            "device": codes("device"),
            "ts_ns": ops["ts_ns"].to_numpy()[rows],
            "name": codes("name"),
        }
    )
    right = pd.DataFrame(
        {
            "input_id": events["input_id"].to_numpy()[kernels],
            "device": events["device"].cat.codes.to_numpy()[kernels].astype(np.int64),
            "ts_ns": events["ts_ns"].to_numpy()[kernels],
            "name": events["name"].cat.codes.to_numpy()[kernels].astype(np.int64),
            "row": kernels,
        }
    ).drop_duplicates(["input_id", "device", "ts_ns", "name"])
    found = left.merge(right, on=["input_id", "device", "ts_ns", "name"], how="left")["row"]
    return found.fillna(-1).to_numpy(np.int64)


def counted_kernel_ns(events: pd.DataFrame, ops: pd.DataFrame, costs: pd.DataFrame) -> np.ndarray:
    """Per op: the summed duration (ns) of the kernels launched by it or the ops nested in it, for the ops
    `costs` (`flops.op_costs`) counts; NaN for the others."""
    owner = kernel_owners(events, ops, costs)
    total = np.full(len(ops), np.nan)
    total[np.isfinite(costs["flops"].to_numpy())] = 0.0
    mine = owner >= 0
    np.add.at(total, owner[mine], events["dur_ns"].to_numpy()[mine].astype(np.float64))
    return total


def _key(input_id: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """One int64 per (input, id); -1 for ids unknown or too large."""
    ok = (ids >= 0) & (ids < 1 << _ID_BITS)
    return np.where(ok, input_id << _ID_BITS | np.where(ok, ids, 0), -1)


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """`values` at the first of `keys` equal to each `wanted` (-1 when none, or the key is -1)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, wanted), max(len(keys) - 1, 0))
    hit = (sorted_keys[at] == wanted) & (wanted >= 0) if len(keys) else np.zeros(len(wanted), bool)
    return np.where(hit, values[order[at]], -1)


def _repeated_ids(input_id: np.ndarray, external: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    """The inputs whose launches' External ids just repeat their correlation ids (or are all missing)."""
    inputs, inverse = np.unique(input_id, return_inverse=True)
    launches = np.bincount(inverse, minlength=len(inputs))
    useless = np.bincount(inverse, weights=(external == correlation) | (external < 0), minlength=len(inputs))
    return inputs[useless > REPEATED_EXTERNAL_ID_SHARE * launches]


def _innermost(
    ops: pd.DataFrame, input_id: np.ndarray, thread: np.ndarray, ts: np.ndarray, among: np.ndarray | None = None
) -> np.ndarray:
    """Per (input, thread, ts): the position of the innermost op (of `among`, default all) running there, -1.

    Ops on a thread nest; those at one nesting depth follow one another, so each depth is one binary search,
    and the deepest hit is the innermost op.
    """
    found = np.full(len(ts), -1, np.int64)
    rows = (
        np.flatnonzero(ops["thread"].to_numpy() >= 0) if among is None else among[ops["thread"].to_numpy()[among] >= 0]
    )
    order = thread_order(ops, rows)
    if not len(order) or not len(ts):
        return found
    place = ops["input_id"].to_numpy().astype(np.int64)[order] << 32 | ops["thread"].to_numpy()[order] & 0xFFFFFFFF
    start = ops["ts_ns"].to_numpy()[order]
    end = start + ops["dur_ns"].to_numpy()[order]
    depth = _depths(place, start, end)
    wanted = input_id << 32 | thread & 0xFFFFFFFF
    for level in range(int(depth.max()) + 1):
        at_level = depth == level
        level_place, level_start, level_end = place[at_level], start[at_level], end[at_level]
        # (place, start) sorted: one search on a combined order of the two
        at = search_pairs(level_place, level_start, wanted, ts)
        ok = at >= 0
        ok[ok] &= (level_place[at[ok]] == wanted[ok]) & (level_end[at[ok]] >= ts[ok])
        found[ok] = order[at_level][at[ok]]
    return found


def _depths(place: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each op of one (place, start, longer first) order: how many ops of its place that
    started before it (in this order) have not ended when it starts."""
    n = len(start)
    position = np.arange(n)
    first_of_place = np.searchsorted(place, place, side="left")
    depth = np.zeros(n, np.int64)
    for p in np.unique(place).tolist():
        mine = np.flatnonzero(place == p)
        ends = np.sort(end[mine], kind="stable")
        # started before (in order) minus ended at or before its start (ops ending exactly there are siblings)
        depth[mine] = (position[mine] - first_of_place[mine]) - np.searchsorted(ends, start[mine], side="right")
    return np.maximum(depth, 0)
