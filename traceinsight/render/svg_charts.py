"""The page's bar charts, ranks and roofline, written as SVG directly: bars, circles, ticks, a legend and hover
titles are all they have.

A matplotlib draw costs 30-150 ms a chart however little it shows (its tick and text machinery; the roofline's log
axes the most), after 0.3 s of importing it: these charts are written here in a few milliseconds, in the report's
own process, while the painter draws the others with matplotlib (`render/charts.py`: the timeline and the
memory). Every text from a trace is escaped here; a hover is an SVG ``<title>`` in the group of what it describes
(no script).
"""

from __future__ import annotations

import base64
import html
import math
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from traceinsight.render.chart_data import ChartRun, DeviceBusy, StepSpan, StepSpans
from traceinsight.render.format import (
    fmt_bytes,
    fmt_ns,
    fmt_pct,
    fmt_rate,
    fmt_tick,
    plural,
    tick_decimals,
    time_unit,
)
from traceinsight.render.wording import device_words, mfu_text
from traceinsight.result import (
    PART_WORDS,
    ComputeEfficiency,
    Memory,
    Rank,
    RooflineOp,
    RunReport,
    Step,
    StepMemory,
)
from traceinsight.rules import GPU_UTIL_TARGET, KERNEL_CLASSES

FONT_SIZE = 10  # in the drawings' units, points on the page as matplotlib's are: no chart text is smaller
_TEXT = FONT_SIZE  # the text of these charts, in the drawing's units: points on the page, as matplotlib's
_CHAR = 0.6 * _TEXT  # about a character's width in DejaVu Sans: room for labels and the legend
_WIDTH = 640  # pt on the page (853 px), as wide as the 9-inch figures matplotlib drew
MAX_STEP_BARS = 40  # past this many steps, the step chart's parts are areas, not a rectangle a step and part
MAX_TICK_LABELS = 20
BREAKDOWN_COLOURS = {
    "device_compute": "#2e7d32",
    "device_copy": "#1565c0",
    "host_runtime": "#8e24aa",
    "input_wait": "#d84315",
    "host_compute": "#f9a825",
    "idle": "#bdbdbd",
    # The ledger's parts (analysis/ledger.py): busy in greens and blues, idle causes in warm colours, unexplained grey.
    "compute": "#2e7d32",
    "collective_wait": "#6a1b9a",
    "collective_transfer": "#ab47bc",
    "copy_h2d": "#1565c0",
    "copy_d2h": "#42a5f5",
    "copy_d2d": "#0097a7",
    "copy_other": "#80deea",
    "graph_internal": "#9e9d24",
    "wait_outside_trace": "#795548",
    "blocking_wait": "#c62828",
    "host_launch": "#f9a825",
    "unexplained": "#bdbdbd",
}
_GAPS = "#d84315"
_SMALL_KERNELS, _KERNELS = "#ef6c00", "#1565c0"
MFU_COLOURS = ("#2e7d32", "#1565c0", "#6a1b9a", "#c62828")  # busy, compute share, efficiency (conv), MFU (roof)
# The critical path's groups (`analysis/critical_path.GROUPS`), in its order, coloured as the step breakdown's
# parts of the same kind: host work amber, launches purple, device compute green, copies blue, waits warm, idle grey.
PATH_GROUP_COLOURS = {
    "cpu": "#f9a825",
    "launch": "#8e24aa",
    "gpu_compute": "#2e7d32",
    "copy": "#1565c0",
    "collective": "#ab47bc",
    "rank_wait": "#6a1b9a",
    "input": "#d84315",
    "idle": "#bdbdbd",
}
_OTHER_GROUP = "#795548"  # a group this chart does not know (a newer analysis)


class TimeAxis:
    """A time axis's unit, chosen from the largest value it shows (`format.time_unit`): ns, \u00b5s, ms or s."""

    def __init__(self, largest_ns: float) -> None:
        self.scale, self.unit = time_unit(largest_ns)

    def of(self, ns: Any) -> Any:
        """`ns` (a number or a numpy array) in the axis's unit."""
        return ns / self.scale

    def text(self, ns: float) -> str:
        """'12.5 ms': a time in the axis's unit, for its labels."""
        return f"{ns / self.scale:,.1f} {self.unit}"


def tick_every(n: int) -> int:
    """Label every this many of `n` categories: at most `MAX_TICK_LABELS` labels."""
    return max(1, -(-n // MAX_TICK_LABELS))


def nice_tick(span: float, count: int = 6) -> float:
    """A round tick spacing (1, 2 or 5 times a power of ten) giving about `count` ticks over `span`."""
    raw = span / count if span > 0 else 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def _escaped(text: str) -> str:
    """Text from a trace for an element's content (a label, a title): <, >, &, " and ' escaped (' as &#39;, as the
    page's other escapes write it)."""
    return html.escape(text).replace("&#x27;", "&#39;")


def _text_width(text: str) -> float:
    return _CHAR * len(text)


class _Svg:
    """One chart's SVG elements; `hover` wraps one in a group titled with what it shows (``<chart>-hover-<n>``)."""

    def __init__(self, chart: str) -> None:
        self.chart = chart
        self.elements: list[str] = []
        self.hovers = 0

    def add(self, element: str) -> None:
        self.elements.append(element)

    def hover(self, element: str, title: str) -> None:
        gid = f"{self.chart}-hover-{self.hovers}"
        self.hovers += 1
        self.elements.append(f'<g id="{gid}"><title>{_escaped(title)}</title>{element}</g>')

    def text(self, x: float, y: float, text: str, anchor: str = "start", rotate: float = 0, fill: str = "") -> None:
        turn = f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"' if rotate else ""
        colour = f' fill="{fill}"' if fill else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{turn}{colour}>{_escaped(text)}</text>')

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#444") -> None:
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"/>')

    def legend(self, x: float, y: float, items: Sequence[tuple[str, str]], columns: int | None = None) -> float:
        """A colour box and its label per item, in rows of `columns` (one row: all); the y below it."""
        columns = columns or max(len(items), 1)
        step = 24 + max((_text_width(label) for label, _ in items), default=0) if columns < len(items) else 0
        at = x
        for i, (label, colour) in enumerate(items):
            if i and i % columns == 0:
                at, y = x, y + _TEXT + 6
            self.add(f'<rect x="{at:.1f}" y="{y - 10:.1f}" width="10" height="10" fill="{colour}"/>')
            self.text(at + 14, y - 1, label)
            at += step or 24 + _text_width(label)
        return y + _TEXT

    def svg(self, width: float, height: float) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}pt" height="{height:.0f}pt" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" style="background:#fff" '
            f'font-family="DejaVu Sans, sans-serif" font-size="{_TEXT}">'
        )
        return head + "".join(self.elements) + "</svg>"


class _Scale:
    """A linear axis from `low` to `high`, `length` px long, its ticks `nice_tick` apart (about `count` of them);
    `rounded`: its ends moved out to the ticks around them (a bar chart's axis from 0 to a round top)."""

    def __init__(self, low: float, high: float, length: float, rounded: bool = True, count: int = 6) -> None:
        self.tick = nice_tick(high - low, count)
        if rounded:
            low = math.floor(low / self.tick + 1e-9) * self.tick
            high = max(math.ceil(high / self.tick - 1e-9), math.floor(low / self.tick + 1e-9) + 1) * self.tick
        self.low, self.high, self.length = low, high if high > low else low + 1.0, length

    def px(self, value: float) -> float:
        return (value - self.low) / (self.high - self.low) * self.length

    def ticks(self) -> list[tuple[float, str]]:
        decimals = tick_decimals(self.tick)
        first, last = math.ceil(self.low / self.tick - 1e-9), math.floor(self.high / self.tick + 1e-9)
        return [(k * self.tick, fmt_tick(k * self.tick, decimals)) for k in range(first, last + 1)]


def _x_axis(svg: _Svg, scale: _Scale | _LogScale, left: float, bottom: float) -> None:
    """An axis under a plot from `left`: its line, ticks and plain labels."""
    svg.line(left, bottom, left + scale.length, bottom)
    for value, label in scale.ticks():
        svg.line(left + scale.px(value), bottom, left + scale.px(value), bottom + 4)
        svg.text(left + scale.px(value), bottom + 16, label, anchor="middle")


def _y_axis(svg: _Svg, scale: _Scale | _LogScale, left: float, bottom: float) -> None:
    """An axis left of a plot up from `bottom`: its line, ticks and plain labels."""
    svg.line(left, bottom - scale.length, left, bottom)
    for value, label in scale.ticks():
        svg.line(left - 4, bottom - scale.px(value), left, bottom - scale.px(value))
        svg.text(left - 6, bottom - scale.px(value) + 4, label, anchor="end")


class _Columns:
    """A column a category along the x axis, values up the y axis (`_Scale`): the frame of the column charts."""

    def __init__(
        self,
        svg: _Svg,
        categories: Sequence[str],
        high: float,
        y_label: str,
        x_label: str,
        rotate: float = 0,
        every: int = 1,
    ) -> None:
        self.top, self.height = 14.0, 170.0
        self.scale = _Scale(0, high, self.height)
        self.left = 38 + max(_text_width(label) for _, label in self.scale.ticks())  # the axis label, the ticks'
        self.width = _WIDTH - self.left - 12
        self.slot = self.width / max(len(categories), 1)
        self.svg = svg
        bottom = self.top + self.height
        _y_axis(svg, self.scale, self.left, bottom)
        svg.line(self.left, bottom, self.left + self.width, bottom)
        label_room = 0.0
        for i, name in enumerate(categories):
            if i % every:
                continue
            x = self.x(i)
            svg.line(x, bottom, x, bottom + 4)
            if rotate:
                svg.text(x, bottom + 14, name, anchor="end", rotate=-rotate)
                label_room = max(label_room, _text_width(name) * math.sin(math.radians(rotate)))
            else:
                svg.text(x, bottom + 16, name, anchor="middle")
        middle = self.top + self.height / 2
        svg.text(14, middle, y_label, anchor="middle", rotate=-90)
        baseline = bottom + 34 + label_room
        for line in x_label.split("\n"):
            svg.text(self.left + self.width / 2, baseline, line, anchor="middle")
            baseline += _TEXT + 3
        self.below = baseline - _TEXT + 6  # the first free y under the frame and its labels

    def x(self, i: float) -> float:
        """The centre of category `i` (fractions: between categories)."""
        return self.left + (i + 0.5) * self.slot

    def y(self, value: float) -> float:
        return self.top + self.height - self.scale.px(value)

    def column(self, i: int, low: float, high: float, fill: str, title: str, share: float = 0.8) -> None:
        """Category `i`'s column from `low` to `high` (a stacked part: from the parts below it), `share` of its slot
        wide."""
        width = self.slot * share
        top, bottom = self.y(high), self.y(low)
        rect = (
            f'<rect x="{self.x(i) - width / 2:.2f}" y="{top:.2f}" width="{width:.2f}" '
            f'height="{max(bottom - top, 0):.2f}" fill="{fill}"/>'
        )
        self.svg.hover(rect, title)


def gap_histogram(report: RunReport) -> str | None:
    """Idle time per gap-length bin, summed over devices."""
    devices = report.devices
    if not devices or not any(d.gaps.count for d in devices):
        return None
    labels = [b.label for b in devices[0].gaps.histogram]
    totals = [sum(d.gaps.histogram[i].total_ns for d in devices) for i in range(len(labels))]
    counts = [sum(d.gaps.histogram[i].count for d in devices) for i in range(len(labels))]
    time = TimeAxis(float(max(totals)))
    svg = _Svg("gaps")
    frame = _Columns(svg, labels, time.of(max(totals)) or 1.0, f"idle time ({time.unit})", "gap length")
    for i, (label, count, total) in enumerate(zip(labels, counts, totals, strict=True)):
        frame.column(i, 0, time.of(total), _GAPS, f"gaps {label}: {plural(count, 'gap')}, {fmt_ns(total)} idle")
        svg.text(frame.x(i), frame.y(time.of(total)) - 4, plural(count, "gap"), anchor="middle")
    return svg.svg(_WIDTH, frame.below)


def kernel_histogram(report: RunReport) -> str | None:
    """Kernel counts per duration bin, with the small-kernel threshold marked."""
    devices = [d for d in report.devices if d.kernels.count]
    if not devices:
        return None
    bins = devices[0].kernels.histogram
    counts = [sum(d.kernels.histogram[i].count for d in devices) for i in range(len(bins))]
    totals = [sum(d.kernels.histogram[i].total_ns for d in devices) for i in range(len(bins))]
    threshold = devices[0].kernels.small_threshold_ns
    small = [b.upper_ns is not None and b.upper_ns <= threshold for b in bins]
    svg = _Svg("kernels")
    x_label = f"kernel duration (orange: small kernels, below {fmt_ns(threshold)})"
    frame = _Columns(svg, [b.label for b in bins], max(counts) or 1, "kernels", x_label, rotate=20)
    for i, (b, count, total, is_small) in enumerate(zip(bins, counts, totals, small, strict=True)):
        kind = " (small)" if is_small else ""
        title = f"kernels {b.label}{kind}: {plural(count, 'kernel')}, {fmt_ns(total)} in all"
        frame.column(i, 0, count, _SMALL_KERNELS if is_small else _KERNELS, title)
    return svg.svg(_WIDTH, frame.below)


def step_breakdown(report: RunReport) -> str | None:
    """Stacked bars: where each step's time went (a stacked area a part past `MAX_STEP_BARS` steps, which would
    otherwise be hundreds of rectangles); parts no step has are left out."""
    items = report.steps.items
    if not items:
        return None
    every = list(items[0].breakdown)
    parts = [cat for cat in every if any(s.breakdown[cat] for s in items)] or every
    names = {cat: PART_WORDS.get(cat, cat.replace("_", " ")) for cat in parts}
    durations = [sum(s.breakdown.values()) for s in items]  # the parts sum to the step
    time = TimeAxis(max(durations))
    svg = _Svg("steps")
    labels = [str(s.id) for s in items]
    frame = _Columns(
        svg, labels, time.of(max(durations)) or 1.0, f"time ({time.unit})", "step", every=tick_every(len(items))
    )
    below = [0.0] * len(items)
    for cat in parts:
        values = [time.of(s.breakdown[cat]) for s in items]
        upper = [b + v for b, v in zip(below, values, strict=True)]
        colour = BREAKDOWN_COLOURS[cat]
        if len(items) > MAX_STEP_BARS:  # one area: each step's band from the parts below it, a step wide
            edge = [f"{frame.x(i + side):.2f},{frame.y(v):.2f}" for i, v in enumerate(upper) for side in (-0.5, 0.5)]
            back = [
                f"{frame.x(i + side):.2f},{frame.y(v):.2f}"
                for i, v in reversed(list(enumerate(below)))
                for side in (0.5, -0.5)
            ]
            total = sum(s.breakdown[cat] for s in items)
            title = f"{names[cat]}: {fmt_ns(total)} in {len(items)} steps, mean {fmt_ns(total / len(items))}"
            svg.hover(f'<path d="M{" L".join(edge + back)} Z" fill="{colour}"/>', title)
        else:
            for i, (step, v, length) in enumerate(zip(items, values, durations, strict=True)):
                ns = step.breakdown[cat]
                share = fmt_pct(ns / length if length else None)
                title = f"step {step.id}, {names[cat]}: {fmt_ns(ns)} ({share} of {fmt_ns(length)})"
                frame.column(i, below[i], below[i] + v, colour, title)
        below = upper
    end = svg.legend(frame.left, frame.below + _TEXT + 4, [(names[c], BREAKDOWN_COLOURS[c]) for c in parts], columns=3)
    return svg.svg(_WIDTH, end)


def mfu_chart(report: RunReport) -> str | None:
    """MFU's decomposition as bars on one 0-100 % scale: which of busy time, the share of it spent in arithmetic
    kernels and their speed against the peak takes MFU down."""
    c = report.compute
    shares = [v for v in (c.gpu_util, c.compute_share, c.compute_efficiency, c.mfu) if v is not None]
    if len(shares) < 4:
        return None
    window = "device-side step windows" if c.window == "device step" else "steps"
    util = device_words(report).util
    titles = (
        f"{util} {fmt_pct(c.gpu_util)}: some kernel runs in that share of the {window}",
        f"compute share {fmt_pct(c.compute_share)}: the share of that busy time in matmul, conv and attention kernels "
        "(and any other kernel whose FLOPs are counted)",
        f"their efficiency {fmt_pct(c.compute_efficiency)}: those kernels' counted FLOPs against the {c.device}'s "
        f"dense {c.dtype} peak ({fmt_rate(c.peak_tflops)} TFLOP/s) over their time",
        f"MFU {mfu_text(c)} = {fmt_pct(c.gpu_util)} x {fmt_pct(c.compute_share)} x {fmt_pct(c.compute_efficiency)}",
    )
    labels = [util, "x compute share", "x their efficiency", "= MFU"]
    svg = _Svg("mfu")
    left = 12 + max(_text_width(label) for label in labels)
    width, row, bar = _WIDTH - left - 60, 26.0, 16.0
    scale = _Scale(0, 100, width, rounded=False, count=5)
    bottom = 8 + row * len(shares)
    for k, (label, share, colour, title) in enumerate(zip(labels, shares, MFU_COLOURS, titles, strict=True)):
        y = 8 + k * row + (row - bar) / 2
        svg.add(f'<rect x="{left:.1f}" y="{y:.1f}" width="{width:.1f}" height="{bar}" fill="#eeeeee"/>')
        rect = f'<rect x="{left:.1f}" y="{y:.1f}" width="{scale.px(share * 100):.2f}" height="{bar}" fill="{colour}"/>'
        svg.hover(rect, title)
        svg.text(left + scale.px(share * 100) + 4, y + bar - 3, fmt_pct(share))
        svg.text(left - 6, y + bar - 3, label, anchor="end")
    _x_axis(svg, scale, left, bottom)
    svg.text(left + width / 2, bottom + 34, f"% (MFU = {util} x compute share x their efficiency)", anchor="middle")
    return svg.svg(_WIDTH, bottom + 42)


CLASS_COLOURS = dict(
    zip(KERNEL_CLASSES, ("#1565c0", "#6a1b9a", "#2e7d32", "#ef6c00", "#00838f", "#8d6e63", "#757575"), strict=True)
)
_ROOF = "#c62828"
_POINT_AREA = (30.0, 600.0)  # px^2 of the shortest and the longest op's circle


def _colour(op_class: str) -> str:
    return CLASS_COLOURS.get(op_class, CLASS_COLOURS["other"])


def _placed(op: RooflineOp) -> bool:
    """Whether an op has a place on the roofline: FLOPs, bytes and time all known and positive (log axes)."""
    return op.flops > 0 and op.time_ns > 0 and op.bytes is not None and op.bytes > 0


def _op_title(op: RooflineOp) -> str:
    share = f", {fmt_pct(op.roofline_fraction)} of its roofline" if op.roofline_fraction is not None else ""
    bound = f", {op.bound}-bound" if op.bound else ""
    return (
        f"{op.name} ({op.op_class}, {op.dtype or 'dtype unknown'}): {fmt_rate(op.tflops)} TFLOP/s, "
        f"{fmt_rate(op.tbps)} TB/s, "
        f"{fmt_rate(op.intensity)} FLOP/byte{bound}{share}; {plural(op.calls, 'call')}, {fmt_ns(op.time_ns)}"
    )


class _LogScale:
    """A log axis from `low` to `high`, `length` px long: ticks at 1, 2 and 5 of each decade where it spans few
    decades (else one a decade, which would leave two labels), labelled as plain numbers (1,000, not 10^3)."""

    def __init__(self, low: float, high: float, length: float) -> None:
        self.low, self.high, self.length = math.log10(low), math.log10(high), length

    def px(self, value: float) -> float:
        return (math.log10(value) - self.low) / (self.high - self.low) * self.length

    def ticks(self) -> list[tuple[float, str]]:
        subs = (1, 2, 5) if self.high - self.low <= 3 else (1,)
        decades = range(math.floor(self.low), math.ceil(self.high) + 1)
        values = [m * 10.0**d for d in decades for m in subs]
        return [(v, fmt_tick(v, tick_decimals(v))) for v in values if self.low <= math.log10(v) <= self.high + 1e-9]


def _roof(svg: _Svg, c: ComputeEfficiency, x: _LogScale, y: _LogScale, at: tuple[float, float]) -> None:
    """The device's roofline for the run's dtype: bandwidth x intensity up to the flat peak, across the x axis,
    with its two labels; `at`: the plot's left and bottom (px)."""
    if c.peak_tflops is None or c.memory_tbps is None:
        return
    left, bottom = at
    low, high = 10**x.low, 10**x.high
    ridge = c.peak_tflops / c.memory_tbps
    xs = [low, ridge, high] if low < ridge < high else [low, high]
    points = [(left + x.px(v), bottom - y.px(min(c.memory_tbps * v, c.peak_tflops))) for v in xs]
    line = " ".join(f"{px:.2f},{py:.2f}" for px, py in points)
    title = (
        f"{c.device} roofline, {c.dtype}: {fmt_rate(c.memory_tbps)} TB/s x FLOP/byte up to the dense peak "
        f"{fmt_rate(c.peak_tflops)} TFLOP/s (ridge at {fmt_rate(ridge)} FLOP/byte); {c.peak_source}"
    )
    svg.hover(f'<polyline points="{line}" fill="none" stroke="{_ROOF}" stroke-width="1.5"/>', title)
    svg.text(
        left + x.px(ridge),
        bottom - y.px(c.peak_tflops) - 6,
        f"{c.dtype} peak {fmt_rate(c.peak_tflops)} TFLOP/s",
        anchor="end",
        fill=_ROOF,
    )
    slope = (low * 1.5, c.memory_tbps * low * 1.5)
    svg.text(left + x.px(slope[0]) + 4, bottom - y.px(slope[1]) + 14, f"{fmt_rate(c.memory_tbps)} TB/s", fill=_ROOF)


def roofline(report: RunReport) -> str | None:
    """Each counted op with FLOPs and bytes at its arithmetic intensity and achieved TFLOP/s (a circle sized by its
    kernel time, coloured by its class) under the device's roofline for the run's dtype, where the device is known:
    how far each op is from what the hardware allows, and whether bandwidth or arithmetic bounds it."""
    c = report.compute
    placed = [op for op in c.ops if _placed(op)]
    if not placed:
        return None
    xs = [op.flops / op.bytes for op in placed if op.bytes]
    ys = [op.flops / op.time_ns / 1e3 for op in placed]  # FLOP per ns = 1e-3 TFLOP/s
    longest = max(op.time_ns for op in placed)
    smallest, largest = _POINT_AREA
    ridge = [c.peak_tflops / c.memory_tbps] if c.peak_tflops and c.memory_tbps else []
    top = max([*ys, *([c.peak_tflops] if ridge and c.peak_tflops else [])])
    svg = _Svg("roofline")
    height = 220.0
    y = _LogScale(min(ys) / 4, top * 3, height)
    left, plot_top = 38 + max(_text_width(label) for _, label in y.ticks()), 30.0
    x = _LogScale(min([*xs, *ridge]) / 4, max([*xs, *ridge]) * 4, _WIDTH - left - 12)
    bottom = plot_top + height
    _y_axis(svg, y, left, bottom)
    _x_axis(svg, x, left, bottom)
    _roof(svg, c, x, y, (left, bottom))
    for op, xi, yi in zip(placed, xs, ys, strict=True):
        radius = math.sqrt(smallest + (largest - smallest) * op.time_ns / longest) / 2
        circle = (
            f'<circle cx="{left + x.px(xi):.2f}" cy="{bottom - y.px(yi):.2f}" r="{radius:.2f}" '
            f'fill="{_colour(op.op_class)}" fill-opacity="0.6" stroke="#333"/>'
        )
        svg.hover(circle, _op_title(op))
    classes = dict.fromkeys(op.op_class for op in placed)  # one legend entry a class
    svg.legend(left + 8, plot_top - 8, [(name, _colour(name)) for name in classes])
    unplaced = sum(1 for op in c.ops if op.flops > 0 and not _placed(op))
    missing = f"; {plural(unplaced, 'op')} without bytes not placed" if unplaced else ""
    svg.text(
        left + x.length / 2,
        bottom + 34,
        f"arithmetic intensity (FLOP/byte), circles sized by kernel time{missing}",
        anchor="middle",
    )
    if not ridge:
        svg.text(
            left + x.length / 2,
            bottom + 49,
            "no roofline: the device or its peak is not in the hardware table",
            anchor="middle",
        )
    svg.text(14, plot_top + height / 2, "achieved TFLOP/s", anchor="middle", rotate=-90)
    return svg.svg(_WIDTH, bottom + (56 if ridge else 71))


# The ranks chart's measures: (name, colour, what a hover says it is).
RANK_MEASURES = (
    ("wait", "#d84315", "inside collectives, waiting for later ranks"),
    ("transfer", "#1565c0", "the collectives' own transfers"),
    ("late", "#8e24aa", "arriving at collectives after the first rank"),
)
MAX_RANK_ROWS = 64  # ranks past this share the chart's height (a run of hundreds stays one small drawing)


def _rank_values(rank: Rank, per_step: bool) -> list[int]:
    """A rank's wait, transfer and lateness (ns): a step, or over the capture."""
    wait, transfer, late = rank.wait_ns or 0, rank.transfer_ns or 0, rank.late_ns or 0
    if not per_step:
        return [wait, transfer, late]
    return [rank.wait_per_step_ns or 0, rank.transfer_per_step_ns or 0, rank.late_per_step_ns or 0]


def ranks_chart(report: RunReport) -> str | None:
    """Per rank, how long it waits in collectives, transfers and arrives late, a step (over the capture where a rank
    has no steps), as grouped horizontal bars: the ranks that wait and the one they wait for side by side."""
    ranks = [r for r in report.ranks.items if r.wait_ns is not None] if report.ranks else []
    if not ranks:
        return None
    per_step = all(r.wait_per_step_ns is not None and r.late_per_step_ns is not None and r.steps.count for r in ranks)
    when = "a step" if per_step else "over the capture"
    values = [_rank_values(r, per_step) for r in ranks]
    time = TimeAxis(max(max(v) for v in values))
    row = 36.0 * min(len(ranks), MAX_RANK_ROWS) / len(ranks)  # px a rank
    bar = row * 0.8 / len(RANK_MEASURES)
    left = 12 + max(_text_width(r.label) for r in ranks)
    top = 30.0
    scale = _Scale(0, time.of(max(max(v) for v in values)) or 1.0, _WIDTH - left - 16)
    bottom = top + row * len(ranks)
    svg = _Svg("ranks")
    svg.legend(left, top - 10, [(measure, colour) for measure, colour, _ in RANK_MEASURES])
    every = tick_every(len(ranks))
    for i, (rank, ns_of) in enumerate(zip(ranks, values, strict=True)):  # the first rank on top, wait on top
        y = top + i * row + row * 0.1
        for k, ((measure, colour, meaning), ns) in enumerate(zip(RANK_MEASURES, ns_of, strict=True)):
            rect = (
                f'<rect x="{left:.1f}" y="{y + k * bar:.2f}" width="{scale.px(time.of(ns)):.2f}" '
                f'height="{bar:.2f}" fill="{colour}"/>'
            )
            svg.hover(rect, f"{rank.label}: {measure} {fmt_ns(ns)} {when} ({meaning})")
        if i % every == 0:
            svg.text(left - 6, top + (i + 0.5) * row + 4, rank.label, anchor="end")
    svg.line(left, top, left, bottom)
    _x_axis(svg, scale, left, bottom)
    svg.text(left + scale.length / 2, bottom + 34, f"{time.unit} {when}", anchor="middle")
    return svg.svg(_WIDTH, bottom + 42)


def critical_path_chart(report: RunReport) -> str | None:
    """Per step, what its critical path is made of: a horizontal bar a step (the first on top), stacked by group,
    in the unit of its longest step; past `MAX_STEP_BARS` steps, the longest of them (in step order)."""
    steps = report.critical_path.steps
    if not steps:
        return None
    shown = (
        sorted(sorted(steps, key=lambda s: -s.step_ns)[:MAX_STEP_BARS], key=lambda s: s.id)
        if len(steps) > MAX_STEP_BARS
        else list(steps)
    )
    seen = {g for s in shown for g, ns in s.groups.items() if ns}
    groups = [g for g in PATH_GROUP_COLOURS if g in seen] + sorted(seen - PATH_GROUP_COLOURS.keys())
    left, right, top, row, bar = 64, 16, 30, 20, 14
    time = TimeAxis(max(s.step_ns for s in shown))
    scale = _Scale(0, time.of(max(s.step_ns for s in shown)) or 1.0, _WIDTH - left - right)
    bottom = top + row * len(shown)
    svg = _Svg("critical_path")
    svg.legend(left, 18, [(g.replace("_", " "), PATH_GROUP_COLOURS.get(g, _OTHER_GROUP)) for g in groups])
    every = tick_every(len(shown))
    for i, step in enumerate(shown):
        y = top + i * row
        if i % every == 0:
            svg.text(left - 6, y + bar - 3, str(step.id), anchor="end")
        along = 0.0  # where the next group starts, in the axis's unit
        for group in groups:
            ns = step.groups.get(group, 0)
            if not ns:
                continue
            share = fmt_pct(ns / step.step_ns if step.step_ns else None)
            title = f"step {step.id}, {group}: {fmt_ns(ns)} ({share} of {fmt_ns(step.step_ns)})"
            colour = PATH_GROUP_COLOURS.get(group, _OTHER_GROUP)
            svg.add(
                f'<rect x="{left + scale.px(along):.2f}" y="{y}" width="{scale.px(time.of(ns)):.2f}" height="{bar}" '
                f'fill="{colour}"><title>{_escaped(title)}</title></rect>'
            )
            along += time.of(ns)
    _x_axis(svg, scale, left, bottom)
    step_label = "step" if len(shown) == len(steps) else f"step ({len(shown)} longest of {len(steps)})"
    svg.text((left + _WIDTH - right) / 2, bottom + 34, f"time on the critical path ({time.unit})", anchor="middle")
    svg.text(12, (top + bottom) / 2, step_label, anchor="middle", rotate=-90)
    return svg.svg(_WIDTH, bottom + 44)


TIMELINE_BINS = 200
MAX_TIMELINE_BANDS = 24
_BUSY = "#2e7d32"
_TARGET = "#1565c0"
# The timeline shows the span that holds this share of the devices' busy time (and every step), not empty capture.
TIMELINE_BUSY_SHARE = 0.99
_ZOOM_GRID = 4000
ZOOM_AT_MOST = 0.9  # a zoom that would keep more of the window than this shows the whole window
_BAND = 0.85  # a band's height at 100 %, in rows


def ms_text(ns: float) -> str:
    """'12.5 ms': a time in ms, for hovers."""
    return f"{ns / 1e6:,.1f} ms"


def _zoom(run: ChartRun) -> tuple[int, int]:
    """The time range worth drawing: where each device's busy time is (all of it but a straggling
    `1 - TIMELINE_BUSY_SHARE`), widened to every step, padded a little; the whole window when that is
    most of it. A device with a little work far from the rest still shows it."""
    start, end = run.window_start_ns or 0, run.window_end_ns or (run.window_start_ns or 0) + 1
    grid = np.linspace(start, end, _ZOOM_GRID + 1).astype(np.int64)
    lows, highs = [], []
    for usage in run.devices:
        busy = usage.busy.covered_before(grid).astype(np.float64)
        if busy[-1] > 0:
            tail = (1 - TIMELINE_BUSY_SHARE) / 2 * busy[-1]
            lows.append(int(grid[max(0, np.searchsorted(busy, tail, side="left") - 1)]))
            highs.append(int(grid[min(_ZOOM_GRID, np.searchsorted(busy, busy[-1] - tail, side="left") + 1)]))
    steps = [s for steps in run.input_steps or [run.steps] for s in steps.items] + list(run.steps.items)
    lows += [s.start_ns for s in steps]
    highs += [s.start_ns + s.dur_ns for s in steps]
    if not lows:
        return start, end
    low, high = min(lows), max(highs)
    pad = (high - low) // 50
    low, high = max(start, low - pad), min(end, high + pad + 1)
    return (start, end) if high - low >= ZOOM_AT_MOST * (end - start) else (low, high)


def _device_steps(run: ChartRun, usage: DeviceBusy) -> StepSpans:
    """The steps drawn in a device's band: its own input's steps where each input has its own, else the run's."""
    inputs = run.input_steps
    if 0 <= usage.input_id < len(inputs) and inputs[usage.input_id].items:
        return inputs[usage.input_id]
    return run.steps


def _steps_title(device: str, steps: StepSpans, origin: int) -> str:
    items = steps.items
    listed = ", ".join(f"step {s.id} at {ms_text(s.start_ns - origin)} ({fmt_ns(s.dur_ns)})" for s in items[:8])
    more = f", and {len(items) - 8} more" if len(items) > 8 else ""
    return f"{device}: {plural(len(items), 'step')} ({steps.marker}): {listed}{more}"


MEMORY_OFF_SCALE = 5  # a capacity more than this many times the peak is a note, not a line (the levels stay readable)
MAX_MEMORY_PANELS = 8  # past this many devices with memory, the ones whose peak is highest are drawn
_ALLOCATED = "#6a1b9a"
_RESERVED = "#f9a825"
_CAPACITY = "#c62828"


def _bytes_unit(high: float) -> tuple[float, str]:
    return (float(1 << 30), "GiB") if high >= 1 << 30 else (float(1 << 20), "MiB")


def _step_split(step: StepMemory) -> str:
    """A step's memory: what it kept, its peak, what it needed on top."""
    static, peak, transient = (fmt_bytes(n) for n in (step.static_bytes, step.peak_bytes, step.transient_bytes))
    return f"static {static}, peak {peak}, transient {transient}"


def _memory_steps(report: RunReport, run: ChartRun, device: str, ids: set[int]) -> list[StepSpan] | list[Step]:
    """The steps a device's memory was split by (its input's own steps, else the run's)."""
    input_id = run.memory_inputs.get(device, -1)
    if 0 <= input_id < len(run.input_steps) and run.input_steps[input_id].items:
        return [s for s in run.input_steps[input_id].items if s.id in ids]
    return [s for s in report.steps.items if s.id in ids]


def _png(rgb: np.ndarray) -> str:
    """An RGB image (rows x columns x 3, uint8) as a PNG data URI: the heatmap's pixels, one a device and time bin."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    height, width = rgb.shape[:2]
    raw = b"".join(b"\x00" + row.tobytes() for row in rgb)  # each row unfiltered
    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


# The heatmap's colours from 0 to 100 % busy (matplotlib's "Greens" at 0, 50 and 100 %).
_GREENS = np.array([[247, 252, 245], [116, 196, 118], [0, 68, 27]], np.float64)


def _greens(share: np.ndarray) -> np.ndarray:
    """Busy shares (0-1) as RGB, between `_GREENS`' stops."""
    at = np.clip(share, 0, 1) * (len(_GREENS) - 1)
    low = np.minimum(at.astype(np.int64), len(_GREENS) - 2)
    weight = (at - low)[..., None]
    return np.rint(_GREENS[low] * (1 - weight) + _GREENS[low + 1] * weight).astype(np.uint8)


def _marks(xs: Sequence[float], y1: float, y2: float, width: float = 0.8) -> str:
    """Dotted vertical lines at `xs` px from `y1` to `y2`, one group: the step starts."""
    lines = "".join(f'<line x1="{x:.2f}" y1="{y1:.1f}" x2="{x:.2f}" y2="{y2:.1f}"/>' for x in xs)
    return f'<g stroke="#555" stroke-width="{width:g}" stroke-dasharray="1,2">{lines}</g>'


def _hline(x1: float, x2: float, y: float, colour: str, dash: str = "") -> str:
    """A level across a plot (1.2 px; `dash`: an SVG dash pattern, "" for a solid line)."""
    pattern = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{x1:.1f}" y1="{y:.2f}" x2="{x2:.1f}" y2="{y:.2f}" stroke="{colour}" stroke-width="1.2"{pattern}/>'
    )


def _label_lines(svg: _Svg, x: float, y: float, lines: Sequence[str]) -> float:
    """Centred lines of text from baseline `y` down; the baseline after them."""
    for line in lines:
        svg.text(x, y, line, anchor="middle")
        y += _TEXT + 3
    return y


def utilisation_timeline(run: ChartRun, word: str = "GPU-Util") -> str | None:
    """Busy share over time per device, each device's `word` (GPU-Util, TPU-Util) against the 80-90 % target,
    and its steps, in one plot zoomed to the activity: a band per device, or a heatmap past `MAX_TIMELINE_BANDS`
    devices (a run of hundreds of ranks stays one small drawing)."""
    if not run.devices or run.window_start_ns is None:
        return None
    origin = run.window_start_ns
    start, end = _zoom(run)
    time = TimeAxis(end - origin)
    edges = np.linspace(start, end, TIMELINE_BINS + 1).astype(np.int64)
    busy = np.array([np.diff(u.busy.covered_before(edges)) / np.maximum(np.diff(edges), 1) for u in run.devices])
    rows = len(run.devices)
    low, high = GPU_UTIL_TARGET
    bands = rows <= MAX_TIMELINE_BANDS
    labels = [[u.id, f"{word} {fmt_pct(u.gpu_util)}"] if bands else [u.id] for u in run.devices]
    left = 12 + max(_text_width(line) for lines in labels for line in lines)
    top, row = 10.0, (40.0 if bands else 260.0 / min(rows, 64))
    bottom = top + row * rows
    x = _Scale(time.of(start - origin), time.of(end - origin), _WIDTH - left - (16 if bands else 70), rounded=False)
    bin_px = x.length / TIMELINE_BINS

    def starts(items: Sequence[StepSpan]) -> list[float]:
        """The step starts inside the zoom, in px."""
        return [left + x.px(time.of(s.start_ns - origin)) for s in items if start <= s.start_ns <= end]

    svg = _Svg("timeline")
    if bands:
        for i, (usage, share) in enumerate(zip(run.devices, busy, strict=True)):
            base = top + (i + 1) * row  # the band's bottom, the first device on top
            y_low, y_high = base - row * _BAND * low, base - row * _BAND * high
            strip = (
                f'<rect x="{left:.1f}" y="{y_high:.2f}" width="{x.length:.1f}" height="{y_low - y_high:.2f}" '
                f'fill="{_TARGET}" fill-opacity="0.12"/>'
            )
            svg.hover(strip, f"{usage.id}: the target practitioners aim {word} at, {low * 100:.0f}-{fmt_pct(high, 0)}")
            outline = " ".join(
                f"{left + k * bin_px:.2f},{base - row * _BAND * v:.2f} {left + (k + 1) * bin_px:.2f},"
                f"{base - row * _BAND * v:.2f}"
                for k, v in enumerate(share.tolist())
            )
            band = (
                f'<polygon points="{left:.2f},{base:.2f} {outline} {left + x.length:.2f},{base:.2f}" fill="{_BUSY}"/>'
            )
            span = fmt_pct(usage.busy_ns / usage.span_ns if usage.span_ns else None)
            svg.hover(
                band,
                f"{usage.id}: busy {span} of its span ({fmt_ns(usage.busy_ns)} of {fmt_ns(usage.span_ns)}); "
                f"busiest bin {fmt_pct(float(share.max()))}",
            )
            if usage.gpu_util is not None:
                y = base - row * _BAND * usage.gpu_util
                svg.hover(
                    _hline(left, left + x.length, y, _TARGET, "5,3"),
                    f"{usage.id}: {word} {fmt_pct(usage.gpu_util)} (kernels running, over its steps)",
                )
            steps = _device_steps(run, usage)
            if steps.items:
                svg.hover(_marks(starts(steps.items), base - row, base), _steps_title(usage.id, steps, origin))
            svg.text(left - 6, base - row / 2 - 2, labels[i][0], anchor="end")
            svg.text(left - 6, base - row / 2 + _TEXT - 1, labels[i][1], anchor="end")
        note: tuple[str, ...] = (
            f"green: % busy per time bin; dashed: {word} over the device's steps;",
            f"blue strip: the {low * 100:.0f}-{fmt_pct(high, 0)} {word} target; dotted: step starts",
        )
    else:
        image = f'<image x="{left:.1f}" y="{top:.1f}" width="{x.length:.1f}" height="{bottom - top:.1f}" '
        image += f'preserveAspectRatio="none" style="image-rendering:pixelated" href="{_png(_greens(busy))}"/>'
        svg.hover(image, f"% busy per device and time bin, {rows} devices")
        for i in range(0, rows, max(1, rows // 16)):
            svg.text(left - 6, top + (i + 0.5) * row + 4, labels[i][0], anchor="end")
        svg.hover(_marks(starts(run.steps.items), top, bottom, 0.6), _steps_title("run", run.steps, origin))
        scale_x = left + x.length + 14
        svg.add(
            '<defs><linearGradient id="timeline-greens" x1="0" y1="1" x2="0" y2="0">'
            + "".join(
                f'<stop offset="{k / 2:g}" stop-color="rgb({r:.0f},{g:.0f},{b:.0f})"/>'
                for k, (r, g, b) in enumerate(_GREENS)
            )
            + "</linearGradient></defs>"
        )
        svg.add(
            f'<rect x="{scale_x:.1f}" y="{top:.1f}" width="10" height="{bottom - top:.1f}" '
            'fill="url(#timeline-greens)"/>'
        )
        svg.text(scale_x + 14, top + 10, "100")
        svg.text(scale_x + 14, bottom, "0")
        svg.text(scale_x + 14, (top + bottom) / 2, "% busy")
        note = ("colour: % busy, one row per device; dotted: step starts",)
    _x_axis(svg, x, left, bottom)
    window = (run.window_end_ns or origin) - origin
    zoomed = end - start < window
    span = f"{time.text(start - origin)} - {time.text(end - origin)}"
    where = f", zoomed to {span} of the {time.text(window)} window" if zoomed else ""
    lines = [f"{time.unit} after window start (the gap table's clock){where}", *note]
    end_y = _label_lines(svg, left + x.length / 2, bottom + 34, lines)
    return svg.svg(_WIDTH, end_y - _TEXT + 6)


def _memory_limits(
    svg: _Svg,
    name: str,
    m: Memory,
    high: float,
    plot: tuple[float, float, float],
    py: Callable[[float], float],
    unit_bytes: float,
) -> None:
    """The capacity and the allocator's limit (absolute levels only) across the panel at `plot` (left, top,
    width), at `py(bytes / unit_bytes)` px: a line each, or, when far above the levels (`MEMORY_OFF_SCALE`), a note
    at its top saying where."""
    given = [("capacity", m.capacity_bytes, ""), ("allocator limit", m.allocator_limit_bytes, "6,3")]
    limits = [(label, v, dash) for label, v, dash in given if v is not None and v > 0 and m.absolute]
    if not limits:
        return
    left, top, width = plot
    free = f", {fmt_pct(m.headroom_fraction)} free at the peak" if m.headroom_fraction is not None else ""
    titles = {"capacity": f"{name}: capacity {fmt_bytes(m.capacity_bytes)}{free}"}
    titles["allocator limit"] = f"{name}: the allocator's limit {fmt_bytes(m.allocator_limit_bytes)}"
    if max(v for _, v, _ in limits) <= MEMORY_OFF_SCALE * high:
        for label, value, dash in limits:
            y = py(value / unit_bytes)
            svg.hover(_hline(left, left + width, y, _CAPACITY, dash), titles[label])
        return
    words = "; ".join(f"{label} {fmt_bytes(v)}" for label, v, _ in limits)
    note = f'<text x="{left + width - 4:.1f}" y="{top + _TEXT:.1f}" text-anchor="end" fill="{_CAPACITY}">'
    note += f"{_escaped(f'↑ {words} (off the scale){free}')}</text>"
    svg.hover(note, "; ".join(titles[label] for label, _, _ in limits))


def _memory_top(m: Memory, high: float) -> float:
    """The highest level a panel shows: its levels, and the limits drawn as lines (else room for their note)."""
    limits = [v for v in (m.capacity_bytes, m.allocator_limit_bytes) if v is not None and v > 0 and m.absolute]
    if not limits:
        return high
    return max([high, *limits]) if max(limits) <= MEMORY_OFF_SCALE * high else high * 1.2


def _steps_path(
    x: Sequence[float], y: Sequence[float], px: Callable[[float], float], py: Callable[[float], float]
) -> str:
    """Points as a step line held until the next point ("post"), in px."""
    xs, ys = [px(v) for v in x], [py(v) for v in y]
    corners = [f"{a:.2f},{b:.2f} {c:.2f},{b:.2f}" for a, b, c in zip(xs, ys, xs[1:] + xs[-1:], strict=True)]
    return " ".join(corners)


def memory_chart(report: RunReport, run: ChartRun) -> str | None:
    """Device memory over time, a panel per device with memory events: allocated (and reserved where known),
    the capacity and the allocator's limit, the steps and the peak; x in time after the window start."""
    panels = [(d.id, d.memory) for d in report.devices if d.memory is not None and d.memory.series.ts_ns]
    if not panels:
        return None
    shown = sorted(panels, key=lambda panel: -panel[1].peak_in_use_bytes)[:MAX_MEMORY_PANELS]
    shown = [panel for panel in panels if panel in shown]  # in the report's order
    origin = report.window.start_ns or 0
    time = TimeAxis(max(max(m.series.ts_ns) for _, m in shown) - origin)
    labels = []
    for name, m in shown:
        levels = [
            max(m.series.allocated),
            m.peak_in_use_bytes,
            *([max(m.series.reserved)] if m.series.reserved else []),
        ]
        labels.append((name, _bytes_unit(max(levels)), levels))
    height, gap, top = 110.0, 18.0, 30.0
    scales = [
        _Scale(
            min(0.0, min(m.series.allocated) / unit[0]), _memory_top(m, max(levels)) / unit[0] * 1.1, height, False, 4
        )
        for (_, m), (_, unit, levels) in zip(shown, labels, strict=True)
    ]
    left = 38 + max(_text_width(label) for y in scales for _, label in y.ticks())
    x = _Scale(0, time.of(max(max(m.series.ts_ns) for _, m in shown) - origin) or 1.0, _WIDTH - left - 16)
    svg = _Svg("memory")
    kinds = {"allocated": _ALLOCATED}
    for k, ((name, m), (_, (scale_bytes, unit), levels), y) in enumerate(zip(shown, labels, scales, strict=True)):
        series = m.series
        panel_top = top + k * (height + gap)
        bottom = panel_top + height
        xs = [time.of(t - origin) for t in series.ts_ns]
        allocated = [v / scale_bytes for v in series.allocated]
        high = max(levels)

        def px(v: float) -> float:
            return left + x.px(v)

        def py(v: float, y: _Scale = y, bottom: float = bottom) -> float:
            return bottom - y.px(v)

        relative = "" if m.absolute else " (relative to the profile start)"
        line = _steps_path(xs, allocated, px, py)
        floor = f"{px(xs[-1]):.2f},{py(0):.2f} {px(xs[0]):.2f},{py(0):.2f}"
        area = f'<polygon points="{line} {floor}" fill="{_ALLOCATED}" fill-opacity="0.35"/>'
        svg.hover(area, f"{name}: allocated{relative}, peak {fmt_bytes(m.peak_allocated_bytes)}")
        svg.hover(
            f'<polyline points="{line}" fill="none" stroke="{_ALLOCATED}"/>',
            f"{name}: allocated over time, {plural(len(xs), 'point')}",
        )
        if series.reserved is not None:
            held = _steps_path(xs, [v / scale_bytes for v in series.reserved], px, py)
            svg.hover(
                f'<polyline points="{held}" fill="none" stroke="{_RESERVED}" stroke-width="1.2"/>',
                f"{name}: reserved{relative}, peak {fmt_bytes(m.peak_reserved_bytes)}",
            )
            kinds["reserved"] = _RESERVED
        _memory_limits(svg, name, m, high, (left, panel_top, x.length), py, scale_bytes)
        drawn = [v for v in (m.capacity_bytes, m.allocator_limit_bytes) if v is not None and v > 0 and m.absolute]
        if drawn and max(drawn) <= MEMORY_OFF_SCALE * high:
            kinds["capacity"] = _CAPACITY
        by_id = {s.id: s for s in m.steps}
        steps = _memory_steps(report, run, name, set(by_id))
        if steps:
            marks = _marks([px(time.of(s.start_ns - origin)) for s in steps], panel_top, bottom)
            listed = "; ".join(
                f"step {s.id} at {ms_text(s.start_ns - origin)}: {_step_split(by_id[s.id])}" for s in steps[:8]
            )
            more = f"; and {len(steps) - 8} more" if len(steps) > 8 else ""
            svg.hover(
                marks,
                f"{name}: {plural(len(steps), 'step')}: {listed}{more}",
            )
        at, level = px(time.of(m.peak_ns - origin)), py(m.peak_in_use_bytes / scale_bytes)
        corners = f"{at - 5:.2f},{level - 8:.2f} {at + 5:.2f},{level - 8:.2f} {at:.2f},{level:.2f}"
        marker = f'<polygon points="{corners}" fill="{_CAPACITY}"/>'  # a triangle pointing down at the peak
        in_step = f", step {m.peak_step}" if m.peak_step is not None else ""
        svg.hover(
            marker, f"{name}: peak {fmt_bytes(m.peak_in_use_bytes)}{relative} at {ms_text(m.peak_ns - origin)}{in_step}"
        )
        _y_axis(svg, y, left, bottom)
        svg.line(left, bottom, left + x.length, bottom)
        svg.text(
            14,
            panel_top + height / 2,
            f"{name} {unit}{' (relative)' if not m.absolute else ''}",
            anchor="middle",
            rotate=-90,
        )
    kinds["peak"] = _CAPACITY
    svg.legend(left, top - 12, list(kinds.items()))
    bottom = top + len(shown) * (height + gap) - gap
    _x_axis(svg, x, left, bottom)
    hidden = len(panels) - len(shown)
    more = f"; the {len(shown)} devices of {len(panels)} with the highest peak" if hidden else ""
    relative = "" if all(m.absolute for _, m in shown) else "; relative levels: no capacity line"
    end_y = _label_lines(
        svg,
        left + x.length / 2,
        bottom + 34,
        [f"{time.unit} after window start (the timeline's clock); dotted: step starts{relative}{more}"],
    )
    return svg.svg(_WIDTH, end_y - _TEXT + 6)


Charts = dict[str, str | None]
# The page's charts, each None where the run has nothing to show.
CHART_NAMES = ("steps", "timeline", "memory", "gaps", "kernels", "mfu", "roofline", "ranks", "critical_path")


def draw_charts(report: RunReport, run: ChartRun) -> Charts:
    """Every chart of the page (`CHART_NAMES`), as inline SVG."""
    return {
        "steps": step_breakdown(report),
        "timeline": utilisation_timeline(run, device_words(report).util),
        "memory": memory_chart(report, run),
        "gaps": gap_histogram(report),
        "kernels": kernel_histogram(report),
        "mfu": mfu_chart(report),
        "roofline": roofline(report),
        "ranks": ranks_chart(report),
        "critical_path": critical_path_chart(report),
    }
