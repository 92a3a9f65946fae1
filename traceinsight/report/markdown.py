"""A short Markdown summary for CI step summaries (GitHub Actions `$GITHUB_STEP_SUMMARY`)."""

from __future__ import annotations

from typing import Any

from traceinsight.report.format import fmt_bytes, fmt_count, fmt_ns, fmt_pct, fmt_step_change
from traceinsight.report.terminal import projection_sentence, verdict_sentence


def markdown_cell(text: str) -> str:
    """Table-cell safe text: pipes and newlines would break the table."""
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    totals = report["totals"]
    steps = report["steps"]
    ip = report["input_pipeline"]
    lines = [
        f"## traceinsight: {markdown_cell(report['run'])}",
        "",
        f"**{markdown_cell(verdict_sentence(report))}**",
        "",
        *([markdown_cell(projection_sentence(report) or ""), ""] if report.get("projection") else []),
        "| metric | value |",
        "|---|---|",
        f"| framework | {report['framework']} |",
        f"| devices | {totals['device_count']} |",
        f"| idle fraction | {fmt_pct(totals['idle_fraction'])} |",
        f"| GPU-Util | {fmt_pct(totals.get('gpu_util'))} |",
        f"| steps | {steps['count']} ({steps['source']}), mean {fmt_ns(steps['mean_ns'])} |",
        f"| input wait | {fmt_pct(ip['fraction'])} ({ip['verdict']}) |",
        f"| kernels (small) | {fmt_count(totals['kernel_count'])} ({fmt_count(totals['small_kernel_count'])}) |",
        f"| H2D copies | {fmt_count(totals['h2d_count'])}, {fmt_ns(totals['h2d_ns'])}, "
        f"{fmt_bytes(totals['h2d_bytes'])} |",
        "",
    ]
    if report["bottlenecks"]:
        lines += [
            "| # | bottleneck | severity | share of step | step after this fix | basis | first fix |",
            "|---|---|---|---|---|---|---|",
        ]
        for b in report["bottlenecks"]:
            fix = b["recommendations"][0] if b["recommendations"] else ""
            p = b["projection"]
            after = fmt_step_change(p["step_ns_before"], p["step_ns_after"], p["speedup"])
            lines.append(
                f"| {b['rank']} | {b['id']} | {b['severity']} | {fmt_pct(b['fraction'])} | {after} | {p['basis']} "
                f"| {markdown_cell(fix)} |"
            )
    else:
        lines.append("No bottleneck worth fixing found.")
    return "\n".join(lines) + "\n"
