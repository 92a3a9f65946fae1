"""Chrome-trace JSON events (Kineto, XProf's trace_viewer export) as msgspec structs, and their decoders.

Events are decoded by msgspec straight into small typed structs holding only the
fields the readers use; every other key is skipped by the decoder, and the structs
are not tracked by the garbage collector (which, not parsing, dominates dict-based
loading of big traces). On the 55.6 MB (unzipped) H100 OWLv2 trace, best of 3 on a
2-core VM: loading it this way 147 ms (378 MB/s), ``orjson.loads`` 251 ms with the collector
off / 527 ms with it on, ``json.loads`` 575 / 920 ms. benchmarks/bench_json.py repeats the comparison.

Damaged events (a list where a number belongs, ...) do not sink the file: the
strict decode falls back to decoding event by event and counts what it skipped.
Syntax errors become a `TraceError` that says where (`EndsEarly`: the text only
ends too soon, a file cut short). Timestamps too large for a double to keep
their ns are decoded again as literals (`ExactEvent`), for json_times.py.

Both forms of the Trace Event Format are read: the object form (``{"traceEvents":
[...], ...}``) and the array form (``[{...}, ...]``, the events alone; the closing
``]`` may be missing, as the format allows), which legacy
``torch.autograd.profiler`` exports and home-grown tracers write.

This module decodes text it is given: a whole document (`decode_document`, used
by json_document.py) or a chunk of the events' array (`decode_chunk`, used by
json_stream.py).
"""

from __future__ import annotations

import gc
import math
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
from msgspec import field

from traceinsight.errors import TraceError

# Numbers some writers put in strings (ROCm: "size": "2560", "stream": "0x0").
Number = int | float | str | None

# Beyond 2**43 µs (~102 days) a double holds a µs timestamp to worse than 1 ns, so
# an absolute-epoch float like 1712195495519689.047 cannot be read exactly as one.
_EXACT_LIMIT_US = 2.0**43
_BYTE_POSITION = re.compile(r"^((?:.*\S)?)\s*\(byte (\d+)\)$")  # greedy to a non-blank: linear
# The array form's start: the events' array is the document (`is_array_form`).
_ARRAY_START = re.compile(rb"\s*\[")
# What ends the array form's text when its closing `]` was left off: the last event, maybe a comma and blanks.
_OPEN_ARRAY_END = b" \t\n\r\f\v,"
# One warning for all damaged events (a per-message key would list every field and type seen).
DAMAGED_EVENTS = "skipped damaged events (missing or wrong-typed fields)"
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


NO_RAW = msgspec.Raw()  # an arg the event does not have


class Args(msgspec.Struct, gc=False):
    """The event args the readers use: Kineto's names, then XProf's (stats as strings).

    Absent numbers default to -1 (ids, counts) or NaN (ratios), the table's own
    "unknown", so most columns are plain lists of numbers for numpy.

    Fields are in the order Kineto writes its keys: msgspec looks a key up from
    the field after the last one found, and goes through every field for a key
    it does not know (most of Kineto's), so each field costs every event a little.
    """

    external_id: Number = field(name="External id", default=-1)
    # A Kineto op's shapes (``record_shapes=True``), left undecoded: a big trace repeats a few thousand
    # distinct values millions of times, so kineto.py decodes each distinct text once.
    concrete_inputs: msgspec.Raw = field(name="Concrete Inputs", default=NO_RAW)
    input_types: msgspec.Raw = field(name="Input type", default=NO_RAW)
    input_dims: msgspec.Raw = field(name="Input Dims", default=NO_RAW)
    flops: Number = math.nan  # the op's FLOPs (``with_flops=True``)
    device: Number = -1
    stream: Number = -1
    correlation: Number = -1
    external_id_old: Number = field(name="external id", default=-1)
    bytes: Number = -1
    blocks_per_sm: Number = field(name="blocks per SM", default=math.nan)
    occupancy_pct: Number = field(name="est. achieved occupancy %", default=math.nan)
    size: Number = -1
    # Kineto's `[memory]` instant events (profile_memory=True).
    total_reserved: Number = field(name="Total Reserved", default=-1)
    total_allocated: Number = field(name="Total Allocated", default=-1)
    memory_bytes: Number = field(name="Bytes", default=0)
    addr: Number = field(name="Addr", default=-1)
    device_id: Number = field(name="Device Id", default=-1)
    device_type: Number = field(name="Device Type", default=-1)
    # Collectives (Kineto's `record_param_comms` ops and NCCL kernels; kineto.py keeps them for those rows only).
    collective_name: str | None = field(name="Collective name", default=None)
    in_msg_nelems: Number = field(name="In msg nelems", default=-1)
    out_msg_nelems: Number = field(name="Out msg nelems", default=-1)
    group_size: Number = field(name="Group size", default=-1)
    dtype: str | None = None
    process_group: Number = field(name="Process Group Name", default=None)
    seq: Number = field(name="Seq", default=-1)
    # XProf's trace_viewer export.
    name: Any = None
    correlation_id: Number = -1
    memcpy_details: str | None = None
    memset_details: str | None = field(name="Memset_details", default=None)
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
    """`Event` whose ts is the literal as written (absolute-epoch float µs, see `_EXACT_LIMIT_US`):
    `exact_times` reads its digits. Empty when the event has no ts."""

    ts: msgspec.Raw = msgspec.Raw()  # type: ignore[assignment]


class TraceDoc(msgspec.Struct):
    """A decoded trace: all events in file order, the kept top-level keys (none in the array form), load
    warnings; `array_form`: the document is the events' array itself."""

    events: list[Event]
    top: dict[str, Any]
    warnings: Counter[str] = field(default_factory=Counter)
    exact_ts: bool = False
    array_form: bool = False


class _ArrayDoc:
    """The array form's events where the object form's document keeps them (`_decode`)."""

    def __init__(self, events: list[Any]) -> None:
        self.traceEvents = events


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


def is_array_form(raw: bytes | bytearray) -> bool:
    """Whether a JSON text is the Trace Event Format's array form (its first non-blank character opens an array)."""
    return _ARRAY_START.match(raw) is not None


def decode_document(path: Path | str, raw: bytes) -> TraceDoc:
    """`load_trace_json` of a whole text, in either form; `EndsEarly` when it is cut short."""
    warnings: Counter[str] = Counter()
    array_form = is_array_form(raw)
    with gc_paused():
        try:
            doc, skipped = _decode(path, raw, Event)
        except msgspec.DecodeError:  # only invalid UTF-8 gets here
            # Names written by a profiler without escaping; keep the file readable.
            raw = raw.decode("utf-8", "replace").encode()
            warnings["invalid UTF-8 replaced"] += 1
            doc, skipped = _decode(path, raw, Event)
        exact = needs_exact_ts(doc.traceEvents)
        if exact:
            doc, skipped = _decode(path, raw, ExactEvent)
    warnings.update(skipped)
    if array_form and not any(e.ph is not None for e in doc.traceEvents):
        items = len(doc.traceEvents) + skipped.total()
        noun = "item" if items == 1 else "items"
        raise TraceError(path, f'{_NO_TRACE} (an array of {items:,} {noun}, none a readable event with a "ph")')
    return TraceDoc(events=doc.traceEvents, top=top_keys(doc), warnings=warnings, exact_ts=exact, array_form=array_form)


def top_keys(doc: Any) -> dict[str, Any]:
    """The kept top-level keys that a decoded document has (none for the array form)."""
    return {key: getattr(doc, key, None) for key in TOP_LEVEL_KEYS if getattr(doc, key, None) is not None}


def decode_chunk(wrapped: bytes | bytearray, event_type: type[Event]) -> tuple[list[Event], Counter[str]]:
    """Events of a JSON array; damaged ones skipped and counted. Syntax errors raise msgspec.DecodeError."""
    try:
        return _list_decoder(event_type).decode(wrapped), Counter()
    except msgspec.ValidationError:
        return _decode_items(_list_decoder(msgspec.Raw).decode(wrapped), event_type)


def try_decode_document(doc: bytes) -> Any:
    """The document decoded with its events left raw, or None when it is no JSON object."""
    try:
        return _doc_decoder(msgspec.Raw).decode(doc)
    except msgspec.MsgspecError:
        return None


def error_offset(message: str, size: int) -> int:
    """Where in a bracketed chunk of `size` bytes a decode error lies (`size` when at its end or truncated)."""
    match = _BYTE_POSITION.match(message)
    return min(int(match.group(2)) - 1, size) if match else size


@cache
def _doc_decoder(item_type: type) -> msgspec.json.Decoder[Any]:
    """Decoder of the whole document with `item_type` elements in traceEvents."""
    events = ("traceEvents", list[item_type])  # type: ignore[valid-type]
    fields = [events] + [(key, Any, None) for key in TOP_LEVEL_KEYS]
    return msgspec.json.Decoder(msgspec.defstruct("Doc", fields, gc=False), strict=False)


@cache
def _event_decoder(event_type: type[Event]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(event_type, strict=False)


@cache
def _list_decoder(item_type: type) -> msgspec.json.Decoder[Any]:
    """Decoder of a JSON array of `item_type` (a chunk of events in brackets)."""
    return msgspec.json.Decoder(list[item_type], strict=False)  # type: ignore[valid-type]


def _decode_items(items: list[msgspec.Raw], event_type: type[Event]) -> tuple[list[Event], Counter[str]]:
    """Decode events one by one, skipping (and counting) the damaged ones."""
    decoder = _event_decoder(event_type)
    events = []
    skipped: Counter[str] = Counter()
    for item in items:
        try:
            events.append(decoder.decode(item))
        except msgspec.ValidationError:
            skipped[DAMAGED_EVENTS] += 1
    return events, skipped


class EndsEarly(TraceError):
    """The text is valid JSON as far as it goes, and ends too soon: a file cut short."""


# What a JSON document that is neither form of a trace is told.
_NO_TRACE = "top level is not an object with traceEvents nor an array of trace events"


def _decode(path: Path | str, raw: bytes, event_type: type[Event]) -> tuple[Any, Counter[str]]:
    """Strict decode; on a damaged event, decode event by event and count the skipped ones.

    Syntax errors raise `TraceError` (`EndsEarly` for a text cut short), except invalid UTF-8, which is left
    to the caller.
    """
    if is_array_form(raw):
        return _decode_array(path, raw, event_type)
    try:
        return _doc_decoder(event_type).decode(raw), Counter()
    except msgspec.ValidationError as exc:
        if "$.traceEvents[" not in str(exc):
            raise TraceError(path, f"{_NO_TRACE} ({exc})") from None
    except msgspec.DecodeError as exc:
        if "UTF-8" in str(exc):
            raise
        raise _syntax_error(path, str(exc), len(raw)) from None
    try:
        doc = _doc_decoder(msgspec.Raw).decode(raw)
    except msgspec.DecodeError as exc:  # a syntax error after the damaged event
        raise _syntax_error(path, str(exc), len(raw)) from None
    doc.traceEvents, skipped = _decode_items(doc.traceEvents, event_type)
    return doc, skipped


def _decode_array(path: Path | str, raw: bytes, event_type: type[Event]) -> tuple[_ArrayDoc, Counter[str]]:
    """`_decode` of the array form. A text that ends early is read as an open array (its closing `]` left off,
    as the format allows) when it ends after a whole event; otherwise it is cut short (`EndsEarly`)."""
    try:
        return _array_events(raw, event_type)
    except msgspec.DecodeError as exc:
        if "UTF-8" in str(exc):
            raise
        error = _syntax_error(path, str(exc), len(raw))
        if not isinstance(error, EndsEarly):
            raise error from None
    try:  # rstrip, not a search for the blanks at the end: that rescans every run of blanks (quadratic)
        return _array_events(raw.rstrip(_OPEN_ARRAY_END) + b"]", event_type)
    except msgspec.DecodeError:
        raise error from None


def _array_events(text: bytes, event_type: type[Event]) -> tuple[_ArrayDoc, Counter[str]]:
    """The events of a JSON array, damaged ones skipped and counted; msgspec.DecodeError on a syntax error."""
    try:
        return _ArrayDoc(_list_decoder(event_type).decode(text)), Counter()
    except msgspec.ValidationError:
        events, skipped = _decode_items(_list_decoder(msgspec.Raw).decode(text), event_type)
        return _ArrayDoc(events), skipped


def _syntax_error(path: Path | str, message: str, size: int) -> TraceError:
    """``invalid JSON at byte N: what`` from msgspec's message about a text of `size` bytes; `EndsEarly` when
    the text only ends too soon."""
    match = _BYTE_POSITION.match(message)
    if match:
        what = match.group(1).removeprefix("JSON is malformed: ")
        # At the end, a number or word cut short; msgspec puts trailing characters there too.
        error = EndsEarly if int(match.group(2)) >= size and "trailing" not in what else TraceError
        return error(path, f"invalid JSON at byte {match.group(2)}: {what}")
    if "truncated" in message:
        return EndsEarly(path, f"invalid JSON at byte {size}: the document ends early (truncated file?)")
    return TraceError(path, f"invalid JSON: {message}")


def ends_early(doc: bytes) -> bool:
    """Whether `doc` is valid JSON as far as it goes and ends too soon (a file cut short)."""
    try:
        _doc_decoder(msgspec.Raw).decode(doc)
    except msgspec.DecodeError as exc:
        return isinstance(_syntax_error("", str(exc), len(doc)), EndsEarly)
    return False


def needs_exact_ts(events: list[Event], sample: int = 4096) -> bool:
    """Whether ts are float µs too large for a double to keep their ns digits.

    A writer uses one format for all its timestamps, so a stride sample of a few
    thousand events decides for the file (a few hundred for a streamed chunk).
    """
    step = max(1, len(events) // sample)
    return any(type(e.ts) is float and abs(e.ts) >= _EXACT_LIMIT_US for e in events[::step])
