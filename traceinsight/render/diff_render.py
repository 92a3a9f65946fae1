"""A diff for people: HTML (jinja2, autoescape on), Markdown for CI summaries, the terminal summary.

All three start from the diff object and the same formatted rows (`step_line`, `change_rows`,
`projection_rows`), so every renderer opens alike: the step time and the verdict, then any warning that the runs
differ in hardware, framework or capture kind, then the figures that moved beyond their noise, regressions first,
each by its plain label (the JSON path on hover in HTML).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceinsight.diff import ranked
from traceinsight.render.format import (
    escape_control,
    fmt_bytes,
    fmt_count,
    fmt_ns,
    fmt_pct,
    markdown_code,
    markdown_text,
    plural,
)
from traceinsight.render.html import environment

# The figures the one-line summary names after the step time, in this order.
HEADLINE_METRICS = ("totals.idle_fraction", "input_pipeline.fraction")
_VERDICT_WORDS = {
    "win": "a win",
    "regression": "a regression",
    "unchanged": "unchanged (inside the step-to-step noise)",
    "unknown": "no verdict (a side has no steps)",
}
_FORMATTERS: dict[str, Callable[[Any], str]] = {
    "ns": fmt_ns,
    "fraction": fmt_pct,
    "percent": lambda v: "-" if v is None else f"{v:.1f} %",
    "bytes": fmt_bytes,
    "count": fmt_count,
    "flop": lambda v: "-" if v is None else f"{v / 1e12:,.3f} TFLOP",
    "tflops": lambda v: "-" if v is None else f"{v:,.1f} TF/s",
}
KERNEL_ROWS_HTML, KERNEL_ROWS_MARKDOWN, KERNEL_ROWS_TERMINAL = 30, 10, 5
_RED, _GREEN, _BOLD, _RESET = "\033[31m", "\033[32m", "\033[1m", "\033[0m"
_VERDICT_COLOUR = {"regression": _RED, "improvement": _GREEN}
_BOTTLENECK_COLOUR = {"added": _RED, "worse": _RED, "removed": _GREEN, "better": _GREEN}


def fmt_value(value: float | None, unit: str) -> str:
    return _FORMATTERS[unit](value)


def fmt_delta(delta: float | None, unit: str) -> str:
    """A signed change: fractions and percentages in percentage points (pp), others in their unit."""
    if delta is None:
        return "-"
    if unit in ("fraction", "percent"):
        points = delta * 100 if unit == "fraction" else delta
        return f"{points:+.1f} pp" if delta else "0 pp"
    text = _FORMATTERS[unit](delta)
    return f"+{text}" if delta > 0 else text


def fmt_relative(relative: float | None) -> str:
    if relative is None:
        return "-"
    return f"{relative * 100:+.1f} %" if relative else "0 %"


def fmt_noise(change: dict[str, Any]) -> str:
    """``±27.5 ms (steps)``: the change a figure must pass to count, and what it was read from."""
    if change["noise"] is None:
        return "-"
    value = change["noise"]
    text = fmt_delta(value, change["unit"]).lstrip("+") if value else "0"
    return f"±{text} ({change['noise_source']})"


def says_something(change: dict[str, Any]) -> bool:
    """A row worth a line: a figure at least one run has, and not zero on both sides."""
    return any(change[side] for side in ("base", "new"))


def change_rows(changes: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Formatted rows, regressions first (`diff.ranked`), without those that say nothing (`says_something`)."""
    return [
        {
            "metric": c["metric"],
            "label": c.get("label") or c["metric"],
            "base": fmt_value(c["base"], c["unit"]),
            "new": fmt_value(c["new"], c["unit"]),
            "delta": fmt_delta(c["delta"], c["unit"]),
            "relative": fmt_relative(c["relative"]),
            "noise": fmt_noise(c),
            "verdict": c["verdict"],
            "worse_when": c["worse_when"] or "",
        }
        for c in ranked(changes)
        if says_something(c)
    ]


def moved(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows whose change is beyond the noise."""
    return [r for r in rows if r["verdict"] not in ("unchanged", "unknown")]


def split_changes(diff: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(run-level changes, per-device changes)."""
    run = [c for c in diff["changes"] if not c["metric"].startswith("devices.")]
    return run, [c for c in diff["changes"] if c["metric"].startswith("devices.")]


def bottleneck_cells(item: dict[str, Any]) -> dict[str, str]:
    """One bottleneck change, formatted: severity and cost on each side (a step's, where both reports say it)."""
    b, n = item["base"], item["new"]
    measure = item.get("measure", "time_ns")
    unit = " a step" if measure == "per_step_ns" else ""

    def cost(side: dict[str, Any] | None) -> str:
        return fmt_ns(side[measure]) + unit if side else fmt_ns(None)

    return {
        "id": item["id"],
        "title": item["title"] or "",
        "status": item["status"],
        "severity": f"{b['severity'] if b else 'absent'} -> {n['severity'] if n else 'absent'}",
        "base": cost(b),
        "new": cost(n),
        "delta": fmt_delta(item["delta_ns"], "ns") + unit,
        "relative": fmt_relative(item["relative"]),
    }


def bottleneck_line(item: dict[str, Any]) -> str:
    """``input_bound: better, high -> low, 28.5 ms a step -> 1.1 ms a step (-96.3 %)``."""
    c = bottleneck_cells(item)
    return f"{c['id']}: {c['status']}, {c['severity']}, {c['base']} -> {c['new']} ({c['relative']})"


def kernel_cells(item: dict[str, Any]) -> dict[str, str]:
    """One kernel change, formatted: total time and calls on each side."""

    def side(s: dict[str, Any] | None) -> str:
        return "not in top" if s is None else f"{fmt_ns(s['total_ns'])} ({fmt_count(s['count'])} calls)"

    return {
        "name": item["name"],
        "status": item["status"],
        "base": side(item["base"]),
        "new": side(item["new"]),
        "delta": fmt_delta(item["delta_ns"], "ns"),
        "relative": fmt_relative(item["relative"]),
    }


def fmt_ms(ns: float | None) -> str:
    """A step time in milliseconds to one decimal, no unit (``115.6``): projected and measured side by side."""
    return "-" if ns is None else f"{ns / 1_000_000:.1f}"


def fmt_speedup(speedup: float | None) -> str:
    return "-" if speedup is None else f"{speedup:.2f}x"


def _projection_cells(item: dict[str, Any], label: str, basis: str, status: str) -> dict[str, str]:
    """One projection check or the headline, formatted: step times and savings in ms (`fmt_ms`)."""
    return {
        "label": label,
        "basis": basis,
        "status": status,
        **{
            f"{side}_{figure}": fmt_ms(item[f"{side}_{key}"])
            for side in ("projected", "measured")
            for figure, key in (("before", "step_ns_before"), ("after", "step_ns_after"), ("saving", "saving_ns"))
        },
        "projected_speedup": fmt_speedup(item["projected_speedup"]),
        "measured_speedup": fmt_speedup(item["measured_speedup"]),
        "error": fmt_relative(item["error"]),
        "path_after": fmt_ms(item.get("path_step_ns_after")),
        "path_error": fmt_relative(item.get("path_error")),
    }


def projection_rows(diff: dict[str, Any]) -> list[dict[str, str]]:
    """Projected vs measured: one row per check, then the headline; none when no check (nothing to compare)."""
    projections = diff.get("projections") or {}
    checks = projections.get("checks") or []
    if not checks:
        return []
    rows = [_projection_cells(c, c["id"], c["basis"] or "-", c["status"]) for c in checks]
    if headline := projections.get("headline"):
        applied, addressed = headline["applied"], headline["addressed"]
        label = f"all applied: {', '.join(applied) or '-'}"
        rows.append(_projection_cells(headline, label, "combined", f"{len(addressed)} of {len(applied)} fixed"))
    return rows


def projection_line(row: dict[str, str]) -> str:
    """``input_bound (measured, gone): projected 175.0 -> 115.6 ms/step (1.51x), measured 175.0 -> 139.7 ms/step
    (1.25x), projection off by -17.3 %``."""
    return (
        f"{row['label']} ({row['basis']}, {row['status']}): "
        f"projected {row['projected_before']} -> {row['projected_after']} ms/step ({row['projected_speedup']}), "
        f"measured {row['measured_before']} -> {row['measured_after']} ms/step ({row['measured_speedup']}), "
        f"projection off by {row['error']}{_path_words(row)}"
    )


def _path_words(row: dict[str, str]) -> str:
    """`` (critical path: 120.0 ms/step, off by -14.1 %)``, or nothing where the path projected nothing."""
    return (
        "" if row["path_after"] == "-" else f" (critical path: {row['path_after']} ms/step, off by {row['path_error']})"
    )


def step_line(diff: dict[str, Any]) -> str:
    """The diff's first line: ``Step time 175 ms -> 140 ms: 1.25x faster, a win (noise ±27.5 ms).``"""
    t = diff["step_time"]
    if t["base_ns"] is None or t["new_ns"] is None:
        return f"Step time {fmt_ns(t['base_ns'])} -> {fmt_ns(t['new_ns'])}: {_VERDICT_WORDS['unknown']}."
    speedup = t["speedup"]
    ratio = "-" if not speedup else f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
    noise = "" if t["noise_ns"] is None else f" (noise ±{fmt_ns(t['noise_ns'])})"
    return f"Step time {fmt_ns(t['base_ns'])} -> {fmt_ns(t['new_ns'])}: {ratio}, {_VERDICT_WORDS[t['verdict']]}{noise}."


def diff_sentence(diff: dict[str, Any]) -> str:
    """After the step line: the idle and input figures, how many figures moved beyond their noise, and the
    bottlenecks that came and went."""
    by_metric = {c["metric"]: c for c in diff["changes"]}
    figures = []
    for name in HEADLINE_METRICS:
        c = by_metric[name]
        if c["base"] is not None or c["new"] is not None:
            figures.append(
                f"{c['label'].lower()} {fmt_value(c['base'], c['unit'])} -> {fmt_value(c['new'], c['unit'])} "
                f"({fmt_delta(c['delta'], c['unit'])})"
            )
    verdicts = [c["verdict"] for c in diff["changes"]]
    counts = (
        f"{plural(verdicts.count('regression'), 'figure')} worse beyond their noise, "
        f"{verdicts.count('improvement')} better, {verdicts.count('unchanged')} unchanged"
    )
    bottlenecks = diff["bottlenecks"]
    moved_severity = [
        f"{x['id']} {x['base']['severity']} -> {x['new']['severity']}"
        for x in bottlenecks["items"]
        if x["base"] and x["new"] and x["base"]["severity"] != x["new"]["severity"]
    ]
    came_went = [
        f"bottlenecks {label}: {', '.join(ids)}"
        for label, ids in (
            ("added", bottlenecks["added"]),
            ("removed", bottlenecks["removed"]),
            ("changed", moved_severity),
        )
        if ids
    ]
    return "; ".join(part for part in (", ".join(figures), counts, *came_went) if part) + "."


def render_diff_html(diff: dict[str, Any]) -> str:
    run_changes, device_changes = split_changes(diff)
    return (
        environment()
        .get_template("diff.html")
        .render(
            report=diff,
            diff=diff,
            step=step_line(diff),
            verdict=diff_sentence(diff),
            warnings=[w["message"] for w in diff.get("warnings") or []],
            run_rows=change_rows(run_changes),
            device_rows=change_rows(device_changes),
            bottlenecks=[bottleneck_cells(item) for item in diff["bottlenecks"]["items"] if item["status"] != "same"],
            kernels=[
                {**kernel_cells(k), "names": k["names"]}
                for k in diff["kernels"][:KERNEL_ROWS_HTML]
                if k["status"] != "same"
            ],
            projections=projection_rows(diff),
        )
    )


def _title(diff: dict[str, Any]) -> str:
    return f"traceinsight diff: {diff['base']['run']} -> {diff['new']['run']}"


def render_diff_markdown(diff: dict[str, Any]) -> str:
    """The step time and verdict, any warning, the run-level figures that moved beyond their noise (regressions
    first, by plain label), bottleneck changes, projections whose cause changed, the kernels that changed most.
    Every string is escaped (`markdown_text`): ids, names and kinds come from the saved reports."""
    run_changes, _ = split_changes(diff)
    lines = [f"## {markdown_text(_title(diff))}", "", f"**{markdown_text(step_line(diff))}**", ""]
    lines += [f"> **Warning:** {markdown_text(w['message'])}" for w in diff.get("warnings") or []]
    if diff.get("warnings"):
        lines.append("")
    lines += [markdown_text(diff_sentence(diff)), ""]
    rows = moved(change_rows(run_changes))
    if rows:
        lines += ["| figure | base | new | change | relative | noise | verdict |", "|---|---|---|---|---|---|---|"]
        lines += [
            "| "
            + " | ".join(markdown_text(r[k]) for k in ("label", "base", "new", "delta", "relative", "noise"))
            + f" | {markdown_text(r['verdict'])} |"
            for r in rows
        ]
    else:
        lines.append("No run-level figure moved beyond its noise.")
    lines.append("")
    items = [x for x in diff["bottlenecks"]["items"] if x["status"] != "same"]
    lines += [f"- bottleneck {markdown_text(bottleneck_line(x))}" for x in items] or ["No bottleneck changed."]
    if projections := projection_rows(diff):
        lines += ["", "Projected vs measured (mean step), for the bottlenecks whose cause changed:", ""]
        lines += [f"- {markdown_text(projection_line(row))}" for row in projections]
    kernels = [kernel_cells(k) for k in diff["kernels"][:KERNEL_ROWS_MARKDOWN] if k["status"] != "same"]
    if kernels:
        lines += ["", "| kernel | status | base | new | change |", "|---|---|---|---|---|"]
        lines += [
            f"| {markdown_code(k['name'])} | {markdown_text(k['status'])} | {markdown_text(k['base'])} "
            f"| {markdown_text(k['new'])} | {markdown_text(k['delta'])} ({markdown_text(k['relative'])}) |"
            for k in kernels
        ]
    return "\n".join(lines) + "\n"


def render_diff_terminal(diff: dict[str, Any], color: bool = False) -> str:
    def paint(text: str, code: str | None = None) -> str:
        """`text` safe for a terminal (names come from the traces), in colour `code` where asked."""
        text = escape_control(text)
        return f"{code}{text}{_RESET}" if color and code else text

    run_changes, device_changes = split_changes(diff)
    verdict_colour = {"win": _GREEN, "regression": _RED}.get(diff["step_time"]["verdict"])
    lines = [paint(_title(diff), _BOLD), paint("  " + step_line(diff), verdict_colour)]
    lines += [paint(f"  WARNING: {w['message']}", _RED) for w in diff.get("warnings") or []]
    for side in ("base", "new"):
        s = diff[side]
        lines.append(
            paint(
                f"  {side:<4} {s.get('path') or s['run']} ({s.get('source') or 'report'}, {s['framework']}, "
                f"{s.get('hardware') or 'no device'}, {plural(len(s['inputs']), 'input')}, "
                f"{'- steps' if s['step_count'] is None else plural(s['step_count'], 'step')})"
            )
        )
    lines += [paint("  " + diff_sentence(diff)), ""]
    rows = moved(change_rows(run_changes))
    if rows:
        lines.append(f"  {'figure':<44}{'base':>12}{'new':>12}{'change':>13}{'relative':>11}  noise")
    for r in rows:
        text = f"  {r['label']:<44}{r['base']:>12}{r['new']:>12}{r['delta']:>13}{r['relative']:>11}  {r['noise']}"
        lines.append(paint(text, _VERDICT_COLOUR.get(r["verdict"])))
    changed_devices = len(moved(change_rows(device_changes)))
    if changed_devices:
        lines.append(f"  ({plural(changed_devices, 'per-device figure')} moved beyond the noise: see the HTML or JSON)")
    items = [x for x in diff["bottlenecks"]["items"] if x["status"] != "same"]
    if items:
        lines += ["", paint("  Bottlenecks", _BOLD)]
        lines += [paint(f"  {bottleneck_line(x)}", _BOTTLENECK_COLOUR.get(x["status"])) for x in items]
    if projections := projection_rows(diff):
        lines += ["", paint("  Projected vs measured (mean step), for the bottlenecks whose cause changed", _BOLD)]
        lines += [paint(f"  {projection_line(row)}") for row in projections]
    kernels = [kernel_cells(k) for k in diff["kernels"][:KERNEL_ROWS_TERMINAL] if k["status"] != "same"]
    if kernels:
        lines += ["", paint("  Kernels that changed most", _BOLD)]
        lines += [
            paint(f"  {k['status']:<11} {k['delta']:>10} {k['relative']:>9}  {k['name']} ({k['base']} -> {k['new']})")
            for k in kernels
        ]
    return "\n".join(lines)
