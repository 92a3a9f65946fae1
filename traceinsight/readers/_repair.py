"""Event-level damage that every reader skips or repairs the same way, counting each kind in the warnings.

A profiler killed mid-write, a counter that wrapped, a hand-edited file: one bad
event must not sink a trace, and must not quietly skew the figures either (one
event stamped in 2100 would make every device 100 % idle). So readers pass their
times through `usable_times` (JSON: `usable_json_times`, before converting µs), and,
where the format records its profiling window, `near_window`; occupancies through
`valid_occupancy`; and their finished table through `drop_duplicates`. Each kind of
damage becomes one warning with a count, never one line per event.

What is *not* damage: events out of order (analyses sort), and events that overlap
on one stream (real XSpace and Kineto traces have thousands; busy time is a union).

pandas is imported by the functions over finished tables alone: the early read's process (early.py) checks times
here without it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# HTA drops events longer than 7 days as CUPTI counter overflows (MAX_EVENT_DURATION_US).
MAX_DURATION_NS = 7 * 24 * 3600 * 10**9
# Timestamps (ns) a clock can give: up to 2**61 ns before its zero (relative clocks start near 0) and 2**62 ns
# after it (epoch: the year 2116). Any two then differ by less than 2**63: no difference, no ts + dur overflows int64.
TS_MIN_NS, TS_MAX_NS = -(2**61), 2**62


def possible_ts(ts_ns: np.ndarray) -> np.ndarray:
    """Whether each timestamp (ns, int or float; NaN is not) is one a clock can give."""
    return (ts_ns > TS_MIN_NS) & (ts_ns < TS_MAX_NS)


def usable_times(ts_ok: np.ndarray, dur_ns: np.ndarray, warnings: Counter[str], prefix: str) -> np.ndarray:
    """Rows to keep: a possible timestamp (`ts_ok`, the reader's own check) and a duration within ±7 days.

    Durations a little below 0 (rounding) are the readers' to set to 0; NaN and inf
    are impossible. Counts what it refuses in `warnings` under ``"<prefix>: ..."``.
    """
    with np.errstate(invalid="ignore"):
        bad_dur = ts_ok & ~(np.abs(dur_ns) <= MAX_DURATION_NS)
    bad_ts = ~ts_ok
    if bad_ts.any():
        warnings[f"{prefix}: events with an impossible timestamp skipped"] += int(bad_ts.sum())
    if bad_dur.any():
        warnings[f"{prefix}: events with an impossible duration (over 7 days: counter overflow) skipped"] += int(
            bad_dur.sum()
        )
    return ~(bad_ts | bad_dur)


def usable_json_times(
    ts_us: Sequence[Any] | np.ndarray, dur_us: Sequence[Any], warnings: Counter[str], prefix: str
) -> np.ndarray:
    """`usable_times` of JSON events from their ts and dur as decoded (µs: int, float, Decimal; None if absent).

    Run before the µs are converted to int64 ns, which inf or 1e300 would break.
    Absent values pass (the loader skips events without ts and gives dur 0).
    """
    ts, dur = floats(ts_us), floats(dur_us)
    with np.errstate(invalid="ignore", over="ignore"):
        ts_ok = np.isnan(ts) | possible_ts(ts * 1000)
        return usable_times(ts_ok, np.nan_to_num(dur, nan=0.0) * 1000, warnings, prefix)


def floats(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """float64 of decoded JSON numbers: None -> NaN, ints beyond a double -> ±inf. (JSON has no NaN literal.)"""
    try:
        return np.array(values, dtype=np.float64)
    except OverflowError:
        return np.array([np.nan if v is None else _float(v) for v in values], dtype=np.float64)


def _float(value: Any) -> float:
    try:
        return float(value)
    except OverflowError:
        return np.inf if value > 0 else -np.inf


def near_window(
    ts_ns: np.ndarray, dur_ns: np.ndarray, keep: np.ndarray, start: int, stop: int, warnings: Counter[str], prefix: str
) -> np.ndarray:
    """False for events far outside the profiling window [start, stop]: more than its length (at least 1 s) away.

    Real files have events a little outside it (still running at the start or the
    stop); an event a window-length away is a damaged timestamp that would stretch
    every device's span. Only rows in `keep` are counted.
    """
    slack = max(stop - start, 10**9)
    far = keep & ((ts_ns + dur_ns < start - slack) | (ts_ns > stop + slack))
    if far.any():
        warnings[f"{prefix}: events far outside the profiling window skipped"] += int(far.sum())
    return ~far


_MORE_HASHED = (("kind", 0x27D4EB2F), ("name", 0x165667B1), ("correlation", 0x1B873593), ("external_id", 0xCC9E2D51))


def drop_duplicates(
    table: pd.DataFrame, warnings: Counter[str], prefix: str, in_line_order: bool = False
) -> pd.DataFrame:
    """The table without exact repeats of a row (every column equal), counted in `warnings`.

    Rows are first matched on a hash of their main columns (one integer column,
    cheap); only rows sharing that with another row are compared in full. Most
    traces have no repeat at all, which a sort of the hashes shows without the
    memory of a hash table. With `in_line_order` (XSpace: each line's events are one
    block of rows) the sort is often not needed either (`_tied_rows`).
    """
    import pandas as pd

    tied = _tied_rows(table) if in_line_order else None
    if tied is not None:
        if not tied.any():
            return table
        candidates = table[tied]
    else:
        key = _row_hash(table)
        key.sort()
        if not (key[1:] == key[:-1]).any():
            return table
        maybe = pd.Series(_row_hash(table)).duplicated(keep=False).to_numpy()
        candidates = table[maybe]
    repeats = candidates.index[candidates.duplicated()]
    if not len(repeats):
        return table
    warnings[f"{prefix}: exact duplicate events skipped"] += len(repeats)
    return table.drop(index=repeats).reset_index(drop=True)


def _tied_rows(table: pd.DataFrame) -> np.ndarray | None:
    """The only rows that may repeat one another, when the table's rows come in blocks of one place each (device,
    stream, thread), no two blocks of one place and each block in time order, as writers lay out a line's
    events: rows starting at the same instant next to each other in a block (repeats are equal in every column,
    so in place and start). None when the rows are not laid out so: then any two may repeat each other. Four
    comparisons a row, where the hash sort took 0.1 s a million rows."""
    import pandas as pd

    ts = table["ts_ns"].to_numpy()
    places = [table["device"].cat.codes.to_numpy(), table["stream"].to_numpy(), table["thread"].to_numpy()]
    same_place = np.ones(max(len(ts) - 1, 0), bool)
    for column in places:
        same_place &= column[1:] == column[:-1]
    if (same_place & (ts[1:] < ts[:-1])).any():
        return None
    firsts = np.flatnonzero(np.r_[True, ~same_place]) if len(ts) else np.zeros(0, np.int64)
    blocks = pd.DataFrame({i: column[firsts] for i, column in enumerate(places)})
    if blocks.duplicated().any():  # a place in two blocks
        return None
    tie = same_place & (ts[1:] == ts[:-1])
    tied = np.zeros(len(ts), bool)
    tied[1:] |= tie
    tied[:-1] |= tie
    return tied


def _row_hash(table: pd.DataFrame) -> np.ndarray:
    """A hash of each row's start, duration, stream, thread, kind, name and ids, built in one array plus
    one temporary. (Start and place alone collide often: an op and the annotation around it.)"""
    with np.errstate(over="ignore"):  # the hash wraps around, as hashes do
        key = np.multiply(table["ts_ns"].to_numpy(), np.int64(0x9E3779B1))
        part = np.multiply(table["dur_ns"].to_numpy(), np.int64(0x85EBCA77))
        key += part
        np.multiply(table["stream"].to_numpy(), np.int64(0xC2B2AE3D), out=part)
        key += part
        key += table["thread"].to_numpy()
        for column, factor in _MORE_HASHED:  # rows alike in time and place, told apart by what they are
            values = table[column].cat.codes.to_numpy() if column in ("kind", "name") else table[column].to_numpy()
            np.multiply(values, np.int64(factor), out=part)
            key += part
    return key


def valid_occupancy(values: np.ndarray, warnings: Counter[str], prefix: str) -> np.ndarray:
    """Occupancy percentages in (0, 100]; NaN elsewhere. Non-finite or out-of-range values are counted.

    0 stays NaN without a warning: ROCm writes it for "not computed".
    """
    with np.errstate(invalid="ignore"):
        ok = (values > 0) & (values <= 100)
        bad = ~ok & ~np.isnan(values) & (values != 0)
    if bad.any():
        warnings[f"{prefix}: occupancy values outside 0-100 % ignored"] += int(bad.sum())
    return np.where(ok, values, np.nan)
