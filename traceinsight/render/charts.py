"""`traceinsight trend`'s chart, drawn with matplotlib as inline SVG (the report's charts are written directly:
`svg_charts`).

SVG keeps the report one self-contained file with no network requests, stays
sharp when printed, and keeps text as text. Labels that come from a trace (kernel
names) are escaped by matplotlib's SVG writer.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import Formatter  # noqa: E402

from traceinsight.render.format import (  # noqa: E402
    clip,
    escape_control,
    fmt_pct,
    fmt_tick,
    tick_decimals,
)
from traceinsight.render.svg_charts import FONT_SIZE, TimeAxis, ms_text, tick_every  # noqa: E402
from traceinsight.result import (  # noqa: E402
    RunSummary,
)

_STYLE: Any = {  # matplotlib rcParams (its stubs want literal keys)
    "svg.fonttype": "none",
    "text.parse_math": False,  # names from traces ("$a$", "node$x^$") are text, not formulas
    "font.size": FONT_SIZE,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "traceinsight",
    # No axis in scientific notation or with an offset ("1e6" above it): every numeric axis is given `_PlainTicks`
    # too; these keep any other one plain.
    "axes.formatter.useoffset": False,
    "axes.formatter.limits": (-30, 30),
}


class _PlainTicks(Formatter):
    """Tick labels as plain numbers: thousands separated, with the decimals the ticks' spacing needs, never
    '2e+06' nor an offset."""

    decimals = 0

    def set_locs(self, locs: Any) -> None:
        super().set_locs(locs)
        steps = np.diff(np.unique(np.asarray(locs, np.float64)))
        self.decimals = tick_decimals(float(steps.min())) if len(steps) else 0

    def __call__(self, x: float, pos: int | None = None) -> str:
        return fmt_tick(x, self.decimals)


def _plain(*axes: Any) -> None:
    """Plain tick labels (`_PlainTicks`) on each of these axes (`ax.xaxis`, `ax.yaxis`)."""
    for axis in axes:
        axis.set_major_formatter(_PlainTicks())


class _Hovers:
    """Text shown on hover: an SVG `<title>` in the group of each artist given one (no script needed)."""

    def __init__(self, chart: str) -> None:
        self.chart = chart
        self.titles: dict[str, str] = {}

    def add(self, artist: Any, text: str) -> None:
        gid = f"{self.chart}-hover-{len(self.titles)}"
        artist.set_gid(gid)
        self.titles[gid] = text

    def apply(self, svg: str) -> str:
        def titled(match: re.Match[str]) -> str:
            text = self.titles.get(match[1])
            return match[0] if text is None else f"{match[0]}<title>{html.escape(text)}</title>"

        return re.sub(r'<g id="([\w-]+)">', titled, svg)


_SVG_BOX = re.compile(r'width="[\d.]+pt" height="[\d.]+pt" viewBox="[^"]*"')


def _svg(fig: Any, hovers: _Hovers | None = None) -> str:
    """The figure as SVG, cropped to what it draws plus matplotlib's pad, as ``bbox_inches="tight"`` would crop
    it: but from the one draw's own extents (a `draw_event`), where ``bbox_inches`` lays the figure out in a
    draw of its own first, which took 40 % of a chart's time."""
    drawn: list[Any] = []
    fig.canvas.mpl_connect("draw_event", lambda event: drawn.append(fig.get_tightbbox(event.renderer)))
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    box = drawn[0].padded(plt.rcParams["savefig.pad_inches"])
    x, y, width, height = (v * 72 for v in (box.x0, fig.get_figheight() - box.y1, box.width, box.height))  # pt
    # What lies outside the figure's own white patch (a legend below the axes) is on white too, as when cropped.
    cropped = (
        f'width="{width:f}pt" height="{height:f}pt" viewBox="{x:f} {y:f} {width:f} {height:f}" style="background:#fff"'
    )
    text = _SVG_BOX.sub(cropped, text, count=1)
    return hovers.apply(text) if hovers else text


# `traceinsight trend`: one panel per figure, over the runs in their order (figures as `RunSummary` has them).
# (panel, axis label, `RunSummary` field, top of the axis: None, a little above the highest point).
TREND_PANELS = (
    ("steps", "mean step ({unit})", "mean_step_ns", None),  # the unit of the longest mean step
    ("gpu_util", "GPU-Util (%)", "gpu_util", 100.0),
    ("mfu", "MFU (%)", "mfu", None),
    ("input_wait", "input wait (% of step)", "input_wait_fraction", 100.0),
)
_TREND_LINE = "#1565c0"
_TREND_CHANGE = "#8e24aa"
TREND_LABEL_CHARS = 28


def _trend_value(row: RunSummary, attribute: str, time: TimeAxis) -> float | None:
    """A row's figure in its panel's unit: `time`'s for the step, % for the shares."""
    value = getattr(row, attribute)
    if value is None:
        return None
    return time.of(value) if attribute == "mean_step_ns" else value * 100


def _trend_title(row: RunSummary, label: str, attribute: str) -> str:
    """'run-7: mean step 22.4 ms; top bottleneck input_bound (high)'."""
    value = getattr(row, attribute)
    shown = ms_text(value) if attribute == "mean_step_ns" else fmt_pct(value)
    top = f"{row.top_bottleneck} ({row.top_severity})" if row.top_bottleneck else "none"
    return escape_control(f"{row.name}: {label.split(' (')[0]} {shown}; top bottleneck {top}")


def bottleneck_changes(rows: Sequence[RunSummary]) -> list[int]:
    """The positions of the runs whose top bottleneck differs from the run's before them."""
    return [i for i in range(1, len(rows)) if rows[i].top_bottleneck != rows[i - 1].top_bottleneck]


def trend_chart(rows: Sequence[RunSummary]) -> str | None:
    """Step time, GPU-Util, MFU and input-wait share over the runs, one small panel each on one run axis, each
    point titled with its run; a dashed line marks each run whose top bottleneck differs from the one before it
    (named at the top), so a jump in step time shows beside what changed. A panel no run has a figure for says so.
    Each panel's line has the id ``trend-<panel>-line``: its points are the runs' figures, in order."""
    if not rows:
        return None
    x = np.arange(len(rows))
    changes = bottleneck_changes(rows)
    time = TimeAxis(max(row.mean_step_ns or 0 for row in rows))
    hovers = _Hovers("trend")
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(len(TREND_PANELS), 1, figsize=(8, 1.7 * len(TREND_PANELS)), sharex=True)
        for ax, (panel, named, attribute, top_value) in zip(axes, TREND_PANELS, strict=True):
            label = named.format(unit=time.unit)
            values = [_trend_value(row, attribute, time) for row in rows]
            known = [(i, v) for i, v in enumerate(values) if v is not None]
            ax.set_ylabel(label)
            for i in changes:
                ax.axvline(i, color=_TREND_CHANGE, linestyle="--", linewidth=1)
            if not known:
                ax.text(0.5, 0.5, "no run has this figure", transform=ax.transAxes, ha="center", color="#666")
                ax.set_yticks([])
                continue
            y = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
            (line,) = ax.plot(x, y, color=_TREND_LINE, linewidth=1.5)
            line.set_gid(f"trend-{panel}-line")
            for i, v in known:
                point = ax.scatter([i], [v], s=24, color=_TREND_LINE, zorder=3, clip_on=False)
                hovers.add(point, _trend_title(rows[i], label, attribute))
            ax.set_ylim(0, top_value or max(v for _, v in known) * 1.15 or 1)
            _plain(ax.yaxis)
        top = axes[0]
        for i in [0, *changes]:
            before = f"{rows[i - 1].top_bottleneck or 'none'} -> " if i else ""
            mark = top.annotate(
                escape_control(rows[i].top_bottleneck or "none"),  # from saved reports: no glyph for a control
                (i, 1),
                xycoords=("data", "axes fraction"),
                xytext=(2, 2),
                textcoords="offset points",
                color=_TREND_CHANGE,
                rotation=20,
            )
            title = f"{rows[i].name}: top bottleneck {before}{rows[i].top_bottleneck or 'none'}"
            hovers.add(mark, escape_control(title))
        every = tick_every(len(rows))
        ticks = x[::every]
        labels = [escape_control(clip(rows[i].name, TREND_LABEL_CHARS)) for i in ticks]
        axes[-1].set_xticks(ticks, labels, rotation=30, ha="right")
        axes[-1].set_xlim(-0.5, len(rows) - 0.5)
        axes[-1].set_xlabel("run (dashed: the top bottleneck changes)")
        return _svg(fig, hovers)
