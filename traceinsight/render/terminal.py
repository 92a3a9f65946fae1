"""The compact summary printed on stdout (colours only on a terminal)."""

from __future__ import annotations

from traceinsight.render.format import escape_control, fmt_bytes, fmt_count, fmt_ns, fmt_pct
from traceinsight.render.meta import runs_line
from traceinsight.render.wording import (
    BOTTLENECKS_HEADING,
    MEMORY_WARNINGS,
    NO_PROJECTION,
    bottleneck_name,
    capture_sentence,
    collectives_sentence,
    compute_sentence,
    critical_path_sentence,
    culprit_text,
    input_verdict,
    other_warnings,
    partial_notes,
    path_change,
    path_disagrees,
    projection_sentence,
    run_header,
    step_after_fix,
    verdict_sentence,
)
from traceinsight.result import Bottleneck, RunReport

_SEVERITY_COLOUR = {"high": "\033[31m", "medium": "\033[33m", "low": "\033[36m"}
_BOLD, _RESET = "\033[1m", "\033[0m"


def memory_lines(report: RunReport) -> list[str]:
    """One line per device with memory events: its peak, the capacity, the headroom and the batch factor."""
    out = []
    for d in report.devices:
        m = d.memory
        if not m:
            continue
        peak = fmt_bytes(m.peak_in_use_bytes)
        of = f" of {fmt_bytes(m.capacity_bytes)}" if m.capacity_bytes else ""
        relative = "" if m.absolute else " (relative to the profile start)"
        free = f", {fmt_pct(m.headroom_fraction)} free" if m.headroom_fraction is not None else ""
        grow = f", the batch could grow about {m.batch_headroom_factor:.1f}x" if m.batch_headroom_factor else ""
        warn = "".join(f"; {MEMORY_WARNINGS[w]}" for w in m.warnings if w in MEMORY_WARNINGS)
        out.append(f"memory {escape_control(d.id)}: peak {peak}{of}{relative}{free}{grow}{warn}")
    return out


def _step_words(bottleneck: Bottleneck) -> str:
    """'step 174.8 -> 115.6 ms (1.51x)', or that no speedup is projected."""
    after = step_after_fix(bottleneck)
    return after if after == NO_PROJECTION else f"step {after}"


def render_terminal(report: RunReport, color: bool = False) -> str:
    """The summary; every string from the trace escaped (`escape_control`), so only our colours reach the
    terminal."""

    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    lines = [
        paint(f"traceinsight: {escape_control(report.run)}", _BOLD),
        *([f"  {escape_control(runs)}"] if (runs := runs_line(report)) else []),
        "  " + escape_control(", ".join(run_header(report))),
        *([f"  {escape_control(capture)}"] if (capture := capture_sentence(report)) else []),
        "  " + escape_control(verdict_sentence(report)),
    ]
    if projection := projection_sentence(report):
        lines.append("  " + escape_control(projection))
    if compute := compute_sentence(report):
        lines.append("  " + escape_control(compute))
    if collectives := collectives_sentence(report):
        lines.append("  " + escape_control(collectives))
    if path := critical_path_sentence(report):
        lines.append("  " + escape_control(path))
    lines += [paint("  " + escape_control(note), _SEVERITY_COLOUR["high"]) for note in partial_notes(report)]
    if report.devices:
        lines += ["", f"  {'device':<22}{'idle*':>9}{'kernels':>10}{'small':>9}{'H2D':>11}{'H2D bytes':>12}"]
    for d in report.devices:
        h2d = d.copies["h2d"]
        lines.append(
            f"  {escape_control(d.id):<22}{fmt_pct(d.idle_fraction):>9}{fmt_count(d.kernels.count):>10}"
            f"{fmt_count(d.kernels.small_count):>9}{fmt_ns(h2d.total_ns):>11}{fmt_bytes(h2d.bytes):>12}"
        )
    if report.devices:
        lines.append("  * idle: share of the steps' time nothing runs on the device; counts and copies: whole capture")
    lines += [f"  {line}" for line in memory_lines(report)]
    lines += ["", f"  input pipeline: {escape_control(input_verdict(report))}", ""]
    if report.bottlenecks:
        lines.append(paint(f"  {BOTTLENECKS_HEADING}", _BOLD))
    for b in report.bottlenecks:
        sev = paint(f"{b.severity:<6}", _SEVERITY_COLOUR[b.severity])
        basis = " (estimate)" if b.projection and b.projection.basis == "estimated" else ""
        lines.append(
            f"  {b.rank}. {sev} {escape_control(bottleneck_name(b)):<16} {fmt_pct(b.fraction):>8}  "
            f"{_step_words(b)}{basis}  {escape_control(b.title)}"
        )
        if culprit := culprit_text(b):
            lines.append(f"       cause: {escape_control(culprit)}")
        if b.projection and path_disagrees(b.projection):
            lines.append(f"       {path_change(b.projection)}")
        if b.recommendations:
            lines.append(f"       -> {escape_control(b.recommendations[0])}")
    if warnings := other_warnings(report):
        warned = ", ".join(f"{k} x{v}" for k, v in warnings.items())
        lines += ["", "  warnings: " + escape_control(warned)]
    return "\n".join(lines)
