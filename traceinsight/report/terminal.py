"""The compact summary printed on stdout (colours only on a terminal)."""

from __future__ import annotations

from typing import Any

from traceinsight.report.format import (
    escape_control,
    fmt_bytes,
    fmt_count,
    fmt_ns,
    fmt_pct,
    fmt_step_change,
    plural,
)
from traceinsight.report.json import MIN_STEADY_STEPS

_SEVERITY_COLOUR = {"high": "\033[31m", "medium": "\033[33m", "low": "\033[36m"}
_BOLD, _RESET = "\033[1m", "\033[0m"


def verdict_sentence(report: dict[str, Any]) -> str:
    """The top bottleneck and what it costs a step, or that nothing stands out; figures over the steps, for
    the devices that ran kernels, and a warning when too few steps were captured to trust them."""
    top = report["bottlenecks"][:1]
    totals = report["totals"]
    if not report["devices"]:
        lead = "No accelerator activity in this trace"
    else:
        util, idle = fmt_pct(totals.get("step_gpu_util")), fmt_pct(totals.get("step_idle_fraction"))
        lead = f"GPU-Util {util} of step time (devices idle {idle} of it)"
    if not top:
        sentence = f"{lead}; no bottleneck worth fixing found."
    else:
        b = top[0]
        p = b["projection"]
        cost = f"{fmt_ns(b['fraction'] * p['step_ns_before'])} a step ({fmt_pct(b['fraction'])} of the step)"
        basis = "" if p["basis"] == "measured" else ", estimated"
        sentence = f"{lead}; the main bottleneck is {b['id']} ({b['title']}), costing {cost}{basis}."
    few = report["warnings"].get("few_steps")
    if few is not None:
        sentence += f" Only {plural(few, 'step')} captured: profile at least {MIN_STEADY_STEPS} steps."
    return sentence


def projection_sentence(report: dict[str, Any]) -> str | None:
    """The headline what-if: 'Fixing the top 2 (input_bound, host_bound): step 174.8 -> 99.7 ms (1.75x), GPU-Util
    54.9 % -> 96.2 %.' None when nothing fires."""
    p = report.get("projection")
    if not p:
        return None
    applied = p["applied"]
    which = f"the top {len(applied)} ({', '.join(applied)})" if len(applied) > 1 else applied[0]
    util = ""
    if p["gpu_util_before"] is not None and p["gpu_util_after"] is not None:
        util = f", GPU-Util in the steps {fmt_pct(p['gpu_util_before'])} \u2192 {fmt_pct(p['gpu_util_after'])}"
    estimate = " (estimated)" if p["basis"] == "estimated" else ""
    change = fmt_step_change(p["step_ns_before"], p["step_ns_after"], p["speedup"])
    return f"Fixing {which}{estimate}: step {change}{util}."


def render_terminal(report: dict[str, Any], color: bool = False) -> str:
    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    inputs = report["inputs"]
    steps = report["steps"]
    lines = [
        paint(f"traceinsight: {escape_control(report['run'])}", _BOLD),
        f"  framework {report['framework']}, {plural(len(inputs), 'input')}, "
        f"{plural(report['totals']['device_count'], 'device')}, "
        f"{plural(steps['count'], 'step')} ({steps['source']}: {escape_control(steps['marker'])}), "
        f"mean step {fmt_ns(steps['mean_ns'])}",
        "  " + verdict_sentence(report),
    ]
    headline = projection_sentence(report)
    if headline:
        lines.append("  " + headline)
    if report["devices"]:
        lines += ["", f"  {'device':<22}{'idle':>9}{'kernels':>10}{'small':>9}{'H2D':>11}{'H2D bytes':>12}"]
    for d in report["devices"]:
        h2d = d["copies"]["h2d"]
        lines.append(
            f"  {escape_control(d['id']):<22}{fmt_pct(d['idle_fraction']):>9}{fmt_count(d['kernels']['count']):>10}"
            f"{fmt_count(d['kernels']['small_count']):>9}{fmt_ns(h2d['total_ns']):>11}{fmt_bytes(h2d['bytes']):>12}"
        )
    ip = report["input_pipeline"]
    lines += ["", f"  input pipeline: {ip['verdict']} ({fmt_pct(ip['fraction'])} of step time waiting for input)", ""]
    if report["bottlenecks"]:
        lines.append(paint("  Bottlenecks (measured stalls first; step after each fix alone)", _BOLD))
    for b in report["bottlenecks"]:
        sev = paint(f"{b['severity']:<6}", _SEVERITY_COLOUR[b["severity"]])
        p = b["projection"]
        after = fmt_step_change(p["step_ns_before"], p["step_ns_after"], p["speedup"])
        basis = "" if p["basis"] == "measured" else " (estimate)"
        lines.append(
            f"  {b['rank']}. {sev} {b['id']:<14} {fmt_pct(b['fraction']):>8}  step {after}{basis}  {b['title']}"
        )
        if b["recommendations"]:
            lines.append(f"       -> {b['recommendations'][0]}")
    if report["warnings"]:
        warned = ", ".join(f"{k} x{v}" for k, v in report["warnings"].items())
        lines += ["", "  warnings: " + escape_control(warned)]
    return "\n".join(lines)
