"""A short Markdown summary for CI step summaries (GitHub Actions `$GITHUB_STEP_SUMMARY`)."""

from __future__ import annotations

from traceinsight.render.format import fmt_bytes, fmt_count, fmt_iso, fmt_ns, fmt_pct, markdown_code, markdown_text
from traceinsight.render.meta import runs_line
from traceinsight.render.wording import (
    bottleneck_name,
    capture_sentence,
    collectives_sentence,
    compute_sentence,
    critical_path_sentence,
    culprit_text,
    input_verdict,
    partial_notes,
    path_change,
    path_disagrees,
    projection_sentence,
    step_after_fix,
    verdict_sentence,
)
from traceinsight.result import Bottleneck, RunReport, Steps, Totals


def _link(text: str, target: str) -> str:
    """A Markdown link whose text and target may hold spaces, brackets or parentheses."""
    return f"[{markdown_text(text)}](<{target.replace('<', '%3C').replace('>', '%3E')}>)"


def provenance(report: RunReport, html_file: str | None, html_url: str | None) -> list[str]:
    """Where the full report is and what it was made from: for a CI page to date the run, and to link the page
    only at an absolute URL (a relative link breaks where the summary is shown: `$GITHUB_STEP_SUMMARY`)."""
    meta = report.meta
    parts = []
    if html_url:
        parts.append(f"HTML report: {_link((html_file or html_url).rsplit('/', 1)[-1], html_url)}")
    elif html_file:
        parts.append(f"HTML report: {markdown_code(html_file)}")
    if meta.input:
        parts.append(f"input {markdown_code(meta.input)}")
    if meta.capture_date:
        parts.append(f"captured {fmt_iso(meta.capture_date)}")
    if meta.generated_at:
        parts.append(f"generated {fmt_iso(meta.generated_at)}")
    return [" \u00b7 ".join(parts), ""] if parts else []


def _device_rows(totals: Totals) -> list[str]:
    """The accelerator rows (a CPU-only run has none)."""
    return [
        f"| idle (share of the steps) | {fmt_pct(totals.idle_fraction)} |",
        f"| GPU-Util (share of the steps) | {fmt_pct(totals.gpu_util)} |",
        f"| kernels (small) | {fmt_count(totals.kernel_count)} ({fmt_count(totals.small_kernel_count)}) |",
        f"| H2D copies | {fmt_count(totals.h2d_count)}, {fmt_ns(totals.h2d_ns)}, {fmt_bytes(totals.h2d_bytes)} |",
    ]


def _spread(steps: Steps) -> str:
    spread = steps.spread
    if spread is None:
        return ""
    return f", \u03c3 {fmt_ns(spread.stdev_ns)}, min {fmt_ns(spread.min_ns)}, max {fmt_ns(spread.max_ns)}"


def _step_after(b: Bottleneck) -> str:
    """The step after this fix, and the critical path's where it differs (`path_change`)."""
    p = b.projection
    if p is None or not path_disagrees(p):
        return step_after_fix(b)
    return f"{step_after_fix(b)}; {path_change(p)}"


def render_markdown(report: RunReport, html_file: str | None = None, html_url: str | None = None) -> str:
    """The summary; `html_file`: the HTML report's file, named; `html_url`: an absolute URL it is linked at."""
    totals = report.totals
    steps = report.steps
    lines = [
        f"## traceinsight: {markdown_text(report.run)}",
        "",
        *([runs, ""] if (runs := runs_line(report, markdown_code)) else []),
        *provenance(report, html_file, html_url),
        *([markdown_text(capture), ""] if (capture := capture_sentence(report)) else []),
        f"**{markdown_text(verdict_sentence(report))}**",
        "",
        *(line for note in partial_notes(report) for line in (f"**{markdown_text(note)}**", "")),
        *([markdown_text(projection_sentence(report) or ""), ""] if report.projection else []),
        "| metric | value |",
        "|---|---|",
        f"| framework | {markdown_text(report.framework)} |",
        f"| devices | {totals.device_count} |",
        *(_device_rows(totals) if totals.device_count else []),
        f"| steps | {steps.count} ({markdown_text(steps.source)}), mean {fmt_ns(steps.mean_ns)}{_spread(steps)} |",
        f"| input pipeline | {markdown_text(input_verdict(report))} |",
        *(
            [f"| compute | {markdown_text(compute.removeprefix('Compute: '))} |"]
            if (compute := compute_sentence(report))
            else []
        ),
        *(
            [f"| collectives | {markdown_text(text.removeprefix('Collectives '))} |"]
            if (text := collectives_sentence(report))
            else []
        ),
        *(
            [f"| critical path | {markdown_text(path.removeprefix('Critical path: '))} |"]
            if (path := critical_path_sentence(report))
            else []
        ),
        "",
    ]
    if report.bottlenecks:
        lines += [
            "| # | bottleneck | cause | severity | share of step | step after this fix | basis | first fix |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for b in report.bottlenecks:
            fix = b.recommendations[0] if b.recommendations else ""
            lines.append(
                f"| {b.rank} | {markdown_text(bottleneck_name(b))} | {markdown_text(culprit_text(b) or '-')} "
                f"| {markdown_text(b.severity)} | {fmt_pct(b.fraction)} "
                f"| {_step_after(b)} | {markdown_text(b.projection.basis if b.projection else 'none')} "
                f"| {markdown_text(fix)} |"
            )
    else:
        lines.append("No bottleneck worth fixing found.")
    return "\n".join(lines) + "\n"
