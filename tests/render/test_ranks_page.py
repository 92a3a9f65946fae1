"""Who waits for whom on the page: the ranks table's wait, transfer and lateness per step, the ranks chart with a hover
per rank and measure, and the "Collectives" section (the straggler named with its phase, each rank's phases, the
groups) with the JSON's figures; a balanced run names no straggler, a single-rank trace says its waiting is for ranks
not in the trace; names from a trace stay text."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from markupsafe import Markup, escape

from tests.conftest import SAMPLE_TRACES, shared_trace
from tests.render.test_compute_page import SCRIPT, chart, render, table, text, titles
from traceinsight.render import svg_charts
from traceinsight.render.format import fmt_bytes, fmt_count, fmt_ns, fmt_rate
from traceinsight.render.html import environment, without_empty_columns
from traceinsight.render.svg_charts import RANK_MEASURES
from traceinsight.result import from_document

DISTRIBUTED = SAMPLE_TRACES / "distributed"
NCCL = "hta/nccl_parser_config"


def section(page: str, name: str) -> str | None:
    match = re.search(rf'<section id="{name}">.*?</section>', page, flags=re.S)
    return match.group(0) if match else None


def header(fragment: str, table_id: str) -> list[str]:
    match = re.search(rf'<table id="{table_id}">\s*<tr>(.*?)</tr>', fragment, flags=re.S)
    assert match, table_id
    return [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<th[^>]*>(.*?)</th>", match.group(1), flags=re.S)]


@pytest.fixture(scope="module")
def sleep_rank1(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    return render(DISTRIBUTED / "sleep_rank1", tmp_path_factory.mktemp("sleep_rank1"))


def test_the_straggler_is_named_with_its_phase(sleep_rank1: tuple[str, dict[str, Any]]) -> None:
    page, report = sleep_rank1
    found = section(page, "collectives")
    assert found
    line = re.search(r'<p class="verdict" id="straggler">(.*?)</p>', found, flags=re.S)
    assert line
    said = " ".join(text(line.group(1)).split())
    straggler = report["collectives"]["straggler"]
    assert straggler["rank"] == 1 and straggler["phase"] == "data"
    assert said.startswith("Straggler: rank1 arrives last at 16 of 16 collectives") and "<code>data</code>" in line[1]
    assert said == f"Straggler: {straggler['message'].replace('`', '')}."


def test_ranks_table_has_the_json_figures(sleep_rank1: tuple[str, dict[str, Any]]) -> None:
    page, report = sleep_rank1
    found = section(page, "ranks")
    assert found
    columns = header(found, "ranks-table")
    assert columns[-4:] == ["wait / step", "transfer / step", "late / step", "arrives last"]
    rows = table(found, "ranks-table")
    items = report["ranks"]["items"]
    for row, rank in zip(rows, items, strict=True):
        assert row[columns.index("wait / step")] == fmt_ns(rank["wait_per_step_ns"])
        assert row[columns.index("transfer / step")] == fmt_ns(rank["transfer_ns"] // rank["steps"]["count"])
        assert row[columns.index("late / step")] == fmt_ns(rank["late_per_step_ns"])
        assert row[columns.index("arrives last")] == fmt_count(rank["last_count"])
    assert items[0]["wait_per_step_ns"] > 20_000_000 and rows[0][columns.index("wait / step")] == "31.4 ms"


def test_ranks_chart_has_a_hover_per_rank_and_measure(sleep_rank1: tuple[str, dict[str, Any]]) -> None:
    page, report = sleep_rank1
    found = section(page, "ranks")
    assert found
    svg = chart(found, "ranks")
    assert svg and svg.startswith("<svg")
    shown = titles(svg)
    items = report["ranks"]["items"]
    assert len(shown) == len(items) * len(RANK_MEASURES)
    for rank in items:
        waits = [t for t in shown if t.startswith(f"{rank['label']}: wait ")]
        assert waits == [
            f"{rank['label']}: wait {fmt_ns(rank['wait_per_step_ns'])} a step (inside collectives, waiting for later "
            "ranks)"
        ]


def test_phases_and_groups_tables(sleep_rank1: tuple[str, dict[str, Any]]) -> None:
    page, report = sleep_rank1
    found = section(page, "collectives")
    assert found
    items = report["ranks"]["items"]
    assert header(found, "rank-phases") == ["phase", *(r["label"] for r in items)]
    phases = {row[0]: row[1:] for row in table(found, "rank-phases")}
    assert set(phases) == set(items[0]["phases"])
    excess = report["collectives"]["straggler"]["phase_excess_ns"]
    assert phases["data"] == [
        fmt_ns(items[0]["phases"]["data"]),
        f"{fmt_ns(items[1]['phases']['data'])} (+{fmt_ns(excess)})",
    ]
    assert "<strong>" in re.search(r"<td class=\"name\">data</td>.*?</tr>", found, flags=re.S)[0]
    groups = [
        [g["collective"], fmt_bytes(g["bytes"]), fmt_count(g["count"]), fmt_ns(g["transfer_ns"])]
        + [fmt_ns(g["dur_max_ns"]), fmt_ns(g["wait_ns"]), fmt_rate(g["busbw_gbps"])]
        for g in report["collectives"]["groups"]
    ]
    assert table(found, "collective-groups") == groups  # gloo on the host: no link peak, its column left out


def test_a_balanced_run_names_no_straggler(tmp_path: Path) -> None:
    page, report = render(DISTRIBUTED / "balanced", tmp_path)
    found = section(page, "collectives")
    assert found and report["collectives"]["straggler"] is None
    assert 'id="straggler"' not in found
    assert "No straggler: no rank arrives last often enough" in text(found)
    ranks = section(page, "ranks")
    assert ranks and len(titles(chart(ranks, "ranks") or "")) == 2 * len(RANK_MEASURES)


def test_a_single_rank_trace_says_the_others_are_not_in_it(tmp_path: Path) -> None:
    page, report = render(shared_trace(NCCL), tmp_path)
    assert report["collectives"]["scope"] == "single_rank" and report["ranks"] is None
    assert section(page, "ranks") is None
    found = section(page, "collectives")
    assert found and 'id="straggler"' not in found
    said = text(found)
    c = report["collectives"]
    assert f"{fmt_ns(c['wait_ns'])} waiting (other ranks not in the trace)" in said
    assert "no straggler can be named" in said
    assert "waiting (other ranks not in the trace)" in header(found, "collective-groups")
    assert len(table(found, "collective-groups")) == len(c["groups"])


def test_a_hostile_rank_label_is_text(sleep_rank1: tuple[str, dict[str, Any]]) -> None:
    doc = copy.deepcopy(sleep_rank1[1])
    doc["ranks"]["items"][1]["label"] = SCRIPT
    doc["ranks"]["items"][1]["phases"][SCRIPT] = 1_000_000
    doc["collectives"]["groups"][0]["collective"] = SCRIPT
    doc["collectives"]["straggler"]["message"] = f"{SCRIPT} arrives last"
    typed = from_document(json.loads(json.dumps(doc)))
    svg = svg_charts.ranks_chart(typed)
    assert svg
    pages = [
        environment().get_template(name).render(report=typed, charts={"ranks": Markup(svg)})
        for name in ("_ranks.html", "_collectives.html")
    ]
    page = without_empty_columns("".join(pages))  # as the page is
    ranks, collectives = section(page, "ranks"), section(page, "collectives")
    assert ranks and collectives
    assert "<script" not in ranks + collectives
    assert str(escape(SCRIPT)) in ranks and str(escape(SCRIPT)) in collectives
    assert any(t.startswith(f"{SCRIPT}: wait ") for t in titles(chart(ranks, "ranks") or ""))
