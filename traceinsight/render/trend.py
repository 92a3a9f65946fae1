"""A trend for people and for CI: many runs' headline figures in one order (`traceinsight trend`).

The document (schema `traceinsight.trend/1`) holds one row per run (`result.RunSummary`, with where it came from and
whether its top bottleneck differs from the run's before it), the order and window used, and the gate: the last run
against the median of the `window` runs before it, and the `--fail-on` thresholds it crossed. The HTML page, the
Markdown and the terminal summaries all start from the document and its formatted rows (`trend_rows`), so each shows
the JSON's figures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from statistics import median
from typing import Any

import msgspec
from markupsafe import Markup

from traceinsight import __version__
from traceinsight.errors import TraceError
from traceinsight.gating import FAIL, Gate, Threshold, change, evaluate
from traceinsight.render.diff_render import fmt_relative
from traceinsight.render.format import (
    clip,
    escape_control,
    fmt_iso,
    fmt_ns,
    fmt_pct,
    markdown_code,
    markdown_text,
    plural,
)
from traceinsight.render.html import environment, without_empty_columns
from traceinsight.result import RunReport, RunSummary, as_dict, field_names

TREND_SCHEMA = "traceinsight.trend/1"
ORDER_TIME, ORDER_GIVEN, META_PREFIX = "time", "given", "meta."
_BOLD, _RESET = "\033[1m", "\033[0m"
_DIGITS = re.compile(r"(\d+)")


class TrendRun(msgspec.Struct, frozen=True):
    """One run of the trend: its row, its report (what `--fail-on` and `--order meta.KEY` read) and its origin."""

    row: RunSummary
    report: RunReport
    source: str  # "report": a saved --json report; "trace": analysed from its traces
    path: str  # the INPUT it was found under, as given


def _meta_value(report: RunReport, key: str) -> Any:
    """The value at a dotted `key` of the report's `meta` (`versions.build`), None when it has none."""
    node: Any = as_dict(report.meta)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def natural_key(text: str) -> list[str | int]:
    """A sort key with the numbers in `text` as numbers: build-9 before build-10, version 1.9 before 1.10."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(text)]


def _capture_moment(run: TrendRun) -> datetime | None:
    moment = run.row.capture_time
    return datetime.fromisoformat(moment.replace("Z", "+00:00")) if moment else None


def order_runs(runs: Sequence[TrendRun], order: str) -> list[TrendRun]:
    """`runs` in `order`: as given, by capture time (the trace's own clock), or by a key of the reports' meta (as
    numbers when every run's is one, else as text with its numbers as numbers: `natural_key`). Ties keep the order
    given. Raises TraceError naming the first run without the key: a run put anywhere by guess would move the gate's
    baseline."""
    if order == ORDER_GIVEN:
        return list(runs)
    if order == ORDER_TIME:
        keys: list[Any] = [_capture_moment(run) for run in runs]
        missing = "no capture time (its trace's clock is not the epoch): use --order given or --order meta.KEY"
    else:
        key = order.removeprefix(META_PREFIX)
        keys = [_meta_value(run.report, key) for run in runs]
        missing = f"its report has no {order} to order by"
    for run, value in zip(runs, keys, strict=True):
        if value is None or isinstance(value, dict | list):
            raise TraceError(run.row.name, missing)
    numbers = all(isinstance(value, int | float) and not isinstance(value, bool) for value in keys)
    if order != ORDER_TIME and not numbers:
        keys = [natural_key(str(value)) for value in keys]
    ranked = sorted(range(len(runs)), key=lambda i: keys[i])
    return [runs[i] for i in ranked]


def bottleneck_changed(rows: Sequence[RunSummary]) -> list[bool]:
    """Whether each run's top bottleneck differs from the one of the run before it (never the first)."""
    return [i > 0 and row.top_bottleneck != rows[i - 1].top_bottleneck for i, row in enumerate(rows)]


def build_trend(
    runs: Sequence[TrendRun], order: str, window: int, thresholds: Sequence[Threshold], on_missing: str = FAIL
) -> dict[str, Any]:
    """The trend document of `runs` (at least one, in their order): the rows, and the gate of the last run against
    the `window` runs before it (fewer when there are fewer; a value the runs lack as `on_missing` says)."""
    from traceinsight.render.meta import generated_at  # it imports the readers, and pandas with them

    rows = [run.row for run in runs]
    last, baseline = runs[-1], runs[max(0, len(runs) - 1 - window) : -1]
    previous = [run.report for run in baseline]
    gate = evaluate(thresholds, last.report, previous, on_missing)
    steps = [run.row.mean_step_ns for run in baseline if run.row.mean_step_ns is not None]
    median_ns = median(steps) if steps else None
    delta, relative = change(median_ns, last.row.mean_step_ns)
    return {
        "schema": TREND_SCHEMA,
        "version": __version__,
        "generated_at": generated_at(),
        "order": order,
        "window": window,
        "runs": [
            {"index": i + 1, "source": run.source, "path": run.path, **as_dict(run.row), "bottleneck_changed": moved}
            for i, (run, moved) in enumerate(zip(runs, bottleneck_changed(rows), strict=True))
        ],
        "gate": {
            "last": last.row.name,
            "baseline": [run.row.name for run in baseline],
            "mean_step_ns": {
                "last": last.row.mean_step_ns,
                "baseline_median": median_ns,
                "delta": delta,
                "relative": relative,
            },
            "thresholds": [t.text for t in thresholds],
            "crossed": gate.crossed,
            "missing": gate.missing,  # thresholds the runs have no value for: why, for each
            "on_missing": gate.on_missing,
        },
    }


def trend_gate(document: dict[str, Any]) -> Gate:
    """The document's gate, as the command ends on it."""
    gate = document["gate"]
    return Gate(gate["crossed"], gate["missing"], gate["on_missing"])


def summaries(document: dict[str, Any]) -> list[RunSummary]:
    """The document's rows as `RunSummary` again (what the chart draws)."""
    names = list(field_names(RunSummary))
    return [RunSummary(**{name: row[name] for name in names}) for row in document["runs"]]


def trend_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Each run formatted, in order: its figures, the step's change from the run before, its top bottleneck."""
    formatted = []
    previous_ns = None
    for row in document["runs"]:
        _, relative = change(previous_ns, row["mean_step_ns"])
        previous_ns = row["mean_step_ns"]
        top = row["top_bottleneck"]
        formatted.append(
            {
                "index": row["index"],
                "name": row["name"],
                "source": row["source"],
                "captured": fmt_iso(row["capture_time"]),
                "steps": row["steps"],
                "step": fmt_ns(row["mean_step_ns"]),
                "step_change": fmt_relative(relative) if row["index"] > 1 else "",
                "gpu_util": fmt_pct(row["gpu_util"]),
                "mfu": fmt_pct(row["mfu"]),
                "input_wait": fmt_pct(row["input_wait_fraction"]),
                "bottleneck": f"{top} ({row['top_severity']})" if top else "none",
                "changed": row["bottleneck_changed"],
                "fixed_step": fmt_ns(row["top_step_ns_after"]),
            }
        )
    return formatted


def trend_sentence(document: dict[str, Any]) -> str:
    """The step from the first run to the last, the last against its baseline, where the top bottleneck changed,
    and the thresholds crossed."""
    runs, gate = document["runs"], document["gate"]
    order = "as given" if document["order"] == ORDER_GIVEN else f"by {document['order']}"
    parts = [f"{plural(len(runs), 'run')} ordered {order}"]
    if len(runs) > 1:
        parts.append(f"mean step {fmt_ns(runs[0]['mean_step_ns'])} -> {fmt_ns(runs[-1]['mean_step_ns'])}")
        steps = gate["mean_step_ns"]
        parts.append(
            f"the last run, {gate['last']}, {fmt_ns(steps['last'])} against {fmt_ns(steps['baseline_median'])}, "
            f"the median of the {plural(len(gate['baseline']), 'run')} before it ({fmt_relative(steps['relative'])})"
        )
    moves = [
        f"{row['name']} ({before['top_bottleneck'] or 'none'} -> {row['top_bottleneck'] or 'none'})"
        for before, row in zip(runs, runs[1:], strict=False)
        if row["bottleneck_changed"]
    ]
    parts.append(f"top bottleneck changed at {', '.join(moves)}" if moves else "the top bottleneck never changed")
    if gate["thresholds"]:
        crossed = len(gate["crossed"])
        parts.append(f"{crossed} of {plural(len(gate['thresholds']), 'threshold')} crossed")
        if gate["missing"]:
            outcome = "failed" if gate["on_missing"] == FAIL else "skipped"
            parts.append(f"{len(gate['missing'])} {outcome} for a value the runs do not have")
    return "; ".join(parts) + "."


def _title(document: dict[str, Any]) -> str:
    return f"traceinsight trend: {plural(len(document['runs']), 'run')}"


def render_trend_html(document: dict[str, Any]) -> str:
    """The page: the sentence, the thresholds crossed, the charts and a table with a row per run (without the
    columns no run has a figure for)."""
    from traceinsight.render.charts import trend_chart  # matplotlib only where a chart is drawn

    chart = trend_chart(summaries(document))
    page = (
        environment()
        .get_template("trend.html")
        .render(
            report=document,
            trend=document,
            title=_title(document),
            verdict=trend_sentence(document),
            gate_lines=trend_gate(document).outcomes(),
            rows=trend_rows(document),
            chart=Markup(chart) if chart else None,
        )
    )
    return without_empty_columns(page)


def render_trend_markdown(document: dict[str, Any]) -> str:
    """The sentence, the thresholds crossed and the table (a CI step summary). Every string is escaped
    (`markdown_text`): names and bottleneck ids come from traces and saved reports."""
    lines = [f"## {_title(document)}", "", f"**{markdown_text(trend_sentence(document))}**", ""]
    gate_lines = trend_gate(document).lines()
    lines += [f"- {markdown_text(line)}" for line in gate_lines]
    if gate_lines:
        lines.append("")
    lines += [
        "| # | run | mean step | change | GPU-Util | MFU | input wait | top bottleneck |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['index']} | {markdown_code(r['name'])} | "
        + " | ".join(markdown_text(r[k]) for k in ("step", "step_change", "gpu_util", "mfu", "input_wait"))
        + f" | {'**changed:** ' * r['changed']}{markdown_text(r['bottleneck'])} |"
        for r in trend_rows(document)
    ]
    return "\n".join(lines) + "\n"


def render_trend_terminal(document: dict[str, Any], color: bool = False) -> str:
    """The title, the sentence and one line per run (``*`` where the top bottleneck changes). Every string is
    escaped (`escape_control`): names and bottleneck ids come from traces and saved reports."""
    title = _title(document)
    lines = [f"{_BOLD}{title}{_RESET}" if color else title, "  " + escape_control(trend_sentence(document)), ""]
    lines.append(f"  {'#':>3}  {'run':<32}{'step':>10}{'change':>10}{'GPU-Util':>10}{'MFU':>9}{'input':>9}  top")
    for r in trend_rows(document):
        lines.append(
            f"  {r['index']:>3}  {escape_control(clip(r['name'], 31)):<32}{r['step']:>10}{r['step_change']:>10}"
            f"{r['gpu_util']:>10}{r['mfu']:>9}{r['input_wait']:>9}  {'*' if r['changed'] else ' '}"
            f"{escape_control(r['bottleneck'])}"
        )
    lines.append("  (* the top bottleneck changes)")
    return "\n".join(lines)
