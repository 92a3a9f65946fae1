"""The self-contained HTML report, from jinja2 templates with autoescape on.

Templates live in the top-level `templates/` folder; the wheel ships them as
`traceinsight/templates`, so they are found from an installed wheel and from a
checkout alike. Everything from a trace passes through autoescape; only our own
matplotlib SVG is marked safe.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from traceinsight.analysis import Analysis
from traceinsight.report.format import fmt_bytes, fmt_count, fmt_ns, fmt_pct, plural
from traceinsight.report.painter import ChartPainter
from traceinsight.report.terminal import projection_sentence, verdict_sentence

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


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ns=fmt_ns, pct=fmt_pct, bytes=fmt_bytes, count=fmt_count, code=inline_code, plural=plural)
    return env


def render_html(report: dict[str, Any], analysis: Analysis, painter: ChartPainter | None = None) -> str:
    """The page; its charts drawn by `painter` (in its own process), else here."""
    drawn = (painter or ChartPainter(parallel=False)).paint(report, analysis)
    charts = {name: Markup(svg) if svg else None for name, svg in drawn.items()}
    return (
        environment()
        .get_template("report.html")
        .render(report=report, charts=charts, verdict=verdict_sentence(report), headline=projection_sentence(report))
    )
