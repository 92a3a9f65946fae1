"""The self-contained HTML report, from jinja2 templates with autoescape on.

Templates live in the top-level `templates/` folder; the wheel ships them as
`traceinsight/templates`, so they are found from an installed wheel and from a
checkout alike. Everything from a trace passes through autoescape; only our own
matplotlib SVG is marked safe.
"""

from __future__ import annotations

import bisect
import re
import shlex
from collections.abc import Sequence
from contextlib import suppress
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup, escape

from traceinsight.diff import normalise_kernel_name
from traceinsight.render.chart_data import chart_run
from traceinsight.render.format import (
    clip,
    evidence_label,
    fmt_bytes,
    fmt_count,
    fmt_evidence,
    fmt_flop,
    fmt_iso,
    fmt_ns,
    fmt_pct,
    fmt_rate,
    fmt_trace_ms,
    plural,
)
from traceinsight.render.svg_charts import Charts, draw_charts, utilisation_timeline
from traceinsight.render.wording import (
    BOTTLENECKS_HEADING,
    MEMORY_WARNINGS,
    bottleneck_name,
    capture_sentence,
    coverage_text,
    critical_path_sentence,
    culprit_text,
    device_words,
    gap_cause_words,
    input_label,
    input_verdict,
    mfu_text,
    other_warnings,
    partial_notes,
    projection_sentence,
    projection_source,
    run_header,
    util_label,
    verdict_sentence,
)
from traceinsight.result import PART_MEANINGS, PART_WORDS, Device, LongGap, RunReport, Step

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_BACKTICKS = re.compile(r"`([^`]+)`")


def inline_code(text: str) -> Markup:
    """Escape `text`, then show `backticked` spans (our advice's code) as <code>."""
    return Markup(_BACKTICKS.sub(r"<code>\1</code>", str(escape(text))))


def templates_dir() -> Path:
    """`traceinsight/templates` in an installed wheel, else `templates/` of the checkout."""
    for candidate in (_PACKAGE_DIR / "templates", _PACKAGE_DIR.parent / "templates"):
        if (candidate / "base.html").is_file():
            return candidate
    raise FileNotFoundError("traceinsight templates not found (broken installation)")


# The templates' filters: numbers and times for people, our advice's code, long names cut.
_FILTERS = {
    "ns": fmt_ns,
    "pct": fmt_pct,
    "bytes": fmt_bytes,
    "count": fmt_count,
    "code": inline_code,
    "plural": plural,
    "clip": clip,
    "trace_ms": fmt_trace_ms,
    "shell_join": shlex.join,
    "when": fmt_iso,
    "rate": fmt_rate,
    "flop": fmt_flop,
}


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """The templates compiled by an earlier run, kept by jinja2 in a folder of this user's only (in the temporary
    folder, made with mode 0700 and refused when another user owns it), each under its file's path and used only
    while its source is unchanged: compiling them took 0.13-0.17 s of every report (issue 38). A cache that
    cannot be written is none, never an error."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with suppress(OSError):
            super().dump_bytecode(bucket)


def _template_cache() -> jinja2.BytecodeCache | None:
    """`_TemplateCache` in jinja2's own folder, or None where no safe one can be made."""
    try:
        return _TemplateCache()
    except (OSError, RuntimeError):  # no temporary folder, or one another user could write to
        return None


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        bytecode_cache=_template_cache(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(_FILTERS)
    functions = (evidence_rows, gap_step, kernel_tables, partial_notes, other_warnings, run_header, util_label)
    functions += (critical_path_sentence, input_label, path_groups, device_words, folds_devices)  # type: ignore[assignment]
    functions += (bottleneck_name, culprit_text, gap_cause_words, longest_gaps, projection_source)  # type: ignore[assignment]
    env.globals.update({f.__name__: f for f in (*functions, input_verdict, mfu_text, coverage_text)})
    env.globals.update(bottlenecks_heading=BOTTLENECKS_HEADING, memory_warnings=MEMORY_WARNINGS)
    env.globals.update(part_words=PART_WORDS, part_meanings=PART_MEANINGS)
    return env


# Past this many devices the page shows one summary row a device and folds each one's detail (memory figures and
# chart, longest gaps) in a <details>: eight identical memory tables took most of an 8-GPU page (issue 38).
FOLD_DEVICES_OVER = 2


def folds_devices(report: RunReport) -> bool:
    """Whether the page folds each device's detail (`FOLD_DEVICES_OVER`)."""
    return len(report.devices) > FOLD_DEVICES_OVER


def longest_gaps(devices: Sequence[Device], limit: int) -> list[tuple[str, LongGap]]:
    """The `limit` longest gaps of all the devices, longest first, each with its device."""
    found = [(d.id, x) for d in devices for x in d.gaps.longest]
    return sorted(found, key=lambda pair: -pair[1].dur_ns)[:limit]


def path_groups(report: RunReport) -> list[tuple[str, float, float]]:
    """The critical path's groups, most time first: (group, share of the steps' time, mean ns a step)."""
    cp = report.critical_path
    count = len(cp.steps)
    ranked = sorted(cp.shares, key=lambda g: -cp.shares[g])
    return [(g, cp.shares[g], sum(s.groups.get(g, 0) for s in cp.steps) / count) for g in ranked] if count else []


def evidence_rows(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """A bottleneck's evidence as (label, value) for people; figures nobody knows are left out."""
    return [(evidence_label(k), text) for k, v in evidence.items() if (text := fmt_evidence(k, v)) is not None]


def gap_step(start_ns: int, items: Sequence[Step]) -> str:
    """The step whose [start, start + dur) holds `start_ns` ('7'), else where the gap falls between steps."""
    if not items:
        return "-"
    ordered = sorted(items, key=lambda s: s.start_ns)
    at = bisect.bisect_right([s.start_ns for s in ordered], start_ns) - 1
    if at >= 0 and start_ns < ordered[at].start_ns + ordered[at].dur_ns:
        return str(ordered[at].id)
    if at < 0:
        return f"before {ordered[0].id}"
    if at == len(ordered) - 1:
        return f"after {ordered[-1].id}"
    return f"between {ordered[at].id} and {ordered[at + 1].id}"


def _spread(values: Sequence[int | float], fmt: Any) -> str:
    """One figure when the devices agree, else 'low \u2013 high'."""
    low, high = min(values), max(values)
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)} \u2013 {fmt(high)}"


_TENSOR_CORE_WORDS = {True: "yes", False: "no", None: "unknown"}


def kernel_tables(devices: Sequence[Device], limit: int = 10) -> list[dict[str, Any]]:
    """The top-kernel tables, one per distinct list: devices whose top `limit` kernels are the same names
    in the same order share one table, whose figures give the devices' range where they differ. Names are
    shortened to the function (`diff.normalise_kernel_name`); a shortened name that repeats in one table
    is numbered, and the full name goes with it (a click away on the page)."""
    groups: dict[tuple[str, ...], list[Device]] = {}
    for d in devices:
        top = d.kernels.top[:limit]
        if top:
            groups.setdefault(tuple(t.name for t in top), []).append(d)
    tables = []
    for names, members in groups.items():
        seen: dict[str, int] = {}
        rows = []
        for i, name in enumerate(names):
            short = normalise_kernel_name(name)
            seen[short] = seen.get(short, 0) + 1
            label = short if seen[short] == 1 else f"{short} (variant {seen[short]})"
            tops = [m.kernels.top[i] for m in members]
            rows.append(
                {
                    "label": clip(label, 120),
                    "name": name,
                    "calls": _spread([t.count for t in tops], fmt_count),
                    "total": _spread([t.total_ns for t in tops], fmt_ns),
                    "mean": _spread([t.mean_ns for t in tops], fmt_ns),
                    # Same name, same answer on every device: the first one's ("unknown" where the name tells
                    # neither Tensor Core use nor the precision).
                    "tensor_core": _TENSOR_CORE_WORDS[tops[0].tensor_core],
                    # The framework op that launched it (Kineto links them); the first device's, where linked.
                    "op": clip(tops[0].op or "", 120),
                }
            )
        tables.append({"devices": [m.id for m in members], "rows": rows, "ops": any(r["op"] for r in rows)})
    return tables


_TABLE = re.compile(r"<table[^>]*>.*?</table>", re.S)
_ROW = re.compile(r"<tr[^>]*>.*?</tr>", re.S)
_CELL = re.compile(r"<t([hd])([^>]*)>(.*?)</t\1>", re.S)
_TAG = re.compile(r"<[^>]+>")


def _without_empty_columns(table: str) -> str:
    """`table` without the columns whose every data cell is '-' (nothing known in any row)."""
    cells = [_CELL.findall(row) for row in _ROW.findall(table)]
    data = [c for c in cells if c and all(kind == "d" for kind, _, _ in c)]
    if not data or len({len(c) for c in cells}) != 1:
        return table
    empty = {i for i in range(len(data[0])) if all(_TAG.sub("", c[i][2]).strip() == "-" for c in data)}
    if not empty:
        return table

    def keep(row: re.Match[str]) -> str:
        text = row.group(0)
        kept = "".join(m.group(0) for i, m in enumerate(_CELL.finditer(text)) if i not in empty)
        return text[: text.index(">") + 1] + kept + "</tr>"

    return _ROW.sub(keep, table)


def without_empty_columns(page: str) -> str:
    """Every table of our own page without its '-'-only columns (cells are never nested, names are escaped)."""
    return _TABLE.sub(lambda m: _without_empty_columns(m.group(0)), page)


CONTENTS_MARK = "<!-- contents -->"  # where report.html puts the table of contents
_SECTION_HEADING = re.compile(r'<section id="([\w-]+)">\s*<h2>(.*?)</h2>', re.S)


def with_contents(page: str) -> str:
    """`page` with its table of contents at `CONTENTS_MARK`: a link to each section the page holds, by its id, named
    by its heading up to a colon ("Bottlenecks", not the whole line). Made from the page itself, so it lists the
    sections this run has and every link finds its target."""
    entries = [
        (sid, Markup(_TAG.sub("", heading).split(":")[0].strip())) for sid, heading in _SECTION_HEADING.findall(page)
    ]
    return page.replace(CONTENTS_MARK, environment().get_template("_contents.html").render(entries=entries), 1)


def render_html(report: RunReport, analysis: Analysis) -> str:
    """The page, its charts written as inline SVG (`svg_charts`)."""
    return _page(report, draw_charts(report, chart_run(analysis)))


def _page(report: RunReport, drawn: Charts) -> str:
    charts = {name: Markup(svg) if svg else None for name, svg in drawn.items()}
    page = (
        environment()
        .get_template("report.html")
        .render(
            report=report,
            charts=charts,
            capture=capture_sentence(report),
            verdict=verdict_sentence(report),
            projection=projection_sentence(report),
        )
    )
    return without_empty_columns(with_contents(page))


def render_notebook(report: RunReport, analysis: Analysis) -> str:
    """The notebook view (`traceinsight.Report._repr_html_`): the headline, the bottleneck cards and the
    timeline chart, one HTML fragment with a style of its own (scoped to it) and no script."""
    timeline = utilisation_timeline(chart_run(analysis), device_words(report).util)
    return (
        environment()
        .get_template("notebook.html")
        .render(
            report=report,
            timeline=Markup(timeline) if timeline else None,
            capture=capture_sentence(report),
            verdict=verdict_sentence(report),
            projection=projection_sentence(report),
        )
    )
