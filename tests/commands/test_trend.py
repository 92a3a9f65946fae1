"""`traceinsight trend` end to end: a history of the real before/after pairs (saved `--json` reports) draws each fix's
step-time drop, `--fail-on` gates the last run against the median of the window, the orders, a logdir of traces, and
what it refuses (the page's own rendering: tests/render/test_trend_page.py)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES, typed_report
from traceinsight.cli import main
from traceinsight.gating import MissingValue, parse_threshold
from traceinsight.render.diff_render import fmt_relative
from traceinsight.render.format import fmt_ns

PAIRS = SAMPLE_TRACES / "pairs"
# Fixes that cut the step: a history of each one's before, then its after.
FIXES = ("tf_data_parallel", "torch_dataloader_workers", "tf_eager_vs_function")
SLOWER = "steps.mean_ns>+10%"


def _trend(tmp_path: Path, *args: str) -> tuple[int, dict, str, str]:
    """Run `trend` with every output; (exit code, JSON, HTML, Markdown); empty ones when nothing was written."""
    html, js, md = tmp_path / "t.html", tmp_path / "t.json", tmp_path / "t.md"
    code = main(["trend", *args, "-o", str(html), "--json", str(js), "--markdown", str(md), "-q", "--jobs", "1"])
    if not html.exists():
        return code, {}, "", ""
    return code, json.loads(js.read_text()), html.read_text(), md.read_text()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """The pairs' `--json` reports, as a CI history keeps them: a folder per build, in fix order."""
    folder = tmp_path_factory.mktemp("history")
    build = 0
    for pair in FIXES:
        for side in ("before", "after"):
            build += 1
            out = folder / f"build-{build}-{pair}-{side}" / "report.json"
            code = main(
                ["report", str(PAIRS / pair / side), "-o", "/dev/null", "--json", str(out), "-q", "--jobs", "1"]
            )
            assert code == 0
    return folder


def _reports(folder: Path) -> list[dict]:
    """The history's reports in build order (build-1 ... build-N: fewer than 10)."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*/report.json"))]


def _line(html: str, panel: str) -> list[tuple[float, float]]:
    """The (x, y) vertices of a trend panel's line in the page's SVG (y grows downwards)."""
    path = re.search(rf'<g id="trend-{panel}-line">\s*<path d="([^"]*)"', html)
    assert path, f"no {panel} line"
    return [(float(x), float(y)) for x, y in re.findall(r"[ML] ([-\d.]+) ([-\d.]+)", path[1])]


def test_pairs_history_draws_each_fix_step_drop(tmp_path, history):
    code, doc, html, md = _trend(tmp_path, str(history))
    assert code == 0
    reports = _reports(history)
    means = [r["steps"]["mean_ns"] for r in reports]
    assert doc["schema"] == "traceinsight.trend/1" and doc["order"] == "given"
    assert [row["name"] for row in doc["runs"]] == [
        p.relative_to(history).as_posix() for p in sorted(history.glob("*/report.json"))
    ]
    assert [row["mean_step_ns"] for row in doc["runs"]] == means
    assert [row["input_wait_fraction"] for row in doc["runs"]] == [r["input_pipeline"]["fraction"] for r in reports]
    # The chart's step line passes through every run's mean step, on one linear axis: y = a + b * mean, b < 0.
    points = _line(html, "steps")
    assert len(points) == len(means)
    xs, ys = zip(*points, strict=True)
    slope = (ys[1] - ys[0]) / (means[1] - means[0])
    assert slope < 0
    assert list(ys) == pytest.approx([ys[0] + slope * (mean - means[0]) for mean in means], abs=0.01)
    assert list(xs) == sorted(xs)
    for fix in range(len(FIXES)):
        before, after = 2 * fix, 2 * fix + 1
        assert means[after] < means[before]  # the fix's drop ...
        assert points[after][1] > points[before][1]  # ... drawn lower
        # ... and in the table: each run's mean step, and the change from the run before it.
        row = re.search(rf'<tr id="run-{after + 1}"[^>]*>(.*?)</tr>', html, re.S)[1]
        assert fmt_ns(means[after]) in row
        assert fmt_relative((means[after] - means[before]) / means[before]) in row
        assert f"| {fmt_ns(means[after])} | {fmt_relative((means[after] - means[before]) / means[before])} |" in md
    for mean, report in zip(means, reports, strict=True):
        assert f"mean step {int(mean) / 1e6:,.1f} ms" in html  # each point's hover title
        assert report["bottlenecks"][0]["id"] in html


def _noisy_history(tmp_path: Path, base: dict, factors: list[float]) -> Path:
    """A folder of copies of one saved report, each with its mean step scaled: run-1 ... run-N."""
    folder = tmp_path / "history"
    folder.mkdir()
    for i, factor in enumerate(factors, 1):
        doc = json.loads(json.dumps(base))
        doc["steps"]["mean_ns"] = int(base["steps"]["mean_ns"] * factor)
        (folder / f"run-{i}.json").write_text(json.dumps(doc))
    return folder


@pytest.mark.parametrize(
    ("last", "code"),
    [(1.3, 1), (1.03, 0), (0.7, 0)],
    ids=["made-slower", "normal", "faster"],
)
def test_fail_on_last_run_against_window_median(tmp_path, history, capsys, last, code):
    base = _reports(history)[1]
    # A noisy run (half the step) right before the last: the median of the window is not moved by it.
    folder = _noisy_history(tmp_path, base, [1.0, 1.02, 0.98, 1.01, 0.5, last])
    got, doc, html, _ = _trend(tmp_path, str(folder), "--window", "4", "--fail-on", SLOWER)
    assert got == code
    assert html and doc["gate"]["baseline"] == ["run-2.json", "run-3.json", "run-4.json", "run-5.json"]
    err = capsys.readouterr().err
    if code:
        assert doc["gate"]["crossed"] == [
            line.removeprefix("traceinsight: threshold crossed: ") for line in err.splitlines()
        ]
        assert "median of 4 runs" in err and "+30." in err
    else:
        assert doc["gate"]["crossed"] == [] and "threshold crossed" not in err


def test_one_noisy_run_fails_diff_not_trend(tmp_path, history):
    """What the window is for: the last run against the noisy one alone (`diff`) would fail the build."""
    folder = _noisy_history(tmp_path, _reports(history)[1], [1.0, 1.02, 0.98, 1.01, 0.5, 1.03])
    assert _trend(tmp_path, str(folder), "--window", "4", "--fail-on", SLOWER)[0] == 0
    diff = ["diff", str(folder / "run-5.json"), str(folder / "run-6.json"), "-o", str(tmp_path / "d.html"), "-q"]
    assert main([*diff, "--fail-on", SLOWER]) == 1


@pytest.mark.parametrize(("sides", "code"), [(("after", "before"), 1), (("before", "after"), 0)])
def test_fail_on_a_real_slower_run(tmp_path, history, sides, code):
    """A real before after an after (the fix undone) fails; the fix itself passes."""
    files = {p.parent.name.rsplit("-", 1)[1]: p for p in history.glob("build-*-tf_data_parallel-*/report.json")}
    got, doc, _, _ = _trend(tmp_path, *(str(files[side]) for side in sides), "--fail-on", SLOWER)
    assert got == code
    assert [row["source"] for row in doc["runs"]] == ["report", "report"]


def _bottlenecks(*items: tuple[str, str]):
    """A report whose bottlenecks are `items` (id, severity)."""
    fields = {"rank": 1, "time_ns": 1, "fraction": 0.1, "title": "t"}
    return typed_report(bottlenecks=[{"id": b, "severity": s, **fields} for b, s in items])


def test_window_bottleneck_gate():
    """`bottleneck=ID` over a window: new in the last run when none of the K had it, or medium/high there."""
    threshold = parse_threshold("bottleneck=h2d_copy", allow_change=True)
    had = _bottlenecks(("h2d_copy", "low"))
    assert threshold.check_window([_bottlenecks(), had], _bottlenecks(("h2d_copy", "low"))) is None
    message = threshold.check_window([_bottlenecks(), _bottlenecks()], _bottlenecks(("h2d_copy", "low")))
    assert message == "bottleneck=h2d_copy: bottleneck h2d_copy is new (low)"
    message = threshold.check_window([had, had], _bottlenecks(("h2d_copy", "high")))
    assert message == "bottleneck=h2d_copy: bottleneck h2d_copy is present (high)"
    assert threshold.check_window([had], _bottlenecks()) is None


def test_change_threshold_median_and_missing_values():
    step = parse_threshold(SLOWER, allow_change=True)
    runs = [typed_report(steps={"mean_ns": ns}) for ns in (100, 1000, 110, None)]
    last = typed_report(steps={"mean_ns": 120})
    assert step.check_window(runs, last) is None  # the median of 100, 110, 1000 is 110: +9.1 %
    message = step.check_window(runs[:1], last)
    assert message == "steps.mean_ns>+10%: steps.mean_ns 100 -> 120 (+20.0 %)"  # one run: diff's own words
    assert step.check_window([], last) is None  # no run before (a history's first): nothing to compare
    with pytest.raises(MissingValue, match="steps.mean_ns is missing or null in the base run"):
        step.check_window([runs[3]], last)  # a run before without the value: the missing-value policy decides
    with pytest.raises(MissingValue, match="steps.mean_ns is null in this run"):
        step.check_window(runs[:1], runs[3])


def test_order_time_follows_the_capture_clock(tmp_path, history):
    files = sorted(history.glob("*/report.json"), reverse=True)  # newest build first
    _, given, _, _ = _trend(tmp_path, *map(str, files))
    code, timed, _, _ = _trend(tmp_path, *map(str, files), "--order", "time")
    assert code == 0 and timed["order"] == "time"
    captured = [r["meta"]["capture_date"] for r in _reports(history)]
    assert [row["capture_time"] for row in given["runs"]] == captured[::-1]
    assert [row["capture_time"] for row in timed["runs"]] == sorted(captured)
    assert [row["mean_step_ns"] for row in timed["runs"]] == [r["steps"]["mean_ns"] for r in _reports(history)]


@pytest.mark.parametrize(
    ("key", "values", "order"),
    [
        ("meta.versions.build", ["10", "9", "2"], [2, 1, 0]),  # build numbers as numbers, not text
        ("meta.generated_at", ["2027-01-03T00:00:00Z", "2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z"], [1, 2, 0]),
    ],
)
def test_order_by_a_meta_key_of_saved_reports(tmp_path, history, key, values, order):
    base = _reports(history)[0]
    folder = tmp_path / "history"
    folder.mkdir()
    for i, value in enumerate(values):
        doc = json.loads(json.dumps(base))
        if key == "meta.generated_at":
            doc["meta"]["generated_at"] = value
        else:
            doc["meta"]["versions"]["build"] = value
        (folder / f"r{i}.json").write_text(json.dumps(doc))
    code, doc, _, _ = _trend(tmp_path, str(folder), "--order", key)
    assert code == 0 and doc["order"] == key
    assert [row["name"] for row in doc["runs"]] == [f"r{i}.json" for i in order]


def test_logdir_runs_ordered_by_a_run_info_version(tmp_path, history, monkeypatch):
    """A trace path: every run under it is analysed (and cached); `run_info.json` versions order them."""
    monkeypatch.setenv("TRACEINSIGHT_CACHE", str(tmp_path / "cache"))
    pair = PAIRS / "torch_dataloader_workers"
    logdir = tmp_path / "logdir"
    builds = {"b": ("before", "1.10"), "a": ("after", "1.9"), "c": ("before", "1.2")}
    for name, (side, build) in builds.items():
        shutil.copytree(pair / side, logdir / name)
        (logdir / name / "run_info.json").write_text(json.dumps({"build": build}))
    code, doc, _, _ = _trend(tmp_path, str(logdir), "--order", "meta.versions.build", "--fail-on", SLOWER)
    assert [row["name"] for row in doc["runs"]] == ["logdir/c", "logdir/a", "logdir/b"]  # 1.2, 1.9, 1.10
    assert {row["source"] for row in doc["runs"]} == {"trace"}
    saved = {d.name.rsplit("-", 1)[1]: d / "report.json" for d in history.glob("*torch_dataloader_workers*")}
    means = {side: json.loads(path.read_text())["steps"]["mean_ns"] for side, path in saved.items()}
    assert [row["mean_step_ns"] for row in doc["runs"]] == [means[builds[name][0]] for name in "cab"]
    assert code == 1 and doc["gate"]["crossed"]  # a before (1.10) after the fix: slower than the window's median
    assert list((tmp_path / "cache").rglob("*.json"))


def test_hostile_run_name_is_escaped(tmp_path, history):
    folder = tmp_path / "history"
    hostile = "<img src=x onerror=alert(1)>"
    for i, name in enumerate(("ok", hostile)):
        (folder / name).mkdir(parents=True)
        shutil.copy(sorted(history.glob("*/report.json"))[i], folder / name / "report.json")
    code, doc, html, md = _trend(tmp_path, str(folder))
    assert code == 0 and doc["runs"][0]["name"] == f"{hostile}/report.json"
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;/report.json" in html  # the table, the chart's labels and titles


@pytest.mark.parametrize("bad", ["not_a_report", "empty_folder", "trend_document", "missing"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, history, capsys, bad):
    inputs = {
        "not_a_report": tmp_path / "other.json",
        "empty_folder": tmp_path / "empty",
        "trend_document": tmp_path / "trend.json",
        "missing": tmp_path / "nothing-here",
    }
    inputs["not_a_report"].write_text('{"name": "some tool", "steps": [1, 2]}')
    inputs["empty_folder"].mkdir()
    assert (
        main(["trend", str(history), "-o", str(tmp_path / "first.html"), "--json", str(inputs["trend_document"]), "-q"])
        == 0
    )
    code, doc, html, md = _trend(tmp_path, str(inputs[bad]))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not html
    assert len(err) == 1 and err[0].startswith(f"traceinsight: error: {inputs[bad]}")


def test_outputs_never_over_an_input_and_own_outputs_skipped(tmp_path, history, capsys):
    folder = tmp_path / "history"
    shutil.copytree(history, folder)
    report = sorted(folder.glob("*/report.json"))[0]
    before = report.read_bytes()
    assert main(["trend", str(folder), "-o", str(tmp_path / "t.html"), "--json", str(report), "-q"]) == 2
    assert report.read_bytes() == before and "refusing to overwrite" in capsys.readouterr().err
    # The trend's own JSON kept in the history folder is not read as a run the next time.
    for _ in range(2):
        assert (
            main(["trend", str(folder), "-o", str(folder / "trend.html"), "--json", str(folder / "trend.json"), "-q"])
            == 0
        )
    assert len(json.loads((folder / "trend.json").read_text())["runs"]) == 2 * len(FIXES)
