"""Load Chrome-trace JSON (Kineto, XProf's trace_viewer export) fast and without a dict per event.

Events are decoded by msgspec straight into small typed structs holding only the
fields the readers use; every other key is skipped by the decoder, and the structs
are not tracked by the garbage collector (which, not parsing, dominates dict-based
loading of big traces). On the 55.6 MB (unzipped) H100 OWLv2 trace, best of 3 on a
2-core VM: this loader 147 ms (378 MB/s), ``orjson.loads`` 251 ms with the collector
off / 527 ms with it on, ``json.loads`` 575 / 920 ms. benchmarks/bench_json.py repeats the comparison.

Damaged events (a list where a number belongs, ...) do not sink the file: the
strict decode falls back to decoding event by event and counts what it skipped.
"""

from __future__ import annotations

import gc
import gzip
import math
import re
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.model import TraceError

# Numbers some writers put in strings (ROCm: "size": "2560", "stream": "0x0").
Number = int | float | str | None

# Beyond 2**43 µs (~102 days) a double holds a µs timestamp to worse than 1 ns, so
# an absolute-epoch float like 1712195495519689.047 cannot be read exactly as one.
_EXACT_LIMIT_US = 2.0**43
# Old Kineto thread ids ("stream 7"), hex ids ("0x0"), plain numbers in strings.
_ID_TEXT = re.compile(r"^\s*(?:[A-Za-z]+\s+)?([-+]?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?))\s*$")
_BYTE_POSITION = re.compile(r"^(.*?)\s*\(byte (\d+)\)$")
# Top-level keys worth keeping; others (e.g. TraceLens' environment dump, which can
# hold secrets) are never decoded.
TOP_LEVEL_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "computeProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
    "host_name",
    "trace_id",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
)


class Args(msgspec.Struct, gc=False):
    """The event args the readers use: Kineto's names, then XProf's (stats as strings).

    Absent numbers default to -1 (ids, counts) or NaN (ratios), the table's own
    "unknown", so most columns are plain lists of numbers for numpy.
    """

    device: Number = -1
    stream: Number = -1
    correlation: Number = -1
    external_id: Number = msgspec.field(name="External id", default=-1)
    external_id_old: Number = msgspec.field(name="external id", default=-1)
    bytes: Number = -1
    size: Number = -1
    blocks_per_sm: Number = msgspec.field(name="blocks per SM", default=math.nan)
    occupancy_pct: Number = msgspec.field(name="est. achieved occupancy %", default=math.nan)
    name: Any = None
    correlation_id: Number = -1
    memcpy_details: str | None = None
    memset_details: str | None = msgspec.field(name="Memset_details", default=None)
    kernel_details: str | None = None
    long_name: str | None = None
    theoretical_occupancy_pct: Number = math.nan
    step_num: Number = -1


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event, only the fields the readers use."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = -1
    tid: int | str | None = -1
    ts: int | float | None = None
    dur: int | float | None = None
    args: Args | None = None


class ExactEvent(Event, gc=False):
    """`Event` whose ts keeps every decimal digit (absolute-epoch float µs, see `_EXACT_LIMIT_US`)."""

    ts: int | Decimal | None = None  # type: ignore[assignment]  # msgspec reads the literal's digits


@dataclass
class TraceDoc:
    """A decoded trace: all events in file order, the kept top-level keys, load warnings."""

    events: list[Event]
    top: dict[str, Any]
    warnings: Counter[str] = field(default_factory=Counter)
    exact_ts: bool = False


@dataclass
class CompleteEvents:
    """The complete (``ph == "X"``) events with a timestamp, and their times in int64 ns."""

    events: list[Event]
    ts_ns: np.ndarray
    dur_ns: np.ndarray


@contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the garbage collector off while millions of objects are created."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_json_bytes(path: Path | str, data: bytes | None = None) -> bytes:
    """The JSON text of a ``.json`` or ``.json.gz`` file; gzip is told by its magic bytes."""
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise TraceError(path, f"cannot read file: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise TraceError(path, "truncated gzip stream") from None
        except (OSError, zlib.error) as exc:
            raise TraceError(path, f"corrupt gzip stream ({exc})") from None
    if not data or data.isspace():
        raise TraceError(path, "empty file")
    return data


def load_trace_json(path: Path | str, data: bytes | None = None) -> TraceDoc:
    """Decode a Chrome-trace JSON file (or its bytes, `data`) into a `TraceDoc`."""
    raw = read_json_bytes(path, data)
    warnings: Counter[str] = Counter()
    with gc_paused():
        try:
            doc, skipped = _decode(path, raw, Event)
        except msgspec.DecodeError:  # only invalid UTF-8 gets here
            # Names written by a profiler without escaping; keep the file readable.
            raw = raw.decode("utf-8", "replace").encode()
            warnings["invalid UTF-8 replaced"] += 1
            doc, skipped = _decode(path, raw, Event)
        exact = _needs_exact_ts(doc.traceEvents)
        if exact:
            doc, skipped = _decode(path, raw, ExactEvent)
    warnings.update(skipped)
    top = {key: getattr(doc, key) for key in TOP_LEVEL_KEYS if getattr(doc, key) is not None}
    return TraceDoc(events=doc.traceEvents, top=top, warnings=warnings, exact_ts=exact)


@cache
def _doc_decoder(item_type: type) -> msgspec.json.Decoder[Any]:
    """Decoder of the whole document with `item_type` elements in traceEvents."""
    events = ("traceEvents", list[item_type])  # type: ignore[valid-type]
    fields = [events] + [(key, Any, None) for key in TOP_LEVEL_KEYS]
    return msgspec.json.Decoder(msgspec.defstruct("Doc", fields, gc=False), strict=False)


@cache
def _event_decoder(event_type: type[Event]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(event_type, strict=False)


def _decode(path: Path | str, raw: bytes, event_type: type[Event]) -> tuple[Any, Counter[str]]:
    """Strict decode; on a damaged event, decode event by event and count the skipped ones.

    Syntax errors raise `TraceError`, except invalid UTF-8, which is left to the caller.
    """
    skipped: Counter[str] = Counter()
    try:
        return _doc_decoder(event_type).decode(raw), skipped
    except msgspec.ValidationError as exc:
        if "$.traceEvents[" not in str(exc):
            raise TraceError(path, f"top level is not an object with traceEvents ({exc})") from None
    except msgspec.DecodeError as exc:
        if "UTF-8" in str(exc):
            raise
        raise TraceError(path, _syntax_reason(str(exc), len(raw))) from None
    doc = _doc_decoder(msgspec.Raw).decode(raw)
    decoder = _event_decoder(event_type)
    events = []
    for item in doc.traceEvents:
        try:
            events.append(decoder.decode(item))
        except msgspec.ValidationError as exc:
            skipped[f"skipped damaged event ({exc})"] += 1
    doc.traceEvents = events
    return doc, skipped


def _syntax_reason(message: str, size: int) -> str:
    """``invalid JSON at byte N: what`` from msgspec's message."""
    match = _BYTE_POSITION.match(message)
    if match:
        what = match.group(1).removeprefix("JSON is malformed: ")
        return f"invalid JSON at byte {match.group(2)}: {what}"
    if "truncated" in message:
        return f"invalid JSON at byte {size}: the document ends early (truncated file?)"
    return f"invalid JSON: {message}"


def _needs_exact_ts(events: list[Event]) -> bool:
    """Whether ts are float µs too large for a double to keep their ns digits.

    A writer uses one format for all its timestamps, so a stride sample of a few
    thousand events decides for the file.
    """
    step = max(1, len(events) // 4096)
    return any(type(e.ts) is float and abs(e.ts) >= _EXACT_LIMIT_US for e in events[::step])


def complete_events(doc: TraceDoc) -> CompleteEvents:
    """The ``X`` events that have a ts, with ts/dur as int64 ns; a missing dur is 0.

    Conversion is exact: whole µs and the fraction are scaled separately, so no
    ``ts * 1000`` product ever exceeds a double's integer range. Negative
    durations become 0 (counted in warnings).
    """
    events = [e for e in doc.events if e.ph == "X"]
    timed = [e for e in events if e.ts is not None]
    if len(timed) < len(events):
        doc.warnings["complete events without ts skipped"] += len(events) - len(timed)
    ts_us: list[Any] = [e.ts for e in timed]
    ts_ns = np.array([round(t * 1000) for t in ts_us], dtype=np.int64) if doc.exact_ts else us_to_ns(ts_us)
    dur_ns = us_to_ns([0 if e.dur is None else e.dur for e in timed])
    negative = int((dur_ns < 0).sum())
    if negative:
        doc.warnings["negative durations set to 0"] += negative
        dur_ns = np.maximum(dur_ns, 0)
    return CompleteEvents(events=timed, ts_ns=ts_ns, dur_ns=dur_ns)


def us_to_ns(values: Sequence[float]) -> np.ndarray:
    """µs (int or float) to int64 ns, rounding to the nearest ns without float overflow."""
    us = np.asarray(values, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def int_column(values: Sequence[Any], missing: int = -1) -> np.ndarray:
    """int64 column from decoded numbers, numeric strings ("0x0", "stream 7") and None (`missing`).

    Strings are parsed once per distinct value, so a tid column of "stream 7" stays cheap.
    """
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        parsed = np.array([_parse_number(v, missing) for v in uniques] + [missing], np.float64)[codes]
        return np.where(np.isnan(parsed), missing, parsed).astype(np.int64)


def float_column(values: Sequence[Any]) -> np.ndarray:
    """float64 column from decoded numbers, numeric strings and None (NaN)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        return np.array([_parse_number(v, math.nan) for v in uniques] + [math.nan], np.float64)[codes]


def category_column(values: Sequence[str | None]) -> pd.Categorical:
    """Categorical of strings, hashing each value once (pd.Categorical on a list is 2-3x slower).

    The categories get pandas' default string dtype, as every reader's do, so
    tables of different formats can be concatenated.
    """
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=uniques)


def _parse_number(value: Any, missing: float) -> float:
    if isinstance(value, int | float):
        return float(value)
    match = _ID_TEXT.match(value) if isinstance(value, str) else None
    if match is None:
        return missing
    text = match.group(1)
    return float(int(text, 16)) if "x" in text.lower() else float(text)
