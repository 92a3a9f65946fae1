"""Duration histograms with readable bin labels, shared by the gap and kernel analyses."""

from __future__ import annotations

import numpy as np

from traceinsight.result import Bin

_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "\u00b5s"), (1, "ns"))


def _unit(ns: int) -> tuple[int, str]:
    return next((scale, unit) for scale, unit in _UNITS if ns >= scale or scale == 1)


def _fmt(ns: int) -> str:
    scale, unit = _unit(ns)
    return f"{ns / scale:g} {unit}"


def _label(lower: int, upper: int | None) -> str:
    if upper is None:
        return f">= {_fmt(lower)}"
    if lower == 0:
        return f"< {_fmt(upper)}"
    (low_scale, low_unit), (high_scale, high_unit) = _unit(lower), _unit(upper)
    if low_unit == high_unit:
        return f"{lower / low_scale:g}-{upper / high_scale:g} {high_unit}"
    return f"{_fmt(lower)} - {_fmt(upper)}"


def duration_histogram(durations_ns: np.ndarray, edges_ns: tuple[int, ...]) -> list[Bin]:
    """Count and total time per [edge, next edge) bin; the last bin is open-ended."""
    edges = sorted(set(edges_ns) | {0})
    bins = np.digitize(durations_ns, edges[1:])
    uppers: list[int | None] = [*edges[1:], None]
    return [
        Bin(_label(lo, hi), lo, hi, int((bins == i).sum()), int(durations_ns[bins == i].sum()))
        for i, (lo, hi) in enumerate(zip(edges, uppers, strict=True))
    ]
