"""The report as its reader sees it (issue 19), on real traces: readable tables, no noise, where to look, and
the metadata a CI artifact needs."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_trace
from tests.render.test_browser import CHROMIUM, open_in_chromium
from traceinsight.cli import main
from traceinsight.render.format import fmt_evidence, fmt_trace_ms
from traceinsight.render.html import gap_step, kernel_tables, without_empty_columns
from traceinsight.render.meta import capture_date, run_info_versions
from traceinsight.result import Device, Kernels, Step, TopKernel

TRACES = ("xprof/GPU-multi-worker", "tf_cpu/a_input_bound", "kineto/resnet50_num_workers_0")
MAX_CELL = 200
# A float written out to more than 4 decimals; not part of a word, file name or clock time ("worker0.16231...").
LONG_FLOAT = re.compile(r"(?<![\w.:/-])\d+\.\d{5,}(?![\w.])")


class Page:
    """One rendered report: the HTML, the JSON, the Markdown and the command that made them."""

    def __init__(self, trace: str, out: Path) -> None:
        self.path = shared_trace(trace)
        self.html_path, self.json_path, self.md_path = out / "r.html", out / "r.json", out / "r.md"
        self.argv = ["report", str(self.path), "-o", str(self.html_path), "--json", str(self.json_path)]
        self.argv += ["--markdown", str(self.md_path), "-q"]
        assert main(self.argv) == 0
        self.html = self.html_path.read_text()
        self.report: dict[str, Any] = json.loads(self.json_path.read_text())
        self.markdown = self.md_path.read_text()

    def section(self, name: str) -> str:
        match = re.search(rf'<section id="{name}">.*?</section>', self.html, flags=re.S)
        assert match, name
        return match.group(0)


@pytest.fixture(scope="module", params=TRACES, ids=lambda t: t.split("/")[1])
def page(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Page:
    return Page(request.param, tmp_path_factory.mktemp("page"))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Page]:
    return {t.split("/")[1]: Page(t, tmp_path_factory.mktemp("pages")) for t in TRACES}


def visible_text(fragment: str) -> str:
    """What a reader sees before clicking anything: no markup, no closed <details> body (its summary stays)."""
    fragment = re.sub(r"<details[^>]*>\s*(<summary>.*?</summary>).*?</details>", r"\1", fragment, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def page_text(page: str) -> str:
    """All the text of a page, the charts' and the closed details' included."""
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", page, flags=re.S)))


def svgs(page: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", page, flags=re.S)


def table_rows(table: str) -> list[list[str]]:
    """Each data row's cells as visible text."""
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S) for row in rows]
    return [[" ".join(visible_text(c).split()) for c in row] for row in cells if row]


# --------------------------------------------------------------------------- every page


def test_every_chart_says_its_values_on_hover(page: Page) -> None:
    charts = svgs(page.html)
    assert charts, "no chart drawn"
    for svg in charts:
        assert svg.count("<title>") >= 1
    assert "<script" not in page.html and "default-src 'none'" in page.html  # hovers need no script; the CSP stays


def test_step_and_gap_charts_have_a_hover_for_each_bar(page: Page) -> None:
    steps = re.search(r'id="chart-steps">(<svg.*?</svg>)', page.html, flags=re.S)
    items = page.report["steps"]["items"]
    parts = {cat for s in items for cat, ns in s["breakdown"].items() if ns}
    assert steps and steps.group(1).count("<title>step ") == len(items) * len(parts)
    gaps = re.search(r'id="chart-gaps">(<svg.*?</svg>)', page.html, flags=re.S)
    if page.report["devices"]:
        bins = page.report["devices"][0]["gaps"]["histogram"]
        assert gaps and gaps.group(1).count("<title>gaps ") == len(bins)


def test_chart_text_is_at_least_10_px(page: Page) -> None:
    # matplotlib's text sets its size in a style, the charts written directly in an attribute (`svg_charts`)
    size = r"font[-\w]*:[^;\"]*?([\d.]+)px|font-size=\"([\d.]+)\""
    found = [m for svg in svgs(page.html) for m in re.findall(size, svg)]
    sizes = [float(style or attribute) for style, attribute in found]
    assert sizes and min(sizes) >= 10


def test_no_visible_table_cell_is_longer_than_200_characters(page: Page) -> None:
    cells = [
        c for table in re.findall(r"<table.*?</table>", page.html, flags=re.S) for row in table_rows(table) for c in row
    ]
    assert cells and max(len(c) for c in cells) <= MAX_CELL


def test_no_none_and_no_long_unrounded_float(page: Page) -> None:
    text = page_text(page.html)
    assert not re.search(r"\bNone\b", text)
    assert not LONG_FLOAT.findall(text), LONG_FLOAT.findall(text)[:5]


def test_no_column_is_dash_in_every_row(page: Page) -> None:
    for table in re.findall(r"<table.*?</table>", page.html, flags=re.S):
        rows = table_rows(table)
        for column in range(len(rows[0]) if rows else 0):
            assert any(row[column] != "-" for row in rows), table[:300]


def test_evidence_is_formatted_for_people(page: Page) -> None:
    for kv in re.findall(r'<div class="kv">(.*?)</div>\s*</details>', page.html, flags=re.S):
        labels = re.findall(r'<span class="muted">(.*?)</span>', kv)
        assert labels and not any(label.endswith(("_ns", " ns")) or "_" in label for label in labels), labels


def test_footer_has_the_time_the_command_and_the_input(page: Page) -> None:
    footer = page.html[page.html.index('<footer class="muted" id="footer">') :]
    generated = page.report["meta"]["generated_at"]
    assert f'<time datetime="{generated}">' in footer
    text = " ".join(page_text(footer).split())
    assert f"Input: {page.path}" in text
    assert "Command: traceinsight report " + str(page.path) in text and str(page.html_path) in text


def test_meta_says_when_how_and_from_what(page: Page) -> None:
    meta = page.report["meta"]
    assert set(meta) >= {"generated_at", "command", "options", "input", "capture_date", "versions"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["generated_at"])
    assert meta["command"] == ["traceinsight", *page.argv]
    assert meta["input"] == str(page.path)
    assert meta["options"]["output"] == str(page.html_path) and meta["options"]["small_kernel_us"] == 10.0
    assert meta["versions"]["traceinsight"] == page.report["version"]


def test_markdown_names_the_html_report(page: Page) -> None:
    # Named as given, never as a relative link, which breaks where a CI step summary is shown.
    assert f"HTML report: `{page.html_path}`" in page.markdown and "](" not in page.markdown
    assert f"input `{page.path}`" in page.markdown


def test_longest_gaps_say_their_step_and_trace_time(page: Page) -> None:
    if not page.report["devices"]:
        pytest.skip("CPU-only: no gaps")
    table = re.search(r'<table id="longest-gaps">.*?</table>', page.html, flags=re.S)
    assert table and "ms after the start of the analyzed window" in page.html
    rows = table_rows(table.group(0))
    gaps = [x for d in page.report["devices"] for x in d["gaps"]["longest"][:5]]
    items = page.report["steps"]["items"]
    assert len(rows) == len(gaps)
    for (_, step, at, *_), gap in zip(rows, gaps, strict=True):
        assert at == fmt_trace_ms(gap["start_ns"], page.report["window"]["start_ns"])
        inside = [s["id"] for s in items if s["start_ns"] <= gap["start_ns"] < s["start_ns"] + s["dur_ns"]]
        assert step == (str(inside[0]) if inside else gap_step(gap["start_ns"], [Step(**s) for s in items]))
        assert re.fullmatch(r"\d+|before \d+|after \d+|between \d+ and \d+", step)


# --------------------------------------------------------------------------- one trace each


def test_resnet_page(pages: dict[str, Page]) -> None:
    page = pages["resnet50_num_workers_0"]
    meta = page.report["meta"]
    assert meta["capture_date"] == "2021-06-08T08:57:03.460072Z"  # Kineto's epoch clock
    assert "Tesla V100-DGXS-32GB (compute capability 7.0)" in meta["versions"]["devices"]
    # Evidence for people: the input share and the DataLoader's time, not 0.33896962370921735 and 415791000.
    evidence = page_text(page.section("bottlenecks"))  # inside the closed "Evidence" details
    assert "input fraction 33.9 %" in " ".join(evidence.split()) and "415791000" not in page.html
    # Every gap of the DataLoader run lies in a step; the steps section gives the spread.
    rows = table_rows(re.search(r'<table id="longest-gaps">.*?</table>', page.html, flags=re.S).group(0))
    assert [r[1] for r in rows] == ["9", "7", "6", "8", "10"]
    steps = " ".join(visible_text(page.section("steps")).split())
    durations = [s["dur_ns"] for s in page.report["steps"]["items"]]
    assert "σ 5.2 ms" in steps and f"min {min(durations) // 1_000_000} ms" in steps
    # Kernel names shortened to the function, the profiler's name a click away.
    kernels = page.section("kernels")
    assert "<summary>cudnn::detail::dgrad_engine</summary>" in kernels
    assert html.escape("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int", quote=False) in kernels


def test_multi_worker_page(pages: dict[str, Page]) -> None:
    page = pages["GPU-multi-worker"]
    assert page.report["meta"]["capture_date"] is None  # a clock relative to the profiler's start: no date
    kernels = page.section("kernels")
    assert kernels.count("<h3>Top kernels on") == 1 and "<h3>Top kernels on GPU:4, GPU:6</h3>" in kernels
    assert "Eigen::internal::EigenMetaKernel (variant 2)" in kernels
    timeline = re.search(r'id="chart-timeline">(<svg.*?</svg>)', page.html, flags=re.S)
    assert timeline
    svg = timeline.group(1)
    assert "zoomed to" in svg  # not the 2.6 s window, most of it empty
    for device in page.report["devices"]:  # step lines, GPU-Util (over its steps) and its target in every band
        assert f"<title>{device['id']}: 1 step " in svg
        if device["gpu_util"] is not None:  # GPU:1 ran copies only: no kernel, no GPU-Util over steps
            assert f"<title>{device['id']}: GPU-Util {device['gpu_util'] * 100:.1f} %" in svg
        assert f"<title>{device['id']}: the target practitioners aim GPU-Util at, 80-90 %</title>" in svg


def test_cpu_only_page(pages: dict[str, Page]) -> None:
    page = pages["a_input_bound"]
    for section in ("devices", "gaps", "kernels", "copies"):
        assert f'<section id="{section}">' not in page.html
    assert 'id="cpu-only"' in page.html
    parts = [row[0] for row in table_rows(page.section("steps"))]
    assert parts == ["input wait", "host compute", "idle"]  # no all-zero device rows
    meta = page.report["meta"]
    assert meta["capture_date"].startswith("2026-12-02T13:47:01")
    assert meta["versions"]["tensorflow"] == "2.21.0" and meta["versions"]["framework"] == "tensorflow 2.21.0"
    assert "tensorflow 2.21.0" in page_text(page.section("inputs"))


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_pages_render_with_their_hovers_in_a_browser(pages: dict[str, Page], tmp_path: Path) -> None:
    for page in pages.values():
        dom, requests = open_in_chromium(page.html_path, tmp_path)
        assert requests == set()
        assert 'id="footer"' in dom and dom.count("<svg") == page.html.count("<svg")
        assert dom.count("<title>") == page.html.count("<title>")  # the hovers survive parsing


# --------------------------------------------------------------------------- the helpers


def test_evidence_values() -> None:
    assert fmt_evidence("input_fraction", 0.33896962370921735) == "33.9 %"
    assert fmt_evidence("slowest_stage_self_ns", 415_791_000) == "416 ms"
    assert fmt_evidence("flop_coverage", 0.1369) == "13.7 %"
    assert fmt_evidence("step_ns_after_hidden", 115_567_500) == "116 ms"
    assert fmt_evidence("bytes", 115_607_040) == "110 MiB"
    assert fmt_evidence("occupancy_mean_pct", [None, None]) is None  # nothing known: the row goes
    assert fmt_evidence("occupancy_mean_pct", [None, 41.25]) == "41.2 %"
    assert fmt_evidence("seen", {"prefetch": True, "map_parallel": False}) == "prefetch: yes, map parallel: no"
    assert fmt_evidence("peak_speedup", 7.96) == "7.96x" and fmt_evidence("ratio", 0.123456789) == "0.123"


def test_gap_step_names_the_step_or_where_between() -> None:
    items = [Step(id=5, start_ns=100, dur_ns=50, breakdown={}), Step(id=6, start_ns=200, dur_ns=50, breakdown={})]
    assert [gap_step(t, items) for t in (99, 100, 149, 150, 210, 250)] == [
        "before 5",
        "5",
        "5",
        "between 5 and 6",
        "6",
        "after 6",
    ]
    assert gap_step(1, []) == "-"


def _device(name: str, tops: list[tuple[str, int, int]]) -> Device:
    top = [TopKernel(name=n, count=c, total_ns=t, mean_ns=t // c, tensor_core=False) for n, c, t in tops]
    return Device(id=name, kernels=Kernels(top=top))


def test_identical_kernel_lists_share_one_table() -> None:
    a = [("void k<int>(int)", 2, 4000), ("void k<float>(float)", 1, 1000)]
    b = [("void k<int>(int)", 2, 6000), ("void k<float>(float)", 1, 1000)]
    tables = kernel_tables([_device("GPU:0", a), _device("GPU:1", b), _device("GPU:2", a[::-1]), _device("GPU:3", [])])
    assert [t["devices"] for t in tables] == [["GPU:0", "GPU:1"], ["GPU:2"]]
    rows = tables[0]["rows"]
    assert [r["label"] for r in rows] == ["k", "k (variant 2)"] and rows[0]["name"] == "void k<int>(int)"
    assert rows[0]["total"] == "4 \u00b5s \u2013 6 \u00b5s" and rows[0]["calls"] == "2"
    assert rows[1]["total"] == "1 \u00b5s"


def test_dash_only_columns_go() -> None:
    table = "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>-</td></tr><tr><td>-</td><td> - </td></tr></table>"
    assert without_empty_columns(table) == "<table><tr><th>a</th></tr><tr><td>1</td></tr><tr><td>-</td></tr></table>"


def test_capture_date_only_from_an_epoch_clock() -> None:
    assert capture_date(1_623_142_623_460_072_000) == "2021-06-08T08:57:03.460072Z"
    assert capture_date(1_796_219_221_000_000_000) == "2026-12-02T13:47:01Z"
    assert capture_date(128_685_703) is None and capture_date(None) is None


def test_run_info_versions(tmp_path: Path) -> None:
    info = tmp_path / "run_info.json"
    info.write_text(json.dumps({"torch": "2.5.1+cu124", "scenario": "a", "steps": 3, "versions": {"cuda": "12.4"}}))
    assert run_info_versions([info], "pytorch") == {
        "cuda": "12.4",
        "torch": "2.5.1+cu124",
        "framework": "pytorch 2.5.1+cu124",
    }
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert run_info_versions([broken], "pytorch") == {}


def test_source_date_epoch_fixes_the_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "report",
                str(shared_trace("tf_cpu/a_input_bound")),
                "-o",
                str(tmp_path / "r.html"),
                "--json",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["meta"]["generated_at"] == "2023-11-14T22:13:20Z"
