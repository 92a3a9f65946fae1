"""Charts: inline SVG, and long runs drawn as areas rather than hundreds of bars."""

import base64
import io
import re
import struct

import numpy as np
import pytest

from tests.conftest import typed_report
from tests.render.test_trend_page import _row as _trend_row
from traceinsight.analysis import analyze
from traceinsight.events import Profile, make_event_table
from traceinsight.render import charts, svg_charts
from traceinsight.render.chart_data import chart_run
from traceinsight.result import RunReport
from traceinsight.rules import BREAKDOWN


def _steps(n: int) -> RunReport:
    parts = {c: (j + 1) * 1_000_000 for j, c in enumerate(BREAKDOWN)}
    items = [{"id": i, "start_ns": 0, "dur_ns": sum(parts.values()), "breakdown": parts} for i in range(n)]
    return typed_report(steps={"items": items})


def test_step_chart_bars_then_areas():
    few = svg_charts.step_breakdown(_steps(10))
    many = svg_charts.step_breakdown(_steps(200))
    assert few.startswith("<svg") and many.startswith("<svg")
    assert few.count('<g id="steps-hover-') == 10 * len(BREAKDOWN)  # one rectangle per step and part
    assert many.count('<g id="steps-hover-') == len(BREAKDOWN)  # one area per part, not 1,200 rectangles
    assert few.count("<title>step ") == 10 * len(BREAKDOWN)  # each rectangle says its value on hover
    assert svg_charts.step_breakdown(typed_report()) is None


def _bins(*bins: tuple[str, int | None, int, int]) -> list[dict[str, object]]:
    return [
        {"label": label, "lower_ns": 0, "upper_ns": upper, "count": count, "total_ns": total}
        for label, upper, count, total in bins
    ]


def _bars(svg: str, chart: str) -> list[tuple[str, float]]:
    """Each hovered bar's title and height (px), in order."""
    found = re.findall(rf'<g id="{chart}-hover-\d+"><title>(.*?)</title><rect [^>]*height="([\d.]+)"', svg)
    return [(title, float(height)) for title, height in found]


def test_bar_charts_are_written_to_scale_with_a_hover_a_bar():
    """The histograms are written as SVG without matplotlib: two devices' bins summed, each bar as tall as its
    value on the axis (5 ms of idle half as tall as 10 ms), the small kernels orange, the numbers plain."""
    gaps = _bins(("< 10 us", 10_000, 3, 0), ("10-100 us", 100_000, 2, 5_000_000), (">= 100 us", None, 1, 10_000_000))
    kernels = _bins(("< 10 us", 10_000, 400, 1_000_000), (">= 10 us", None, 100, 9_000_000))
    device = {"gaps": {"count": 6, "histogram": gaps}, "kernels": {"count": 500, "small_threshold_ns": 10_000}}
    devices = [
        {"id": f"GPU:{d}", "busy_ns": 1, "span_ns": 1, **device, "kernels": {**device["kernels"], "histogram": kernels}}
        for d in range(2)
    ]
    report = typed_report(devices=devices)
    drawn = svg_charts.gap_histogram(report)
    bars = _bars(drawn, "gaps")
    assert [title for title, _ in bars] == [
        "gaps &lt; 10 us: 6 gaps, 0 ns idle",
        "gaps 10-100 us: 4 gaps, 10 ms idle",
        "gaps &gt;= 100 us: 2 gaps, 20 ms idle",
    ]
    assert bars[0][1] == 0 and bars[2][1] == pytest.approx(2 * bars[1][1])
    assert "idle time (ms)" in drawn and ">20<" in drawn  # the axis in ms, up to a round 20
    kernel_bars = _bars(svg_charts.kernel_histogram(report), "kernels")
    assert [title.split(":")[0] for title, _ in kernel_bars] == ["kernels &lt; 10 us (small)", "kernels &gt;= 10 us"]
    assert kernel_bars[0][1] == pytest.approx(4 * kernel_bars[1][1])  # 800 kernels against 200
    assert '#ef6c00"/></g><g id="kernels-hover-1"><title>kernels &gt;= 10 us:' in svg_charts.kernel_histogram(report)
    assert svg_charts.gap_histogram(typed_report()) is None and svg_charts.kernel_histogram(typed_report()) is None


def _analysis(devices: int):
    """One 1 ms kernel per device, device d busy from d ms on: its busy share is known per time bin."""
    n = devices
    events = make_event_table(
        {
            "ts_ns": np.arange(n, dtype=np.int64) * 1_000_000,
            "dur_ns": np.full(n, 1_000_000, np.int64),
            "kind": ["kernel"] * n,
            "device": [f"GPU:{d:02d}" for d in range(n)],
            "stream": np.full(n, 7),
            "name": ["gemm"] * n,
        }
    )
    return chart_run(analyze(Profile(events=events, inputs=[])))


def test_timeline_is_one_band_per_device_then_a_heatmap():
    few = svg_charts.utilisation_timeline(_analysis(3))
    assert all(f"GPU:{d:02d}" in few for d in range(3)) and "<image" not in few
    assert all(few.count(f"<title>GPU:{d:02d}: busy ") == 1 for d in range(3))  # one band each, with its figures
    assert all(few.count(f"<title>GPU:{d:02d}: GPU-Util ") == 1 for d in range(3))
    many = svg_charts.utilisation_timeline(_analysis(svg_charts.MAX_TIMELINE_BANDS + 6))
    assert "<image" in many and "% busy" in many  # one raster row per device, and its colour scale
    assert ": busy " not in many
    png = base64.b64decode(re.search(r'href="data:image/png;base64,([^"]+)"', many)[1])
    width, height = struct.unpack(">II", png[16:24])
    assert png.startswith(b"\x89PNG") and (width, height) == (svg_charts.TIMELINE_BINS, 30)  # a pixel a device and bin


def _box(svg: str) -> list[float]:
    head = svg[svg.index("<svg") :]
    return [float(v) for v in re.search(r'viewBox="([^"]*)"', head[: head.index(">")])[1].split()]


def test_the_trend_chart_is_cropped_as_matplotlib_crops_it():
    """One draw, cropped from its own extents, gives the box matplotlib's ``bbox_inches="tight"`` (a layout draw,
    then the draw) gives: the same width and height, and everything drawn inside the view."""
    tight: list[str] = []
    cropped = charts._svg

    def saved_tight(fig, hovers=None):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
        tight.append(buffer.getvalue())
        return cropped(fig, hovers)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(charts, "_svg", saved_tight)
        svg = charts.trend_chart([_trend_row("a", 20, "input_bound"), _trend_row("b", 10, "launch_bound")])
    x, y, width, height = _box(svg)
    assert (x, y) != (0, 0)  # cropped: the figure's margins are not all on the axes' labels
    assert [width, height] == pytest.approx(_box(tight[0])[2:], abs=0.01)
