"""Charts for the HTML report, drawn with matplotlib as inline SVG.

SVG keeps the report one self-contained file with no network requests, stays
sharp when printed, and keeps text as text. Labels that come from a trace (kernel
names) are escaped by matplotlib's SVG writer, and the SVG is inlined only from
here.
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from traceinsight.analysis import Analysis  # noqa: E402
from traceinsight.analysis.steps import BREAKDOWN  # noqa: E402
from traceinsight.report.format import plural

TIMELINE_BINS = 200
MAX_TIMELINE_BANDS = 24
_BUSY = "#2e7d32"
MAX_STEP_BARS = 40
_BREAKDOWN_COLOURS = {
    "device_compute": "#2e7d32",
    "device_copy": "#1565c0",
    "host_runtime": "#8e24aa",
    "input_wait": "#d84315",
    "host_compute": "#f9a825",
    "idle": "#bdbdbd",
}
_STYLE: Any = {  # matplotlib rcParams (its stubs want literal keys)
    "svg.fonttype": "none",
    "text.parse_math": False,  # names from traces ("$a$", "node$x^$") are text, not formulas
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "traceinsight",
}


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def utilisation_timeline(analysis: Analysis) -> str | None:
    """Busy share over time per device, with step starts marked, in one axes: a band per device, or a
    heatmap past `MAX_TIMELINE_BANDS` devices (a run of hundreds of ranks stays one small drawing)."""
    if not analysis.devices or analysis.window_start_ns is None:
        return None
    start, end = analysis.window_start_ns, analysis.window_end_ns or analysis.window_start_ns + 1
    edges = np.linspace(start, end, TIMELINE_BINS + 1).astype(np.int64)
    centres_ms = (edges[:-1] + np.diff(edges) / 2 - start) / 1e6
    busy = np.array([np.diff(u.busy.covered_before(edges)) / np.maximum(np.diff(edges), 1) for u in analysis.devices])
    rows = len(analysis.devices)
    labels = [usage.id for usage in analysis.devices]
    with plt.rc_context(_STYLE):
        bands = rows <= MAX_TIMELINE_BANDS
        fig, ax = plt.subplots(figsize=(9, 0.9 + max(1.2, rows * 0.45) if bands else 1.5 + min(rows, 64) * 0.12))
        if bands:
            for row, share in enumerate(busy):
                base = rows - 1 - row  # first device on top
                ax.fill_between(centres_ms, base, base + 0.85 * share, step="mid", color=_BUSY, linewidth=0)
            ax.set_yticks(np.arange(rows) + 0.42, labels[::-1])
            ax.set_ylim(0, rows)
            note = "band height: % busy (0-100), per device"
        else:
            image = ax.imshow(
                busy * 100,
                aspect="auto",
                cmap="Greens",
                vmin=0,
                vmax=100,
                interpolation="nearest",
                extent=(0, centres_ms[-1] + centres_ms[0], rows, 0),
            )
            ticks = np.arange(0, rows, max(1, rows // 16))
            ax.set_yticks(ticks + 0.5, [labels[i] for i in ticks])
            fig.colorbar(image, ax=ax, label="% busy", fraction=0.03)
            note = "colour: % busy, one row per device"
        step_ms = [(step.start_ns - start) / 1e6 for step in analysis.steps.items]
        ax.vlines(step_ms, 0, rows, colors="#555", linewidth=0.6, linestyles=":")  # one collection, not N lines
        ax.set_xlabel(f"time since start of trace (ms); dotted lines: step starts; {note}")
        return _svg(fig)


def gap_histogram(report: dict[str, Any]) -> str | None:
    """Idle time per gap-length bin, summed over devices."""
    devices = report["devices"]
    if not devices or not any(d["gaps"]["count"] for d in devices):
        return None
    labels = [b["label"] for b in devices[0]["gaps"]["histogram"]]
    totals = np.sum([[b["total_ns"] for b in d["gaps"]["histogram"]] for d in devices], axis=0) / 1e6
    counts = np.sum([[b["count"] for b in d["gaps"]["histogram"]] for d in devices], axis=0)
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(7, 2.6))
        bars = ax.bar(labels, totals, color="#d84315")
        ax.bar_label(bars, labels=[plural(int(c), "gap") for c in counts], fontsize=7)
        ax.set_ylabel("idle time (ms)")
        ax.set_xlabel("gap length")
        return _svg(fig)


def step_breakdown(report: dict[str, Any]) -> str | None:
    """Stacked bars: where each step's time went (a stacked area past `MAX_STEP_BARS` steps, which
    would otherwise be hundreds of SVG rectangles)."""
    items = report["steps"]["items"]
    if not items:
        return None
    x = np.arange(len(items))
    values = {cat: np.array([s["breakdown"][cat] for s in items]) / 1e6 for cat in BREAKDOWN}
    labels = [cat.replace("_", " ") for cat in BREAKDOWN]
    colours = [_BREAKDOWN_COLOURS[cat] for cat in BREAKDOWN]
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(9, 2.8))
        if len(items) > MAX_STEP_BARS:
            ax.stackplot(x, *values.values(), labels=labels, colors=colours, step="mid")
            ticks = x[:: max(1, len(x) // 20)]
            ax.set_xticks(ticks, [str(items[i]["id"]) for i in ticks], fontsize=7)
        else:
            bottom = np.zeros(len(items))
            for (cat, vals), label in zip(values.items(), labels, strict=True):
                ax.bar(x, vals, bottom=bottom, color=_BREAKDOWN_COLOURS[cat], label=label, width=0.8)
                bottom += vals
            ax.set_xticks(x, [str(s["id"]) for s in items], fontsize=7)
        ax.set_xlabel("step")
        ax.set_ylabel("time (ms)")
        ax.legend(ncols=3, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(0, -0.25))
        return _svg(fig)


def kernel_histogram(report: dict[str, Any]) -> str | None:
    """Kernel counts per duration bin, with the small-kernel threshold marked."""
    devices = [d for d in report["devices"] if d["kernels"]["count"]]
    if not devices:
        return None
    bins = devices[0]["kernels"]["histogram"]
    counts = np.sum([[b["count"] for b in d["kernels"]["histogram"]] for d in devices], axis=0)
    threshold = devices[0]["kernels"]["small_threshold_ns"]
    small = [b["upper_ns"] is not None and b["upper_ns"] <= threshold for b in bins]
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(7, 2.6))
        ax.bar([b["label"] for b in bins], counts, color=["#ef6c00" if s else "#1565c0" for s in small])
        ax.set_ylabel("kernels")
        ax.set_xlabel(f"kernel duration (orange: small kernels, below {threshold / 1000:g} us)")
        ax.tick_params(axis="x", labelsize=7)
        return _svg(fig)


def draw(name: str, report: dict[str, Any], analysis: Analysis) -> str | None:
    """One chart ("timeline", "steps", "gaps", "kernels"), as inline SVG; None when the run has nothing to show."""
    if name == "timeline":
        return utilisation_timeline(analysis)
    return {"steps": step_breakdown, "gaps": gap_histogram, "kernels": kernel_histogram}[name](report)
