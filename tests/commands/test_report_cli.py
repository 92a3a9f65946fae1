"""`traceinsight report` end to end: outputs, their agreement with the JSON, CI gating and exit codes."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES, shared_trace
from traceinsight.cli import main
from traceinsight.render.format import fmt_count, fmt_pct
from traceinsight.render.wording import verdict_sentence
from traceinsight.result import from_document
from traceinsight.workflow import analyze_path

INPUT_BOUND = SAMPLE_TRACES / "synthetic_gpu" / "input_bound"


def _report(tmp_path: Path, path: Path, *extra: str) -> tuple[int, Path, Path, Path]:
    html, js, md = tmp_path / "r.html", tmp_path / "r.json", tmp_path / "r.md"
    code = main(["report", str(path), "-o", str(html), "--json", str(js), "--markdown", str(md), "-q", *extra])
    return code, html, js, md


@pytest.fixture(scope="module")
def input_bound_outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    code, html, js, md = _report(tmp, INPUT_BOUND)
    assert code == 0
    return html.read_text(), json.loads(js.read_text()), md.read_text()


def test_json_contract_fields(input_bound_outputs):
    _, report, _ = input_bound_outputs
    assert report["schema"] == "traceinsight.report/2"
    truth = json.loads((INPUT_BOUND / "ground_truth.json").read_text())
    (device,) = report["devices"]
    want = truth["devices"]["GPU:0"]
    assert (device["span_ns"], device["busy_ns"], device["idle_ns"]) == (
        want["span_ns"],
        want["busy_ns"],
        want["idle_ns"],
    )
    assert device["gaps"]["by_cause"] == {**want["gaps"]["by_cause"], "graph_internal": 0}  # no graphs made
    assert report["totals"]["kernel_count"] == want["kernels"]["count"]
    assert report["steps"]["source"] == "marker" and report["steps"]["count"] == truth["steps"]["count"]
    for item in report["steps"]["items"]:
        assert sum(item["breakdown"].values()) == item["dur_ns"]
    assert report["bottlenecks"][0]["id"] == "input_bound"
    assert [b["rank"] for b in report["bottlenecks"]] == list(range(1, len(report["bottlenecks"]) + 1))
    assert report["inputs"][0]["format"] == "kineto"


def test_html_shows_the_json_figures(input_bound_outputs):
    html, report, _ = input_bound_outputs
    for section in (
        "headline",
        "bottlenecks",
        "devices",
        "gaps",
        "steps",
        "kernels",
        "copies",
        "input-pipeline",
        "inputs",
    ):
        assert f'id="{section}"' in html
    device = report["devices"][0]
    assert fmt_pct(device["idle_fraction"]) in html
    assert fmt_count(device["kernels"]["count"]) in html
    assert re.findall(r'id="bottleneck-(\w+)"', html)[0] == "input_bound"
    assert "num_workers" in html
    assert len(re.findall(r"<svg", html)) >= 3
    assert 'id="chart-timeline"' in html and 'id="chart-steps"' in html


def test_html_loads_nothing_remote(input_bound_outputs):
    html, _, _ = input_bound_outputs
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "@import" not in html and "url(http" not in html
    assert "default-src 'none'" in html


def test_markdown_summary(input_bound_outputs):
    _, report, md = input_bound_outputs
    assert md.startswith("## traceinsight")
    # The wait by its name on the page, and its culprit escaped: a name from a trace is text, never emphasis.
    assert "| 1 | input wait | the input stage enumerate\\(DataLoader\\)#\\_SingleProcessDataLoaderIter" in md
    assert fmt_pct(report["totals"]["idle_fraction"]) in md


def test_terminal_summary(tmp_path, capsys):
    assert main(["report", str(INPUT_BOUND), "-o", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "input_bound" in out and "\033[" not in out  # no colours when stdout is not a terminal


@pytest.mark.parametrize(
    ("expr", "code"),
    [
        ("totals.idle_fraction>0.3", 1),
        ("totals.idle_fraction>0.9", 0),
        ("input_pipeline.fraction>=0.2", 1),
        ("devices.GPU:0.idle_fraction<0.1", 0),
        ("bottleneck=input_bound", 1),
        ("bottleneck=fp32_compute", 0),
    ],
)
def test_fail_on_thresholds(tmp_path, expr, code, capsys):
    got, html, js, md = _report(tmp_path, INPUT_BOUND, "--fail-on", expr)
    assert got == code
    assert html.exists() and js.exists() and md.exists()  # reports are written either way
    if code:
        assert "threshold crossed" in capsys.readouterr().err


@pytest.mark.parametrize("expr", ["idle>", "totals.idle_fraction>>0.3", "bottleneck=", "totals.nope>1", "steps>1"])
def test_malformed_fail_on_exits_2_and_writes_nothing(tmp_path, expr, capsys):
    got, html, js, md = _report(tmp_path, INPUT_BOUND, "--fail-on", expr)
    assert got == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not html.exists() and not js.exists() and not md.exists()


def test_missing_path_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope"), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "no such file" in err
    assert not (tmp_path / "r.html").exists()


def test_resnet_num_workers_0_report(tmp_path):
    code, html, js, _ = _report(tmp_path, shared_trace("kineto/resnet50_num_workers_0"))
    assert code == 0
    report = json.loads(js.read_text())
    assert report["bottlenecks"][0]["id"] == "input_bound"
    text = html.read_text()
    assert "DataLoader(" in text and "num_workers=" in text
    assert len(re.findall(r"<svg", text)) >= 3


def test_a_saved_report_is_not_a_trace(tmp_path, capsys):
    code, _, js, _ = _report(tmp_path, INPUT_BOUND)
    assert code == 0
    assert main(["report", str(js), "-o", str(tmp_path / "again.html")]) == 2
    assert "traceinsight report, not a trace" in capsys.readouterr().err


def test_terminal_escapes_control_characters_from_traces(input_bound_outputs):
    from traceinsight.render.terminal import render_terminal

    _, report, _ = input_bound_outputs
    hostile = {**report, "run": "run\x1b[2J\nforged line", "warnings": {"bad\rname": 1}}
    text = render_terminal(from_document(hostile))
    assert "\x1b" not in text and "\r" not in text
    assert "run\\x1b[2J\\x0aforged line" in text


def test_terminal_says_why_the_input_verdict_is_unknown(input_bound_outputs):
    from traceinsight.render.terminal import render_terminal

    _, report, _ = input_bound_outputs
    assert "input pipeline: high: " in render_terminal(from_document(report))
    unknown = {**report, "input_pipeline": {**report["input_pipeline"], "verdict": "unknown", "fraction": None}}
    text = render_terminal(from_document(unknown))
    assert "input pipeline: unknown: the trace has no input-pipeline events" in text and "- of step" not in text


def test_the_report_draws_its_charts_without_matplotlib(tmp_path):
    """The CLI builds its parser without pandas, and `report` writes its charts as SVG itself: matplotlib (0.3 s to
    import, 30-150 ms a chart) is never imported, and no process is started for the charts."""
    script = f"""
import os, sys
import traceinsight.cli as cli
from traceinsight.cli import build_parser, main

def leave(code):  # in place of os._exit, so that this script goes on
    raise SystemExit(code)
cli.exit_now = leave
build_parser()
print("pandas at start:", "pandas" in sys.modules)
fork = os.fork
def refused():
    raise AssertionError("a process started")
os.fork = refused
try:
    code = main(["report", {str(INPUT_BOUND)!r}, "-o", {str(tmp_path / "r.html")!r}, "-q", "--jobs", "2"])
except SystemExit as leaving:
    code = leaving.code
print("matplotlib:", "matplotlib" in sys.modules, "exit:", code)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["pandas at start: False", "matplotlib: False exit: 0"]
    assert (tmp_path / "r.html").read_text().count("<svg") == 5


def test_the_cli_imports_the_module_of_the_command_that_runs_alone():
    """`report` starts without the page renderers and jinja2 that `diff` and `trend` import at their top: its
    painter forks sooner. Without a command, or with `--help`, every command is there with its options."""
    script = """
import sys
from traceinsight.cli import build_parser
report = build_parser(["report", "x", "--jobs", "1"]).parse_args(["report", "x", "--jobs", "1"])
print(report.jobs, sorted(m for m in ("jinja2", "traceinsight.commands.diff", "traceinsight.commands.trend",
      "traceinsight.render.html") if m in sys.modules))
diff = build_parser(["diff", "a", "b", "-q"]).parse_args(["diff", "a", "b", "-q"])
print(diff.base, diff.new, diff.quiet, "jinja2" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["1 []", "a b True True"]
    top = subprocess.run([sys.executable, "-m", "traceinsight", "--help"], capture_output=True, text=True)
    for command in ("report", "diff", "runs", "trend"):
        assert f"    {command} " in top.stdout
    trend = subprocess.run([sys.executable, "-m", "traceinsight", "trend", "--help"], capture_output=True, text=True)
    assert "--window" in trend.stdout and "--trace-out" not in trend.stdout


def test_a_command_collects_garbage_less_often_and_puts_the_thresholds_back(monkeypatch, tmp_path):
    """While a command runs, the cyclic collector waits for 1,000,000 new container objects, not Python's 700: its
    runs cost 8-10 % of a small report's CPU time. Whoever called `main` gets its own thresholds back."""
    import gc

    import traceinsight.api

    seen = []
    analyze = traceinsight.api.analyze

    def recorded(*args, **kwargs):
        seen.append(gc.get_threshold())
        return analyze(*args, **kwargs)

    monkeypatch.setattr(traceinsight.api, "analyze", recorded)
    before = gc.get_threshold()
    assert main(["report", str(INPUT_BOUND), "-o", str(tmp_path / "r.html"), "-q", "--jobs", "1"]) == 0
    assert seen == [(1_000_000, *before[1:])] and gc.get_threshold() == before


@pytest.mark.parametrize("preset", [None, "4"])
def test_the_command_keeps_openblas_to_one_thread_unless_told(preset):
    """numpy's OpenBLAS threads spin for 0.05-0.07 s of CPU time at import in each process: the command sets
    ``OPENBLAS_NUM_THREADS=1`` before numpy is imported (the CLI's modules import none), unless it is set already."""
    script = """
import os, sys
import traceinsight.cli as cli
print("numpy before:", "numpy" in sys.modules)
def leave(code):
    raise SystemExit(code)
cli.exit_now = leave
sys.argv = ["traceinsight", "--version"]
try:
    cli.main()
except SystemExit:
    pass
print("threads:", os.environ.get("OPENBLAS_NUM_THREADS"))
"""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == "numpy before: False" and lines[2] == f"threads: {preset or 1}"  # lines[1]: the version


def test_a_tpu_run_says_tpu_util():
    """The share of time some XLA op runs is TPU-Util on TPUs alone, GPU-Util elsewhere."""
    tpu = analyze_path(shared_trace("xprof/test_xplanes")).report
    gpu = analyze_path(SAMPLE_TRACES / "synthetic_gpu" / "input_bound").report
    assert verdict_sentence(tpu).startswith("TPU-Util ") and verdict_sentence(gpu).startswith("GPU-Util ")
