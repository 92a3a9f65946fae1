"""The trend's renderers on hand-made rows: the top-bottleneck marks, panels without figures, one run, and names
that would break a terminal or a Markdown table (the command end to end: tests/commands/test_trend.py)."""

import re

from tests.conftest import typed_report
from traceinsight.gating import parse_threshold
from traceinsight.render.trend import (
    TrendRun,
    build_trend,
    render_trend_html,
    render_trend_markdown,
    render_trend_terminal,
    trend_sentence,
)
from traceinsight.result import RunSummary


def _document(
    rows: list[RunSummary], window: int = 5, thresholds: tuple[str, ...] = (), on_missing: str = "fail"
) -> dict:
    runs = [TrendRun(row, typed_report(steps={"mean_ns": row.mean_step_ns}), "report", row.name) for row in rows]
    return build_trend(runs, "given", window, [parse_threshold(t, allow_change=True) for t in thresholds], on_missing)


def _row(name: str, step_ms: float, top: str | None, gpu_util: float | None = 0.5) -> RunSummary:
    return RunSummary(
        name=name,
        mean_step_ns=int(step_ms * 1e6),
        gpu_util=gpu_util,
        input_wait_fraction=0.1,
        top_bottleneck=top,
        top_severity="high" if top else None,
    )


def test_top_bottleneck_changes_are_marked():
    rows = [
        _row("r1", 40, "input_bound"),
        _row("r2", 41, "input_bound"),
        _row("r3", 20, "launch_bound"),
        _row("r4", 20, None),
    ]
    document = _document(rows)
    assert [row["bottleneck_changed"] for row in document["runs"]] == [False, False, True, True]
    html = render_trend_html(document)
    assert re.findall(r'<tr id="run-(\d)" class="changed">', html) == ["3", "4"]
    assert html.count("&#9650;") == 2 + 1  # two rows, and the legend under the table
    # The chart names each change and titles it: what it was, what it became.
    assert "<title>r3: top bottleneck input_bound -&gt; launch_bound</title>" in html
    assert "<title>r4: top bottleneck launch_bound -&gt; none</title>" in html
    assert "r3 (input_bound -&gt; launch_bound), r4 (launch_bound -&gt; none)" in html
    terminal = render_trend_terminal(document)
    assert re.search(r"^\s+3\s+r3\s.*\*launch_bound \(high\)$", terminal, re.M)
    assert "**changed:** launch\\_bound \\(high\\)" in render_trend_markdown(document)  # ids escaped: text


def test_panels_without_figures_and_empty_columns():
    document = _document([_row("a", 10, "host_bound", gpu_util=None), _row("b", 12, "host_bound", gpu_util=None)])
    html = render_trend_html(document)
    assert html.count("no run has this figure") == 2  # GPU-Util and MFU
    assert 'id="trend-steps-line"' in html and 'id="trend-gpu_util-line"' not in html
    assert '<th class="num">MFU</th>' not in html  # a column no run has a figure for is left out


def test_one_run_has_nothing_to_compare():
    document = _document([_row("only", 10, "host_bound")], thresholds=("steps.mean_ns>+10%",))
    assert document["gate"]["baseline"] == [] and document["gate"]["crossed"] == []
    assert trend_sentence(document) == (
        "1 run ordered as given; the top bottleneck never changed; 0 of 1 threshold crossed."
    )
    assert "trend-steps-line" in render_trend_html(document)


def test_names_are_safe_in_a_terminal_and_a_markdown_table():
    document = _document([_row("a|b\x1b[31m", 10, "host_bound"), _row("c", 30, "host_bound")], window=1)
    assert "\x1b" not in render_trend_terminal(document)
    markdown = render_trend_markdown(document)
    assert "| 1 | `a\\|b" in markdown
    assert document["gate"]["mean_step_ns"] == {
        "last": 30_000_000,
        "baseline_median": 10_000_000,
        "delta": 20_000_000,
        "relative": 2.0,
    }


def test_a_skipped_threshold_is_not_shown_as_crossed():
    """The typed report holds no device GPU:0: with --fail-on-missing skip its threshold passes, and the page says
    so in the muted style; with the default policy it fails, in the crossed (red) style."""
    from traceinsight.gating import SKIP

    rows, gpu_gate = [_row("a", 10, None), _row("b", 10, None)], ("devices.GPU:0.idle_fraction>0.5",)
    for on_missing, style in ((SKIP, "skipped muted"), ("fail", "crossed")):
        html = render_trend_html(_document(rows, thresholds=gpu_gate, on_missing=on_missing))
        (item,) = re.findall(r'<ul id="thresholds">\s*<li class="([^"]+)">([^<]*)</li>', html)
        assert item[0] == style and "GPU:0.idle_fraction" in item[1]
