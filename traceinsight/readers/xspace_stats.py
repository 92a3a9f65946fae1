"""The stats of XSpace events that the tables read, decoded with numpy from the events' bytes (`xspace_wire`):
per event, the wanted stats of its metadata, then its own (which win); and the stats of a plane itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.readers.xspace_classify import FLOAT_STATS, INT_STATS, STR_STATS, Plane
from traceinsight.readers.xspace_wire import (
    ST_DOUBLE,
    ST_INT,
    ST_REF,
    ST_STR,
    ST_UINT,
    WORD_STRING,
    EventFields,
    Wire,
)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_CORRUPT_STATS = "xspace: corrupt event stats (bad protobuf wire data) ignored"


def _ref_name(stat_names: Any, ref: int) -> str | None:
    """The string a stat metadata id stands for (its name), None if there is no such entry."""
    if not _INT64_MIN <= ref <= _INT64_MAX:  # the map's keys are int64; upb raises on others
        return None
    meta = stat_names.get(ref)
    return meta.name if meta is not None else None


def _stat_value(stat: Any, stat_names: Any) -> Any:
    """The Python value of one XStat message, ``ref_value`` resolved to its string."""
    which = stat.WhichOneof("value")
    if which == "ref_value":
        return _ref_name(stat_names, stat.ref_value)
    return getattr(stat, which) if which else None


def plane_stats(plane: Any) -> dict[str, Any]:
    """A plane's own stats by name (device properties, profile start and stop time)."""
    return {
        name: _stat_value(stat, plane.stat_metadata)
        for stat in plane.stats
        if (name := _ref_name(plane.stat_metadata, stat.metadata_id)) is not None
    }


class Stats(msgspec.Struct):
    """Per event, the wanted stats (event stats win over event-metadata stats)."""

    ints: dict[str, np.ndarray]  # int64, meaningful where present
    floats: dict[str, np.ndarray]  # float64, NaN where absent
    strings: dict[str, np.ndarray]  # object, None where absent
    present: dict[str, np.ndarray]  # bool

    @classmethod
    def empty(
        cls,
        n: int,
        ints: tuple[str, ...] = INT_STATS,
        floats: tuple[str, ...] = FLOAT_STATS,
        strings: tuple[str, ...] = STR_STATS,
    ) -> Stats:
        return cls(
            ints={s: np.zeros(n, np.int64) for s in ints},
            floats={s: np.full(n, np.nan) for s in floats},
            strings={s: np.full(n, None, object) for s in strings},
            present={s: np.zeros(n, bool) for s in (*ints, *floats, *strings)},
        )

    def put(self, name: str, rows: np.ndarray, value: Any) -> None:
        """Give `rows` one Python value of stat `name` (dropped if of another type)."""
        if name in self.ints and isinstance(value, int):
            self.ints[name][rows] = value if value <= _INT64_MAX else value - 2**64  # uint64 as the wire path reads it
        elif name in self.floats and isinstance(value, int | float):
            self.floats[name][rows] = value
        elif name in self.strings and isinstance(value, str):
            self.strings[name][rows] = value
        else:
            return
        self.present[name][rows] = True

    def put_wire(self, name: str, rows: np.ndarray, field: np.ndarray, value: np.ndarray) -> None:
        """Give `rows` the values of numeric stat `name` as decoded (value field number, raw 64 bits)."""
        is_int = (field == ST_INT) | (field == ST_UINT)
        if name in self.ints:
            ok = is_int
            self.ints[name][rows[ok]] = value[ok].view(np.int64)
        else:
            ok = is_int | (field == ST_DOUBLE)
            as_int = value[ok].view(np.int64).astype(np.float64)
            self.floats[name][rows[ok]] = np.where(is_int[ok], as_int, value[ok].view(np.float64))
        self.present[name][rows[ok]] = True


class FoundStats(msgspec.Struct):
    """The stats of a batch's events that a table may want (by metadata id), found once for both tables."""

    index: np.ndarray  # into the events' stats, in stat order
    md: np.ndarray  # their metadata ids
    value_at: np.ndarray  # where their value field starts (-1: unknown)

    @classmethod
    def of(cls, plane: Plane, wire: Wire, events: EventFields, warnings: Counter[str]) -> FoundStats:
        """The stats of `events` named like a stat either table reads; corrupt ones are counted."""
        index, md, value_at, corrupt = wire.stat_ids(events, plane.wanted_ids)
        if corrupt:
            warnings[_CORRUPT_STATS] += corrupt
        return cls(index, md, value_at)


def read_stats(
    plane: Plane,
    wire: Wire,
    events: EventFields,
    found: FoundStats,
    rows: np.ndarray | None,
    string_rows: np.ndarray,
    with_stats: list[tuple[int, Any]],
    warnings: Counter[str],
    stats: Stats,
) -> Stats:
    """The stats `stats` wants of the events `rows` (None: all) of `plane`, string stats only on `string_rows`
    (positions in `rows`): from the events' metadata (`with_stats`: id, metadata), then from the events' own
    (`found`). Corrupt stats are ignored (counted)."""
    stat_names = plane.meta.stat_metadata
    row_of = np.arange(len(events.md)) if rows is None else np.full(len(events.md), -1, np.int64)
    if rows is not None:
        row_of[rows] = np.arange(len(rows))
    want_string = np.zeros(len(row_of) if rows is None else len(rows), bool)
    want_string[string_rows] = True

    # Stats on the event metadata first (rare: TPU XLA Ops), so the events' own stats overwrite them.
    if with_stats:
        md = events.md if rows is None else events.md[rows]
        order = np.argsort(md, kind="stable")
        ordered = md[order]
        for meta_id, meta in with_stats:
            with_meta = order[np.searchsorted(ordered, meta_id) : np.searchsorted(ordered, meta_id, side="right")]
            for stat in meta.stats:
                name = _ref_name(stat_names, stat.metadata_id)
                if name in stats.present:
                    to = with_meta[want_string[with_meta]] if name in stats.strings else with_meta
                    stats.put(name, to, _stat_value(stat, stat_names))

    # The events' own: those of `found` with a metadata id of a name `stats` has.
    names = [name for name in stats.present if name in plane.stat_ids]
    ids = np.array([md for name in names for md in plane.stat_ids[name]], np.int64)
    id_name = np.array([i for i, name in enumerate(names) for _ in plane.stat_ids[name]], np.int64)
    order = np.argsort(ids)
    mine = np.flatnonzero(np.isin(found.md, ids))
    mine = mine[row_of[events.stat_event[found.index[mine]]] >= 0]
    name_of = id_name[order][np.searchsorted(ids[order], found.md[mine])]
    row = row_of[events.stat_event[found.index[mine]]]
    is_string = np.array([name in stats.strings for name in names], bool)
    chosen = np.flatnonzero(~is_string[name_of] | want_string[row])
    index, name_of, row, value_at = (
        found.index[mine[chosen]],
        name_of[chosen],
        row[chosen],
        found.value_at[mine[chosen]],
    )
    for i, name in enumerate(names):  # a name at a time: the values' arrays stay small
        part = np.flatnonzero(name_of == i)
        if not part.size:
            continue
        at = index[part]
        field, value, length, corrupt = wire.stat_values(events.stat_start[at], events.stat_end[at], value_at[part])
        if corrupt:
            warnings[_CORRUPT_STATS] += corrupt
        if name not in stats.strings:
            stats.put_wire(name, row[part], field, value)
            continue
        texts = _texts(wire, stat_names, field, value, length)
        ok = pd.notna(texts)
        stats.strings[name][row[part][ok]] = texts[ok]
        stats.present[name][row[part][ok]] = True
    return stats


def _texts(wire: Wire, stat_names: Any, field: np.ndarray, value: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The strings of string stats (inline ``str_value`` or interned ``ref_value``), each decoded once."""
    texts = np.full(len(field), None, object)
    refs = np.flatnonzero(field == ST_REF)
    if refs.size:
        codes, distinct = pd.factorize(value[refs])
        texts[refs] = np.array([_ref_name(stat_names, ref) for ref in distinct.tolist()], object)[codes]
    inline = np.flatnonzero(field == ST_STR)
    start = value[inline].astype(np.int64)
    end = start + length[inline]
    short = length[inline] <= WORD_STRING
    grouped = wire.distinct_strings(start[short], end[short]) if short.any() else None
    if grouped is not None:
        codes, first = grouped
        texts[inline[short]] = _decoded(wire.strings(start[short][first], end[short][first]))[codes]
        inline, start, end = inline[~short], start[~short], end[~short]
    if inline.size:
        codes, distinct = pd.factorize(np.array(wire.strings(start, end), object))
        texts[inline] = _decoded(distinct)[codes]
    return texts


def _decoded(raws: Any) -> np.ndarray:
    """Byte strings as text (object array); bytes that are not UTF-8 replaced."""
    return np.array([raw.decode("utf-8", "replace") for raw in raws], object)


def per_distinct(values: np.ndarray, rule: Callable[[str], Any], missing: Any, dtype: Any) -> np.ndarray:
    """``rule(value)`` per row, evaluated once per distinct value; rows without one (None) get `missing`."""
    if not len(values):  # many a batch has no copy, no kernel: no need for pandas' hashing machinery
        return np.zeros(0, dtype)
    codes, distinct = pd.factorize(values)
    return np.array([*(rule(v) for v in distinct), missing], dtype)[codes]
