"""Interval arithmetic on numpy arrays: unions, coverage and overlap, all vectorised.

Every "busy", "idle", "exposed" and step-breakdown figure is a statement about
unions of [start, end) intervals; doing it once here keeps the definitions
identical across analyses and keeps per-event Python loops out of them. numpy only, outside the `analysis`
package: the renderers and the trace export read unions too (`render/chart_data.py`, `render/trace_export.py`).
"""

from __future__ import annotations

import msgspec
import numpy as np


class Intervals(msgspec.Struct, frozen=True):
    """Disjoint, sorted [start, end) intervals (ns), as made by `union`."""

    starts: np.ndarray
    ends: np.ndarray

    @property
    def total(self) -> int:
        return int((self.ends - self.starts).sum())

    def __len__(self) -> int:
        return len(self.starts)

    def _cumulative(self) -> np.ndarray:
        lengths = self.ends - self.starts
        return np.concatenate(([0], np.cumsum(lengths)))

    def covered_before(self, points: np.ndarray) -> np.ndarray:
        """Length of this union that lies before each point (vectorised over points)."""
        points = np.asarray(points, dtype=np.int64)
        if len(self) == 0:
            return np.zeros(points.shape, dtype=np.int64)
        cum = self._cumulative()
        idx = np.searchsorted(self.starts, points, side="right") - 1
        safe = np.clip(idx, 0, None)
        inside = np.clip(points - self.starts[safe], 0, self.ends[safe] - self.starts[safe])
        return np.where(idx >= 0, cum[safe] + inside, 0).astype(np.int64)

    def covered_between(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Length of this union inside each [start, end) window."""
        return self.covered_before(ends) - self.covered_before(starts)

    def gaps(self) -> Intervals:
        """The holes between consecutive intervals."""
        return Intervals(self.ends[:-1].copy(), self.starts[1:].copy())

    def clip(self, start: int, end: int) -> Intervals:
        """This union restricted to [start, end)."""
        s = np.clip(self.starts, start, end)
        e = np.clip(self.ends, start, end)
        keep = e > s
        return Intervals(s[keep], e[keep])


EMPTY = Intervals(np.zeros(0, np.int64), np.zeros(0, np.int64))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals into a disjoint sorted union.

    Intervals that touch are merged (a zero-length hole is not a gap). Empty and
    reversed intervals add nothing: sorted in with the rest, they never raise the
    running end, so each is a group of its own that the last step drops. Three
    arrays of the input's length are made, no more (this runs on most of a trace).
    """
    order = np.argsort(starts, kind="stable")  # timsort: traces come nearly sorted
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
    del order
    if len(s) == 0:
        return EMPTY
    np.maximum.accumulate(e, out=e)  # the running end; at a group's last interval, the group's end
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    np.greater(s[1:], e[:-1], out=new_group[1:])
    first = np.flatnonzero(new_group)
    del new_group
    merged_starts, merged_ends = s[first], e[np.append(first[1:] - 1, len(s) - 1)]
    keep = merged_ends > merged_starts
    return (
        Intervals(merged_starts[keep], merged_ends[keep]) if not keep.all() else Intervals(merged_starts, merged_ends)
    )


def union_of_rows(starts: np.ndarray, durations: np.ndarray, rows: np.ndarray) -> Intervals:
    """`union` of the [start, start + duration) of the `rows` (a mask), without an end for every row."""
    picked = starts[rows]
    return union(picked, picked + durations[rows])


def union_of(*parts: Intervals) -> Intervals:
    """Union of several unions."""
    parts = tuple(p for p in parts if len(p))
    if not parts:
        return EMPTY
    return union(np.concatenate([p.starts for p in parts]), np.concatenate([p.ends for p in parts]))


def exposed(work: Intervals, hiding: Intervals) -> int:
    """Length of `work` not overlapped by `hiding` (e.g. copy time not hidden under kernels)."""
    if len(work) == 0:
        return 0
    return work.total - int(hiding.covered_between(work.starts, work.ends).sum())


def _elementary(a: Intervals, b: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The segments between consecutive endpoints of `a` and `b`, and whether each lies in `a` and in `b`."""
    points = np.empty(2 * (len(a) + len(b)), np.int64)
    for at, u in ((0, a), (2 * len(a), b)):  # each union's starts and ends interleaved: a sorted run
        points[at : at + 2 * len(u) : 2], points[at + 1 : at + 2 * len(u) : 2] = u.starts, u.ends
    # Timsort merges the two runs in linear time; `np.unique` hashed them first (numpy 2.4: 0.1-0.2 s of the
    # 114 MB XSpace's report, issue 38).
    points.sort(kind="stable")
    distinct = np.empty(len(points), bool)
    distinct[:1] = True
    np.not_equal(points[1:], points[:-1], out=distinct[1:])
    points = points[distinct]
    left, right = points[:-1], points[1:]

    def inside(u: Intervals) -> np.ndarray:
        if len(u) == 0:
            return np.zeros(len(left), bool)
        idx = np.searchsorted(u.starts, left, side="right") - 1
        return (idx >= 0) & (left < u.ends[np.clip(idx, 0, None)])

    return left, right, inside(a), inside(b)


def intersection(a: Intervals, b: Intervals) -> Intervals:
    """The time in both unions."""
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    left, right, in_a, in_b = _elementary(a, b)
    keep = in_a & in_b
    return union(left[keep], right[keep])


def difference(a: Intervals, b: Intervals) -> Intervals:
    """The time in `a` and not in `b`."""
    if len(a) == 0 or len(b) == 0:
        return a
    left, right, in_a, in_b = _elementary(a, b)
    keep = in_a & ~in_b
    return union(left[keep], right[keep])
