"""`load_trace_json`: a Chrome-trace JSON file (or its bytes) decoded whole into a `TraceDoc`.

This is the way in for JSON that the stream (json_stream.py) does not take apart
(XProf's export, a file with no events' array, a syntax error) and for a trace
read whole (a Chrome trace in either form):
it says what is wrong in the same words as always. A file cut short keeps the
complete events before the cut, found by streaming its text, and gets a
truncation warning.
"""

from __future__ import annotations

from pathlib import Path

from traceinsight.errors import TraceError, truncation_warning
from traceinsight.limits import MemoryLimit
from traceinsight.readers.json_events import EndsEarly, TraceDoc, decode_document
from traceinsight.readers.json_files import read_json_text, truncation_unit
from traceinsight.readers.json_stream import StreamFallback, TraceStream


def load_trace_json(path: Path | str, data: bytes | None = None, limit: MemoryLimit | None = None) -> TraceDoc:
    """Decode a Chrome-trace JSON file (or its bytes, `data`) into a `TraceDoc`.

    A file cut short (a job killed while writing it) gives the complete events before the cut and a
    truncation warning (`errors.truncation_warning`); one cut before its first event is a `TraceError`.
    `limit`: see `read_json_text`.
    """
    text = read_json_text(path, data, limit)
    raw, cut_at = text.data, None
    try:
        doc = decode_document(path, raw)
    except EndsEarly as error:
        cut_at, closing = _complete_part(path, raw, limit)
        if not cut_at:
            raise TraceError(error.path, error.reason) from None
        doc = decode_document(path, raw[:cut_at] + closing)
    if cut_at is not None or text.cut:
        used = len(raw) if cut_at is None else cut_at
        doc.warnings[truncation_warning(path, used, len(raw), truncation_unit(text.inflated))] = 1
    return doc


def _complete_part(path: Path | str, raw: bytes, limit: MemoryLimit | None) -> tuple[int | None, bytes]:
    """Where the complete events of a text cut short end (None when the stream cannot tell: the cut is before
    them), and what closes the document there: ``]}``, or ``}`` when the cut came after the events' array, or ``]``
    for the array form."""
    stream = TraceStream(path, data=raw, limit=limit)
    try:
        chunks = sum(1 for _ in stream)  # each chunk of events is checked, then dropped: only where they end is kept
    except StreamFallback:
        return None, b""
    closing = b"]" if stream.array_form else b"}" if stream.array_closed else b"]}"
    return (stream.cut_at if chunks else None), closing
