"""Event times as int64 ns: the complete (``X``) events with a ts, their ts and dur converted exactly.

µs are scaled to ns whole part and fraction apart (`us_to_ns`), so no product
exceeds a double's integer range. Absolute-epoch float µs lose their ns digits
in a double, so such timestamps are decoded as literals (json_events.ExactEvent)
and `exact_times` reads their digits. Events without a usable time are skipped,
and counted in the warnings.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np

from traceinsight.readers._repair import floats, usable_json_times
from traceinsight.readers.json_events import DAMAGED_EVENTS, Event, TraceDoc

_EXACT_LIMIT_NS_US = 2.0**62 / 1000  # µs beyond which ns leave int64 (such events are dropped as impossible)
_EXACT_BLOCK = 1 << 15  # rows whose ts literals are read at a time


class CompleteEvents(msgspec.Struct):
    """The complete (``ph == "X"``) events with a timestamp, and their times in int64 ns."""

    events: list[Event]
    ts_ns: np.ndarray
    dur_ns: np.ndarray


def complete_events(doc: TraceDoc) -> CompleteEvents:
    """The ``X`` events of a whole document that have a ts (`complete_of`)."""
    return complete_of(doc.events, doc.exact_ts, doc.warnings)


def complete_of(events: list[Event], exact_ts: bool, warnings: Counter[str]) -> CompleteEvents:
    """The ``X`` events that have a ts, with ts/dur as int64 ns; a missing dur is 0.

    Conversion is exact: whole µs and the fraction are scaled separately, so no
    ``ts * 1000`` product ever exceeds a double's integer range (`exact_ts`: ts
    are literals, read digit by digit by `exact_times`). Negative durations become
    0 (counted in warnings).
    """
    return timed_of([e for e in events if e.ph == "X"], exact_ts, warnings)


def complete_and_instants(
    events: list[Event], exact_ts: bool, warnings: Counter[str]
) -> tuple[CompleteEvents, list[Event]]:
    """`complete_of`, and the instant (``i``) events as decoded, from one pass over the events (a second
    pass would cost Kineto's streamed reader about 2 % more time)."""
    instants: list[Event] = []
    keep = instants.append  # returns None: an instant goes there, not among the complete events
    complete = [e for e in events if (ph := e.ph) == "X" or (ph == "i" and keep(e))]
    return timed_of(complete, exact_ts, warnings), instants


def timed_of(timed: list[Event], exact_ts: bool, warnings: Counter[str], what: str = "complete") -> CompleteEvents:
    """`complete_of` of events already chosen (`what` they are, for the warnings): instants have no dur (0)."""
    if exact_ts:
        return _complete_exact(timed, warnings, what)
    ts_us = floats([e.ts for e in timed])  # once: checked, then converted
    present = ~np.isnan(ts_us)
    if not present.all():
        warnings[f"{what} events without ts skipped"] += int((~present).sum())
    dur_us: list[Any] = [e.dur for e in timed]
    keep = present & usable_json_times(ts_us, dur_us, warnings, "kineto")
    if not keep.all():  # 1e300 or inf would break the conversion; > 7 days is a counter overflow
        timed = list(itertools.compress(timed, keep.tolist()))
        dur_us = list(itertools.compress(dur_us, keep.tolist()))
        ts_us = ts_us[keep]
    return CompleteEvents(events=timed, ts_ns=us_to_ns(ts_us), dur_ns=_dur_ns(dur_us, warnings))


def _complete_exact(timed: list[Any], warnings: Counter[str], what: str) -> CompleteEvents:
    """`timed_of` for events whose ts are literals (`ExactEvent`)."""
    ts_ns, ts_us, numbers = exact_times([e.ts for e in timed])
    present = ~np.isnan(ts_us)
    if not numbers.all():
        warnings[DAMAGED_EVENTS] += int((~numbers).sum())
    if not (present | ~numbers).all():
        warnings[f"{what} events without ts skipped"] += int((~present & numbers).sum())
    dur_us: list[Any] = [e.dur for e in timed]
    keep = present & usable_json_times(ts_us, dur_us, warnings, "kineto")
    if not keep.all():
        timed = list(itertools.compress(timed, keep.tolist()))
        dur_us = list(itertools.compress(dur_us, keep.tolist()))
        ts_ns = ts_ns[keep]
    return CompleteEvents(events=timed, ts_ns=ts_ns, dur_ns=_dur_ns(dur_us, warnings))


def _dur_ns(dur_us: list[Any], warnings: Counter[str]) -> np.ndarray:
    """Durations (µs as decoded, None when absent: 0) as int64 ns; negative ones become 0, counted."""
    if None in dur_us:
        dur_us = [0 if d is None else d for d in dur_us]
    dur_ns = us_to_ns(dur_us)
    negative = int((dur_ns < 0).sum())
    if negative:
        warnings["negative durations set to 0"] += negative
        dur_ns = np.maximum(dur_ns, 0)
    return dur_ns


def exact_times(literals: Sequence[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """JSON µs literals as int64 ns, exactly as written; their float µs (NaN where absent or not a
    number); whether each is a number or absent (False: a string of no number, a list, ...).

    A double rounds epoch µs to a quarter µs, and Decimal is slow, so numpy reads
    the digits: block by block of rows, the text as a matrix of characters, the
    integer part by Horner's rule over its columns, then up to three decimals.
    Literals of another shape (an exponent, more decimals, a number in a string)
    go one by one through Decimal.
    """
    n = len(literals)
    ns, us, numbers = np.zeros(n, np.int64), np.full(n, np.nan), np.ones(n, bool)
    for start in range(0, n, _EXACT_BLOCK):
        block = slice(start, min(n, start + _EXACT_BLOCK))
        ns[block], us[block], plain = _plain_literals(literals[block])
        for i in (np.flatnonzero(~plain) + start).tolist():
            ns[i], us[i], numbers[i] = _literal(bytes(literals[i]))
    return ns, us, numbers


def _plain_literals(literals: Sequence[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ns and float µs of literals like ``-1712195495519689.047`` (up to 2**62 ns, at most 3 decimals),
    and which literals have that shape (the others' figures are meaningless)."""
    text = np.frombuffer(b"\n".join(literals) + b"\n", np.uint8)
    uniform = _uniform_literals(text, len(literals))
    if uniform is not None:
        return uniform
    ends = np.flatnonzero(text == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts
    columns = np.arange(max(1, int(lengths.max())))
    inside = columns < lengths[:, None]
    chars = np.where(inside, text[np.minimum(starts[:, None] + columns, len(text) - 1)], 0).astype(np.int64)
    negative = chars[:, 0] == ord("-")
    is_dot = chars == ord(".")
    dot = np.where(is_dot.any(1), is_dot.argmax(1), lengths)
    int_digits, decimals = dot - negative, np.maximum(lengths - dot - 1, 0)
    is_digit = (chars >= ord("0")) & (chars <= ord("9"))
    stray = inside & ~is_digit & ~is_dot
    stray[:, 0] &= ~negative
    plain = ~stray.any(1) & (is_dot.sum(1) <= 1) & (int_digits >= 1) & (int_digits <= 18) & (decimals <= 3)
    digits = np.where(is_digit, chars - ord("0"), 0)
    whole = np.zeros(len(lengths), np.int64)
    for column in columns.tolist():  # Horner's rule, one column of characters at a time
        part = (column >= negative) & (column < dot)
        whole = np.where(part, whole * 10 + digits[:, column], whole)
    rows = np.arange(len(lengths))
    fraction = np.zeros(len(lengths), np.int64)
    for place in (1, 2, 3):
        at = dot + place
        fraction = fraction * 10 + np.where(at < lengths, digits[rows, np.minimum(at, columns[-1])], 0)
    plain &= whole < _EXACT_LIMIT_NS_US  # beyond, ns would overflow: `_literal` calls the time impossible
    ns = np.where(negative, -1, 1) * (np.where(plain, whole, 0) * 1000 + fraction)
    return ns, ns / 1000, plain


def _uniform_literals(text: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`_plain_literals` of `count` newline-ended literals when all have one layout (``1712195495519689.047``:
    same length, the dot in the same place, no sign), as a writer of epoch µs gives them; else None."""
    width = len(text) // count if count else 0
    if width < 2 or width * count != len(text):
        return None
    chars = text.reshape(count, width)
    dot = int(np.argmax(chars[0] == ord("."))) if ord(".") in chars[0] else width - 1
    decimals = width - 2 - dot
    layout = np.full(width, ord("0"), np.uint8)
    layout[dot], layout[-1] = ord("."), ord("\n")
    fixed = layout != ord("0")  # the dot and newline columns, which must hold exactly those
    digits = chars - np.uint8(ord("0"))  # wraps below "0": any non-digit is then above 9
    if not (
        0 < dot <= 16 and decimals <= 3 and (chars[:, fixed] == layout[fixed]).all() and (digits[:, ~fixed] <= 9).all()
    ):
        return None
    whole = digits[:, :dot].astype(np.int64) @ (10 ** np.arange(dot - 1, -1, -1, dtype=np.int64))
    fraction = digits[:, dot + 1 : dot + 1 + decimals].astype(np.int64) @ (10 ** np.arange(2, 2 - decimals, -1))
    if (whole >= _EXACT_LIMIT_NS_US).any():
        return None
    ns = whole * 1000 + fraction
    return ns, ns / 1000, np.ones(count, dtype=bool)


def _literal(text: bytes) -> tuple[int, float, bool]:
    """ns, float µs and whether it is a number (or absent) for one literal `_plain_literals` could not read."""
    if text in (b"", b"null"):
        return 0, math.nan, True
    try:
        value = msgspec.json.decode(text)
        exact = Decimal(value.strip() if isinstance(value, str) else text.decode())
        if isinstance(value, bool) or not isinstance(value, int | float | str) or not exact.is_finite():
            raise ValueError
    except (msgspec.DecodeError, ArithmeticError, ValueError):
        return 0, math.nan, False
    us = float(exact)
    return (round(exact * 1000) if abs(us) < _EXACT_LIMIT_NS_US else 0), us, True


def us_to_ns(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """µs (int or float) to int64 ns, rounding to the nearest ns without float overflow."""
    us = np.asarray(values, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
