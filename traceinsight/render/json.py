"""The `--json` report (schema ``traceinsight.report/1``, ../shared/notes/report-json.md): the result model
(`traceinsight.result.RunReport`) serialised.

CI jobs, `traceinsight diff` and `--fail-on` read this object, so its names are a
contract: add fields freely, never rename or drop one without bumping `schema`.
Unknown values are null, never a made-up 0.
"""

from __future__ import annotations

from typing import Any

import orjson

from traceinsight.result import RunReport, as_dict, is_record, to_document


def dumps(document: RunReport | dict[str, Any]) -> str:
    """Stable, diff-friendly JSON text (sorted keys, two-space indent) of a report, or of a document holding
    records (`runs`' rows, a diff)."""
    value = to_document(document) if isinstance(document, RunReport) else document
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(value, default=_record, option=options).decode()


def _record(value: Any) -> dict[str, Any]:
    """A record inside a document (`runs`' rows), as its JSON object: orjson writes dataclasses, not Structs."""
    if is_record(value):
        return as_dict(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")
