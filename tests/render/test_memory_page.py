"""The report's device memory (issue 12), on real traces: the "Device memory" section's figures are the JSON's,
its chart says them on hover, and a run without memory events has no such section; a CPU-only run says so."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_trace, typed_report
from tests.render.test_readable_page import table_rows
from traceinsight.analysis import analyze
from traceinsight.cli import main
from traceinsight.events import Profile, make_event_table
from traceinsight.render import svg_charts
from traceinsight.render.chart_data import chart_run
from traceinsight.render.format import fmt_bytes, fmt_pct, fmt_trace_ms

WITH_MEMORY = ("xprof/GPU-multi-worker", "kineto/resnet50_num_workers_0")
WITHOUT_MEMORY = "tf_cpu/a_input_bound"
AT_LIMIT = "the memory is at the limit: OOM risk; a larger batch needs activation checkpointing or mixed precision"
FONT_PX = re.compile(r'font-size="([\d.]+)"')  # the chart's text size, an attribute of its <svg> (`svg_charts`)


def render(trace: str, out: Path) -> tuple[str, dict[str, Any]]:
    """The page and the JSON of `traceinsight report` on a shared trace."""
    page, report = out / "r.html", out / "r.json"
    assert main(["report", str(shared_trace(trace)), "-o", str(page), "--json", str(report), "-q"]) == 0
    return page.read_text(), json.loads(report.read_text())


@pytest.fixture(scope="module", params=WITH_MEMORY, ids=lambda t: t.split("/")[1])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    return render(request.param, tmp_path_factory.mktemp("memory"))


def memory_section(page: str) -> str | None:
    match = re.search(r'<section id="memory">.*?</section>', page, flags=re.S)
    return match.group(0) if match else None


def device_blocks(section: str) -> dict[str, str]:
    """Each device's part of the section, by device id."""
    blocks = re.findall(r'<div class="memory-device"[^>]*>\s*<h3>(.*?)</h3>(.*?)</div>', section, flags=re.S)
    return {html.unescape(name): body for name, body in blocks}


def figures(block: str) -> dict[str, str]:
    table = re.search(r'<table class="memory-figures">.*?</table>', block, flags=re.S)
    assert table
    return {row[0]: row[1] for row in table_rows(table.group(0))}


def test_section_has_the_json_figures(rendered: tuple[str, dict[str, Any]]) -> None:
    page, report = rendered
    section = memory_section(page)
    assert section is not None
    assert page.index('<section id="memory">') > page.index('<section id="devices">')  # after the devices
    blocks = device_blocks(section)
    devices = [d for d in report["devices"] if d["memory"]]
    assert devices and list(blocks) == [d["id"] for d in devices]
    for d in devices:
        m, block = d["memory"], blocks[d["id"]]
        shown = figures(block)
        relative = "" if m["absolute"] else " (relative to the profile start)"
        assert shown["peak in use"] == fmt_bytes(m["peak_in_use_bytes"]) + relative
        assert shown["capacity"] == fmt_bytes(m["capacity_bytes"])
        assert shown["headroom"] == fmt_pct(m["headroom_fraction"])
        factor = m["batch_headroom_factor"]
        assert shown["batch headroom factor"] == ("-" if factor is None else f"{factor:.1f}×")
        static = m["static_bytes"]
        assert shown["static per step"] == fmt_bytes(static) + (relative if static is not None else "")
        assert shown["transient per step"] == fmt_bytes(m["transient_bytes"])
        assert shown["peak step"] == ("-" if m["peak_step"] is None else str(m["peak_step"]))
        assert shown["peak at (after the window start)"] == fmt_trace_ms(m["peak_ns"], report["window"]["start_ns"])
        assert shown["fragmentation max"] == fmt_pct(m["fragmentation_max"])
        if m["allocator_limit_bytes"] is not None:
            assert shown["allocator limit"] == fmt_bytes(m["allocator_limit_bytes"])
        if m["peak_reserved_bytes"] is not None:
            assert shown["peak reserved"] == fmt_bytes(m["peak_reserved_bytes"]) + relative
        assert ("relative to the profile start" in block) == (not m["absolute"])
        ops = re.search(r'<table class="memory-ops">.*?</table>', block, flags=re.S)
        want = [[o["op"], fmt_bytes(o["bytes"])] for o in m["top_ops_at_peak"]]
        assert (table_rows(ops.group(0)) if ops else []) == want
        if len(m["steps"]) > 1:
            per_step = re.search(r'<table class="memory-steps">.*?</table>', block, flags=re.S)
            assert per_step
            assert table_rows(per_step.group(0)) == [
                [str(s["id"])] + [fmt_bytes(s[k]) for k in ("static_bytes", "peak_bytes", "transient_bytes")]
                for s in m["steps"]
            ]
        assert (AT_LIMIT in html.unescape(block)) == ("at_limit" in m["warnings"])
        assert ("expandable_segments" in block) == ("slack" in m["warnings"])


def test_trace_kinds(rendered: tuple[str, dict[str, Any]], request: pytest.FixtureRequest) -> None:
    """The XSpace trace's levels are absolute against a known capacity; the 2021 Kineto one's are relative."""
    memory = [d["memory"] for d in rendered[1]["devices"] if d["memory"]]
    if "xprof" in request.node.callspec.params["rendered"]:
        assert all(m["absolute"] and m["capacity_bytes"] and m["headroom_fraction"] is not None for m in memory)
    else:
        assert not any(m["absolute"] for m in memory)


def test_chart_marks_each_device_on_hover(rendered: tuple[str, dict[str, Any]]) -> None:
    page, report = rendered
    chart = re.search(r'id="chart-memory">(<svg.*?</svg>)', page, flags=re.S)
    assert chart
    svg = html.unescape(chart.group(1))
    origin = report["window"]["start_ns"]
    for d in report["devices"]:
        m = d["memory"]
        if not m:
            continue
        assert f"<title>{d['id']}: allocated" in svg
        peak_ms = f"{(m['peak_ns'] - origin) / 1e6:,.1f} ms"
        assert f"<title>{d['id']}: peak {fmt_bytes(m['peak_in_use_bytes'])}" in svg and peak_ms in svg
        if m["absolute"] and m["capacity_bytes"]:
            assert f"<title>{d['id']}: capacity {fmt_bytes(m['capacity_bytes'])}" in svg
        if m["steps"]:
            assert re.search(rf"<title>{re.escape(d['id'])}: \d+ steps?: step ", svg)
        if m["series"]["reserved"] is not None:
            assert f"<title>{d['id']}: reserved" in svg
    sizes = [float(px) for px in FONT_PX.findall(chart.group(1))]
    assert sizes and min(sizes) >= 10  # no text smaller than 10 px


def test_no_memory_section_without_memory_events_and_cpu_only_label(tmp_path: Path) -> None:
    page, report = render(WITHOUT_MEMORY, tmp_path)
    assert not report["devices"] and memory_section(page) is None and 'id="chart-memory"' not in page
    headline = re.search(r'<header id="headline">.*?</header>', page, flags=re.S)
    assert headline and "CPU-only run: the host is the device" in " ".join(headline.group(0).split())


def test_gpu_runs_are_not_labelled_cpu_only(rendered: tuple[str, dict[str, Any]]) -> None:
    assert "CPU-only run" not in rendered[0]


def _memory(capacity: int | None, absolute: bool = True) -> dict[str, Any]:
    gib = 1 << 30
    return {
        "absolute": absolute,
        "capacity_bytes": capacity,
        "allocator_limit_bytes": None,
        "headroom_fraction": 1 - 2 * gib / capacity if capacity and absolute else None,
        "peak_in_use_bytes": 2 * gib,
        "peak_allocated_bytes": 2 * gib,
        "peak_reserved_bytes": None,
        "peak_ns": 5_000_000,
        "peak_step": 0,
        "steps": [{"id": 0, "static_bytes": gib, "peak_bytes": 2 * gib, "transient_bytes": gib}],
        "series": {"ts_ns": [0, 5_000_000, 9_000_000], "allocated": [gib, 2 * gib, gib], "reserved": None},
    }


def test_chart_capacity_is_a_line_or_a_note_when_far_above() -> None:
    """A capacity near the levels is a line; one far above them (an 80 GB GPU using 2 GB) is a note at the top,
    so the levels stay readable; relative levels get neither."""
    run = chart_run(analyze(Profile(events=make_event_table({}), inputs=[])))
    steps = {"items": [{"id": 0, "start_ns": 0, "dur_ns": 9_000_000}]}

    def chart(memory: dict[str, Any]) -> str:
        report = typed_report(
            devices=[{"id": "GPU:0", "memory": memory}], window={"start_ns": 0, "end_ns": 0}, steps=steps
        )
        svg = svg_charts.memory_chart(report, run)
        assert svg is not None
        return html.unescape(svg)

    near, far, relative = chart(_memory(4 << 30)), chart(_memory(80 << 30)), chart(_memory(80 << 30, False))
    assert "<title>GPU:0: capacity 4 GiB, 50.0 % free at the peak</title>" in near and "off the scale" not in near
    assert "<title>GPU:0: capacity 80 GiB, 97.5 % free at the peak</title>" in far and "off the scale" in far
    assert "capacity" not in relative.replace("no capacity line", "")
    for svg in (near, far, relative):
        assert "<title>GPU:0: peak 2 GiB" in svg and "<title>GPU:0: 1 step: step 0 at 0.0 ms: static 1 GiB" in svg
    assert svg_charts.memory_chart(typed_report(devices=[{"id": "GPU:0", "memory": None}]), run) is None
