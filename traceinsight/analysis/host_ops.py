"""Framework ops on the host: which user code the step and the input pipeline spend their time in.

XProf's framework-op table is where users find the slow function by name (a
`tf.py_function` called 319 times for 1.5 s); the device-centric figures never
name it. Each host op (``cpu_op`` rows: TF ops ``scope/name:Type``, PyTorch
``aten::`` ops) gets its calls, total and *self* time (minus the ops nested
directly inside it on the same thread). Ops that run mostly while the training
loop waits for input are the input pipeline's own work, so the slowest of them is
the user function to make faster. `tf.py_function` / `numpy_function` ops hold
Python's GIL, so a parallel map cannot scale them: they are flagged.

Nesting is found without a loop over events: per thread, an op's depth is the
number of ops that started at or before it and have not ended; an op's parent is
the last op one level up on its thread that started before it.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.grouped import Groups, groups_of, ranked
from traceinsight.events import kind_mask, rows_of_input, take_rows
from traceinsight.intervals import Intervals, union_of_rows
from traceinsight.ordering import lexsort
from traceinsight.result import HostOp
from traceinsight.rules import GIL_PATTERN, INPUT_WORK_COVERAGE

TOP_HOST_OPS = 15
_DEPTH_LIMIT = 256  # deeper nesting is damaged data; such ops are counted as top level


class HostOps(msgspec.Struct, frozen=True):
    top: list[HostOp]  # by self time
    input_functions: list[HostOp]  # ops that run mostly inside input waits, by total time
    count: int = 0  # host framework ops in all
    median_ns: int | None = None  # their median duration (tiny ops: the batch is too small to amortise dispatch)


def _function_name(name: str) -> str:
    """'slow_decode:EagerPyFunc' -> 'slow_decode'; 'model/dense/MatMul:MatMul' -> 'model/dense/MatMul';
    names with '::' (aten::add_) are kept whole."""
    if "::" in name:
        return name
    head, sep, _ = name.rpartition(":")
    return head if sep and head else name


def _depths(thread: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of each op on its thread (rows sorted by thread, then start, longest first)."""
    n = len(starts)
    depth = np.zeros(n, np.int64)
    if n == 0:
        return depth
    boundaries = np.flatnonzero(np.diff(thread)) + 1
    for lo, hi in zip(np.r_[0, boundaries], np.r_[boundaries, n], strict=True):  # one slice per thread
        s, e = starts[lo:hi], ends[lo:hi]
        started = np.arange(1, hi - lo + 1)  # ops started at or before each op (sorted by start)
        # Ops ended at or before each op starts; the ends come nearly sorted (timsort: 6x faster than quicksort).
        ended = np.searchsorted(np.sort(e, kind="stable"), s, side="right")
        depth[lo:hi] = started - ended - 1
    return np.clip(depth, 0, _DEPTH_LIMIT)


def nesting_parents(thread: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each op's parent, the op it runs directly inside on its thread, as a row position; -1 for a top-level op
    (rows sorted by thread, then start, longest first). Found level by level, one vectorised search a level."""
    depth = _depths(thread, starts, ends)
    parent = np.full(len(starts), -1, np.int64)
    by_depth = np.argsort(depth.astype(np.int16), kind="stable")  # each level's rows, in row order (radix sort)
    level_starts = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=0)) + 2))
    for d in range(1, len(level_starts) - 1):
        parents = by_depth[level_starts[d - 1] : level_starts[d]]
        kids = by_depth[level_starts[d] : level_starts[d + 1]]
        if not len(kids) or not len(parents):
            continue
        # The parent is the last op one level up that started before the child on the same thread: rows are
        # sorted by (thread, start), so the last such row index before the child's.
        candidate = parents[np.clip(np.searchsorted(parents, kids, side="right") - 1, 0, None)]
        same = (
            (thread[candidate] == thread[kids]) & (starts[candidate] <= starts[kids]) & (ends[candidate] >= ends[kids])
        )
        parent[kids[same]] = candidate[same]
    return parent


def _own(thread: np.ndarray, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each op's `values` (int64: its time, or its time inside some windows) minus its direct children's (rows
    sorted by thread, then start, longest first)."""
    parent = nesting_parents(thread, starts, ends)
    children = np.zeros(len(values), np.int64)
    nested = parent >= 0
    np.add.at(children, parent[nested], values[nested])
    return np.clip(values - children, 0, None)


def _self_times(thread: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each op's time minus its direct children's (rows sorted by thread, then start, longest first)."""
    return _own(thread, starts, ends, (ends - starts).astype(np.int64))


def _own_in_row_order(threads: np.ndarray, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`_own` of rows in any order: sorted by thread, then start, longest first, and put back."""
    thread_codes = pd.factorize(threads)[0]
    order = lexsort((starts - ends, starts, thread_codes))
    own = np.empty(len(order), np.int64)
    own[order] = _own(thread_codes[order], starts[order], ends[order], values[order])
    return own


def own_times(ops: pd.DataFrame) -> np.ndarray:
    """Each op row's self time: its duration less its direct children's on the same thread (any row order)."""
    starts = ops["ts_ns"].to_numpy()
    ends = starts + ops["dur_ns"].to_numpy()
    return _own_in_row_order(ops["thread"].to_numpy(), starts, ends, (ends - starts).astype(np.int64))


def _summarise(
    groups: Groups, names: pd.Index, dur: np.ndarray, self_ns: np.ndarray, limit: int, by: str
) -> list[HostOp]:
    """The `limit` ops with the most time `by` ("own": self time, "total"), each with its calls and times (`groups`:
    the rows by name, `names` their categories)."""
    calls, total, own = groups.count, groups.sum(dur), groups.sum(self_ns)
    return [
        HostOp(
            name := str(names[groups.codes[g]]),
            _function_name(name),
            int(calls[g]),
            int(total[g]),
            int(own[g]),
            bool(GIL_PATTERN.search(name)),
        )
        for g in ranked(own if by == "own" else total, limit).tolist()
    ]


class HostOpRows(msgspec.Struct, frozen=True):
    """One input's host framework ops and their self times, found once for the host-op table and the step model."""

    mine: pd.DataFrame  # the input's rows (the columns both read)
    host: np.ndarray  # per row of `mine`: on no device
    ops: pd.DataFrame  # its host ``cpu_op`` rows
    self_ns: np.ndarray  # per op: `own_times`


def host_op_rows(events: pd.DataFrame, input_id: int) -> HostOpRows:
    """The host framework ops of input `input_id` and their self times."""
    mine = rows_of_input(events, input_id, ["ts_ns", "dur_ns", "kind", "device", "name", "thread"])
    host = mine["device"].isna().to_numpy()
    ops = take_rows(mine, host & kind_mask(mine, "cpu_op"), ["ts_ns", "dur_ns", "name", "thread"])
    return HostOpRows(mine, host, ops, own_times(ops))


def host_ops(events: pd.DataFrame, input_id: int, rows: HostOpRows | None = None) -> HostOps:
    """Host framework ops of one input (the run's step input): the top ones by self time, and the input
    pipeline's own ops (mostly inside input waits) by total time (`rows`: `host_op_rows`, if known)."""
    rows = host_op_rows(events, input_id) if rows is None else rows
    mine, host, ops, self_ns = rows.mine, rows.host, rows.ops, rows.self_ns
    if ops.empty:
        return HostOps([], [])
    starts = ops["ts_ns"].to_numpy()
    ends = starts + ops["dur_ns"].to_numpy()
    waits = union_of_rows(mine["ts_ns"].to_numpy(), mine["dur_ns"].to_numpy(), host & kind_mask(mine, "input_wait"))
    in_wait = waits.covered_between(starts, ends)
    names, dur = ops["name"].array, ends - starts
    by_name = groups_of(names.codes)
    name_dur, name_in_wait = by_name.sum(dur), by_name.sum(in_wait)
    input_name = (name_in_wait >= INPUT_WORK_COVERAGE * name_dur) & (name_dur > 0)
    of_input = np.append(input_name, False)[by_name.of_row]  # row -1 (no name): the appended False
    inputs = groups_of(names.codes[of_input])
    return HostOps(
        top=_summarise(by_name, names.categories, dur, self_ns, TOP_HOST_OPS, "own"),
        input_functions=_summarise(inputs, names.categories, dur[of_input], self_ns[of_input], 5, "total"),
        count=len(dur),
        median_ns=int(np.median(dur)),
    )


class UnlaunchedWork(msgspec.Struct, frozen=True):
    """The host ops that gave the device nothing to do (no launch, copy, sync or other device call inside them):
    the CPU's own compute, whatever an unrecorded device did meanwhile."""

    per_step_ns: np.ndarray  # the union of those ops in each step
    ops: int  # how many there are
    top: list[HostOp]  # by self time


def unlaunched_work(events: pd.DataFrame, input_id: int, starts: np.ndarray, ends: np.ndarray) -> UnlaunchedWork:
    """`UnlaunchedWork` of one input's ops over its steps (`starts`, `ends`). An op holds a device call when the
    call runs inside it on its thread, at any depth: the call's enclosing ops are marked level by level."""
    mine = rows_of_input(events, input_id, ["ts_ns", "dur_ns", "kind", "device", "name", "thread"])
    host = mine["device"].isna().to_numpy()
    is_call = kind_mask(mine, "runtime", "sync")
    rows = np.flatnonzero(host & (kind_mask(mine, "cpu_op") | is_call))
    thread = pd.factorize(mine["thread"].to_numpy()[rows])[0]
    start = mine["ts_ns"].to_numpy()[rows]
    end = start + mine["dur_ns"].to_numpy()[rows]
    order = lexsort((start - end, start, thread))
    rows, thread, start, end = rows[order], thread[order], start[order], end[order]
    parent = nesting_parents(thread, start, end)
    calls = is_call[rows]
    holds_call = np.zeros(len(rows), bool)
    reached = parent[calls]
    while len(reached := reached[reached >= 0]):  # the calls' enclosing rows, one level up a turn
        reached = reached[~holds_call[reached]]  # one marked already has its own marked above it
        holds_call[reached] = True
        reached = parent[reached]
    free = ~calls & ~holds_call
    if not free.any():
        return UnlaunchedWork(np.zeros(len(starts), np.int64), 0, [])
    work = union_of_rows(start, end - start, free)
    names = mine["name"].array[rows[free]]
    self_ns = _self_times(thread, start, end)[free]  # its children are ops that launched nothing either
    top = _summarise(groups_of(names.codes), names.categories, end[free] - start[free], self_ns, TOP_HOST_OPS, "own")
    return UnlaunchedWork(work.covered_between(starts, ends).astype(np.int64), int(free.sum()), top)


def ops_within(events: pd.DataFrame, input_id: int, windows: Intervals) -> list[HostOp]:
    """The input's host framework ops by their own time inside `windows` (an op's time there less its children's
    on the same thread), most first: which ops the host ran while the device waited for it. Total and calls count
    only the calls that overlap the windows; only those are nested (an op's parent holds it, so overlaps too)."""
    mine = rows_of_input(events, input_id, ["ts_ns", "dur_ns", "kind", "device", "name", "thread"])
    rows = np.flatnonzero(mine["device"].isna().to_numpy() & kind_mask(mine, "cpu_op"))
    if not len(rows) or not len(windows):
        return []
    starts = mine["ts_ns"].to_numpy()[rows]
    ends = starts + mine["dur_ns"].to_numpy()[rows]
    inside = windows.covered_between(starts, ends).astype(np.int64)
    overlapping = inside > 0
    rows, starts, ends, inside = rows[overlapping], starts[overlapping], ends[overlapping], inside[overlapping]
    own = _own_in_row_order(mine["thread"].to_numpy()[rows], starts, ends, inside)
    names = mine["name"].array[rows]
    return _summarise(groups_of(names.codes), names.categories, inside, own, TOP_HOST_OPS, "own")
