"""Numpy and pandas columns built from decoded event fields, cheaply for millions of rows.

`int_column` and `float_column` also take numbers written as strings ("0x0",
"stream 7"), parsing each distinct string once; `category_column` and
`StringPool` make categoricals, chunk by chunk if need be; `ColumnBuffers` fills
columns chunk by chunk without copying them. The JSON readers (chrome.py,
kineto.py) build their event tables with these.

Distinct values are found with a dict, not `pd.factorize`: as fast on a chunk's rows (1.1 against 1.3 ms for
16,000 names), and pandas is imported only to make a categorical, so the early read's process (early.py) builds
its columns without it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# Old Kineto thread ids ("stream 7"), hex ids ("0x0"), plain numbers in strings.
_ID_TEXT = re.compile(r"^\s*(?:[A-Za-z]+\s+)?([-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?))\s*$")
T = TypeVar("T")


def int_column(values: Sequence[Any], missing: int = -1) -> np.ndarray:
    """int64 column from decoded numbers, numeric strings ("0x0", "stream 7") and None (`missing`).

    Strings are parsed once per distinct value, so a tid column of "stream 7" stays cheap.
    """
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        codes, distinct = first_appearance(values)
        parsed = np.array([_parse_number(v, missing) for v in distinct], np.float64)[codes]
        fits = ~np.isnan(parsed) & (np.abs(parsed) < 2.0**63)  # beyond int64 is no id we can use
        return np.where(fits, parsed, missing).astype(np.int64)


def float_column(values: Sequence[Any]) -> np.ndarray:
    """float64 column from decoded numbers, numeric strings and None (NaN)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        codes, distinct = first_appearance(values)
        return np.array([_parse_number(v, math.nan) for v in distinct], np.float64)[codes]


def first_appearance(values: Sequence[T]) -> tuple[np.ndarray, list[T]]:
    """Each value's code (int64) among the distinct values, which come in the order of their first appearance;
    None is a value like any other. TypeError for an unhashable value. (Both passes run in C: 15-20 % faster than
    one `dict.setdefault` a value.)"""
    distinct = list(dict.fromkeys(values))
    code = dict(zip(distinct, range(len(distinct)), strict=True))
    return np.fromiter(map(code.__getitem__, values), np.int64, len(values)), distinct


def category_column(values: Sequence[str | None]) -> pd.Categorical:
    """Categorical of strings, hashing each value once (pd.Categorical on a list is 2-3x slower)."""
    pool = StringPool()
    return pool.categorical(pool.encode(values))


class StringPool:
    """The strings of one column, met chunk by chunk, as codes into one category list.

    Categories are in order of first appearance, as `category_column` of the whole
    column would give, and get pandas' default string dtype, as every reader's do,
    so tables of different formats can be concatenated.
    """

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self.strings: list[str] = []

    def encode(self, values: Sequence[str | None]) -> np.ndarray:
        """int32 codes of `values` (-1 for None), adding strings not met before."""
        codes, distinct = first_appearance(values)
        pooled = self.add(value for value in distinct if value is not None)  # then -1
        if None in distinct:  # its rows take the -1
            pooled = np.insert(pooled, distinct.index(None), -1)
        return pooled[codes]

    def add(self, strings: Iterable[str]) -> np.ndarray:
        """The codes of `strings` (added when new), then -1: index it with another pool's codes to translate them."""
        known = []
        for value in strings:
            code = self._codes.get(value)
            if code is None:
                code = self._codes[value] = len(self.strings)
                self.strings.append(value)
            known.append(code)
        return np.array(known + [-1], np.int32)

    def lookup(self, rule: Callable[[str], T], missing: T, dtype: Any) -> np.ndarray:
        """`rule` of every string by code, `missing` last (so code -1 finds it): index it with codes."""
        return np.array([rule(value) for value in self.strings] + [missing], dtype=dtype)

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        import pandas as pd

        return pd.Categorical.from_codes(codes, categories=self.strings)


class ColumnBuffers:
    """Named numpy columns filled chunk by chunk, in buffers that grow by doubling.

    Capacity not yet written costs address space, not memory (the OS maps a page
    in when it is first written), so buffers sized for the whole file up front
    (`expected_rows`) are filled without ever being copied, and `column` returns a
    view. Joining per-chunk arrays at the end instead would hold each column twice.
    """

    def __init__(self, expected_rows: int = 1 << 16) -> None:
        self._capacity = max(1, expected_rows)
        self._buffers: dict[str, np.ndarray] = {}
        self._sizes: dict[str, int] = {}

    def append(self, **columns: np.ndarray) -> None:
        for name, values in columns.items():
            size = self._sizes.get(name, 0)
            end = size + len(values)
            buffer = self._buffers.get(name)
            if buffer is None or end > len(buffer):
                grown = np.empty(max(end, 2 * len(buffer) if buffer is not None else self._capacity), values.dtype)
                if buffer is not None:
                    grown[:size] = buffer[:size]
                self._buffers[name] = buffer = grown
            buffer[size:end] = values
            self._sizes[name] = end

    def column(self, name: str, dtype: Any) -> np.ndarray:
        """The rows appended to one column, in order (a view of its buffer; empty `dtype` if none were)."""
        buffer = self._buffers.get(name)
        return np.zeros(0, dtype) if buffer is None else buffer[: self._sizes[name]]


def _parse_number(value: Any, missing: float) -> float:
    try:
        return _number(value, missing)
    except OverflowError:  # an integer beyond a double
        return missing


def _number(value: Any, missing: float) -> float:
    if isinstance(value, int | float):
        return float(value)
    match = _ID_TEXT.match(value) if isinstance(value, str) else None
    if match is None:
        return missing
    text = match.group(1)
    return float(int(text, 16)) if "x" in text.lower() else float(text)
