"""Number formatting and escaping shared by every renderer (and the HTML templates' filters)."""

from __future__ import annotations

import math
import re

# What a file or event name could smuggle into a terminal: C0 and C1 controls (newlines, ESC sequences) and the
# bidirectional controls (embeddings, overrides, isolates and marks: U+202E shows text backwards, Trojan Source).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What Markdown (and the HTML it may hold) reads as markup: tags and entities, links, emphasis, code, tables, and
# the backslash that escapes them.
_MARKDOWN = re.compile(r"[\\`*_~\[\]()|]")
_CODE_SPAN = re.compile(r"`([^`]*)`")


def escape_control(text: str) -> str:
    """`text` with control characters shown as \\xNN and bidi controls as \\uNNNN, safe to print on a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def markdown_text(text: object) -> str:
    """`text` (from a trace or a saved report, or a sentence that holds such strings) as Markdown shows it
    literally, on one line: HTML's `<>&` as entities, link, emphasis, table syntax and a lone backtick
    backslash-escaped, line breaks and other controls as spaces. A `code` span stays one (our advice quotes code
    so): nothing inside a span is read as markup or a tag. The one escape for every such string in a Markdown
    summary (a CI page renders it)."""
    flat = _CONTROL.sub(" ", str(text))
    parts = _CODE_SPAN.split(flat)  # odd items: the spans' contents
    return "".join(markdown_code(part) if i % 2 else _escaped(part) for i, part in enumerate(parts))


def _escaped(text: str) -> str:
    html = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\g<0>", html)


def markdown_code(text: object) -> str:
    """`text` as an inline code span, shown literally (no markup or tag is read inside one): a backtick, which
    would end the span, shown as a quote; a pipe escaped for tables; controls as spaces."""
    flat = _CONTROL.sub(" ", str(text).replace("`", "'")).replace("|", "\\|")
    return f"`{flat}`"


# The time units of every figure and chart axis, largest first: one spelling (µs) on every page and summary.
_TIME_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "\u00b5s"))
_BYTE_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def time_unit(largest_ns: float) -> tuple[int, str]:
    """The unit a time axis reads in, as (ns per unit, name), from the largest value it shows: the largest unit it
    holds at least one of, so that no tick needs more than three digits before the point or a string of zeros
    after it (80,000 ms reads 80 s, 0.020 ms reads 20 \u00b5s); ns below a microsecond."""
    return next(((scale, unit) for scale, unit in _TIME_UNITS if abs(largest_ns) >= scale), (1, "ns"))


def tick_decimals(step: float) -> int:
    """Decimals the labels of ticks `step` apart need to tell them apart: 0 for whole steps, 1 for 0.5, 2 for 0.25
    or 0.01 (at most 9)."""
    step = abs(step)
    if step == 0 or not math.isfinite(step):
        return 0
    return next((d for d in range(10) if abs(round(step, d) - step) <= 1e-6 * step), 9)


def fmt_tick(value: float, decimals: int) -> str:
    """A tick label as a plain number, thousands separated, never in scientific notation: '80,000', '0.25'."""
    return f"{round(value, decimals) + 0.0:,.{decimals}f}"  # + 0.0: no '-0'


def fmt_ns(ns: float | None) -> str:
    """A duration for people: 1.23 ms, 45.6 \u00b5s, 812 ns; '-' when unknown."""
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
    """'174.8 -> 115.6 ms (1.51x)': a step before and after a fix, in one unit, or each in its own where the
    step after is under one of the unit before ('1.8 ms -> 3.20 us'): never a '0.0 ms' beside a speedup."""
    if before_ns is None or after_ns is None:
        return "-"
    scale, unit = next(((s, u) for s, u in _TIME_UNITS if before_ns >= s), (1, "ns"))
    if after_ns < scale:
        times = f"{fmt_ns(before_ns)} \u2192 {fmt_ns(after_ns)}"
    else:
        times = f"{before_ns / scale:,.1f} \u2192 {after_ns / scale:,.1f} {unit}"
    return times if speedup is None else f"{times} ({speedup:.2f}x)"


def fmt_number(value: float) -> str:
    """A plain number for people: whole numbers with thousands separators, others to 3 significant digits."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def fmt_trace_ms(ns: int | None, origin_ns: int | None) -> str:
    """A trace timestamp as ms after `origin_ns` (the window start), to the microsecond: '717.498 ms'."""
    if ns is None or origin_ns is None:
        return "-"
    return f"{(ns - origin_ns) / 1e6:,.3f} ms"


def clip(text: object, limit: int = 200) -> str:
    """`text` cut to `limit` characters (an ellipsis marks the cut): long names stay one table cell."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


_UNIT_WORDS = ("ns", "bytes", "gbps", "pct")


def evidence_label(key: str) -> str:
    """'input_wait_per_step_ns' -> 'input wait per step': the unit shows in the value."""
    words = key.split("_")
    named = [w for w in words if w not in _UNIT_WORDS]
    return " ".join(named or words)


def fmt_evidence(key: str, value: object) -> str | None:
    """A bottleneck's evidence value for people, its unit told by its key ('*_ns' a duration, '*fraction',
    '*_share' and '*_coverage' a share, '*bytes' a size); lists and settings joined; None when nothing is known
    (left out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        parts = [text for item in value if (text := fmt_evidence(key, item)) is not None]
        return ", ".join(parts) if parts else None
    if isinstance(value, dict):
        parts = [f"{evidence_label(k)}: {text}" for k, v in value.items() if (text := fmt_evidence(k, v)) is not None]
        return ", ".join(parts) if parts else None
    if not isinstance(value, int | float):
        return str(value)
    words = key.split("_")
    if "ns" in words:
        return fmt_ns(value)
    if key.endswith(("fraction", "_share", "_coverage")):
        return fmt_pct(value)
    if key.endswith("_pct"):
        return f"{value:.1f} %"
    if key.endswith("bytes"):
        return fmt_bytes(value)
    if key.endswith("_gbps"):
        return f"{value:.2f} GB/s"
    if key.endswith(("speedup", "_assumed", "_factor")):
        return f"{fmt_number(round(value, 2))}x"
    return fmt_number(value)


def fmt_iso(moment: str | None) -> str:
    """'2021-06-08T08:57:03.460072Z' for people: '2021-06-08 08:57:03 UTC' ('-' when unknown)."""
    if not moment:
        return "-"
    return f"{moment[:19].replace('T', ' ')} UTC" if moment.endswith("Z") else moment


def fmt_rate(value: float | None) -> str:
    """A TFLOP/s, TB/s or FLOP/byte figure: whole from 1,000 up (2,250), one decimal from 10 (989.5, 622.6), 3
    significant digits below (3.35, 0.48): a peak reads as its data sheet writes it, and a slow op is not '0.0'."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


_FLOP_UNITS = ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"))


def fmt_flop(n: float) -> str:
    """A count of FLOPs for people: 5.76 TFLOP, 35,776 FLOP."""
    for scale, unit in _FLOP_UNITS:
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:,.0f} FLOP"
