"""The critical path on the page, in the terminal and in the Markdown summary (`templates/_critical_path.html`,
`wording.critical_path_sentence`): figures recomputed from the JSON's per-step groups, no section without steps,
names from the trace escaped."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from markupsafe import escape
from msgspec.structs import replace

import traceinsight as ti
from tests.conftest import SAMPLE_TRACES
from tests.render.test_escaping import SCRIPT
from traceinsight.render.html import render_html
from traceinsight.render.svg_charts import PATH_GROUP_COLOURS, critical_path_chart
from traceinsight.result import CriticalPathSummary, PathItem

SLEEP_RANK1 = SAMPLE_TRACES / "distributed" / "sleep_rank1"  # rank 1 sleeps ~30 ms a step in `data` (its README)


@pytest.fixture(scope="module")
def straggler() -> tuple[ti.Report, dict[str, Any], str]:
    report = ti.analyze(SLEEP_RANK1)
    return report, orjson.loads(report.to_json()), report.to_html()


def _section(page: str) -> str:
    found = re.search(r'<section id="critical-path">.*?</section>', page, re.S)
    assert found, "no critical path section"
    return re.sub(r"<svg.*?</svg>", "", found.group(0), flags=re.S)


def _rows(section: str, table: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table}">(.*?)</table>', section, re.S)
    assert body
    return [
        re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
    ][1:]


def test_the_section_shows_the_steps_groups_and_the_sleeping_rank(straggler) -> None:
    """Shares recomputed from the JSON's per-step groups (their sum over the steps' time), largest first; the top
    item is rank 1's `data`, about 30 ms a step (the sample sleeps 30 ms), more than half the mean step."""
    report, doc, page = straggler
    section = _section(page)
    steps = doc["critical_path"]["steps"]
    total = sum(s["step_ns"] for s in steps)
    assert all(sum(s["groups"].values()) == s["step_ns"] for s in steps)
    by_group: dict[str, int] = {}
    for s in steps:
        for group, ns in s["groups"].items():
            by_group[group] = by_group.get(group, 0) + ns
    expected = sorted(by_group, key=lambda g: -by_group[g])
    rows = _rows(section, "critical-path-groups")
    assert [r[0] for r in rows] == [g.replace("_", " ") for g in expected]
    assert [r[1] for r in rows] == [f"{by_group[g] / total * 100:.1f} %" for g in expected]
    assert expected[0] == "cpu" and by_group["cpu"] / total > 0.8
    first = _rows(section, "critical-path-items")[0]
    assert first[0] == "data" and first[2] == "rank 1" and first[-1] in ("29.9 ms", "30 ms", "30.1 ms")
    line = f"Critical path: {round(by_group['cpu'] / total * 100)} % cpu (data on rank 1: "
    assert line in section and 'id="chart-critical-path"' in page
    assert line in report.to_text() and "| critical path | " in report.to_markdown()


def test_the_chart_has_a_bar_a_step_and_a_legend_of_its_groups(straggler) -> None:
    report, doc, _ = straggler
    svg = critical_path_chart(report.result)
    assert svg is not None
    hovers = re.findall(r"<title>step (\d+), (\w+): ", svg)
    ids = [s["id"] for s in doc["critical_path"]["steps"]]
    expected = {(str(s["id"]), g) for s in doc["critical_path"]["steps"] for g, ns in s["groups"].items() if ns}
    assert set(hovers) == expected and {int(i) for i, _ in hovers} == set(ids)
    for group in ("cpu", "collective"):
        assert PATH_GROUP_COLOURS[group] in svg and f">{group}<" in svg


def test_no_section_without_steps(straggler) -> None:
    report, _, _ = straggler
    empty = replace(report.result, critical_path=CriticalPathSummary())
    page = render_html(empty, report.analysis)
    assert 'id="critical-path"' not in page and "Critical path:" not in page
    assert critical_path_chart(empty) is None


def test_names_from_the_trace_are_escaped(straggler) -> None:
    report, _, _ = straggler
    cp = report.result.critical_path
    hostile = PathItem(name=SCRIPT, part="cpu_op", group="cpu", input=1, ns_per_step=40_000_000)
    page = render_html(
        replace(report.result, critical_path=replace(cp, top=[hostile, *cp.top])),
        report.analysis,
    )
    section = _section(page)
    assert SCRIPT not in page and str(escape(SCRIPT)) in section
    share = round(cp.shares["cpu"] * 100)
    assert f"Critical path: {share} % cpu ({escape(SCRIPT)} on rank 1: 40 ms a step)" in section
