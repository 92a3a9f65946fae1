"""The canonical event table and the `Profile` that carries it.

Every reader turns its format into the same pandas DataFrame, so analyses never
know where an event came from. One row per timed event (instant, flow and
metadata records are not rows).

Columns (all present in every table, in this order):

=============  ==========  ======  ==========================================================
column         dtype       unit    meaning
=============  ==========  ======  ==========================================================
ts_ns          int64       ns      start, on the profile's one clock (epoch ns where known)
dur_ns         int64       ns      duration, >= 0
kind           category            one of `KINDS` (what the event means for the analyses)
device         category            accelerator id ("GPU:0", "TPU:1", "<host-or-rank>/GPU:0"
                                   when a run has several inputs); NaN for host events
stream         int64               stream / device line id; -1 for host events
host           category            host name of the input, NaN if unknown
rank           int32               distributed rank of the input, -1 if unknown
thread         int64               OS thread / host line id; -1 for device events
name           category            event name as the profiler wrote it (never altered)
correlation    int64               host launch <-> device activity id; -1 if none
external_id    int64               Kineto op <-> runtime link ("External id"); -1 if none
bytes          int64   bytes       bytes moved by a memcpy/memset; -1 if unknown
copy_kind      category            "h2d" | "d2h" | "d2d" | "p2p" | "other" for memcpy, else NaN
src_memory     category            "pageable" | "pinned" | "device" | "unknown" for memcpy
step_id        int32               step number of a `step` event; -1 otherwise (and beyond int32)
blocks_per_sm  float32             kernel blocks per SM where the trace says, else NaN
occupancy_pct  float32  %          kernel (estimated or theoretical) occupancy, else NaN
op             category            the framework op a device event ran for, where the event
                                   itself names it (XSpace ``level 0`` annotation: its op type,
                                   ``MatMul`` of ``dense/MatMul:MatMul``); NaN otherwise (Kineto
                                   links kernels to ops through `external_id` instead)
input_id       int16               index into `Profile.inputs`
=============  ==========  ======  ==========================================================

Columns that are rarely set or small by nature are 32-bit: the table is most of
the memory a big trace takes (about 80 bytes a row).

Device memory is not events but a side table, `Profile.memory` (`make_memory_table`):
one row per allocator event of an accelerator (an allocation or a free) with the
allocator's levels right after it, in time order within each input. Columns:

==============  ==========  ======  ==========================================================
column          dtype       unit    meaning
==============  ==========  ======  ==========================================================
ts_ns           int64       ns      when, on the event table's clock
device          category            the event table's device id ("GPU:0"; prefixed like it
                                    when a run has several inputs)
thread          int64               host thread (Kineto tid, XSpace line id) of the event
allocated       int64       bytes   live bytes (Kineto ``Total Allocated``, else the running sum
                                    of ``Bytes`` from 0 at the first event: see `absolute`;
                                    XSpace ``bytes_allocated``)
reserved        int64       bytes   what the allocator holds from the device, live or cached
                                    (Kineto ``Total Reserved``); -1 unknown (XSpace: BFC does
                                    not say)
stack_reserved  int64       bytes   XSpace ``bytes_reserved``: memory reserved beside the heap
                                    (TPU program stack; 0 for GPU BFC), in use on top of
                                    `allocated`; -1 unknown (Kineto)
available       int64       bytes   XSpace ``bytes_available`` (allocator limit - in use); -1
fragmentation   float64             XSpace ``fragmentation`` (share of free memory outside the
                                    largest free chunk); NaN unknown
delta           int64       bytes   bytes this event allocated (> 0) or freed (< 0); 0 unknown
addr            int64               address of the block (matches a free to its allocation); -1
op              category            the op that allocated (XSpace ``tf_op``; Kineto: the
                                    outermost CPU op running on the event's thread); NaN
absolute        bool                False when `allocated` is a running sum from the profile
                                    start (Kineto 2021 schema: only ``Bytes`` recorded)
input_id        int16               index into `Profile.inputs`
==============  ==========  ======  ==========================================================

Framework ops' costs are a second side table, `Profile.ops` (`make_op_table`): one row per
framework op for which the trace records what its cost can be computed from (shapes, or the
profiler's own FLOP and byte counts), so ops without them cost nothing to keep. Columns:

================  ==========  ======  ==========================================================
column            dtype       unit    meaning
================  ==========  ======  ==========================================================
ts_ns             int64       ns      start, on the event table's clock
dur_ns            int64       ns      duration (host time for a Kineto op, device time for an
                                      XSpace op on a device line)
thread            int64               host thread of a host op; -1 for a device op
device            category            the device a device op ran on (prefixed like the event
                                      table's in a run of several inputs); NaN for host ops
name              category            op name as the profiler wrote it (``aten::addmm``)
external_id       int64               Kineto ``External id`` (links the op to its kernels); -1
input_dims        object              Kineto ``Input Dims``: a list per input (a list of ints,
                                      empty for a scalar or non-tensor); None unknown
input_types       object              Kineto ``Input type``: a str per input; None unknown
concrete_inputs   object              Kineto ``Concrete Inputs``: a str per input; None unknown
flops             float64     FLOP    the profiler's own count (Kineto ``flops``, XSpace
                                      ``flops``); NaN unknown
bytes_accessed    float64     bytes   the profiler's count of bytes read and written; NaN
model_flops       float64     FLOP    XSpace ``model_flops`` (the model's FLOPs, without
                                      rematerialisation); NaN unknown
input_id          int16               index into `Profile.inputs`
================  ==========  ======  ==========================================================

Collectives' args are a third side table, `Profile.collectives` (`make_collective_table`): one row per event
that is a collective or enqueues one (Kineto: a ``Collective name`` arg, or a name of `rules.COLLECTIVE_*`:
NCCL / RCCL kernels, ``gloo:all_reduce``, ``c10d::allreduce_``, ``record_param_comms``), with what the event
table has no column for: the process group, the sequence number and the message. Other events add nothing. Columns:

============  ==========  ======  ==========================================================
column        dtype       unit    meaning
============  ==========  ======  ==========================================================
ts_ns         int64       ns      start, on the event table's clock (joins the event's row)
dur_ns        int64       ns      duration
thread        int64               host thread; -1 for a device event
device        category            the device of a kernel (prefixed like the event table's);
                                  NaN for host events
stream        int64               device stream; -1 for host events
name          category            event name as the profiler wrote it
collective    category            Kineto ``Collective name`` (``allreduce``); NaN unknown
group         category            ``Process Group Name`` (``0``); NaN unknown
group_size    int32               ``Group size``; -1 unknown
seq           int64               ``Seq``: the collective's sequence number in its group; -1
in_nelems     int64               ``In msg nelems``, else the elements of the first input's
                                  ``Input Dims`` (a tensor list: summed); -1 unknown
out_nelems    int64               ``Out msg nelems``; -1 unknown
dtype         category            ``dtype`` (``Float``), else the first ``Input type``
                                  (``float``); NaN unknown
input_id      int16               index into `Profile.inputs`
============  ==========  ======  ==========================================================

Kinds: ``kernel``, ``memcpy``, ``memset`` are device work (the only kinds that make a
device busy); ``sync`` is a synchronisation (host API or device wait: never work);
``runtime`` a CUDA/HIP runtime or driver call on the host; ``cpu_op`` a framework op on
the host; ``annotation`` a user range (host or device copy); ``step`` a training-step
marker; ``input_wait`` the training loop waiting for data (tf.data GetNext, DataLoader
``__next__``); ``python`` a Python function; ``other`` anything else.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import msgspec
import numpy as np
import pandas as pd
from msgspec import field
from msgspec.structs import replace

from traceinsight.kinds import COPY_KINDS as COPY_KINDS
from traceinsight.kinds import DEVICE_WORK_KINDS as DEVICE_WORK_KINDS
from traceinsight.kinds import KINDS as KINDS
from traceinsight.kinds import MEMORY_KINDS as MEMORY_KINDS
from traceinsight.regex_literals import FEW_NAMES, JoinedNames, required_literals
from traceinsight.result import DeviceInfo
from traceinsight.rules import BLOCKING_HOST_OPS, INPUT_WAIT_PATTERN, PROFILER_STEP_PATTERN, SYNC_API_PATTERN

FORMATS = ("xspace", "kineto", "chrome", "nsys")
FRAMEWORKS = ("tensorflow", "jax", "pytorch", "unknown")

_INT_COLUMNS: dict[str, type[np.signedinteger[Any]]] = {
    "stream": np.int64,
    "rank": np.int32,
    "thread": np.int64,
    "correlation": np.int64,
    "external_id": np.int64,
    "bytes": np.int64,
    "step_id": np.int32,
}
_FLOAT_COLUMNS = ("blocks_per_sm", "occupancy_pct")
_CATEGORY_COLUMNS: dict[str, tuple[str, ...] | None] = {
    "kind": KINDS,
    "device": None,
    "host": None,
    "name": None,
    "copy_kind": COPY_KINDS,
    "src_memory": MEMORY_KINDS,
    "op": None,
}
COLUMNS = (
    "ts_ns",
    "dur_ns",
    "kind",
    "device",
    "stream",
    "host",
    "rank",
    "thread",
    "name",
    "correlation",
    "external_id",
    "bytes",
    "copy_kind",
    "src_memory",
    "step_id",
    "blocks_per_sm",
    "occupancy_pct",
    "op",
    "input_id",
)

_HOST_KINDS_TO_PROMOTE = ("cpu_op", "annotation", "python", "other")


def make_event_table(columns: Mapping[str, Any], n: int | None = None) -> pd.DataFrame:
    """Build a canonical event table from whichever columns a reader has.

    Missing columns get their "unknown" value, dtypes are enforced, and host
    events whose names are step or input-wait markers get those kinds, so every
    reader classifies markers the same way.
    """
    if n is None:
        n = len(next(iter(columns.values()))) if columns else 0
    data: dict[str, Any] = {}
    for col in ("ts_ns", "dur_ns"):
        data[col] = np.asarray(columns.get(col, np.zeros(n)), dtype=np.int64)
    for col, cats in _CATEGORY_COLUMNS.items():
        values = columns.get(col)
        if values is None:  # all unknown: codes -1 (a column of NaN objects would cost a pointer per row)
            data[col] = pd.Categorical.from_codes(np.full(n, -1, np.int8), categories=cats or [])
        elif isinstance(values, pd.Categorical):
            data[col] = values if cats is None else values.set_categories(cats)
        else:
            data[col] = pd.Categorical(values, categories=cats)
    for col, dtype in _INT_COLUMNS.items():
        values = columns.get(col)
        data[col] = np.full(n, -1, dtype) if values is None else narrowed_ints(values, dtype)
    for col in _FLOAT_COLUMNS:
        values = columns.get(col)
        data[col] = np.full(n, np.nan, np.float32) if values is None else np.asarray(values, np.float32)
    input_id = columns.get("input_id")
    data["input_id"] = np.zeros(n, np.int16) if input_id is None else np.asarray(input_id, np.int16)
    table = pd.DataFrame({col: data[col] for col in COLUMNS}, copy=False)  # the columns are ours: no second copy
    _promote_markers(table)
    return table


def narrowed_ints(values: Any, dtype: type[np.signedinteger[Any]]) -> np.ndarray:
    """`values` as `dtype`; those it cannot hold are unknown (-1), not wrapped around."""
    array = np.asarray(values)
    if array.dtype == dtype:
        return array
    array = array.astype(np.int64, copy=False)
    info = np.iinfo(dtype)
    if len(array) and (array.min() < info.min or array.max() > info.max):
        array = np.where((array >= info.min) & (array <= info.max), array, -1)
    return array.astype(dtype)


def kind_mask(events: pd.DataFrame, *kinds: str) -> np.ndarray:
    """Rows whose kind is one of `kinds`, read from the category codes.

    ``events["kind"].to_numpy()`` would build a string object per row; on a million
    rows that is most of an analysis' time. The codes are compared kind by kind: a
    lookup table indexed by them would first widen the int8 codes to 8 bytes a row
    (10x the time, 8 MB a million rows). Code -1 (no kind) matches none.
    """
    codes = cast(pd.Categorical, events["kind"].array).codes  # `.cat.codes` builds a Series: 3x the time a call
    mask = np.zeros(len(codes), dtype=bool)
    for kind in kinds:
        mask |= codes == KINDS.index(kind)
    return mask


class DistinctNames:
    """The distinct names of some rows of a table (`where`; every row when None), each pattern searched once per
    distinct name (a big trace has thousands of op names; the rows asked about, a few), and only in the names that
    hold a literal every match needs (`regex_literals`). A row mask is built only for a pattern some name matches,
    so asking many patterns of one table costs one pass over its rows."""

    def __init__(self, rows: pd.DataFrame, where: np.ndarray | None = None) -> None:
        self.codes = rows["name"].cat.codes.to_numpy()
        self.count = len(rows["name"].cat.categories)
        self.where = where
        asked = self.codes if where is None else self.codes[where]
        self.used = np.flatnonzero(np.bincount(asked + 1, minlength=self.count + 1)[1:])  # code -1: no name
        self.names = rows["name"].cat.categories[self.used].tolist()
        self._joined: JoinedNames | None = None

    def _candidates(self, pattern: re.Pattern[str]) -> Iterable[int]:
        """The indices of the names `pattern` may match: those holding one of its required literals, else all."""
        if len(self.names) < FEW_NAMES:
            return range(len(self.names))
        literals = required_literals(pattern)
        if literals is None:
            return range(len(self.names))
        if self._joined is None:
            self._joined = JoinedNames(self.names)
        holding = self._joined.holding(literals)
        return range(len(self.names)) if holding is None else holding

    def rows(self, pattern: str | re.Pattern[str]) -> np.ndarray:
        """Per row, whether it is one of the rows asked about and its name contains `pattern` (re.search)."""
        compiled = re.compile(pattern)
        used, names, search = self.used, self.names, compiled.search
        hits = [int(used[i]) for i in self._candidates(compiled) if search(names[i])]
        if not hits:
            return np.zeros(len(self.codes), bool)
        found = np.zeros(self.count + 1, bool)  # code -1 finds the last slot: False
        found[hits] = True
        mask = found[self.codes]
        return mask if self.where is None else mask & self.where


def cut_long_names(table: pd.DataFrame, columns: Sequence[str], longest: int) -> int:
    """Cut the strings of categorical `columns` longer than `longest` characters to that length, in place (names
    that become equal merge), so no name costs a pattern more than that; how many distinct strings were cut."""
    cut_count = 0
    for col in columns:
        if col not in table or not isinstance(table[col].dtype, pd.CategoricalDtype):
            continue
        names = table[col].cat.categories
        long = np.asarray(names.str.len() > longest, dtype=bool) if len(names) else np.zeros(0, bool)
        if not long.any():
            continue
        cut_count += int(long.sum())
        new_codes, unique = pd.factorize(names.where(~long, names.str.slice(0, longest)))
        codes = table[col].cat.codes.to_numpy()
        table[col] = pd.Categorical.from_codes(np.where(codes >= 0, new_codes[codes], -1), categories=unique)
    return cut_count


def names_matching(rows: pd.DataFrame, pattern: str | re.Pattern[str], where: np.ndarray) -> np.ndarray:
    """Per row, whether it is one of the rows `where` and its name contains `pattern` (one question of
    `DistinctNames`)."""
    return DistinctNames(rows, where).rows(pattern)


def blocking_mask(events: pd.DataFrame) -> np.ndarray:
    """Host rows that block until the device catches up: the `sync` kind (``*Synchronize`` of CUDA and HIP) and
    the blocking copies and value reads of `rules.BLOCKING_HOST_OPS`, whatever kind their reader gave them. The
    one answer to "is this a sync" for gap causes, the step model and the timeline export."""
    names = events["name"].cat.categories
    # Decided once per distinct name (a few thousand), then spread over the rows by their codes.
    matched = np.asarray(names.str.match(SYNC_API_PATTERN), dtype=bool) if len(names) else np.zeros(0, bool)
    blocking = np.append(names.isin(BLOCKING_HOST_OPS) | matched, False)
    named = blocking[events["name"].cat.codes.to_numpy()]  # code -1 (no name) finds the last slot: False
    return events["device"].isna().to_numpy() & (kind_mask(events, "sync") | named)


def mark_step_ranges(table: pd.DataFrame, name: str) -> int:
    """Make the host ranges named `name` the table's steps, in place (``--step-range``: a user's NVTX or annotation
    range around each training step, where no ``ProfilerStep#N`` is recorded), numbered 0, 1, ... in time order;
    any other step marker becomes a plain annotation, so the steps are these ranges alone. The number marked."""
    categories = table["name"].cat.categories
    if name not in categories:
        return 0
    named = table["name"].cat.codes.to_numpy() == categories.get_loc(name)
    host = table["device"].isna().to_numpy()
    rows = np.flatnonzero(named & host & kind_mask(table, *_HOST_KINDS_TO_PROMOTE, "step"))
    if not len(rows):
        return 0
    rows = rows[np.argsort(table["ts_ns"].to_numpy()[rows], kind="stable")]
    kind_codes = table["kind"].cat.codes.to_numpy().copy()
    step_ids = table["step_id"].to_numpy().copy()
    others = kind_codes == KINDS.index("step")
    kind_codes[others] = KINDS.index("annotation")
    step_ids[others] = -1
    kind_codes[rows] = KINDS.index("step")
    step_ids[rows] = np.arange(len(rows))  # an int32 column: 2**31 steps are beyond any trace
    table["kind"] = pd.Categorical.from_codes(kind_codes, categories=KINDS)
    table["step_id"] = step_ids
    return len(rows)


def _promote_markers(table: pd.DataFrame) -> None:
    """Give host step and input-wait markers their kinds, in place."""
    if table.empty or not len(table["name"].cat.categories):
        return
    names = table["name"].cat.categories.to_series(index=range(len(table["name"].cat.categories)))
    codes = table["name"].cat.codes.to_numpy()
    host = table["device"].isna().to_numpy() & table["kind"].isin(_HOST_KINDS_TO_PROMOTE).to_numpy()
    is_wait_name = names.str.match(INPUT_WAIT_PATTERN).fillna(False).to_numpy(bool)
    step_match = names.str.extract(PROFILER_STEP_PATTERN, expand=False)
    is_step_name = step_match.notna().to_numpy()
    valid = codes >= 0
    wait_rows = host & valid & is_wait_name[np.where(valid, codes, 0)]
    step_rows = host & valid & is_step_name[np.where(valid, codes, 0)]
    if not (wait_rows.any() or step_rows.any()):
        return
    # Whole columns are replaced (the readers' arrays may be read-only views, and are not copied).
    kind_codes = table["kind"].cat.codes.to_numpy().copy()
    kind_codes[wait_rows] = KINDS.index("input_wait")
    kind_codes[step_rows] = KINDS.index("step")
    table["kind"] = pd.Categorical.from_codes(kind_codes, categories=KINDS)
    step_numbers = pd.to_numeric(step_match, errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    step_ids = table["step_id"].to_numpy().copy()
    step_ids[step_rows] = step_numbers[codes[step_rows]]
    table["step_id"] = step_ids


# --------------------------------------------------------------------------- device memory

_MEMORY_INT_COLUMNS: dict[str, Any] = {
    "ts_ns": np.int64,
    "thread": np.int64,
    "allocated": np.int64,
    "reserved": np.int64,
    "stack_reserved": np.int64,
    "available": np.int64,
    "delta": np.int64,
    "addr": np.int64,
}
_MEMORY_UNKNOWN = {"delta": 0}  # any other int column: -1
_MEMORY_CATEGORY_COLUMNS: dict[str, tuple[str, ...] | None] = {"device": None, "op": None}
_NO_STRINGS = pd.Index(["-"])[:0]  # no categories, of the dtype pandas gives strings
MEMORY_COLUMNS = (
    "ts_ns",
    "device",
    "thread",
    "allocated",
    "reserved",
    "stack_reserved",
    "available",
    "fragmentation",
    "delta",
    "addr",
    "op",
    "absolute",
    "input_id",
)


def _sized(columns: Mapping[str, Any] | None, n: int | None) -> tuple[Mapping[str, Any], int]:
    """A side table's columns as a reader gave them (maybe none) and its row count (`n`, else the first column's)."""
    columns = columns or {}
    return columns, (len(next(iter(columns.values()))) if columns else 0) if n is None else n


def _int_columns(
    columns: Mapping[str, Any], spec: Mapping[str, Any], n: int, unknown: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """A side table's integer columns of `spec` (name -> dtype), each missing one all unknown (-1, or `unknown`'s)."""
    data: dict[str, Any] = {}
    for col, dtype in spec.items():
        values = columns.get(col)
        fill = (unknown or {}).get(col, -1)
        data[col] = np.full(n, fill, dtype) if values is None else narrowed_ints(values, dtype)
    return data


def _strings(values: Any, n: int) -> pd.Categorical:
    """A side table's string column as a categorical (all unknown when None); without any value, of the dtype
    pandas gives strings, so tables of several inputs concatenate."""
    if values is None:
        return pd.Categorical.from_codes(np.full(n, -1, np.int8), categories=_NO_STRINGS)
    column = values if isinstance(values, pd.Categorical) else pd.Categorical(values)
    return column if len(column.categories) else pd.Categorical.from_codes(column.codes, categories=_NO_STRINGS)


def make_memory_table(columns: Mapping[str, Any] | None = None, n: int | None = None) -> pd.DataFrame:
    """Build a memory side table (module docstring) from whichever columns a reader has, sorted by time
    (stably: events at one instant keep the reader's order). Missing columns get their "unknown" value."""
    columns, n = _sized(columns, n)
    data = _int_columns(columns, _MEMORY_INT_COLUMNS, n, _MEMORY_UNKNOWN)
    for col in _MEMORY_CATEGORY_COLUMNS:
        data[col] = _strings(columns.get(col), n)
    fragmentation = columns.get("fragmentation")
    data["fragmentation"] = np.full(n, np.nan) if fragmentation is None else np.asarray(fragmentation, np.float64)
    absolute = columns.get("absolute")
    data["absolute"] = np.ones(n, bool) if absolute is None else np.asarray(absolute, bool)
    input_id = columns.get("input_id")
    data["input_id"] = np.zeros(n, np.int16) if input_id is None else np.asarray(input_id, np.int16)
    table = pd.DataFrame({col: data[col] for col in MEMORY_COLUMNS}, copy=False)
    ts = data["ts_ns"]
    if n > 1 and (ts[1:] < ts[:-1]).any():
        table = table.iloc[np.argsort(ts, kind="stable")].reset_index(drop=True)
    return table


def empty_memory_table() -> pd.DataFrame:
    """A memory table without rows: the trace has no memory events."""
    return make_memory_table({}, 0)


# --------------------------------------------------------------------------- op costs

_OP_INT_COLUMNS: dict[str, Any] = {"ts_ns": np.int64, "dur_ns": np.int64, "thread": np.int64, "external_id": np.int64}
_OP_CATEGORY_COLUMNS: dict[str, tuple[str, ...] | None] = {"device": None, "name": None}
_OP_OBJECT_COLUMNS = ("input_dims", "input_types", "concrete_inputs")
_OP_FLOAT_COLUMNS = ("flops", "bytes_accessed", "model_flops")
OP_COLUMNS = (
    "ts_ns",
    "dur_ns",
    "thread",
    "device",
    "name",
    "external_id",
    "input_dims",
    "input_types",
    "concrete_inputs",
    "flops",
    "bytes_accessed",
    "model_flops",
    "input_id",
)


def make_op_table(columns: Mapping[str, Any] | None = None, n: int | None = None) -> pd.DataFrame:
    """Build an op-cost side table (module docstring) from whichever columns a reader has; missing columns get
    their "unknown" value."""
    columns, n = _sized(columns, n)
    data = _int_columns(columns, _OP_INT_COLUMNS, n)
    for col in _OP_CATEGORY_COLUMNS:
        data[col] = _strings(columns.get(col), n)
    for col in _OP_OBJECT_COLUMNS:
        values = columns.get(col)
        column = np.empty(n, dtype=object)
        if values is not None:  # a list of lists goes in row by row, not as a 2-d array
            column[:] = values if isinstance(values, np.ndarray) else list(values)
        data[col] = column
    for col in _OP_FLOAT_COLUMNS:
        values = columns.get(col)
        data[col] = np.full(n, np.nan) if values is None else np.asarray(values, np.float64)
    input_id = columns.get("input_id")
    data["input_id"] = np.zeros(n, np.int16) if input_id is None else np.asarray(input_id, np.int16)
    return pd.DataFrame({col: data[col] for col in OP_COLUMNS}, copy=False)


def concat_op_tables(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Op tables one after another (rows renumbered), their categorical columns kept categorical."""
    return tables[0] if len(tables) == 1 else _concat_tables(tables, OP_COLUMNS, _OP_CATEGORY_COLUMNS)


def empty_op_table() -> pd.DataFrame:
    """An op table without rows: the trace records no op costs (no shapes, no FLOP counts)."""
    return make_op_table({}, 0)


# --------------------------------------------------------------------------- collectives' args

_COLLECTIVE_INT_COLUMNS: dict[str, Any] = {
    "ts_ns": np.int64,
    "dur_ns": np.int64,
    "thread": np.int64,
    "stream": np.int64,
    "group_size": np.int32,
    "seq": np.int64,
    "in_nelems": np.int64,
    "out_nelems": np.int64,
}
_COLLECTIVE_CATEGORY_COLUMNS: dict[str, tuple[str, ...] | None] = {
    "device": None,
    "name": None,
    "collective": None,
    "group": None,
    "dtype": None,
}
COLLECTIVE_COLUMNS = (
    "ts_ns",
    "dur_ns",
    "thread",
    "device",
    "stream",
    "name",
    "collective",
    "group",
    "group_size",
    "seq",
    "in_nelems",
    "out_nelems",
    "dtype",
    "input_id",
)


def make_collective_table(columns: Mapping[str, Any] | None = None, n: int | None = None) -> pd.DataFrame:
    """Build a collectives' args side table (module docstring) from whichever columns a reader has; missing
    columns get their "unknown" value."""
    columns, n = _sized(columns, n)
    data = _int_columns(columns, _COLLECTIVE_INT_COLUMNS, n)
    for col in _COLLECTIVE_CATEGORY_COLUMNS:
        data[col] = _strings(columns.get(col), n)
    input_id = columns.get("input_id")
    data["input_id"] = np.zeros(n, np.int16) if input_id is None else np.asarray(input_id, np.int16)
    return pd.DataFrame({col: data[col] for col in COLLECTIVE_COLUMNS}, copy=False)


def empty_collective_table() -> pd.DataFrame:
    """A collectives' args table without rows: the trace records no collective."""
    return make_collective_table({}, 0)


class InputInfo(msgspec.Struct):
    """One trace file that went into a profile."""

    path: str
    format: str
    host: str | None = None
    rank: int | None = None
    events: int = 0


class TraceRead(msgspec.Struct):
    """What a reader returns for one file, before inputs are merged into a `Profile`."""

    events: pd.DataFrame
    input: InputInfo
    framework: str = "unknown"
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: Counter[str] = field(default_factory=Counter)
    memory: pd.DataFrame = field(default_factory=empty_memory_table)  # device memory levels (`make_memory_table`)
    ops: pd.DataFrame = field(default_factory=empty_op_table)  # framework ops' cost basis (`make_op_table`)
    collectives: pd.DataFrame = field(default_factory=empty_collective_table)  # `make_collective_table`


class Profile(msgspec.Struct):
    """One run: every input's events on one clock, plus what the inputs say about it."""

    events: pd.DataFrame
    inputs: list[InputInfo]
    framework: str = "unknown"
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: Counter[str] = field(default_factory=Counter)
    name: str = ""
    memory: pd.DataFrame = field(default_factory=empty_memory_table)  # device memory levels (`make_memory_table`)
    ops: pd.DataFrame = field(default_factory=empty_op_table)  # framework ops' cost basis (`make_op_table`)
    collectives: pd.DataFrame = field(default_factory=empty_collective_table)  # `make_collective_table`


def take_rows(table: pd.DataFrame, rows: np.ndarray, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """`columns` (default: all) of the rows `rows` (positions, or a mask), the table's index kept. Only the
    cells taken are copied: ``table[columns]`` first would copy every row of those columns."""
    if rows.dtype == bool:
        rows = np.flatnonzero(rows)
    names = list(table.columns) if columns is None else list(columns)
    return pd.DataFrame({name: table[name].array.take(rows) for name in names}, index=table.index.take(rows))


def rows_of_input(events: pd.DataFrame, input_id: int, columns: list[str] | None = None) -> pd.DataFrame:
    """Rows of one input: the table itself, not a copy, when every row is that input's (a single-file run;
    callers only read it), else a copy of those rows, of `columns` only when given (a smaller copy)."""
    ids = events["input_id"].to_numpy()
    if len(ids) == 0 or (ids[0] == input_id and (ids == input_id).all()):
        return events
    return take_rows(events, ids == input_id, columns)


def _input_label(info: InputInfo, index: int) -> str:
    if info.rank is not None:
        return f"rank{info.rank}"
    if info.host:
        return info.host
    return f"input{index}"


def input_labels(inputs: list[InputInfo]) -> list[str]:
    """The prefix of each input's device ids in a run of several (``rank3``, a host name, ``input2``), unique."""
    labels = [_input_label(info, i) for i, info in enumerate(inputs)]
    if len(set(labels)) < len(labels):
        labels = [f"{label}#{i}" for i, label in enumerate(labels)]
    return labels


def merge_reads(reads: list[TraceRead], name: str = "") -> Profile:
    """Merge per-file reads of one run into a `Profile`.

    With several inputs, device ids get the input's rank or host as prefix so
    two files' GPU:0 stay two devices. Clocks are already absolute per reader.
    """
    if not reads:
        raise ValueError("merge_reads needs at least one read")
    several = len(reads) > 1
    labels = input_labels([r.input for r in reads])
    tables = []
    memories = []
    op_tables = []
    collective_tables = []
    devices: dict[str, DeviceInfo] = {}
    warnings: Counter[str] = Counter()
    metadata: dict[str, Any] = {}
    for i, read in enumerate(reads):
        table = read.events
        table["input_id"] = np.int16(i)
        if several:
            _prefix_devices(table, labels[i])
        memory = read.memory
        memory["input_id"] = np.int16(i)
        if several:
            _prefix_devices(memory, labels[i])
        memories.append(memory)
        ops = read.ops
        ops["input_id"] = np.int16(i)
        if several:
            _prefix_devices(ops, labels[i])
        op_tables.append(ops)
        collectives = read.collectives
        collectives["input_id"] = np.int16(i)
        if several:
            _prefix_devices(collectives, labels[i])
        collective_tables.append(collectives)
        for dev_id, info in read.devices.items():
            key = f"{labels[i]}/{dev_id}" if several else dev_id
            devices[key] = replace(info, id=key)
        warnings.update(read.warnings)
        metadata[read.input.path] = read.metadata
        tables.append(table)
    events = tables[0] if len(tables) == 1 else _concat_tables(tables)
    memory = memories[0] if len(memories) == 1 else _concat_tables(memories, MEMORY_COLUMNS, _MEMORY_CATEGORY_COLUMNS)
    ops = concat_op_tables(op_tables)
    collectives = (
        collective_tables[0]
        if len(collective_tables) == 1
        else _concat_tables(collective_tables, COLLECTIVE_COLUMNS, _COLLECTIVE_CATEGORY_COLUMNS)
    )
    frameworks = {r.framework for r in reads} - {"unknown"}
    framework = frameworks.pop() if len(frameworks) == 1 else "unknown"
    return Profile(
        events=events,
        inputs=[r.input for r in reads],
        framework=framework,
        devices=devices,
        metadata=metadata,
        warnings=warnings,
        name=name,
        memory=memory,
        ops=ops,
        collectives=collectives,
    )


def _prefix_devices(table: pd.DataFrame, label: str) -> None:
    """Prefix a table's device ids with its input's label (``rank1/GPU:0``), in place."""
    table["device"] = table["device"].cat.rename_categories([f"{label}/{d}" for d in table["device"].cat.categories])


def _alike(columns: list[pd.Categorical]) -> list[pd.Categorical]:
    """Categoricals whose categories share one dtype: an input without any value (no devices: a CPU-only
    trace) has empty categories of the default dtype, which `union_categoricals` refuses beside strings."""
    dtypes = [c.categories.dtype for c in columns if len(c.categories)]
    if not dtypes:
        return columns
    empty = pd.Index([], dtype=dtypes[0])
    return [c if len(c.categories) else pd.Categorical.from_codes(c.codes, categories=empty) for c in columns]


def concat_event_tables(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Event tables one after another, their categorical columns kept categorical."""
    return _concat_tables(tables)


def _concat_tables(
    tables: list[pd.DataFrame],
    columns: tuple[str, ...] = COLUMNS,
    categories: Mapping[str, tuple[str, ...] | None] = _CATEGORY_COLUMNS,
) -> pd.DataFrame:
    """Concatenate event tables (or memory tables: their `columns` and `categories`) keeping categorical
    columns categorical."""
    merged: dict[str, Any] = {}
    for col in columns:
        if col in categories:
            cats = categories[col]
            if cats is None:
                merged[col] = pd.api.types.union_categoricals(_alike([t[col].array for t in tables]), ignore_order=True)
            else:  # same fixed categories everywhere: the codes concatenate as they are
                codes = np.concatenate([t[col].cat.codes.to_numpy() for t in tables])
                merged[col] = pd.Categorical.from_codes(codes, categories=cats)
        else:
            merged[col] = np.concatenate([t[col].to_numpy() for t in tables])
    return pd.DataFrame(merged, copy=False)
