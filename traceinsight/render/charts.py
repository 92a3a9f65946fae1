"""The charts matplotlib draws, as inline SVG: the utilisation timeline, the memory and `trend`'s panels (the bar
charts, the ranks and the roofline are written directly: `svg_charts`).

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

from traceinsight.render.chart_data import ChartRun, DeviceBusy, StepSpan, StepSpans  # noqa: E402
from traceinsight.render.format import (  # noqa: E402
    clip,
    escape_control,
    fmt_bytes,
    fmt_ns,
    fmt_pct,
    fmt_tick,
    plural,
    tick_decimals,
)
from traceinsight.render.svg_charts import DIRECT_CHARTS, FONT_SIZE, TimeAxis, tick_every  # noqa: E402
from traceinsight.render.wording import device_words  # noqa: E402
from traceinsight.result import (  # noqa: E402
    Memory,
    RunReport,
    RunSummary,
    Step,
    StepMemory,
)
from traceinsight.rules import GPU_UTIL_TARGET  # noqa: E402

TIMELINE_BINS = 200
MAX_TIMELINE_BANDS = 24
_BUSY = "#2e7d32"
_TARGET = "#1565c0"
# The timeline shows the span that holds this share of the devices' busy time (and every step), not empty capture.
TIMELINE_BUSY_SHARE = 0.99
_ZOOM_GRID = 4000
ZOOM_AT_MOST = 0.9  # a zoom that would keep more of the window than this shows the whole window
_BAND = 0.85  # a band's height at 100 %, in rows
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


def _ms(ns: float) -> str:
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
    listed = ", ".join(f"step {s.id} at {_ms(s.start_ns - origin)} ({fmt_ns(s.dur_ns)})" for s in items[:8])
    more = f", and {len(items) - 8} more" if len(items) > 8 else ""
    return f"{device}: {plural(len(items), 'step')} ({steps.marker}): {listed}{more}"


def utilisation_timeline(run: ChartRun, word: str = "GPU-Util") -> str | None:
    """Busy share over time per device, each device's `word` (GPU-Util, TPU-Util) against the 80-90 % target,
    and its steps, in one axes zoomed to the activity: a band per device, or a heatmap past `MAX_TIMELINE_BANDS`
    devices (a run of hundreds of ranks stays one small drawing)."""
    if not run.devices or run.window_start_ns is None:
        return None
    origin = run.window_start_ns
    start, end = _zoom(run)
    time = TimeAxis(end - origin)
    edges = np.linspace(start, end, TIMELINE_BINS + 1).astype(np.int64)
    centres = time.of(edges[:-1] + np.diff(edges) / 2 - origin)
    busy = np.array([np.diff(u.busy.covered_before(edges)) / np.maximum(np.diff(edges), 1) for u in run.devices])
    rows = len(run.devices)
    labels = [usage.id for usage in run.devices]
    hovers = _Hovers("timeline")
    low, high = GPU_UTIL_TARGET
    with plt.rc_context(_STYLE):
        bands = rows <= MAX_TIMELINE_BANDS
        fig, ax = plt.subplots(figsize=(9, 0.9 + max(1.2, rows * 0.55) if bands else 1.5 + min(rows, 64) * 0.12))
        if bands:
            for row, (usage, share) in enumerate(zip(run.devices, busy, strict=True)):
                base = rows - 1 - row  # first device on top
                target = ax.fill_between(
                    [centres[0], centres[-1]], base + _BAND * low, base + _BAND * high, color=_TARGET, alpha=0.12
                )
                hovers.add(
                    target, f"{usage.id}: the target practitioners aim {word} at, {low * 100:.0f}-{fmt_pct(high, 0)}"
                )
                band = ax.fill_between(centres, base, base + _BAND * share, step="mid", color=_BUSY, linewidth=0)
                hovers.add(
                    band,
                    f"{usage.id}: busy {fmt_pct(usage.busy_ns / usage.span_ns if usage.span_ns else None)} of its span "
                    f"({fmt_ns(usage.busy_ns)} of {fmt_ns(usage.span_ns)}); busiest bin {fmt_pct(float(share.max()))}",
                )
                if usage.gpu_util is not None:
                    util = ax.hlines(
                        base + _BAND * usage.gpu_util,
                        centres[0],
                        centres[-1],
                        colors=_TARGET,
                        linewidth=1.2,
                        linestyles="--",
                    )
                    words = f"{word} {fmt_pct(usage.gpu_util)} (kernels running, over its steps)"
                    hovers.add(util, f"{usage.id}: {words}")
                steps = _device_steps(run, usage)
                if steps.items:
                    lines = ax.vlines(
                        [time.of(s.start_ns - origin) for s in steps.items],
                        base,
                        base + 1,
                        colors="#555",
                        linewidth=0.8,
                        linestyles=":",
                    )
                    hovers.add(lines, _steps_title(usage.id, steps, origin))
            ax.set_yticks(np.arange(rows) + 0.42, [f"{u.id}\n{word} {fmt_pct(u.gpu_util)}" for u in run.devices][::-1])
            ax.set_ylim(0, rows)
            note = (
                f"green: % busy per time bin; dashed: {word} over the device's steps;\n"
                f"blue strip: the {low * 100:.0f}-{fmt_pct(high, 0)} {word} target; dotted: step starts"
            )
        else:
            image = ax.imshow(
                busy * 100,
                aspect="auto",
                cmap="Greens",
                vmin=0,
                vmax=100,
                interpolation="nearest",
                extent=(time.of(start - origin), time.of(end - origin), rows, 0),
            )
            hovers.add(image, f"% busy per device and time bin, {rows} devices")
            ticks = np.arange(0, rows, max(1, rows // 16))
            ax.set_yticks(ticks + 0.5, [labels[i] for i in ticks])
            fig.colorbar(image, ax=ax, label="% busy", fraction=0.03)
            lines = ax.vlines(
                [time.of(s.start_ns - origin) for s in run.steps.items],
                0,
                rows,
                colors="#555",
                linewidth=0.6,
                linestyles=":",
            )  # one collection, not N lines
            hovers.add(lines, _steps_title("run", run.steps, origin))
            note = "colour: % busy, one row per device; dotted: step starts"
        window = (run.window_end_ns or origin) - origin
        zoomed = end - start < window
        span = f"{time.text(start - origin)} - {time.text(end - origin)}"
        where = f", zoomed to {span} of the {time.text(window)} window" if zoomed else ""
        ax.set_xlabel(f"{time.unit} after window start (the gap table's clock){where}\n{note}")
        ax.set_xlim(time.of(start - origin), time.of(end - origin))
        _plain(ax.xaxis)
        return _svg(fig, hovers)


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


def _memory_limits(ax: Any, name: str, m: Memory, high: float, scale: float, hovers: _Hovers) -> float:
    """The capacity and the allocator's limit (absolute levels only): a line each, or, when they are far above
    the levels (`MEMORY_OFF_SCALE`), a note at the top saying where they are. Returns the highest level to show."""
    given = [("capacity", m.capacity_bytes, "-"), ("allocator limit", m.allocator_limit_bytes, "--")]
    limits = [(label, v, style) for label, v, style in given if v is not None and v > 0 and m.absolute]
    if not limits:
        return high
    free = f", {fmt_pct(m.headroom_fraction)} free at the peak" if m.headroom_fraction is not None else ""
    titles = {"capacity": f"{name}: capacity {fmt_bytes(m.capacity_bytes)}{free}"}
    titles["allocator limit"] = f"{name}: the allocator's limit {fmt_bytes(m.allocator_limit_bytes)}"
    if max(v for _, v, _ in limits) <= MEMORY_OFF_SCALE * high:
        for label, value, style in limits:
            line = ax.axhline(value / scale, color=_CAPACITY, linewidth=1.2, linestyle=style, label=label)
            hovers.add(line, titles[label])
        return max([high] + [v for _, v, _ in limits])
    words = "; ".join(f"{label} {fmt_bytes(v)}" for label, v, _ in limits)
    note = ax.text(0.99, 0.97, f"\u2191 {words} (off the scale){free}", transform=ax.transAxes, ha="right", va="top")
    note.set_color(_CAPACITY)
    hovers.add(note, "; ".join(titles[label] for label, _, _ in limits))
    return high * 1.2  # room for the note


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
    hovers = _Hovers("memory")
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(len(shown), 1, figsize=(9, 0.6 + 2.0 * len(shown)), sharex=True, squeeze=False)
        for ax, (name, m) in zip(axes[:, 0], shown, strict=True):
            series = m.series
            x = time.of(np.asarray(series.ts_ns, np.float64) - origin)
            allocated = np.asarray(series.allocated, np.float64)
            reserved = None if series.reserved is None else np.asarray(series.reserved, np.float64)
            lines = [allocated.max(), m.peak_in_use_bytes]
            if reserved is not None:
                lines.append(reserved.max())
            scale, unit = _bytes_unit(max(lines))
            relative = "" if m.absolute else " (relative to the profile start)"
            area = ax.fill_between(x, allocated / scale, step="post", color=_ALLOCATED, alpha=0.35, linewidth=0)
            hovers.add(area, f"{name}: allocated{relative}, peak {fmt_bytes(m.peak_allocated_bytes)}")
            line = ax.step(x, allocated / scale, where="post", color=_ALLOCATED, linewidth=1, label="allocated")[0]
            hovers.add(line, f"{name}: allocated over time, {plural(len(x), 'point')}")
            if reserved is not None:
                held = ax.step(x, reserved / scale, where="post", color=_RESERVED, linewidth=1.2, label="reserved")[0]
                hovers.add(held, f"{name}: reserved{relative}, peak {fmt_bytes(m.peak_reserved_bytes)}")
            top = _memory_limits(ax, name, m, max(lines), scale, hovers)
            by_id = {s.id: s for s in m.steps}
            steps = _memory_steps(report, run, name, set(by_id))
            if steps:
                marks = ax.vlines(
                    [time.of(s.start_ns - origin) for s in steps],
                    0,
                    1,
                    transform=ax.get_xaxis_transform(),
                    colors="#555",
                    linewidth=0.8,
                    linestyles=":",
                )
                listed = "; ".join(
                    f"step {s.id} at {_ms(s.start_ns - origin)}: {_step_split(by_id[s.id])}" for s in steps[:8]
                )
                more = f"; and {len(steps) - 8} more" if len(steps) > 8 else ""
                hovers.add(marks, f"{name}: {plural(len(steps), 'step')}: {listed}{more}")
            at = time.of(m.peak_ns - origin)
            peak = ax.plot(
                [at], [m.peak_in_use_bytes / scale], marker="v", color=_CAPACITY, linestyle="", label="peak"
            )[0]
            in_step = f", step {m.peak_step}" if m.peak_step is not None else ""
            hovers.add(
                peak,
                f"{name}: peak {fmt_bytes(m.peak_in_use_bytes)}{relative} at {_ms(m.peak_ns - origin)}{in_step}",
            )
            ax.set_ylabel(f"{name}\n{unit}{' (relative)' if not m.absolute else ''}")
            ax.set_ylim(min(0.0, float(allocated.min()) / scale), top / scale * 1.1)
            _plain(ax.yaxis)
        legend: dict[str, Any] = {}
        for ax in axes[:, 0]:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(label, handle)
        axes[0, 0].legend(
            legend.values(), legend.keys(), ncols=5, frameon=False, loc="lower left", bbox_to_anchor=(0, 1)
        )
        hidden = len(panels) - len(shown)
        more = f"; the {len(shown)} devices of {len(panels)} with the highest peak" if hidden else ""
        relative = "" if all(m.absolute for _, m in shown) else "; relative levels: no capacity line"
        clock = f"{time.unit} after window start (the timeline's clock)"
        axes[-1, 0].set_xlabel(f"{clock}; dotted: step starts{relative}{more}")
        _plain(axes[-1, 0].xaxis)
        return _svg(fig, hovers)


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
    shown = _ms(value) if attribute == "mean_step_ns" else fmt_pct(value)
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


def draw(name: str, report: RunReport, run: ChartRun) -> str | None:
    """One chart (`painter.CHART_NAMES`: "timeline", "memory", and those `svg_charts` writes), as
    inline SVG; None when the run has nothing to show."""
    if name == "timeline":
        return utilisation_timeline(run, device_words(report).util)
    if name == "memory":
        return memory_chart(report, run)
    return DIRECT_CHARTS[name](report)
