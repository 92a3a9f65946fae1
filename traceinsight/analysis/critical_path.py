"""The critical path of each step: the chain of work, across host threads, device streams and ranks, that the step
could not have ended sooner than, and what it is made of.

The dependency graph is what the trace records:
- a host thread's ops in order, with nesting (at each instant the innermost op running is the thread's work);
- launch -> device work, by correlation id (CUDA and HIP launches, ``cuLaunchKernel(Ex)``, copies, a graph
  launch for each of its nodes);
- device work in stream order;
- a kernel that starts after both its launch and its stream's previous work waited for another stream of its
  device (``cudaStreamWaitEvent``): the work there that ended last before it;
- a blocking call (``*Synchronize``, a blocking copy, `rules.BLOCKING_HOST_OPS`, a copy of pageable memory, a
  launch into a full queue) -> the device work that ended last inside it;
- a collective -> the rank that arrived last (`stitch`), where the run has several ranks.

The path is found backward from each step's end, always to the dependency that arrived last (a last-arrival
walk). Each edge's weight is the time between its ends, so every chain through the graph is at most as long as
the step and the walk's chain is exactly as long: it is the longest path, without building the edges one by
one. Each node's predecessor is found for all nodes at once (vectorised); only following the chain is a loop,
one cheap step per node on the path.

Each input is walked where it is read (`input_walks`: the pieces from its steps' ends and from each of its
collectives back to the collective before), so a run analysed in processes joins its ranks' pieces (`stitch`)
as one read whole does.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.collectives import Collectives
from traceinsight.analysis.host_ops import nesting_parents
from traceinsight.analysis.kernel_classes import kernel_classes
from traceinsight.analysis.steps import Steps
from traceinsight.events import DEVICE_WORK_KINDS, DistinctNames, blocking_mask, kind_mask
from traceinsight.intervals import union
from traceinsight.ordering import dense_codes, lexsort, search_pairs
from traceinsight.rules import (
    COLLECTIVE_HOST_PATTERN,
    COLLECTIVE_KERNEL_PATTERN,
    CROSS_STREAM_WAIT_MIN_NS,
    DRAINED_QUEUE_LAUNCH_DELAY_NS,
    GRAPH_LAUNCH,
    KERNEL_LAUNCH,
    THREAD_WAIT_MIN_NS,
    WAIT_MIN_NS,
)

# What a stretch of the path is, and the group a breakdown reports it under.
PATH_PARTS: dict[str, str] = {
    "cpu_op": "cpu",  # a framework op, a user range or a Python function runs on the host
    "runtime": "cpu",  # a runtime call other than a launch (allocations, event records)
    "host_gap": "cpu",  # host time between traced ops on the step's thread (Python, untraced work)
    "sync": "cpu",  # a blocking call returning after the device work it waited for ended
    "launch": "launch",  # a launch call, and its launch to the start of its device work
    "compute": "gpu_compute",  # a kernel (its class in `kernel_class`)
    "copy": "copy",  # a memcpy or memset
    "collective_transfer": "collective",  # a collective, every rank in
    "rank_wait": "rank_wait",  # a collective waiting for a rank the trace does not hold (single-rank trace)
    "input_wait": "input",  # the training loop waiting for its input data
    "kernel_gap": "idle",  # device work waiting for the work before it on its stream, beyond its end
    "queued": "idle",  # device work waiting after its launch, beyond a launch's cost, for what the trace does not hold
    "blocked": "idle",  # a blocking call waiting for device work the trace does not hold
    "idle": "idle",  # nothing the trace holds runs (before the first work the walk can reach)
}
PARTS = tuple(PATH_PARTS)
GROUPS = ("cpu", "launch", "gpu_compute", "copy", "collective", "rank_wait", "input", "idle")
_CODE = {name: code for code, name in enumerate(PARTS)}
_HOST_WORK = [_CODE[p] for p in ("cpu_op", "runtime", "host_gap")]  # what a host interval inside an input wait is not

_NONE = -1  # no predecessor in the trace: the rest of the step down to its start is idle
_TO_MAIN = -2  # an idle moment of a thread other than the step's: the step's thread at that instant


class _Graph(msgspec.Struct, frozen=True):
    """One input's dependency graph, as arrays over nodes: the host threads' intervals (between consecutive starts
    and ends of their ops, each owned by the innermost op running), then the device work rows. A node is entered
    at an instant and holds the path from its `start` to that instant; from its start the path goes to `pred`,
    resuming at `arrive` (the edge's own time, [arrive, start], is `edge_part`). What the walk reads one element
    at a time is a `memoryview` of an int64 array (a list would hold an object a node)."""

    start: memoryview
    # The nodes that wait (their path begins where what they waited for ended): their interval's own start,
    # predecessor on its thread and part, for a walk that enters them before the wait ended.
    own: dict[int, tuple[int, int, int]]
    end: memoryview
    part: memoryview  # codes of PARTS
    edge_part: memoryview
    # A launch edge's end of launch cost (the call and `DRAINED_QUEUE_LAUNCH_DELAY_NS`): beyond it the work sat queued
    # for what the trace does not hold; other edges: the node's start (no split).
    edge_split: memoryview
    pred: memoryview  # a node, or _NONE / _TO_MAIN
    arrive: memoryview
    collective: memoryview  # the start of the collective row the node belongs to; -1 for other nodes
    run_head: memoryview  # the first interval of the run a host interval ends (`_run_heads`); a device node: itself
    name: np.ndarray  # name codes (into `names`), -1 none
    kernel_class: np.ndarray  # codes into `classes`, -1 for host nodes
    resource: np.ndarray  # the thread (host nodes) or -(stream + 2) (device nodes)
    device_nodes: np.ndarray  # positions of the device nodes
    main_starts: np.ndarray  # the step thread's nodes' starts, in order (entering it at an instant)
    main_nodes: np.ndarray
    names: list[str]
    classes: list[str]


class Piece(msgspec.Struct, frozen=True):
    """The path from one instant back to where it needs another rank (a collective), or to its floor: arrays of
    its stretches, latest first, in its input's codes."""

    start: np.ndarray
    end: np.ndarray
    part: np.ndarray
    name: np.ndarray
    kernel_class: np.ndarray
    resource: np.ndarray
    stop_ns: int  # where it stopped
    collective_ns: int | None  # it stopped at the collective that started then (its `Arrival.arrival_ns`)
    collective_name: int = -1  # that collective's name code, and where it ran
    collective_resource: int = -1
    # It joined the path of another of its input's pieces (the one from the collective that started at `join_ns`),
    # from that piece's stretch `join_at` on: the walk from there is that piece's (`_Memo`).
    join_ns: int | None = None
    join_at: int = 0


class _Memo(msgspec.Struct):
    """The nodes the pieces from an input's collectives passed, entered at their end: which piece (by its
    collective's start) and at which of its stretches. A later piece that enters one of them at its end joins that
    piece there, so the pieces together walk each node once."""

    piece: np.ndarray  # per node, the piece's collective start; -1 none
    at: np.ndarray  # per node, the index of its first stretch in that piece


class InputWalks(msgspec.Struct, frozen=True):
    """One input's pieces: from each of its steps' ends, and from each of its collectives' starts back."""

    steps: list[Piece]
    collectives: dict[int, Piece]  # by the collective's start (an `Arrival.arrival_ns`)
    names: list[str]
    classes: list[str]
    not_walked: int = 0  # the input's events, when it has more than `rules.CRITICAL_PATH_MAX_EVENTS` (not walked)


NO_WALKS = InputWalks([], {}, [], [])  # an input walked for no step


class CriticalPath(msgspec.Struct, frozen=True):
    """The run's steps' critical paths: each step's time, every nanosecond in one stretch of its path."""

    step_ids: list[int]
    step_ns: np.ndarray
    parts: dict[str, np.ndarray]  # ns per step, by `PARTS`
    # One row per stretch: step (position in the run's steps), start_ns, end_ns, part, group, kernel_class, name,
    # input_id, resource (a host thread, or -(stream + 2) for a device stream).
    segments: pd.DataFrame
    crossings: np.ndarray  # per step, how many times the path moves to another rank

    @property
    def total_ns(self) -> int:
        return int(self.step_ns.sum())

    def group_ns(self) -> dict[str, np.ndarray]:
        """ns per step by breakdown group (`GROUPS`)."""
        grouped = {g: np.zeros(len(self.step_ns), np.int64) for g in GROUPS}
        for part, ns in self.parts.items():
            grouped[PATH_PARTS[part]] += ns
        return grouped

    def shares(self) -> dict[str, float]:
        """Each group's share of the steps' time."""
        total = self.total_ns
        return {g: float(ns.sum()) / total if total else 0.0 for g, ns in self.group_ns().items()}


def input_walks(
    events: pd.DataFrame, steps: Steps, blocked_launches: np.ndarray, alone: dict[int, int] | None = None
) -> InputWalks:
    """One input's walks (`events`: its rows alone; `steps`: its own steps; `blocked_launches`: per row, a launch
    call that found its stream's queue full, `queue_depth.blocked_launch_rows`). `alone`: the input is the run's
    only rank, and these are its collectives' waits for the ranks the trace does not hold, by their start (each
    collective's time is split into that wait and its transfer where the path passes it; no piece stops there)."""
    graph = _graph(events, blocked_launches)
    pieces = {}
    memo = None
    if alone is None:
        # Each back to the input's first event, or to where it joins an earlier one (another rank's steps may begin
        # well before this one's).
        node_starts = np.asarray(graph.start)
        lowest = int(node_starts.min()) if len(node_starts) else 0
        memo = _Memo(np.full(len(node_starts), -1, np.int64), np.zeros(len(node_starts), np.int64))
        for node in sorted(_first_of_each_collective(graph), key=lambda n: graph.collective[n]):
            begin = graph.collective[node]
            pieces[begin] = _from_collective(graph, node, lowest, (memo, begin))
    step_pieces = []
    for step in steps.items:  # joining the collectives' pieces where they meet them (recording nothing of their own)
        end = step.start_ns + step.dur_ns
        node, at = _step_end_node(graph, end, steps.device is None)
        head = [(-1, at, end, _CODE["idle"])] if at < end else []
        step_pieces.append(_chase(graph, node, at, step.start_ns, head, alone, None if memo is None else (memo, None)))
    return InputWalks(step_pieces, pieces, graph.names, graph.classes)


def _first_of_each_collective(graph: _Graph) -> list[int]:
    """The first node of each collective row (a host collective's first interval; a collective kernel's row)."""
    seen: set[int] = set()
    first = []
    for node, begin in enumerate(graph.collective):
        if begin >= 0 and begin not in seen:
            seen.add(begin)
            first.append(node)
    return first


def _graph(events: pd.DataFrame, blocked_launches: np.ndarray) -> _Graph:
    """The input's nodes and each node's predecessor, found for all nodes at once."""
    names = DistinctNames(events)
    classes = kernel_classes(events)
    host = _host_nodes(events, names, blocked_launches)
    device = _device_nodes(events, names, classes)
    offset = len(host["start"])
    # A device node's launch edge goes to the launch call's first interval (entered at its start, it passes the
    # path on to whatever ran before it on its thread).
    launch_row = device.pop("launch_row")
    launch_node = np.where(launch_row >= 0, host["first_interval"][np.maximum(launch_row, 0)], _NONE)
    is_launch = device["pred"] == -3
    device["pred"] = np.where(
        is_launch, launch_node, np.where(device["pred"] >= 0, device["pred"] + offset, device["pred"])
    )
    main = _main_thread(events, host)
    on_main = np.flatnonzero(host["thread"] == main) if main is not None else np.zeros(0, np.int64)
    other = host["thread"] != main if main is not None else np.ones(len(host["start"]), bool)
    # Long idle moments of other threads (and their beginnings) pass the path to the step's thread at that instant;
    # short ones between their ops are their own untraced work (an engine's dispatch between its ops).
    gap = other & (host["owner"] < 0) & (host["end"] - host["interval_start"] >= THREAD_WAIT_MIN_NS)
    host["start"] = np.where(gap, host["end"], host["start"])
    host["start_raw"] = host["start"].copy()
    host["arrive"] = np.where(gap, host["end"], host["arrive"])
    host["pred"] = np.where(other & ((host["pred"] == _NONE) | gap), _TO_MAIN, host["pred"])
    host["pred_raw"] = host["pred"].copy()
    host["part_raw"] = host["part"].copy()
    # A blocking call's last interval waits for the device work that ended last inside it; a long wait of the step's
    # thread for another thread, for that thread's op that ended last inside it.
    waited = _waited_work(host, device)
    synced = waited >= 0
    ended = device["end"][np.maximum(waited, 0)] if len(device["end"]) else host["start"]
    host["start"] = np.where(synced, ended, host["start"])
    host["pred"] = np.where(synced, waited + offset, host["pred"])
    woken = np.where(synced, -1, _thread_waits(host, other))
    host["start"] = np.where(woken >= 0, host["end"][np.maximum(woken, 0)], host["start"])
    host["pred"] = np.where(woken >= 0, woken, host["pred"])
    host["part"] = np.where(woken >= 0, _CODE["sync"], host["part"])
    # Else, a long untraced stretch of the step's thread while the device ran through most of it: a wait the trace
    # does not name (a spin on a flag the device writes, a query loop), for the device work that ended last in it.
    spun = np.where(synced | (woken >= 0), -1, _untraced_device_waits(host, device, other))
    host["start"] = np.where(spun >= 0, device["end"][np.maximum(spun, 0)] if len(device["end"]) else 0, host["start"])
    host["pred"] = np.where(spun >= 0, spun + offset, host["pred"])
    host["part"] = np.where(spun >= 0, _CODE["sync"], host["part"])
    host["arrive"] = np.where(synced | (woken >= 0) | (spun >= 0), host["start"], host["arrive"])
    blocked_long = host["blocking_long"] & ~synced
    host["part"] = np.where(blocked_long, _CODE["blocked"], host["part"])

    device_nodes = offset + np.arange(len(device["start"]))
    run_heads = np.concatenate([_run_heads(host), device_nodes])
    waiting = np.flatnonzero(host["start"] != host["start_raw"])
    own = dict(
        zip(
            waiting.tolist(),
            zip(
                host["start_raw"][waiting].tolist(),
                host["pred_raw"][waiting].tolist(),
                host["part_raw"][waiting].tolist(),
                strict=True,
            ),
            strict=True,
        )
    )

    def both(key: str, dtype: type[np.signedinteger[Any]] = np.int64) -> memoryview:
        # Read one element at a time by the walk: a view of machine ints (no copy; a list would hold an object each).
        # Each side is let go as it is joined, so the graph's peak is about one copy of it.
        return np.concatenate([host.pop(key), device.pop(key)]).astype(dtype, copy=False).data

    return _Graph(
        start=both("start"),
        own=own,
        end=both("end"),
        part=both("part", np.int8),
        edge_part=both("edge_part", np.int8),
        edge_split=both("edge_split"),
        pred=both("pred", np.int32),
        arrive=both("arrive"),
        collective=both("collective"),
        run_head=run_heads.astype(np.int32).data,
        name=_used_codes(names, np.concatenate([host["name"], device["name"]])).astype(np.int32),
        kernel_class=np.concatenate([np.full(offset, -1, np.int8), device["kernel_class"]]),
        resource=np.concatenate([host["thread"], -(device["stream"] + 2)]),
        device_nodes=device_nodes,
        main_starts=host["interval_start"][on_main],
        main_nodes=on_main,
        names=names.names,
        classes=[str(c) for c in classes.categories],
    )


def _run_heads(host: dict[str, Any]) -> np.ndarray:
    """Per host interval, the first of the run it ends: intervals of one thread each of which passes the path to the
    one before it, from its own start, with no collective (a walk takes such a run in one slice, `_run`)."""
    n = len(host["start"])
    position = np.arange(n)
    linked = (
        (host["pred"] == position - 1)
        & (host["arrive"] == host["start"])
        & (host["start"] == host["start_raw"])
        & (host["collective"] < 0)
    )
    return np.maximum.accumulate(np.where(linked, 0, position)) if n else np.zeros(0, np.int64)


def _used_codes(names: DistinctNames, codes: np.ndarray) -> np.ndarray:
    """Name category codes as positions in `names.names` (the names the input uses); -1 stays."""
    position = np.full(names.count + 1, -1, np.int64)  # the last slot: code -1
    position[names.used] = np.arange(len(names.used))
    return position[codes]


def _host_nodes(events: pd.DataFrame, names: DistinctNames, blocked_launches: np.ndarray) -> dict[str, Any]:
    """The host threads' intervals: between each pair of consecutive instants at which an op of the thread starts
    or ends, owned by the innermost op then running (-1 between top-level ops), and their predecessors (the
    interval before on the thread)."""
    rows = np.flatnonzero(events["device"].isna().to_numpy() & (events["dur_ns"].to_numpy() > 0))
    thread_ids = events["thread"].to_numpy()[rows]
    threads, thread = dense_codes(thread_ids)
    start = events["ts_ns"].to_numpy()[rows]
    end = start + events["dur_ns"].to_numpy()[rows]
    order = lexsort((start - end, start, thread))
    rows, thread, start, end = rows[order], thread[order], start[order], end[order]
    parent = nesting_parents(thread, start, end)
    # Every instant at which something starts or ends on a thread, once.
    b_thread = np.concatenate([thread, thread])
    b_time = np.concatenate([start, end])
    o = lexsort((b_time, b_thread))
    b_thread, b_time = b_thread[o], b_time[o]
    distinct = np.r_[True, (np.diff(b_thread) != 0) | (np.diff(b_time) != 0)] if len(b_time) else np.zeros(0, bool)
    b_thread, b_time = b_thread[distinct], b_time[distinct]
    same = b_thread[:-1] == b_thread[1:]
    i_thread, i_start, i_end = b_thread[:-1][same], b_time[:-1][same], b_time[1:][same]
    del b_thread, b_time, o, distinct, same  # a big trace's largest temporaries: gone before the intervals' columns
    # The innermost op of each interval: the op that starts where it starts (the last of those, in start-then-longest
    # order), else the parent of the outermost op that ends there; damaged nesting is climbed below.
    owner = np.full(len(i_start), -1, np.int64)
    at_end = search_pairs(i_thread, i_start, thread, end)
    ends_here = np.flatnonzero((at_end >= 0) & (i_start[np.maximum(at_end, 0)] == end))[::-1]  # outermost last
    owner[at_end[ends_here]] = parent[ends_here]
    del at_end, ends_here
    at_start = search_pairs(i_thread, i_start, thread, start)
    owner[at_start] = np.arange(len(start))
    while True:
        ended = owner >= 0
        ended[ended] = end[owner[ended]] <= i_start[ended]
        if not ended.any():
            break
        owner[ended] = parent[owner[ended]]
    owned = owner >= 0
    row_of = np.where(owned, rows[np.maximum(owner, 0)], -1)
    blocking_row = blocking_mask(events) | _pageable_copy_calls(events)
    part = _host_parts(events, names, blocking_row, row_of)
    blocking_row |= blocked_launches  # a launch into a full queue waits for the device, and stays a launch
    untraced_owner = kind_mask(events, "step", "annotation", "python", "other")
    blocking_last = owned & blocking_row[np.maximum(row_of, 0)] & (end[np.maximum(owner, 0)] == i_end)
    blocking_long = blocking_last & (end[np.maximum(owner, 0)] - start[np.maximum(owner, 0)] >= WAIT_MIN_NS)
    # Whatever runs inside an input wait (the loader's own Python, a condition wait) is the wait.
    waiting = _inside_input_waits(kind_mask(events, "input_wait")[rows], thread, start, end, i_thread, i_start, i_end)
    part = np.where(waiting & np.isin(part, _HOST_WORK), _CODE["input_wait"], part)
    collective_row = names.rows(COLLECTIVE_HOST_PATTERN)
    collective = np.where(owned & collective_row[np.maximum(row_of, 0)], start[np.maximum(owner, 0)], -1)
    part = np.where(collective >= 0, _CODE["collective_transfer"], part)
    n = len(i_start)
    first_of_thread = np.r_[True, i_thread[1:] != i_thread[:-1]] if n else np.zeros(0, bool)
    pred = np.where(first_of_thread, _NONE, np.arange(n) - 1)
    # Each op's first interval (a launch's: where its device work's launch edge goes).
    first_interval = np.full(len(events), _NONE, np.int64)
    first_interval[rows] = at_start
    name_codes = events["name"].cat.codes.to_numpy()
    return {
        "start": i_start.copy(),
        "interval_start": i_start,
        "end": i_end,
        "part": part,
        "edge_part": np.full(n, _CODE["idle"], np.int8),
        "edge_split": i_start,
        "pred": pred,
        "arrive": i_start.copy(),
        "collective": collective,
        "name": np.where(owned, name_codes[np.maximum(row_of, 0)], -1),
        "thread": threads[i_thread],
        "owner": owner,
        "untraced": (~owned | untraced_owner[np.maximum(row_of, 0)]) & ~waiting,
        "blocking_last": blocking_last,
        "blocking_long": blocking_long,  # a blocking call of at least `WAIT_MIN_NS`
        "first_interval": first_interval,
    }


def _inside_input_waits(
    is_wait: np.ndarray,
    thread: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    i_thread: np.ndarray,
    i_start: np.ndarray,
    i_end: np.ndarray,
) -> np.ndarray:
    """Per interval, whether an input wait of its thread spans it (ops sorted by thread then start; `is_wait`: the
    input waits among them)."""
    w_thread, w_start, w_end = thread[is_wait], start[is_wait], end[is_wait]
    reach = w_end.copy()  # per wait, the latest end of its thread's waits that began at or before it
    for t in np.unique(w_thread).tolist():
        mine = w_thread == t
        reach[mine] = np.maximum.accumulate(w_end[mine])
    at = search_pairs(w_thread, w_start, i_thread, i_start)
    return (at >= 0) & (reach[np.maximum(at, 0)] >= i_end) if len(w_start) else np.zeros(len(i_start), bool)


def _pageable_copy_calls(events: pd.DataFrame) -> np.ndarray:
    """Host calls that launched a copy from or to pageable memory: whatever their name, they return only once the
    copy is done, after the work queued before it on its stream (CUDA runtime API, "API synchronization behavior":
    ``cudaMemcpyAsync`` of pageable memory is synchronous), so they wait for the device like a sync."""
    device = events["device"].notna().to_numpy()
    pageable = device & kind_mask(events, "memcpy") & (events["src_memory"] == "pageable").to_numpy()
    correlation = events["correlation"].to_numpy()
    wanted = correlation[pageable & (correlation >= 0)]
    return ~device & (correlation >= 0) & np.isin(correlation, wanted)


def _host_parts(events: pd.DataFrame, names: DistinctNames, blocking: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """The part of each host interval, told by its owner: a launch, a blocking call, an input wait, a runtime call,
    another op; untraced host time between ops (and inside a step marker alone)."""
    n = len(events)
    launches = names.rows(KERNEL_LAUNCH.pattern) | names.rows(GRAPH_LAUNCH.pattern)
    correlation = events["correlation"].to_numpy()
    device = events["device"].notna().to_numpy()
    host_correlated = ~device & (correlation >= 0) & np.isin(correlation, correlation[device & (correlation >= 0)])
    launches |= host_correlated
    code = np.full(n + 1, _CODE["cpu_op"], np.int8)  # the last slot: no owner
    code[:n][kind_mask(events, "runtime")] = _CODE["runtime"]
    code[:n][launches] = _CODE["launch"]
    code[:n][kind_mask(events, "input_wait")] = _CODE["input_wait"]
    code[:n][kind_mask(events, "step")] = _CODE["host_gap"]
    code[:n][blocking] = _CODE["sync"]
    code[n] = _CODE["host_gap"]
    return code[np.where(row_of >= 0, row_of, n)]


def _device_nodes(events: pd.DataFrame, names: DistinctNames, classes: pd.Categorical) -> dict[str, Any]:
    """The device work rows, in stream order, each with the dependency that arrived last: the work before it on
    its stream, its launch, or (when it started later than both) work on another stream of its device."""
    rows = np.flatnonzero(kind_mask(events, *DEVICE_WORK_KINDS) & events["device"].notna().to_numpy())
    device_codes = events["device"].cat.codes.to_numpy()[rows]
    stream = events["stream"].to_numpy()[rows]
    start = events["ts_ns"].to_numpy()[rows]
    end = start + events["dur_ns"].to_numpy()[rows]
    order = lexsort((start, stream, device_codes))
    rows, device_codes, stream, start, end = rows[order], device_codes[order], stream[order], start[order], end[order]
    n = len(rows)
    none = np.iinfo(np.int64).min
    # The work before it on its stream.
    same_stream = np.r_[False, (device_codes[1:] == device_codes[:-1]) & (stream[1:] == stream[:-1])]
    by_stream = np.where(same_stream, np.minimum(np.r_[0, end[:-1]], start), none)
    # Its launch: the host row with its correlation id.
    launch_row, launched, launch_dur = _launch_rows(events, rows)
    by_launch = np.where(launch_row >= 0, np.minimum(launched, start), none)
    # Work on another stream of its device that ended last before it, when it started later than both.
    latest_end, latest_node = _latest_end_before(device_codes, start, end)
    known = np.maximum(by_stream, by_launch)
    by_other = np.where(
        (latest_node >= 0)
        & (latest_end > known)
        & (start - np.maximum(known, start.min(initial=0)) > CROSS_STREAM_WAIT_MIN_NS),
        latest_end,
        none,
    )
    choice = np.argmax(np.stack([by_stream, by_other, by_launch]), axis=0)  # ties: the device's own order first
    arrive = np.choose(choice, [by_stream, by_other, by_launch]) if n else np.zeros(0, np.int64)
    previous = np.arange(n) - 1
    pred = np.choose(choice, [previous, latest_node, np.full(n, -3)]) if n else np.zeros(0, np.int64)
    nothing = arrive == none
    pred = np.where(nothing, _NONE, pred)
    arrive = np.where(nothing, start, arrive)
    launch_cost_end = np.minimum(arrive + launch_dur + DRAINED_QUEUE_LAUNCH_DELAY_NS, start)
    edge = np.where(choice == 2, _CODE["launch"], _CODE["kernel_gap"]).astype(np.int8)
    copies = kind_mask(events, "memcpy", "memset")[rows]
    collective = names.rows(COLLECTIVE_KERNEL_PATTERN)[rows] & ~copies
    part = np.where(copies, _CODE["copy"], np.where(collective, _CODE["collective_transfer"], _CODE["compute"]))
    return {
        "start": start,
        "end": end,
        "part": part.astype(np.int8),
        "edge_part": edge,
        "edge_split": np.where(choice == 2, launch_cost_end, start),
        "pred": pred,
        "arrive": arrive,
        "collective": np.where(collective, start, -1),
        "name": events["name"].cat.codes.to_numpy()[rows],
        "kernel_class": np.asarray(classes.codes)[rows].astype(np.int8),
        "stream": stream,
        "launch_row": np.where(choice == 2, launch_row, -1),
    }


def _launch_rows(events: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For device rows `rows`, the host row that launched each (same correlation id), its start and its duration;
    -1, 0, 0 for none."""
    correlation = events["correlation"].to_numpy()
    host = np.flatnonzero(events["device"].isna().to_numpy() & (correlation >= 0))
    found = np.full(len(rows), -1, np.int64)
    if not len(host) or not len(rows):
        return found, np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64)
    host = host[np.argsort(correlation[host], kind="stable")]
    keys = correlation[host]
    wanted = correlation[rows]
    at = np.clip(np.searchsorted(keys, wanted), 0, len(keys) - 1)
    hit = (wanted >= 0) & (keys[at] == wanted)
    found[hit] = host[at[hit]]
    row = np.maximum(found, 0)
    return found, np.where(hit, events["ts_ns"].to_numpy()[row], 0), np.where(hit, events["dur_ns"].to_numpy()[row], 0)


def _latest_end_before(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the latest end at or before its start of any row of its device (any stream), and that row."""
    n = len(start)
    latest = np.full(n, np.iinfo(np.int64).min, np.int64)
    node = np.full(n, -1, np.int64)
    for d in np.unique(device).tolist():
        mine = np.flatnonzero(device == d)
        by_end = mine[np.argsort(end[mine], kind="stable")]
        at = np.searchsorted(end[by_end], start[mine], side="right") - 1
        ok = at >= 0
        latest[mine[ok]] = end[by_end[at[ok]]]
        node[mine[ok]] = by_end[at[ok]]
    return latest, node


def _last_ended_inside(device: dict[str, Any], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per window [start, end], the device node that ended last in (start, end]; -1 none."""
    found = np.full(len(end), -1, np.int64)
    if not len(end) or not len(device["end"]):
        return found
    by_end = np.argsort(device["end"], kind="stable")
    ends = device["end"][by_end]
    at = np.searchsorted(ends, end, side="right") - 1
    ok = at >= 0
    ok[ok] = ends[at[ok]] > start[ok]
    found[ok] = by_end[at[ok]]
    return found


def _waited_work(host: dict[str, Any], device: dict[str, Any]) -> np.ndarray:
    """For each host interval that ends a blocking call, the device node that ended last inside it; -1 none."""
    found = np.full(len(host["start"]), -1, np.int64)
    wanted = np.flatnonzero(host["blocking_last"])
    found[wanted] = _last_ended_inside(device, host["start"][wanted], host["end"][wanted])
    return found


def _thread_waits(host: dict[str, Any], other: np.ndarray) -> np.ndarray:
    """For each interval of the step's thread at least `THREAD_WAIT_MIN_NS` long, the interval of another thread
    that ended last inside it, among the threads that ran ops (framework ops, calls and collectives, not ranges or
    Python frames) through at least half of it (the step's thread waiting for it: DDP's backward for gloo's
    all-reduce, ``loss.backward()`` for autograd's device thread, a TF function's run for the inter-op thread
    blocked in ``IteratorGetNext``; a thread that only finished a short op in it is not what it waited for); -1 none.
    A loop over the threads that ran such ops (a handful to a pool's size), each vectorised over the intervals."""
    found = np.full(len(host["end"]), -1, np.int64)
    start, end, thread = host["interval_start"], host["end"], host["thread"]
    wanted = np.flatnonzero(~other & (end - start >= THREAD_WAIT_MIN_NS))
    # Ops at work and collectives, not a thread's frames waiting (a progress bar's monitor sleeping).
    working = ~host["untraced"] | (host["collective"] >= 0)
    candidates = np.flatnonzero(other & working)
    if not len(wanted) or not len(candidates):
        return found
    # How long a thread ran ops up to an instant: its running total of owned time (intervals sorted by thread, start).
    owned_ns = np.where(working, end - start, 0)
    total = np.concatenate([[0], np.cumsum(owned_ns)])
    w_start, w_end = start[wanted], end[wanted]
    best = np.full(len(wanted), np.iinfo(np.int64).min)
    for t in np.unique(thread[candidates]).tolist():
        lo, hi = np.searchsorted(thread, t, side="left"), np.searchsorted(thread, t, side="right")
        mine = candidates[(candidates >= lo) & (candidates < hi)]  # in order: a thread's intervals do not overlap
        at = np.searchsorted(end[mine], w_end, side="right") - 1
        which = mine[np.maximum(at, 0)]
        ok = (at >= 0) & (end[which] > w_start) & (end[which] > best)
        if not ok.any():
            continue

        def ran_until(x: np.ndarray, lo: int = lo, hi: int = hi) -> np.ndarray:
            pos = lo + np.searchsorted(start[lo:hi], x, side="right") - 1  # the thread's interval holding x
            inside = np.clip(x - start[np.maximum(pos, lo)], 0, owned_ns[np.maximum(pos, lo)])
            return np.where(pos >= lo, total[np.maximum(pos, lo)] + inside, total[lo])

        ok &= 2 * (ran_until(w_end) - ran_until(w_start)) >= w_end - w_start
        found[wanted[ok]] = which[ok]
        best[ok] = end[which[ok]]
    return found


def _untraced_device_waits(host: dict[str, Any], device: dict[str, Any], other: np.ndarray) -> np.ndarray:
    """For each interval of the step's thread at least `THREAD_WAIT_MIN_NS` long that no op of its own fills (the
    thread alone, a step marker, a user range, a Python function), the device node that ended last inside it, when
    the device ran work through at least half of it; -1 none."""
    found = np.full(len(host["end"]), -1, np.int64)
    start, end = host["interval_start"], host["end"]
    wanted = np.flatnonzero(~other & host["untraced"] & (end - start >= THREAD_WAIT_MIN_NS))
    if not len(wanted) or not len(device["end"]):
        return found
    last = _last_ended_inside(device, start[wanted], end[wanted])
    busy = union(device["start"], device["end"]).covered_between(start[wanted], end[wanted])
    found[wanted] = np.where(2 * busy >= end[wanted] - start[wanted], last, -1)
    return found


def _main_thread(events: pd.DataFrame, host: dict[str, Any]) -> int | None:
    """The thread the steps run on: the step markers', else the one whose ops cover the most time."""
    if not len(host["start"]):
        return None
    steps = kind_mask(events, "step") & events["device"].isna().to_numpy()
    if steps.any():
        threads = events["thread"].to_numpy()[steps]
        durations = events["dur_ns"].to_numpy()[steps]
    else:
        owned = host["owner"] >= 0
        threads = host["thread"][owned]
        durations = (host["end"] - host["interval_start"])[owned]
    ids, codes = np.unique(threads, return_inverse=True)
    return int(ids[np.argmax(np.bincount(codes, weights=durations))])


def _step_end_node(graph: _Graph, end: int, host_first: bool) -> tuple[int, int]:
    """Where a step's path begins, walking back: the step thread's interval running at its end (host steps; a step
    of device activity alone, whose end the host has left, begins on the device), else the device work that ran
    last before it; and the instant it is entered at."""
    if host_first and len(graph.main_nodes):
        at = int(np.searchsorted(graph.main_starts, end, side="left")) - 1
        if at >= 0 and graph.end[int(graph.main_nodes[at])] >= end:
            return int(graph.main_nodes[at]), end
    nodes = graph.device_nodes
    if not len(nodes):
        return _NONE, end
    starts = np.asarray(graph.start)[nodes]
    reached = np.minimum(np.asarray(graph.end)[nodes], end)
    reached = np.where(starts < end, reached, np.iinfo(np.int64).min)
    best = int(np.argmax(reached))
    if reached[best] == np.iinfo(np.int64).min:
        return _NONE, end
    return int(nodes[best]), int(reached[best])


def _chase(
    graph: _Graph,
    node: int,
    at: int,
    floor: int,
    head: list[tuple[int, int, int, int]] | None = None,
    alone: dict[int, int] | None = None,
    memo: tuple[_Memo, int | None] | None = None,
) -> Piece:
    """Follow the predecessors from `node` (entered at `at`) down to `floor`, or to a collective (not with `alone`,
    `input_walks`'). `head`: stretches (node, start, end, part) that come before, latest first. `memo`: the nodes
    earlier pieces passed and this piece's key: it joins an earlier piece where it meets one, and records its own
    nodes under its key (none without one: a step's piece)."""
    start, end, part = graph.start, graph.end, graph.part
    pred, arrive, collective = graph.pred, graph.arrive, graph.collective
    waits_own = graph.own
    run_head = graph.run_head
    seg_node: list[int] = []
    seg_start: list[int] = []
    seg_end: list[int] = []
    seg_part: list[int] = []
    blocks: list[tuple[np.ndarray, ...]] = []  # stretches taken a run at a time, between the ones taken one by one
    emitted = 0  # stretches in the blocks
    join_ns, join_at = None, 0

    def emit(n: int, begin: int, end: int, p: int) -> None:
        seg_node.append(n)
        seg_start.append(begin)
        seg_end.append(end)
        seg_part.append(p)

    def flush() -> None:
        nonlocal emitted
        if seg_node:
            blocks.append(tuple(np.asarray(x, np.int64) for x in (seg_node, seg_start, seg_end, seg_part)))
            emitted += len(seg_node)
            for column in (seg_node, seg_start, seg_end, seg_part):
                column.clear()

    for n, s, e, p in head or ():
        if e > max(s, floor):
            emit(n, max(s, floor), e, p)
    t = at
    stop, collective_node = floor, -1
    for _ in range(4 * len(start) + 4):  # each turn goes back in time or to a node entered at its end: bounded
        if t <= floor:
            break
        if node < 0:
            emit(-1, floor, t, _CODE["idle"])
            break
        if memo is not None and t == end[node] and memo[0].piece[node] >= 0:
            join_ns, join_at = int(memo[0].piece[node]), int(memo[0].at[node])
            break
        if run_head[node] < node and start[node] <= t:
            # A run of a thread's intervals, each passing the path to the one before: taken in one slice.
            flush()
            block, node, t = _run(graph, node, t, floor)
            if memo is not None:
                block, joined = _remembered(graph, memo, block, emitted)
                if joined is not None:
                    blocks.append(block)
                    join_ns, join_at = joined
                    break
            blocks.append(block)
            emitted += len(block[0])
            continue
        if memo is not None and memo[1] is not None and t == end[node]:
            memo[0].piece[node], memo[0].at[node] = memo[1], emitted + len(seg_node)
        if collective[node] >= 0:
            if alone is None:
                stop, collective_node = t, node
                break
            waited = min(start[node] + alone.get(collective[node], 0), t)
            if waited > max(start[node], floor):  # the wait for ranks not in the trace, before the transfer
                emit(node, max(waited, floor), t, part[node])
                t = waited
                own_part = _CODE["rank_wait"]
            else:
                own_part = part[node]
        else:
            own_part = -1
        s, p, arrived, own = start[node], pred[node], arrive[node], part[node] if own_part < 0 else own_part
        if t < s and node in waits_own:  # entered before what it waited for ended: its own thread's time
            s, p, own = waits_own[node]
            arrived = s
        s = min(s, t)
        low = max(s, floor)
        if t > low:
            emit(node, low, t, own)
        if s <= floor:
            break
        a = min(arrived, s)
        if a < s:
            for n, b, e, p_ in _edge(graph, node, a, s):
                if e > max(b, floor):
                    emit(n, max(b, floor), e, p_)
        node, t = _resolved(graph, p, a), a
    flush()
    empty = (np.zeros(0, np.int64),) * 4
    nodes, starts, ends, parts = (np.concatenate(c) for c in zip(*blocks, strict=True)) if blocks else empty
    named = nodes >= 0
    safe = np.maximum(nodes, 0)
    return Piece(
        start=starts,
        end=ends,
        part=parts.astype(np.int8),
        name=np.where(named, graph.name[safe] if len(nodes) else -1, -1).astype(np.int64),
        kernel_class=np.where(named, graph.kernel_class[safe] if len(nodes) else -1, -1).astype(np.int8),
        resource=np.where(named, graph.resource[safe] if len(nodes) else -1, -1).astype(np.int64),
        stop_ns=stop,
        collective_ns=collective[collective_node] if collective_node >= 0 else None,
        collective_name=int(graph.name[collective_node]) if collective_node >= 0 else -1,
        collective_resource=int(graph.resource[collective_node]) if collective_node >= 0 else -1,
        join_ns=join_ns,
        join_at=join_at,
    )


def _run(graph: _Graph, node: int, at: int, floor: int) -> tuple[tuple[np.ndarray, ...], int, int]:
    """The stretches of the intervals from `node` (entered at `at`) back to its run's first one (`run_head`), or to
    `floor`: (nodes, starts, ends, parts), latest first; and the node and instant the walk goes on from (the run's
    first interval, entered at its end)."""
    head = graph.run_head[node]
    nodes = np.arange(node, head, -1)
    starts = np.asarray(graph.start)[nodes]
    ends = np.asarray(graph.end)[nodes]
    ends[0] = at
    below = np.flatnonzero(starts <= floor)
    if len(below):  # the floor falls in the run: it ends there
        cut = below[0] + 1
        nodes, starts, ends = nodes[:cut], starts[:cut], ends[:cut]
        starts[-1] = floor
        goes_on, at_next = _NONE, floor
    else:
        goes_on, at_next = head, int(starts[-1])
    kept = ends > starts
    parts = np.asarray(graph.part)[nodes]
    return (nodes[kept], starts[kept], ends[kept], parts[kept]), goes_on, at_next


def _remembered(
    graph: _Graph, memo: tuple[_Memo, int | None], block: tuple[np.ndarray, ...], emitted: int
) -> tuple[tuple[np.ndarray, ...], tuple[int, int] | None]:
    """A run's stretches (`_run`) as a piece with `emitted` stretches before them takes them: up to the first node an
    earlier piece passed (entered at its end, as here), then the join; else all, each node recorded as this piece's."""
    table, key = memo
    nodes = block[0]
    whole = block[2] == np.asarray(graph.end)[nodes]  # entered at its end (the run's first may be entered inside)
    seen = np.flatnonzero(whole & (table.piece[nodes] >= 0))
    if len(seen):
        k, node = int(seen[0]), int(nodes[seen[0]])
        return tuple(column[:k] for column in block), (int(table.piece[node]), int(table.at[node]))
    if key is not None:
        table.piece[nodes[whole]] = key
        table.at[nodes[whole]] = emitted + np.flatnonzero(whole)
    return block, None


def _resolved(graph: _Graph, pred: int, at: int) -> int:
    """A predecessor as a node: `_TO_MAIN` becomes the step thread's node running at `at`."""
    if pred != _TO_MAIN:
        return pred
    i = int(np.searchsorted(graph.main_starts, at, side="left")) - 1
    return int(graph.main_nodes[i]) if i >= 0 else _NONE


def _from_collective(graph: _Graph, node: int, floor: int, memo: tuple[_Memo, int]) -> Piece:
    """The path back from a collective's start: what it waited for before it could begin on this rank."""
    s = graph.start[node]
    a = min(graph.arrive[node], s)
    head = _edge(graph, node, a, s) if a < s else []
    return _chase(graph, _resolved(graph, graph.pred[node], a), a, floor, head, memo=memo)


def _edge(graph: _Graph, node: int, a: int, s: int) -> list[tuple[int, int, int, int]]:
    """The stretches of a node's edge [a, s], latest first: a launch's cost, and beyond it the time its work sat
    queued (`edge_split`); any other edge whole."""
    split = min(max(graph.edge_split[node], a), s)
    queued = [(node, split, s, _CODE["queued"])] if split < s else []
    return queued + ([(node, a, split, graph.edge_part[node])] if a < split else [])


def stitch(walks: list[InputWalks], steps: Steps, collectives: Collectives) -> CriticalPath:
    """The run's steps' paths: each step's piece, and at each collective it reaches, the piece of the rank that
    arrived last (a single-rank trace: the collective's wait for the ranks it does not hold is `rank_wait`)."""
    if not steps.items or steps.input_id >= len(walks) or not walks[steps.input_id].steps:
        return empty_path()
    last: dict[tuple[int, int], tuple[int, int, int]] = {}
    for instance in collectives.instances:
        final = max(instance.arrivals, key=lambda a: a.arrival_ns)
        for a in instance.arrivals:
            last[(a.input_id, a.arrival_ns)] = (final.input_id, final.arrival_ns, a.wait_ns)
    single = collectives.scope == "single_rank"
    columns: dict[str, list[np.ndarray]] = {
        k: [] for k in ("step", "start", "end", "part", "name", "kernel_class", "resource", "input")
    }
    crossings = np.zeros(len(steps.items), np.int64)

    def add(
        k: int, input_id: int, piece_or_rows: Piece | tuple[int, int, int, int, int], floor: int, first: int = 0
    ) -> None:
        if isinstance(piece_or_rows, Piece):
            p = piece_or_rows
            keep = np.flatnonzero(p.end[first:] > np.maximum(p.start[first:], floor)) + first
            arrays = (
                np.maximum(p.start[keep], floor),
                p.end[keep],
                p.part[keep],
                p.name[keep],
                p.kernel_class[keep],
                p.resource[keep],
            )
        else:
            s, e, part, name, resource = piece_or_rows
            if e <= max(s, floor):
                return
            arrays = (
                np.array([max(s, floor)]),
                np.array([e]),
                np.array([part], np.int8),
                np.array([name]),
                np.array([-1], np.int8),
                np.array([resource]),
            )
        count = len(arrays[0])
        columns["step"].append(np.full(count, k, np.int32))
        for key, values in zip(("start", "end", "part", "name", "kernel_class", "resource"), arrays, strict=True):
            columns[key].append(values)
        columns["input"].append(np.full(count, input_id, np.int16))

    for k, step in enumerate(steps.items):
        floor = step.start_ns
        input_id = steps.input_id
        piece: Piece | None = walks[input_id].steps[k]
        first = 0  # where in the piece the path enters it (a piece joined inside)
        for _ in range(100_000):
            assert piece is not None
            add(k, input_id, piece, floor, first)
            if len(piece.start) > first and piece.start[-1] <= floor:
                break  # it reached the step's start
            if piece.join_ns is not None:  # the rest of its walk is another piece's
                piece, first = walks[input_id].collectives[piece.join_ns], piece.join_at
                continue
            first = 0
            if piece.collective_ns is None:
                if piece.stop_ns > floor:
                    add(k, input_id, (floor, piece.stop_ns, _CODE["idle"], -1, -1), floor)
                break
            begin, t = piece.collective_ns, piece.stop_ns
            name, resource = piece.collective_name, piece.collective_resource
            latest = last.get((input_id, begin))
            if latest is not None and not single and latest[0] != input_id and latest[1] > begin:
                add(k, input_id, (latest[1], t, _CODE["collective_transfer"], name, resource), floor)
                input_id, begin = latest[0], latest[1]
                crossings[k] += 1
            elif latest is not None and single and latest[2] > 0:
                waited = min(begin + latest[2], t)
                add(k, input_id, (waited, t, _CODE["collective_transfer"], name, resource), floor)
                add(k, input_id, (begin, waited, _CODE["rank_wait"], name, resource), floor)
            else:
                add(k, input_id, (begin, t, _CODE["collective_transfer"], name, resource), floor)
            if begin <= floor:
                break
            piece = walks[input_id].collectives.get(begin)
            if piece is None:
                add(k, input_id, (floor, begin, _CODE["idle"], -1, -1), floor)
                break
    return _path(walks, steps, columns, crossings)


def _path(
    walks: list[InputWalks], steps: Steps, columns: dict[str, list[np.ndarray]], crossings: np.ndarray
) -> CriticalPath:
    """The path's table and per-step parts from the stitched stretches (names and classes made run-wide)."""
    keys = ("step", "start", "end", "part", "name", "kernel_class", "resource", "input")
    joined = {k: np.concatenate(columns[k]) if columns.get(k) else np.zeros(0, np.int64) for k in keys}
    # Names: each input's codes into one list of the run's names.
    every = [name for w in walks for name in w.names]
    offsets = np.cumsum([0] + [len(w.names) for w in walks])
    codes = (
        np.where(joined["name"] >= 0, offsets[joined["input"].astype(np.int64)] + joined["name"], -1)
        if len(every)
        else joined["name"]
    )
    unique_codes, unique = pd.factorize(pd.Index(every)) if every else (np.zeros(0, np.int64), pd.Index([]))
    name_codes = np.where(codes >= 0, unique_codes[np.maximum(codes, 0)] if len(every) else -1, -1)
    classes = walks[steps.input_id].classes
    part_codes = joined["part"].astype(np.int8)
    segments = pd.DataFrame(
        {
            "step": joined["step"].astype(np.int32),
            "start_ns": joined["start"].astype(np.int64),
            "end_ns": joined["end"].astype(np.int64),
            "part": pd.Categorical.from_codes(part_codes, categories=PARTS),
            "group": pd.Categorical.from_codes(
                np.array([GROUPS.index(PATH_PARTS[p]) for p in PARTS], np.int8)[part_codes], categories=GROUPS
            ),
            "kernel_class": pd.Categorical.from_codes(joined["kernel_class"].astype(np.int8), categories=classes),
            "name": pd.Categorical.from_codes(name_codes.astype(np.int64), categories=unique),
            "input_id": joined["input"].astype(np.int16),
            "resource": joined["resource"].astype(np.int64),
        }
    )
    count = len(steps.items)
    dur = segments["end_ns"].to_numpy() - segments["start_ns"].to_numpy()
    table = np.zeros((count, len(PARTS)), np.int64)
    np.add.at(table, (segments["step"].to_numpy(), part_codes), dur)
    return CriticalPath(
        step_ids=[s.id for s in steps.items],
        step_ns=np.array([s.dur_ns for s in steps.items], np.int64),
        parts={p: table[:, i] for i, p in enumerate(PARTS)},
        segments=segments,
        crossings=crossings,
    )


def empty_path() -> CriticalPath:
    """The path of a run without steps."""
    return _path([NO_WALKS], Steps("none", "", 0, []), {}, np.zeros(0, np.int64))
