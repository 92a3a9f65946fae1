"""Epoch µs literals read to the exact ns (`json_times.exact_times`), against Python's Decimal."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinsight.readers.json_times import exact_times

# Numbers as profilers write them (epoch µs with 0-3 decimals), and shapes the fast path hands to Decimal.
plain = st.builds(
    lambda whole, decimals, fraction, sign: f"{sign}{whole}" + (f".{fraction:0{decimals}d}" if decimals else ""),
    st.integers(0, 4_000_000_000_000_000),
    st.integers(0, 3),
    st.integers(0, 999),
    st.sampled_from(["", "-"]),
).filter(lambda text: "." not in text or len(text.split(".")[1]) <= 3)
other = st.sampled_from(["1e3", "1.5E-2", "0.1234", "1712195495519689.0475", '"17.5"', " 12 "])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(plain, other), min_size=1, max_size=40))
def test_literals_match_decimal(texts: list[str]) -> None:
    ns, us, numbers = exact_times([msgspec.Raw(t.encode()) for t in texts])
    expected = [round(Decimal(t.strip().strip('"')) * 1000) for t in texts]
    assert ns.tolist() == expected
    assert numbers.all()
    assert np.allclose(us, [float(Decimal(t.strip().strip('"'))) for t in texts], rtol=1e-15, atol=1e-3)


def test_absent_and_non_numbers():
    texts = [b"null", b"", b"[1]", b"true", b'"abc"', b"17.5"]
    ns, us, numbers = exact_times([msgspec.Raw(t) for t in texts])
    assert numbers.tolist() == [True, True, False, False, False, True]  # absent is not damaged
    assert np.isnan(us[:5]).all() and us[5] == 17.5 and ns[5] == 17_500


def test_beyond_int64_ns_is_impossible_not_wrapped():
    ns, us, numbers = exact_times([msgspec.Raw(b"9999999999999999.5"), msgspec.Raw(b"99999999999999999999")])
    assert numbers.all() and (us > 2.0**62 / 1000).all()  # the loader then drops them as impossible times


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 16), st.integers(0, 3), st.data())
def test_literals_of_one_layout_match_decimal(digits: int, decimals: int, data: st.DataObject) -> None:
    """A writer's own layout (same length, dot in the same place) takes the reshaping fast path."""
    low, high = 10 ** (digits - 1) if digits > 1 else 0, min(10**digits - 1, 4 * 10**15)  # ns within int64
    wholes = data.draw(st.lists(st.integers(low, high), min_size=1))
    fractions = data.draw(st.lists(st.integers(0, 10**decimals - 1), min_size=len(wholes), max_size=len(wholes)))
    texts = [f"{w}.{f:0{decimals}d}" if decimals else str(w) for w, f in zip(wholes, fractions, strict=True)]
    ns, _, numbers = exact_times([msgspec.Raw(t.encode()) for t in texts])
    assert ns.tolist() == [round(Decimal(t) * 1000) for t in texts] and numbers.all()
