"""`traceinsight diff` closes the loop: what BASE's projections promised against the step NEW measured.

Hand-made reports (the builders of tests/test_diff.py) with known step times; every expected figure is
worked out here from those numbers.
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
            _projected(_sized("input_bound", 60 * MS, 0.34), "measured", 115_600_000, 1.5138),
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
    base, new = _pair()
    checks = projection_checks(base, new)
    assert [c["id"] for c in checks] == ["input_bound", "launch_bound"]  # h2d_copy grew, idle_other has no projection
    gone, shrunk = checks
    assert gone == {
        "id": "input_bound",
        "basis": "measured",
        "status": "gone",
        "projected_step_ns_before": 175_000_000,
        "projected_step_ns_after": 115_600_000,
        "projected_saving_ns": 59_400_000,
        "projected_speedup": 1.5138,
        "measured_step_ns_before": 175_000_000,
        "measured_step_ns_after": 139_700_000,
        "measured_saving_ns": 35_300_000,
        "measured_speedup": 175_000_000 / 139_700_000,
        "error": 115_600_000 / 139_700_000 - 1,
    }
    assert gone["measured_speedup"] == pytest.approx(1.2527, abs=1e-4)
    assert gone["error"] == pytest.approx(-0.1725, abs=1e-4)  # the projection promised 17 % more than came
    assert (shrunk["status"], shrunk["basis"]) == ("shrunk", "estimated")
    assert (shrunk["projected_step_ns_after"], shrunk["projected_saving_ns"]) == (160_000_000, 15_000_000)
    assert shrunk["projected_speedup"] == 1.09375
    assert shrunk["measured_saving_ns"] == 35_300_000
    assert shrunk["error"] == 160_000_000 / 139_700_000 - 1
    assert shrunk["error"] == pytest.approx(0.1453, abs=1e-4)  # too pessimistic: the step fell further


def test_shrunk_by_fraction_alone_and_unchanged_not_checked():
    base = _report(
        steps=_steps(BASE_STEP),
        bottlenecks=[
            _projected(_sized("d2h_sync", 4 * MS, 0.05), "measured", 171 * MS, 1.0234),
            _projected(_sized("host_bound", 4 * MS, 0.05), "measured", 171 * MS, 1.0234),
        ],
    )
    # d2h_sync: more time in a longer run, a smaller share of the step; host_bound: the same on both counts.
    new = _report(
        steps=_steps(NEW_STEP), bottlenecks=[_sized("d2h_sync", 5 * MS, 0.03), _sized("host_bound", 4 * MS, 0.05)]
    )
    assert [(c["id"], c["status"]) for c in projection_checks(base, new)] == [("d2h_sync", "shrunk")]


def test_headline_against_the_measured_step():
    base, new = _pair()
    assert headline_check(base, new) == {
        "applied": ["input_bound", "launch_bound", "h2d_copy"],
        "addressed": ["input_bound", "launch_bound"],
        "projected_step_ns_before": 175_000_000,
        "projected_step_ns_after": 100_000_000,
        "projected_saving_ns": 75_000_000,
        "projected_speedup": 1.75,
        "measured_step_ns_before": 175_000_000,
        "measured_step_ns_after": 139_700_000,
        "measured_saving_ns": 35_300_000,
        "measured_speedup": 175_000_000 / 139_700_000,
        "error": 100_000_000 / 139_700_000 - 1,
        "projected_gpu_util_after": 0.9,
        "measured_gpu_util_before": 0.55,
        "measured_gpu_util_after": 0.7,
    }
    diff = build_diff(base, new)
    assert diff["projections"]["headline"]["error"] == pytest.approx(-0.2842, abs=1e-4)
    assert [c["id"] for c in diff["projections"]["checks"]] == ["input_bound", "launch_bound"]


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
        "measured 175.0 -> 139.7 ms/step (1.25x), projection off by -17.3 %\n" in md
    )
    assert (
        "- launch_bound (estimated, shrunk): projected 175.0 -> 160.0 ms/step (1.09x), "
        "measured 175.0 -> 139.7 ms/step (1.25x), projection off by +14.5 %\n" in md
    )
    assert (
        "- all applied: input_bound, launch_bound, h2d_copy (combined, 2 of 3 fixed): projected 175.0 -> 100.0 "
        "ms/step (1.75x), measured 175.0 -> 139.7 ms/step (1.25x), projection off by -28.4 %\n" in md
    )
    assert "- h2d_copy (" not in md  # grew: no check of its own
    text = render_diff_terminal(diff)
    assert "  input_bound (measured, gone): projected 175.0 -> 115.6 ms/step (1.51x)" in text
    html = render_diff_html(diff)
    section = html[html.index('<section id="projections">') :]
    section = section[: section.index("</section>")]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)
    assert cells[:8] == ["input_bound", "measured", "gone", "115.6", "139.7", "59.4", "35.3", "-17.3 %"]
    assert cells[8:16] == ["launch_bound", "estimated", "shrunk", "160.0", "139.7", "15.0", "35.3", "+14.5 %"]
    assert len(cells) == 24


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
    assert saved["headline"]["measured_saving_ns"] == 35_300_000
    assert "Projected vs measured" in capsys.readouterr().out
