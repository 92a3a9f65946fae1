"""`ordering`'s fast sorts and searches give what numpy's own calls, or a plain loop, give on the same keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traceinsight.ordering import dense_codes, lexsort, search_pairs, tuple_codes


def _keys(rng: np.random.Generator, n: int, spans: tuple[int, ...]) -> list[np.ndarray]:
    """Integer keys of the given spans (small spans: many ties), offset to negative values."""
    return [rng.integers(0, span, n) - span // 2 for span in spans]


@pytest.mark.parametrize(
    "spans",
    [
        (5,),  # one key, all ties broken by row order
        (1 << 40, 3),  # time within a few threads: folded whole
        (7, 1 << 40, 12),  # longest first within start within thread: folded whole
        (1 << 55, 1000, 12),  # the least significant key does not fit: tied rows sorted on by it
        (1 << 61, 1 << 61, 3),  # only the primary key fits: tied rows sorted on by the other two
        (1 << 62, 1 << 62),  # none fits
    ],
)
def test_lexsort_is_numpys_order(spans: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(spans))
    for n in (0, 1, 2, 1000):
        keys = _keys(rng, n, spans)
        assert np.array_equal(lexsort(keys), np.lexsort(keys))


def test_lexsort_of_nearly_sorted_rows_with_equal_starts() -> None:
    """A trace's host ops: time order within each thread, nested ops starting at the same instant."""
    rng = np.random.default_rng(1)
    start = np.repeat(np.cumsum(rng.integers(0, 3, 500)), 2)
    end = start + rng.integers(0, 50, len(start))
    thread = rng.integers(0, 4, len(start)).astype(np.int8)
    keys = (start - end, start, thread)
    assert np.array_equal(lexsort(keys), np.lexsort(keys))


def test_lexsort_of_bools_and_floats() -> None:
    rng = np.random.default_rng(2)
    flags, ts = rng.integers(0, 2, 300).astype(bool), rng.integers(0, 20, 300)
    assert np.array_equal(lexsort((~flags, ts)), np.lexsort((~flags, ts)))
    floats = rng.random(300)
    assert np.array_equal(lexsort((floats, ts)), np.lexsort((floats, ts)))


def test_dense_codes_are_numpys_unique() -> None:
    values = np.random.default_rng(3).integers(-5, 1 << 40, 2000) // (1 << 36)
    distinct, codes = dense_codes(values)
    want_distinct, want_codes = np.unique(values, return_inverse=True)
    assert np.array_equal(distinct, want_distinct)
    assert np.array_equal(codes, want_codes)


def _search_by_loop(place: np.ndarray, start: np.ndarray, wanted: np.ndarray, ts: np.ndarray) -> np.ndarray:
    found = np.full(len(ts), -1, np.int64)
    for q in range(len(ts)):
        for i in range(len(place)):
            if place[i] == wanted[q] and start[i] <= ts[q]:
                found[q] = i
    return found


@pytest.mark.parametrize("place_span", [4, 1 << 40])  # folded into one search; one search per place
def test_search_pairs_finds_the_last_row_at_or_before(place_span: int) -> None:
    rng = np.random.default_rng(4)
    place = rng.integers(0, 4, 200) * (place_span // 4)
    start = rng.integers(-100, 1000, 200)
    order = np.lexsort((start, place))
    place, start = place[order], start[order]
    wanted = rng.integers(0, 5, 300) * (place_span // 4)  # the fifth place holds no row
    ts = rng.integers(-300, 1300, 300)  # before the first start and after the last too
    assert np.array_equal(search_pairs(place, start, wanted, ts), _search_by_loop(place, start, wanted, ts))
    assert np.array_equal(search_pairs(place[:0], start[:0], wanted, ts), np.full(len(ts), -1))


def test_tuple_codes_number_tuples_as_groupby_does() -> None:
    """A code per distinct tuple in the order of its first row (pandas' `ngroup` of `groupby(sort=False)`), and each
    code's first row."""
    rng = np.random.default_rng(5)
    keys = [rng.integers(0, 4, 3000), rng.integers(-(1 << 40), 1 << 40, 3000) // (1 << 38), rng.integers(0, 3, 3000)]
    codes, first = tuple_codes(*keys)
    frame = pd.DataFrame({"a": keys[0], "b": keys[1], "c": keys[2]})
    assert codes.tolist() == frame.groupby(["a", "b", "c"], sort=False).ngroup().tolist()
    assert first.tolist() == [int(np.flatnonzero(codes == c)[0]) for c in range(len(first))]
    empty_codes, empty_first = tuple_codes(np.zeros(0, np.int64))
    assert len(empty_codes) == len(empty_first) == 0
