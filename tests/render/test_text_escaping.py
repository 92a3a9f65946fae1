"""Hostile strings in the Markdown summaries and on the terminal (issue 36, cases 9 and 10).

Markdown: every string from a trace or a saved report is escaped (`format.markdown_text`), so a folder named
``<img src=x onerror=alert(1)>`` or a bottleneck id holding a link is shown as text by a real CommonMark renderer
(markdown-it, HTML allowed, as a CI step summary renders it): the rendered page holds no tag, link or emphasis of
the payload's, and its text reads as the payload. Terminal: no C0/C1 control (ESC sequences) and no bidi control
(U+202E shows text backwards) reaches stdout from `report`, `runs`, `diff` or `trend`; each is shown as ``\\xNN`` /
``\\uNNNN``.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight.cli import main
from traceinsight.listing import CACHE_ENV, ReportCache
from traceinsight.render.format import escape_control, markdown_code, markdown_text

markdown_it = pytest.importorskip("markdown_it")

IMG = "<img src=x onerror=alert(1)>"
LINK = "[click](javascript:alert(1))"
EMPHASIS = "**bold** _it_ ~~gone~~"
TABLE = "a | b\n| c"
CODE = "`<b>x</b>` & `"
PAYLOADS = (IMG, LINK, EMPHASIS, TABLE, CODE, "<script>alert(1)</script>", "&amp; &lt;", "\\*not\\*")
ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"  # retitle the terminal, clear it, paint red
BIDI = "\u202eexe.\u2066\u200f\u061c"
TERMINAL_RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
INPUT_BOUND = SAMPLE_TRACES / "synthetic_gpu" / "input_bound"
HEALTHY = SAMPLE_TRACES / "synthetic_gpu" / "healthy"


def _rendered(markdown: str) -> str:
    """The HTML a CommonMark renderer with tables makes of `markdown`, raw HTML allowed (as GitHub's is, bar its
    sanitiser: the summary must not lean on one)."""
    return markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def _text(rendered: str) -> str:
    """The text a reader sees in `rendered`: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]*>", "", rendered))


def _payload_tags(rendered: str) -> list[str]:
    """Tags in `rendered` a payload could have made (what our own summaries use is allowed)."""
    ours = {"p", "h2", "strong", "code", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "blockquote", "a"}
    tags = re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", rendered)
    return [t for t in tags if t not in ours]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_markdown_text_is_shown_as_written(payload: str) -> None:
    """In a paragraph and in a table cell: no markup of the payload's, and the reader sees it verbatim (a line
    break as a space)."""
    shown = payload.replace("\n", " ")
    para = _rendered(f"x {markdown_text(payload)} y\n")
    assert _payload_tags(para) == [] and "<a" not in para and "<em>" not in para and "<strong>" not in para
    cell = _rendered(f"| h | i |\n|---|---|\n| {markdown_text(payload)} | z |\n")
    assert _payload_tags(cell) == [] and "<a" not in cell and cell.count("<td>") == 2
    if "`" not in payload:  # a code span stays one: its text is the payload's, its backticks are not shown
        assert _text(para) == f"x {shown} y\n"
        assert _text(re.search(r"<td>(.*?)</td>", cell, re.S)[1]) == shown  # type: ignore[index]
    code = _rendered(f"| h |\n|---|\n| {markdown_code(payload)} |\n")
    assert _payload_tags(code) == [] and code.count("<td>") == 1


def test_terminal_escape_covers_c0_c1_and_bidi() -> None:
    text = "a\x00\x1b[31m\x7f\x85\x9b" + BIDI + "\u202a\u202b\u202c\u202d\u2067\u2068\u2069\u200e"
    escaped = escape_control(text)
    assert TERMINAL_RAW.search(escaped.replace("\n", "")) is None
    assert escaped.startswith("a\\x00\\x1b[31m\\x7f\\x85\\x9b\\u202eexe.\\u2066\\u200f\\u061c")
    assert escape_control("plain é ü 中文 \u2014") == "plain é ü 中文 \u2014"  # other text untouched


def _copy_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for f in INPUT_BOUND.iterdir():
        shutil.copy(f, folder / f.name)
    return folder


def test_report_markdown_escapes_the_folder_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy_run(tmp_path / IMG)
    out = tmp_path / "out"
    assert main(["report", str(run), "-o", str(out / "r.html"), "--markdown", str(out / "r.md"), "-q"]) == 0
    md = (out / "r.md").read_text()
    rendered = _rendered(md)
    assert "<img" not in rendered and "onerror" not in re.sub(r"&lt;.*?&gt;", "", rendered)
    assert _payload_tags(rendered) == []
    heading = re.search(r"<h2>(.*?)</h2>", rendered)
    assert heading and _text(heading[1]) == f"traceinsight: {IMG}"


def test_report_terminal_escapes_bidi_and_escape_sequences(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = _copy_run(tmp_path / f"run{BIDI}{ESC}")
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert TERMINAL_RAW.search(out) is None
    assert escape_control(f"run{BIDI}{ESC}") in out


@pytest.fixture
def saved_reports(tmp_path: Path) -> tuple[Path, Path]:
    """Two saved reports (healthy, input_bound) whose run names, bottleneck ids, titles and top kernels are
    payloads: Markdown markup, ESC sequences and bidi controls."""
    paths = []
    for name, run in (("base", HEALTHY), ("new", INPUT_BOUND)):
        path = tmp_path / "history" / name / "report.json"
        assert main(["report", str(run), "-o", str(tmp_path / f"{name}.html"), "--json", str(path), "-q"]) == 0
        doc = json.loads(path.read_text())
        doc["run"] = f"{IMG}{ESC}{BIDI}"
        for b in doc["bottlenecks"]:
            b["id"] = f"{LINK}{ESC}{BIDI}{b['id']}"
            b["title"] = f"{EMPHASIS}{ESC}"
        for d in doc["devices"]:
            for k in d["kernels"]["top"]:
                k["name"] = f"{IMG}{ESC}{k['name']}"
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths[0], paths[1]


def _markdown_is_text(md: str) -> None:
    rendered = _rendered(md)
    assert "<img" not in rendered and "javascript:" in _text(rendered)  # shown, as text
    assert _payload_tags(rendered) == [] and "<a " not in rendered and "<em>" not in rendered
    assert TERMINAL_RAW.search(md) is None  # ESC and bidi controls: spaces


def test_diff_markdown_and_terminal_escape_saved_strings(
    saved_reports: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = saved_reports
    md = tmp_path / "d.md"
    assert main(["diff", str(base), str(new), "-o", str(tmp_path / "d.html"), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    text = md.read_text()
    _markdown_is_text(text)
    assert markdown_text(f"{LINK}{ESC}{BIDI}input_bound") in text  # the added bottleneck, controls as spaces
    assert TERMINAL_RAW.search(out) is None and escape_control(f"{LINK}{ESC}{BIDI}") in out


def test_trend_markdown_and_terminal_escape_saved_strings(
    saved_reports: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = saved_reports
    md = tmp_path / "t.md"
    assert main(["trend", str(base.parent.parent), "-o", str(tmp_path / "t.html"), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    _markdown_is_text(md.read_text())
    assert TERMINAL_RAW.search(out) is None
    assert escape_control(f"{LINK}{ESC}{BIDI}input_bound") in out  # the top bottleneck, shown escaped


def test_runs_escapes_names_and_cached_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run's folder name, and figures read back from a cache entry (its framework, its top bottleneck)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    logdir = tmp_path / "logdir"
    _copy_run(logdir / f"run{BIDI}")
    assert main(["runs", str(logdir)]) == 0
    capsys.readouterr()
    (entry,) = ReportCache().entries.glob("*.json")
    doc: dict[str, Any] = orjson.loads(entry.read_bytes())
    doc["report"]["framework"] = f"torch{ESC}"
    doc["report"]["bottlenecks"][0]["id"] = f"id{BIDI}{ESC}"
    entry.write_bytes(orjson.dumps(doc))
    assert main(["runs", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert "1 from the cache" in out
    assert TERMINAL_RAW.search(out) is None
    assert escape_control(f"torch{ESC}") in out and escape_control(f"id{BIDI}{ESC}") in out
    assert escape_control(f"logdir/run{BIDI}") in out
