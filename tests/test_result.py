"""The result model (`traceinsight/result.py`): docs/json.md's schema is generated from it, every real report
conforms to it strictly and round-trips through it, and no output reads the report by string path."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight.discover import find_runs
from traceinsight.render.json import dumps
from traceinsight.result import RunReport, from_document, schema_outline, to_document
from traceinsight.workflow import analyze_path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"


def test_documented_schema_is_the_model() -> None:
    document = (REPO / "docs" / "json.md").read_text()
    block = re.search(r"<!-- schema:begin -->\n```text\n(.*?)\n```\n<!-- schema:end -->", document, re.S)
    assert block, "docs/json.md has no generated schema block"
    assert block.group(1) == schema_outline(), "docs/json.md's schema differs: paste result.schema_outline() into it"


def _runs() -> list[tuple[Path, str]]:
    bases = [SAMPLE_TRACES] + ([SHARED] if SHARED.is_dir() else [])
    return [(base, run.name) for base in bases for run in find_runs(base)]


@pytest.mark.parametrize(("base", "name"), _runs(), ids=lambda x: str(x) if isinstance(x, str) else "")
def test_every_report_conforms_strictly_and_round_trips(base: Path, name: str) -> None:
    """Each field holds the type the model declares (no int where a float is said, no null where a value is), and
    a saved report read back serialises to the same text."""
    text = dumps(analyze_path(base, name).report)
    document = msgspec.json.decode(text)
    msgspec.convert(document, RunReport, strict=True)
    assert dumps(from_document(document)) == text


def test_a_document_missing_a_required_field_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="`inputs`"):
        from_document({"schema": "traceinsight.report/1", "run": "x"})
    with pytest.raises(ValueError, match=r"\$\.steps\.count"):
        from_document(
            {
                "run": "x",
                "inputs": [],
                "steps": {"count": "many"},
                "devices": [],
                "totals": {},
                "input_pipeline": {},
                "bottlenecks": [],
            }
        )


def test_to_document_is_plain_json_values() -> None:
    report = from_document(
        {"run": "x", "inputs": [], "steps": {}, "devices": [], "totals": {}, "input_pipeline": {}, "bottlenecks": []}
    )
    assert to_document(report)["meta"]["runs"] is None and to_document(report)["steps"]["items"] == []


def test_no_output_reads_the_report_by_string_path() -> None:
    """Outside the `--fail-on` resolver, the report is read by attribute: `report["..."]`, `report.get("...")`
    and a template's `report.get(` would be a field mypy cannot follow."""
    sources = [p for p in (REPO / "traceinsight").rglob("*.py") if p.name != "gating.py"]
    sources += list((REPO / "templates").glob("*.html"))
    pattern = re.compile(r"""\breport\s*(\[\s*["']|\.get\()""")
    found = [
        f"{p.relative_to(REPO)}:{i}"
        for p in sources
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
