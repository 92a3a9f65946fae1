import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinsight.intervals import Intervals, difference, exposed, intersection, union


def _mask(starts, ends, size):
    m = np.zeros(size, bool)
    for s, e in zip(starts, ends, strict=True):
        m[max(s, 0) : max(e, 0)] = True  # e < s: empty
    return m


def test_union_merges_overlapping_and_touching():
    u = union(np.array([0, 5, 10, 30]), np.array([6, 10, 20, 40]))
    assert u.starts.tolist() == [0, 30]
    assert u.ends.tolist() == [20, 40]
    assert u.total == 30
    assert u.gaps().starts.tolist() == [20] and u.gaps().ends.tolist() == [30]


def test_covered_between_windows():
    u = union(np.array([10, 50]), np.array([20, 60]))
    assert u.covered_between(np.array([0, 15, 25, 55]), np.array([100, 18, 45, 70])).tolist() == [20, 3, 0, 5]


def test_exposed_is_copy_time_outside_kernels():
    copies = union(np.array([0, 100]), np.array([50, 150]))
    kernels = union(np.array([40]), np.array([120]))
    assert exposed(copies, kernels) == 40 + 30


# Lengths below 0 are reversed intervals (a damaged end): they and empty ones must add nothing.
intervals = st.lists(st.tuples(st.integers(0, 300), st.integers(-30, 60)), min_size=0, max_size=25)


def _drawn(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, Intervals]:
    """Drawn (start, duration) pairs as their boolean timeline and their union."""
    starts = np.array([s for s, _ in pairs], np.int64)
    ends = starts + np.array([d for _, d in pairs], np.int64)
    return _mask(starts, ends, 400), union(starts, ends)


@settings(max_examples=200, deadline=None)
@given(intervals, intervals, st.integers(0, 400), st.integers(0, 400))
def test_union_and_coverage_match_a_boolean_timeline(a, b, w0, w1):
    (ma, ua), (mb, ub) = _drawn(a), _drawn(b)
    assert ua.total == ma.sum()
    lo, hi = min(w0, w1), max(w0, w1)
    assert ua.covered_between(np.array([lo]), np.array([hi]))[0] == ma[lo:hi].sum()
    assert exposed(ua, ub) == (ma & ~mb).sum()
    gaps = ua.gaps()
    assert (ua.ends > ua.starts).all() and (gaps.ends > gaps.starts).all()  # disjoint, sorted, none empty
    assert (gaps.ends - gaps.starts).sum() == ((~ma)[ua.starts[0] : ua.ends[-1]].sum() if len(ua) else 0)


@settings(max_examples=200, deadline=None)
@given(intervals, intervals)
def test_difference_and_intersection_match_a_boolean_timeline(a, b):
    """The segments between both unions' endpoints (merged from their sorted runs, not hashed) give exactly the
    time in one and not the other, and in both."""
    (ma, ua), (mb, ub) = _drawn(a), _drawn(b)
    for got, want in ((difference(ua, ub), ma & ~mb), (intersection(ua, ub), ma & mb)):
        assert (_mask(got.starts, got.ends, 400) == want).all()
        assert (got.ends > got.starts).all() and (got.starts[1:] > got.ends[:-1]).all()  # disjoint, sorted
