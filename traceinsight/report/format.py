"""Number formatting shared by every renderer (and the HTML templates' filters)."""

from __future__ import annotations

import re

# Control characters (newlines, terminal escapes) that a file or event name could smuggle into a terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escape_control(text: str) -> str:
    """`text` with control characters shown as \\xNN, safe to print on a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


_TIME_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"))
_BYTE_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def fmt_ns(ns: float | None) -> str:
    """A duration for people: 1.23 ms, 45.6 us, 812 ns; '-' when unknown."""
    if ns is None:
        return "-"
    for scale, unit in _TIME_UNITS:
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:,.0f} {unit}"
    return f"{ns:.0f} ns"


def fmt_pct(fraction: float | None, digits: int = 1) -> str:
    return "-" if fraction is None else f"{fraction * 100:.{digits}f} %"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for scale, unit in _BYTE_UNITS:
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def plural(n: int, noun: str) -> str:
    """'1 gap', '3 gaps': counts agree in number."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def fmt_step_change(before_ns: int | None, after_ns: int | None, speedup: float | None) -> str:
    """'174.8 -> 115.6 ms (1.51x)': a step before and after a fix, in one unit."""
    if before_ns is None or after_ns is None:
        return "-"
    scale, unit = next(((s, u) for s, u in _TIME_UNITS if before_ns >= s), (1, "ns"))
    times = f"{before_ns / scale:,.1f} \u2192 {after_ns / scale:,.1f} {unit}"
    return times if speedup is None else f"{times} ({speedup:.2f}x)"
