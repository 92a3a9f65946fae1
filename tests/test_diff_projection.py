"""`traceinsight diff` closes the loop: what BASE's projections promised against the step NEW measured, for the
bottlenecks whose cause NEW changed.

Hand-made reports (the builders of tests/test_diff.py) with known step times; every expected figure is
worked out here from those numbers. They have no per-step values, so the noise is the fixed fallback
(`rules.FALLBACK_RELATIVE_NOISE`, 10 %).
"""

import html
import json
import re
from typing import Any

import pytest

from tests.test_diff import _bottleneck, _report, build_diff, typed
from traceinsight import diff as diffs
from traceinsight.cli import main
from traceinsight.render.diff_render import render_diff_html, render_diff_markdown, render_diff_terminal

MS = 1_000_000
BASE_STEP, NEW_STEP = 175 * MS, 139_700_000  # measured mean steps: 175.0 ms -> 139.7 ms


def projection_checks(base: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    return diffs.projection_checks(typed(base), typed(new))


def headline_check(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    return diffs.headline_check(typed(base), typed(new))


def _projected(bottleneck: dict[str, Any], basis: str, after_ns: int, speedup: float) -> dict[str, Any]:
    """`bottleneck` with a projection from BASE_STEP down to `after_ns`."""
    bottleneck["projection"] = {
        "basis": basis,
        "step_ns_before": BASE_STEP,
        "step_ns_after": after_ns,
        "saving_ns": BASE_STEP - after_ns,
        "speedup": speedup,
        "gpu_util_after": 0.8,
        "assumption": None if basis == "measured" else "kernels reach Tensor Core speed",
    }
    return bottleneck


def _on_path(bottleneck: dict[str, Any], after_ns: int) -> dict[str, Any]:
    """`bottleneck` whose fix, as an edit of the critical path, leaves `after_ns`."""
    bottleneck["projection"] |= {"path_step_ns_after": after_ns, "path_speedup": round(BASE_STEP / after_ns, 3)}
    return bottleneck


def _sized(bid: str, time_ns: int, fraction: float) -> dict[str, Any]:
    return {**_bottleneck(bid, "high", time_ns), "fraction": fraction}


def _steps(mean_ns: int | None) -> dict[str, Any]:
    return {"count": 4, "mean_ns": mean_ns, "median_ns": mean_ns}


def _pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """BASE: input_bound (gone in NEW), launch_bound (shrunk), h2d_copy (grew), all projected; idle_other
    (gone, no projection). BASE also projects all three applied together."""
    base = _report(
        "base",
        steps=_steps(BASE_STEP),
        bottlenecks=[
            _on_path(_projected(_sized("input_bound", 60 * MS, 0.34), "measured", 115_600_000, 1.5138), 120 * MS),
            _projected(_sized("launch_bound", 30 * MS, 0.17), "estimated", 160 * MS, 1.09375),
            _projected(_sized("h2d_copy", 5 * MS, 0.03), "measured", 170 * MS, 1.0294),
            _sized("idle_other", 2 * MS, 0.01),
        ],
    )
    base["totals"]["gpu_util"] = 0.55
    base["projection"] = {
        "step_ns_before": BASE_STEP,
        "step_ns_after": 100 * MS,
        "saving_ns": 75 * MS,
        "speedup": 1.75,
        "gpu_util_before": 0.55,
        "gpu_util_after": 0.9,
        "applied": ["input_bound", "launch_bound", "h2d_copy"],
    }
    new = _report(
        "new",
        steps=_steps(NEW_STEP),
        bottlenecks=[_sized("launch_bound", 10 * MS, 0.07), _sized("h2d_copy", 8 * MS, 0.06)],
    )
    new["totals"]["gpu_util"] = 0.7
    return base, new


def test_gone_and_shrunk_bottlenecks_are_checked_grown_ones_not():
    """input_bound is gone; launch_bound's cost over its 4 steps fell from 7.5 to 2.5 ms (beyond 10 % of 7.5 ms);
    h2d_copy's rose from 1.25 to 2 ms."""
    base, new = _pair()
    checks = projection_checks(base, new)
    assert [c["id"] for c in checks] == ["input_bound", "launch_bound"]  # h2d_copy grew, idle_other has no projection
    gone, shrunk = checks
    assert gone == {
        "id": "input_bound",
        "basis": "measured",
        "status": "gone",
        "cause": {"measure": "per_step_ns", "base": 59_400_000, "new": None, "noise": 5_940_000.0, "status": "gone"},
        "projected_step_ns_before": 175_000_000,
        "projected_step_ns_after": 115_600_000,
        "projected_saving_ns": 59_400_000,
        "projected_speedup": 1.5138,
        "measured_step_ns_before": 175_000_000,
        "measured_step_ns_after": 139_700_000,
        "measured_saving_ns": 35_300_000,
        "measured_speedup": 175_000_000 / 139_700_000,
        "error": 115_600_000 / 139_700_000 - 1,
        "path_step_ns_after": 120_000_000,
        "path_error": 120_000_000 / 139_700_000 - 1,
    }
    assert gone["measured_speedup"] == pytest.approx(1.2527, abs=1e-4)
    assert gone["error"] == pytest.approx(-0.1725, abs=1e-4)  # the projection promised 17 % more than came
    assert (shrunk["status"], shrunk["basis"]) == ("shrunk", "estimated")
    # NEW has no projection of it: both sides' time over the steps, never an estimate against a measurement.
    assert (shrunk["cause"]["base"], shrunk["cause"]["new"]) == (30 * MS // 4, 10 * MS // 4)
    assert (shrunk["projected_step_ns_after"], shrunk["projected_saving_ns"]) == (160_000_000, 15_000_000)
    assert shrunk["projected_speedup"] == 1.09375
    assert shrunk["measured_saving_ns"] == 35_300_000
    assert shrunk["error"] == 160_000_000 / 139_700_000 - 1
    assert shrunk["error"] == pytest.approx(0.1453, abs=1e-4)  # too pessimistic: the step fell further
    assert (shrunk["path_step_ns_after"], shrunk["path_error"]) == (None, None)  # no path projection: none to score


def test_a_cause_that_did_not_fall_beyond_the_noise_is_not_checked():
    base = _report(
        steps=_steps(BASE_STEP),
        bottlenecks=[
            _projected(_sized("d2h_sync", 4 * MS, 0.05), "measured", 171 * MS, 1.0234),
            _projected(_sized("host_bound", 4 * MS, 0.05), "measured", 171 * MS, 1.0234),
        ],
    )
    # d2h_sync: more time a step, a smaller share of it; host_bound: 4 -> 3.7 ms, less than 10 % of 4 ms.
    new = _report(
        steps=_steps(NEW_STEP), bottlenecks=[_sized("d2h_sync", 5 * MS, 0.03), _sized("host_bound", 3_700_000, 0.04)]
    )
    assert projection_checks(base, new) == []


def test_the_cause_is_the_findings_own_evidence():
    """fp32_compute's projected saving fell (the step around it changed) while its cause, the FP32 kernel time a
    step, stayed: its projection is not scored. input_bound's input wait fell beyond the noise: scored."""

    def evidence(bottleneck: dict[str, Any], **figures: int) -> dict[str, Any]:
        return {**bottleneck, "evidence": figures}

    base = _report(
        steps=_steps(BASE_STEP),
        bottlenecks=[
            evidence(
                _projected(_sized("fp32_compute", 50 * MS, 0.3), "estimated", 120 * MS, 1.46),
                fp32_eligible_per_step_ns=60 * MS,
            ),
            evidence(
                _projected(_sized("input_bound", 60 * MS, 0.3), "measured", 115 * MS, 1.5),
                input_wait_per_step_ns=60 * MS,
            ),
        ],
    )
    new = _report(
        steps=_steps(NEW_STEP),
        bottlenecks=[
            evidence(
                _projected(_sized("fp32_compute", 20 * MS, 0.15), "estimated", 120 * MS, 1.16),
                fp32_eligible_per_step_ns=61 * MS,
            ),
            evidence(
                _projected(_sized("input_bound", 5 * MS, 0.03), "measured", 135 * MS, 1.03),
                input_wait_per_step_ns=5 * MS,
            ),
        ],
    )
    (check,) = projection_checks(base, new)
    assert (check["id"], check["status"]) == ("input_bound", "shrunk")
    assert check["cause"] == {
        "measure": "evidence",
        "base": 60 * MS,
        "new": 5 * MS,
        "noise": 6 * MS,
        "status": "shrunk",
    }
    # The headline of both applied together is not scored: NEW left one of them alone.
    base["projection"] = {**_pair()[0]["projection"], "applied": ["input_bound", "fp32_compute"]}
    assert headline_check(base, new) is None


def test_headline_against_the_measured_step():
    base, new = _pair()
    assert headline_check(base, new) is None  # h2d_copy, one of the three applied, grew: not what was projected
    new["bottlenecks"] = new["bottlenecks"][:1]  # h2d_copy gone too
    assert headline_check(base, new) == {
        "applied": ["input_bound", "launch_bound", "h2d_copy"],
        "addressed": ["input_bound", "launch_bound", "h2d_copy"],
        "projected_step_ns_before": 175_000_000,
        "projected_step_ns_after": 100_000_000,
        "projected_saving_ns": 75_000_000,
        "projected_speedup": 1.75,
        "measured_step_ns_before": 175_000_000,
        "measured_step_ns_after": 139_700_000,
        "measured_saving_ns": 35_300_000,
        "measured_speedup": 175_000_000 / 139_700_000,
        "error": 100_000_000 / 139_700_000 - 1,
        "path_step_ns_after": None,  # the hand-built BASE's headline has no path projection
        "path_error": None,
        "projected_gpu_util_after": 0.9,
        "measured_gpu_util_before": 0.55,
        "measured_gpu_util_after": 0.7,
    }
    diff = build_diff(base, new)
    assert diff["projections"]["headline"]["error"] == pytest.approx(-0.2842, abs=1e-4)
    assert [c["id"] for c in diff["projections"]["checks"]] == ["input_bound", "launch_bound", "h2d_copy"]


def _plain(markdown: str) -> str:
    """The text a Markdown renderer shows: backslash escapes and HTML entities undone."""
    return html.unescape(re.sub(r"\\(.)", r"\1", markdown))


def test_old_reports_without_projections_give_no_checks():
    base = _report(steps=_steps(BASE_STEP), bottlenecks=[_sized("input_bound", 60 * MS, 0.34)])
    new = _report(steps=_steps(NEW_STEP))
    diff = build_diff(base, new)
    assert diff["projections"] == {"checks": [], "headline": None}
    # NEW having projections (a newer report) changes nothing: BASE's promise is what is checked.
    _, newer = _pair()
    newer["bottlenecks"] = [_projected(_sized("launch_bound", MS, 0.01), "measured", 100 * MS, 1.75)]
    assert build_diff(base, newer)["projections"] == {"checks": [], "headline": None}
    for text in (render_diff_html(diff), render_diff_markdown(diff), render_diff_terminal(diff)):
        assert "Projected vs measured" not in text and "ms/step" not in text


def test_unknown_steps_give_null_measurements_not_errors():
    base, new = _pair()
    base["steps"] = _steps(None)  # no steps found in BASE
    new["steps"] = _steps(0)
    (gone, _) = projection_checks(base, new)
    assert (gone["measured_step_ns_before"], gone["measured_step_ns_after"]) == (None, 0)
    assert (gone["measured_saving_ns"], gone["measured_speedup"], gone["error"]) == (None, None, None)
    assert gone["projected_step_ns_after"] == 115_600_000  # the projection itself still shows
    diff = build_diff(base, new)
    md = _plain(render_diff_markdown(diff))
    assert "measured - -> 0.0 ms/step (-), projection off by -" in md


def test_renderers_show_projected_vs_measured():
    diff = build_diff(*_pair())
    md = _plain(render_diff_markdown(diff))
    assert (
        "- input_bound (measured, gone): projected 175.0 -> 115.6 ms/step (1.51x), "
        "measured 175.0 -> 139.7 ms/step (1.25x), projection off by -17.3 % "
        "(critical path: 120.0 ms/step, off by -14.1 %)\n" in md
    )
    assert (
        "- launch_bound (estimated, shrunk): projected 175.0 -> 160.0 ms/step (1.09x), "
        "measured 175.0 -> 139.7 ms/step (1.25x), projection off by +14.5 %\n" in md
    )
    assert "- h2d_copy (" not in md and "all applied" not in md  # grew: no check, and the three were not all made
    text = render_diff_terminal(diff)
    assert "  input_bound (measured, gone): projected 175.0 -> 115.6 ms/step (1.51x)" in text
    html = render_diff_html(diff)
    section = html[html.index('<section id="projections">') :]
    section = section[: section.index("</section>")]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)
    input_bound = ["input_bound", "measured", "gone", "115.6", "139.7", "59.4", "35.3", "-17.3 %", "120.0", "-14.1 %"]
    assert cells[:10] == input_bound
    assert cells[10:20] == [
        "launch_bound",
        "estimated",
        "shrunk",
        "160.0",
        "139.7",
        "15.0",
        "35.3",
        "+14.5 %",
        "-",
        "-",
    ]
    assert len(cells) == 20


def test_projection_rows_are_escaped():
    base, new = _pair()
    evil = "<script>alert(1)</script>|\x1b[31m"
    base["bottlenecks"][0]["id"] = evil
    base["projection"]["applied"] = [evil]
    diff = build_diff(base, new)
    html = render_diff_html(diff)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    md = render_diff_markdown(diff)
    assert "<script>" not in md and "alert\\(1\\)&lt;/script&gt;\\|" in md  # escaped like every string here
    text = render_diff_terminal(diff)
    assert "\x1b" not in text and "\\x1b[31m (measured, gone)" in text


def test_cli_diff_of_two_saved_reports_prints_the_projection_line(tmp_path, capsys):
    base, new = _pair()
    base_path, new_path = tmp_path / "base.json", tmp_path / "new.json"
    base_path.write_text(json.dumps(base))
    new_path.write_text(json.dumps(new))
    md, js = tmp_path / "d.md", tmp_path / "d.json"
    argv = ["diff", str(base_path), str(new_path), "-o", str(tmp_path / "d.html"), "--markdown", str(md)]
    assert main([*argv, "--json", str(js)]) == 0
    assert (
        "input_bound (measured, gone): projected 175.0 -> 115.6 ms/step (1.51x), "
        "measured 175.0 -> 139.7 ms/step (1.25x), projection off by -17.3 %" in _plain(md.read_text())
    )
    saved = json.loads(js.read_text())["projections"]
    assert [c["id"] for c in saved["checks"]] == ["input_bound", "launch_bound"]
    assert saved["headline"] is None
    assert "Projected vs measured" in capsys.readouterr().out
