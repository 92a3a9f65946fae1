"""The `--json` report (schema ``traceinsight.report/1``, ../shared/notes/report-json.md): the result model
(`traceinsight.result.RunReport`) serialised.

CI jobs, `traceinsight diff` and `--fail-on` read this object, so its names are a
contract: add fields freely, never rename or drop one without bumping `schema`.
Unknown values are null, never a made-up 0.
"""

from __future__ import annotations

from typing import Any

import orjson

from traceinsight.result import RunReport, to_document


def dumps(document: RunReport | dict[str, Any]) -> str:
    """Stable, diff-friendly JSON text (sorted keys, two-space indent) of a report or a diff."""
    value = to_document(document) if isinstance(document, RunReport) else document
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()
