"""Sorting and searching event rows by integer keys (thread, stream, time), fast on the rows a trace holds.

numpy's `np.lexsort` sorts by its least significant key first, so a (thread, start, longest first) order of
100,000 host ops costs 10-25 ms whatever their order; `np.unique(..., return_inverse=True)` sorts every row to
number a dozen threads. A trace's rows come nearly in time order on each thread, and their keys are integers
whose spans multiply to far less than 2**62: folded into one int64 key, a stable sort of them takes a
millisecond. Same results, bit for bit, as the numpy calls they replace (`tests/test_ordering.py`). Rows are
numbered by their tuple of keys in one home too (`tuple_codes`): the op signatures, the launches' device work, the
top tables' groups and the reader's shared arg values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# Folded keys stay under this, so that a query key past the last span (`search_pairs`) cannot overflow either.
_FOLD_LIMIT = 1 << 62


def lexsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """`np.lexsort(keys)`: the rows' order by the last key, then the one before, ..., stable. The most significant
    integer keys are folded into one while their spans fit, sorted stably, and only the rows that tie on them are
    sorted on by the remaining keys."""
    arrays = [np.asarray(key) for key in keys]
    if not arrays or not len(arrays[-1]) or any(a.dtype.kind not in "biu" for a in arrays):
        return np.lexsort(arrays)
    folded, used = _folded(arrays[::-1])
    order = np.argsort(folded, kind="stable")
    rest = arrays[: len(arrays) - used]
    if not rest:
        return order
    ranked = folded[order]
    same_as_next = ranked[1:] == ranked[:-1]
    tied = np.flatnonzero(np.r_[same_as_next, False] | np.r_[False, same_as_next])
    if len(tied):
        sub = order[tied]
        order[tied] = sub[np.lexsort([*(a[sub] for a in rest), ranked[tied]])]
    return order


def _folded(most_significant_first: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """The leading keys folded into one int64 key of the same order, and how many of them fit."""
    folded = np.zeros(len(most_significant_first[0]), np.int64)
    total = 1
    used = 0
    for key in most_significant_first:
        low, high = int(key.min()), int(key.max())
        span = high - low + 1
        if total * span >= _FOLD_LIMIT:
            break
        folded = folded * span + (key.astype(np.int64) - low)
        total *= span
        used += 1
    return folded, used


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(values, return_inverse=True)` of integers: the distinct values sorted, and each row's position
    among them. Hashed (`pd.factorize`), only the distinct values sorted."""
    codes, distinct = pd.factorize(values, sort=True)
    return np.asarray(distinct), codes.astype(np.intp, copy=False)


def tuple_codes(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, a code for its tuple of `keys`' values, numbered in the order of each tuple's first row (as
    `groupby(sort=False)` numbers groups), and each code's first row. Hashed key by key: `np.unique` of the rows
    sorts them, 5x slower a million rows."""
    codes = np.zeros(len(keys[0]), np.int64)
    for key in keys:
        key_codes, distinct = pd.factorize(key)
        codes = pd.factorize(codes * len(distinct) + key_codes)[0]  # both < rows: no overflow
    first = np.empty(int(codes.max()) + 1 if len(codes) else 0, np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]  # the last write to each slot is its first row
    return codes, first


def search_pairs(place: np.ndarray, start: np.ndarray, wanted_place: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per query, the last position of (place, start)-sorted integer rows whose (place, start) <= (wanted_place, ts)
    in lexicographic order and whose place is the query's; -1 none. One search of folded keys where the places'
    and times' spans fit in one int64, else one search per place."""
    found = np.full(len(ts), -1, np.int64)
    if not len(place) or not len(ts):
        return found
    low = int(min(start.min(), ts.min()))
    span = int(max(start.max(), ts.max())) - low + 1
    first_place = int(min(place.min(), wanted_place.min()))
    places = int(max(place.max(), wanted_place.max())) - first_place + 1
    if places * span < _FOLD_LIMIT:
        keys = (place.astype(np.int64) - first_place) * span + (start - low)
        wanted = (wanted_place.astype(np.int64) - first_place) * span + (ts - low)
        at = np.searchsorted(keys, wanted, side="right") - 1
        hit = at >= 0
        hit[hit] = place[at[hit]] == wanted_place[hit]
        found[hit] = at[hit]
        return found
    for p in np.unique(wanted_place).tolist():
        lo, hi = np.searchsorted(place, p, side="left"), np.searchsorted(place, p, side="right")
        queries = np.flatnonzero(wanted_place == p)
        at = lo + np.searchsorted(start[lo:hi], ts[queries], side="right") - 1
        found[queries] = np.where(at >= lo, at, -1)
    return found
