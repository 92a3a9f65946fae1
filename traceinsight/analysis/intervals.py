"""Interval arithmetic on numpy arrays: unions, coverage and overlap, all vectorised.

Every "busy", "idle", "exposed" and step-breakdown figure is a statement about
unions of [start, end) intervals; doing it once here keeps the definitions
identical across analyses and keeps per-event Python loops out of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Intervals:
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

    Intervals that touch are merged (a zero-length hole is not a gap).
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    running_end = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1]
    first = np.flatnonzero(new_group)
    merged_ends = np.maximum.reduceat(e, first)
    return Intervals(s[first], merged_ends)


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
