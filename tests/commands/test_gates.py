"""Gates that fail loudly: `--fail-on` names checked before any trace is read (exit 2, one line listing the valid
names), one policy for a value the run does not have (the gate fails, exit 1, the reports written; skipped with
`--fail-on-missing skip`) in `report`, `diff` and `trend`, and `--steps` ranges past the run's steps."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight import api
from traceinsight.cli import main
from traceinsight.findings import RULES
from traceinsight.result import Device, Totals, field_names

GPU_RUN = SAMPLE_TRACES / "synthetic_gpu" / "input_bound"  # ProfilerStep#5 to #10, one GPU
CPU_RUN = SAMPLE_TRACES / "torch_cpu_dataloader"  # no accelerator: no device, a null idle fraction


def _outputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    return tmp_path / "r.html", tmp_path / "r.json", tmp_path / "r.md"


def _report(tmp_path: Path, path: Path, *extra: str) -> int:
    html, js, md = _outputs(tmp_path)
    return main(["report", str(path), "-o", str(html), "--json", str(js), "--markdown", str(md), "-q", *extra])


def _written(tmp_path: Path) -> list[bool]:
    return [p.exists() for p in _outputs(tmp_path)]


@pytest.fixture
def no_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any trace read fails the test: the expressions must be refused before."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a trace was read")

    monkeypatch.setattr(api, "analyze", refuse)


# ---------------------------------------------------------------- names checked at parse time
@pytest.mark.parametrize("command", ["report", "diff", "trend"])
def test_an_unknown_bottleneck_is_a_usage_error_listing_the_rules_ids(tmp_path, capsys, no_analysis, command):
    inputs = [str(GPU_RUN)] * (2 if command == "diff" else 1)
    code = main([command, *inputs, "-o", str(tmp_path / "r.html"), "-q", "--fail-on", "bottleneck=input_bond"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "no bottleneck 'input_bond'" in err and "did you mean 'input_bound'?" in err
    listed = err.split("valid: ")[1].strip().split(", ")
    assert listed == [rule.id for rule in RULES]  # every rule's id, in the rules' order
    assert not (tmp_path / "r.html").exists()


def test_an_unknown_field_is_a_usage_error_listing_that_levels_fields(tmp_path, capsys, no_analysis):
    assert _report(tmp_path, GPU_RUN, "--fail-on", "totals.idel_fraction>0.3") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "totals has no field 'idel_fraction'" in err
    assert "did you mean 'idle_fraction'?" in err
    assert err.split("valid: ")[1].strip().split(", ") == list(field_names(Totals))
    assert _written(tmp_path) == [False, False, False]


def test_a_field_behind_a_list_item_is_checked_by_name_only(tmp_path, capsys, no_analysis):
    """`devices.GPU:0.idel_fraction`: the item id can only be known from a run, the field name is checked now."""
    assert _report(tmp_path, GPU_RUN, "--fail-on", "devices.GPU:0.idel_fraction>0.5") == 2
    err = capsys.readouterr().err
    assert "devices.GPU:0 has no field 'idel_fraction'" in err
    assert err.split("valid: ")[1].strip().split(", ") == list(field_names(Device))


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("steps>1", "is not a number: it is a record; its fields: source, marker, count"),
        ("capture.kind>1", "is not a number: it is text"),
        ("devices>1", "is not a number: it is a list or a map"),
        ("totals.idle_fraction.x>1", "totals.idle_fraction is a value, with no field 'x'"),
    ],
)
def test_a_path_to_no_number_is_a_usage_error(tmp_path, capsys, no_analysis, expr, says):
    assert _report(tmp_path, GPU_RUN, "--fail-on", expr) == 2
    assert says in capsys.readouterr().err


# ---------------------------------------------------------------- a value the run does not have
@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("devices.GPU:0.idle_fraction>0.5", "this run has no 'GPU:0' in devices (it has: none)"),
        ("totals.idle_fraction>0.3", "totals.idle_fraction is null in this run"),
    ],
)
def test_a_value_the_run_lacks_fails_the_gate_and_the_reports_are_written(tmp_path, capsys, expr, why):
    assert _report(tmp_path, CPU_RUN, "--fail-on", expr) == 1
    assert _written(tmp_path) == [True, True, True]
    report = json.loads(_outputs(tmp_path)[1].read_text())
    assert report["devices"] == [] and report["totals"]["idle_fraction"] is None  # what the gate found
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"traceinsight: threshold failed, no value: {expr}: {why} (--fail-on-missing skip passes it)",
    ]


def test_skip_passes_a_missing_value_saying_so_and_still_gates_the_rest(tmp_path, capsys):
    missing = "devices.GPU:0.idle_fraction>0.5"
    assert _report(tmp_path, CPU_RUN, "--fail-on", missing, "--fail-on-missing", "skip") == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"traceinsight: threshold skipped, no value: {missing}: this run has no 'GPU:0' in devices (it has: none)"
    ]
    # A threshold the run has a value for still gates: the CPU run waits for input most of its step.
    both = ("--fail-on", missing, "--fail-on", "input_pipeline.fraction>0.5", "--fail-on-missing", "skip")
    assert _report(tmp_path, CPU_RUN, *both) == 1
    err = capsys.readouterr().err
    assert "threshold crossed: input_pipeline.fraction>0.5" in err and "threshold skipped" in err


def test_the_gpu_run_passes_the_same_shared_gate(tmp_path, capsys):
    """One gate for GPU and CPU jobs: on the GPU run the device is there, and its idle fraction is compared."""
    code = _report(tmp_path, GPU_RUN, "--fail-on", "devices.GPU:0.idle_fraction>0.99")
    report = json.loads(_outputs(tmp_path)[1].read_text())
    assert report["devices"][0]["id"] == "GPU:0" and report["devices"][0]["idle_fraction"] < 0.99
    assert code == 0 and capsys.readouterr().err == ""


def _saved(tmp_path: Path, run: Path, name: str) -> Path:
    out = tmp_path / name
    assert main(["report", str(run), "-o", "/dev/null", "--json", str(out), "-q", "--jobs", "1"]) == 0
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """The GPU and the CPU run's saved reports, as CI keeps them."""
    folder = tmp_path_factory.mktemp("saved")
    return {"gpu": _saved(folder, GPU_RUN, "gpu.json"), "cpu": _saved(folder, CPU_RUN, "cpu.json")}


@pytest.mark.parametrize(("policy", "code"), [("fail", 1), ("skip", 0)])
def test_diff_applies_the_same_policy(tmp_path, capsys, saved, policy, code):
    """The CPU run as the base: its idle fraction is null, so no change can be measured from it."""
    expr = "totals.idle_fraction>+0.05"
    args = ["diff", str(saved["cpu"]), str(saved["gpu"]), "-o", str(tmp_path / "d.html"), "-q"]
    assert main([*args, "--fail-on", expr, "--fail-on-missing", policy]) == code
    assert (tmp_path / "d.html").exists()
    outcome = "failed" if policy == "fail" else "skipped"
    assert f"threshold {outcome}, no value: {expr}: totals.idle_fraction is missing or null in the base run" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(("policy", "code"), [("fail", 1), ("skip", 0)])
def test_trend_applies_the_same_policy(tmp_path, capsys, saved, policy, code):
    """A history of GPU runs whose last is the CPU run: the gate has no idle fraction to compare."""
    history = tmp_path / "history"
    history.mkdir()
    for i, report in enumerate(("gpu", "gpu", "cpu"), 1):
        (history / f"run-{i}.json").write_bytes(saved[report].read_bytes())
    js = tmp_path / "t.json"
    expr = "totals.idle_fraction>+0.05"
    args = ["trend", str(history), "-o", str(tmp_path / "t.html"), "--json", str(js), "-q", "--fail-on", expr]
    assert main([*args, "--fail-on-missing", policy]) == code
    gate = json.loads(js.read_text())["gate"]
    why = f"{expr}: totals.idle_fraction is null in this run"
    assert gate["crossed"] == [] and gate["missing"] == [why] and gate["on_missing"] == policy
    assert why in capsys.readouterr().err


# ---------------------------------------------------------------- --steps past the run's steps
def _step_ids(run: Path) -> list[int]:
    """The ProfilerStep ids of the run's trace, from its raw events."""
    (trace,) = run.glob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return sorted({int(m[1]) for e in events if (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", ""))))})


def test_steps_partly_past_the_run_say_which_were_kept(tmp_path, capsys):
    assert _step_ids(GPU_RUN) == [5, 6, 7, 8, 9, 10]
    out = tmp_path / "timeline.json"
    assert _report(tmp_path, GPU_RUN, "--trace-out", str(out), "--steps", "3:5") == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"traceinsight: {out}: annotated trace: --steps 3:5 reaches past the run's steps (ids 5..10): kept steps 5..5"
    ]
    steps = [e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("name", "").startswith("step ")]
    assert steps == ["step 5"]


def test_steps_outside_the_run_are_an_error_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "timeline.json"
    assert _report(tmp_path, GPU_RUN, "--trace-out", str(out), "--steps", "1:4") == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--steps 1:4: no step has an id in 1..4 (the run's steps: ids 5..10)" in err[0]
    assert _written(tmp_path) == [False, False, False] and not out.exists()


def test_steps_without_a_timeline_is_a_usage_error(tmp_path, capsys, no_analysis):
    assert _report(tmp_path, GPU_RUN, "--steps", "5:6") == 2
    assert "give --trace-out FILE too" in capsys.readouterr().err
    assert _written(tmp_path) == [False, False, False]


# ---------------------------------------------------------------- the Markdown summary
def test_the_markdown_names_the_page_and_links_it_only_at_an_absolute_url(tmp_path):
    html, md = tmp_path / "pages" / "r.html", tmp_path / "summary" / "r.md"
    base = ["report", str(CPU_RUN), "-o", str(html), "--markdown", str(md), "-q"]
    assert main(base) == 0
    text = md.read_text()
    assert f"HTML report: `{html}`" in text and "](" not in text  # no link a step summary would break
    url = "https://ci.example.com/artifacts/42/r.html"
    assert main([*base, "--html-url", url]) == 0
    assert f"HTML report: [r.html](<{url}>)" in md.read_text()


@pytest.mark.parametrize("url", ["../traceinsight/r.html", "javascript:alert(1)", "https:///r.html"])
def test_a_relative_or_odd_html_url_is_a_usage_error(tmp_path, capsys, url):
    with pytest.raises(SystemExit) as stop:
        main(["report", str(CPU_RUN), "-o", str(tmp_path / "r.html"), "--html-url", url])
    assert stop.value.code == 2 and "absolute http(s) URL" in capsys.readouterr().err
