"""The Python API (`traceinsight.load`, `traceinsight.analyze`, `Report`): the CLI's figures, as DataFrames.

`Report.to_dict()` must equal the CLI's `--json` document (less the fields that say how the CLI was run)
on every shared trace folder the other tests read and on samples of each format; the DataFrames must add
up to the JSON's figures; bad input raises the CLI's errors; the notebook view renders in a browser and
fetches nothing.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from msgspec.structs import replace

import traceinsight as ti
from tests.analysis.test_projections import _all_shared_runs
from tests.conftest import REPO, SAMPLE_TRACES, SHARED_TRACES, shared_trace
from tests.render.test_browser import CHROMIUM, open_in_chromium
from traceinsight.analysis.gaps import CAUSES
from traceinsight.api import INVOCATION_FIELDS
from traceinsight.cli import main
from traceinsight.errors import TraceError
from traceinsight.events import COLUMNS, Profile
from traceinsight.result import CriticalPathSummary

# The run folders under ../shared/traces the other tests read (tests/analysis/test_projections.py finds them);
# a placeholder when the folder is absent, so the tests skip (or fail under CI) rather than vanish.
SHARED_RUNS = [str(p.relative_to(SHARED_TRACES)) for p in _all_shared_runs()] or ["(none found)"]
SAMPLES = [
    "synthetic_gpu/input_bound",
    "synthetic_gpu_xspace/launch_bound",
    "tf_input_bound",  # a run_info.json beside the run: its versions are in `meta`
    "torch_cpu_dataloader",  # CPU-only: no devices, no gaps
]
INPUT_BOUND = SAMPLE_TRACES / "synthetic_gpu" / "input_bound"
MAX_NOTEBOOK_BYTES = 1 << 20


def _without_invocation(report: dict[str, Any]) -> dict[str, Any]:
    """The report less what only says how it was asked for (`meta`: when, the command line, its paths)."""
    meta = {k: v for k, v in report["meta"].items() if k not in INVOCATION_FIELDS}
    return {**report, "meta": meta}


def _cli_json(path: Path, out: Path, *extra: str) -> dict[str, Any]:
    assert main(["report", str(path), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q", *extra]) == 0
    return dict(orjson.loads((out / "r.json").read_bytes()))


@pytest.fixture(scope="module", params=[f"shared:{r}" for r in SHARED_RUNS] + [f"sample:{s}" for s in SAMPLES])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[ti.Report, dict[str, Any]]:
    """One run: its `Report` and the JSON the CLI writes for it (default options: several processes)."""
    where, relative = request.param.split(":", 1)
    path = shared_trace(relative) if where == "shared" else SAMPLE_TRACES / relative
    cli = _cli_json(path, tmp_path_factory.mktemp("cli"))
    return ti.analyze(path), cli


# --------------------------------------------------------------------------- the JSON


def test_to_dict_is_the_cli_json(run) -> None:
    report, cli = run
    document = report.to_dict()
    assert all(document["meta"][k] is None for k in INVOCATION_FIELDS)
    assert _without_invocation(document) == _without_invocation(cli)
    assert orjson.loads(report.to_json()) == document


def test_to_dict_is_a_copy(run) -> None:
    report, _ = run
    report.to_dict()["bottlenecks"].clear()
    assert report.to_dict()["bottlenecks"] == run[1]["bottlenecks"]


def test_options_reach_the_report(tmp_path: Path) -> None:
    cli = _cli_json(INPUT_BOUND, tmp_path, "--small-kernel-us", "160", "--jobs", "1")
    report = ti.analyze(str(INPUT_BOUND), small_kernel_us=160)
    assert _without_invocation(report.to_dict()) == _without_invocation(cli)
    assert report.devices["kernels_small_count"].iloc[0] > 0


def test_run_picks_a_run_of_a_logdir(tmp_path: Path) -> None:
    logdir = SAMPLE_TRACES / "tf_input_bound"
    (name,) = [p.name for p in (logdir / "plugins" / "profile").iterdir()]
    cli = _cli_json(logdir, tmp_path, "--run", name)
    assert _without_invocation(ti.analyze(logdir, run=name).to_dict()) == _without_invocation(cli)
    with pytest.raises(TraceError, match="no run named 'nope'"):
        ti.analyze(logdir, run="nope")


# --------------------------------------------------------------------------- the DataFrames


def test_gaps_add_up_to_the_json_per_device(run) -> None:
    report, cli = run
    gaps = report.gaps
    assert list(gaps.columns) == ["device", "start_ns", "dur_ns", "cause", "host_activity"]
    assert set(gaps["cause"]) <= set(CAUSES)
    for device in cli["devices"]:
        mine = gaps[gaps["device"] == device["id"]]
        assert int(mine["dur_ns"].sum()) == device["gaps"]["total_ns"]
        assert len(mine) == device["gaps"]["count"]
        by_cause = mine.groupby("cause")["dur_ns"].sum()
        assert {cause: int(by_cause.get(cause, 0)) for cause in CAUSES} == device["gaps"]["by_cause"]
        assert (mine["start_ns"].diff().dropna() > 0).all()  # in time order
        # What the host was doing: for the longest gaps, as the JSON lists them; NaN elsewhere.
        described = mine[mine["host_activity"].notna()]
        longest = {
            (x["start_ns"], x["dur_ns"], x["cause"], "; ".join(x["host_activity"])) for x in device["gaps"]["longest"]
        }
        assert set(described[["start_ns", "dur_ns", "cause", "host_activity"]].itertuples(index=False)) == longest
    assert set(gaps["device"]) == {d["id"] for d in cli["devices"] if d["gaps"]["count"]}


def test_steps_are_one_row_each_and_their_parts_sum_to_the_step(run) -> None:
    report, cli = run
    steps = report.steps
    parts = list(cli["steps"]["items"][0]["breakdown"])  # the ledger's parts on a run with devices
    assert list(steps.columns[:3]) == ["id", "start_ns", "dur_ns"] and sorted(steps.columns[3:]) == sorted(parts)
    assert steps["id"].tolist() == [s["id"] for s in cli["steps"]["items"]]
    assert ((steps[parts].sum(axis=1) - steps["dur_ns"]).abs() <= 1_000 * len(parts)).all()


def test_bottlenecks_in_rank_order_with_their_projection(run) -> None:
    report, cli = run
    frame = report.bottlenecks
    assert frame["rank"].tolist() == list(range(1, len(cli["bottlenecks"]) + 1))
    assert frame["id"].tolist() == [b["id"] for b in cli["bottlenecks"]]
    for column in ("step_ns_before", "step_ns_after", "saving_ns", "speedup", "basis"):
        assert frame[column].tolist() == [b["projection"][column] for b in cli["bottlenecks"]]
    assert frame["recommendations"].tolist() == [b["recommendations"] for b in cli["bottlenecks"]]


def test_devices_kernels_and_host_ops_are_the_json_figures(run) -> None:
    report, cli = run
    devices = report.devices
    assert devices["device"].tolist() == [d["id"] for d in cli["devices"]]
    for column, get in (
        ("gpu_util", lambda d: d["gpu_util"]),
        ("gaps_total_ns", lambda d: d["gaps"]["total_ns"]),
        ("kernels_small_count", lambda d: d["kernels"]["small_count"]),
        ("copies_h2d_bytes", lambda d: d["copies"]["h2d"]["bytes"]),
    ):
        if cli["devices"]:
            got = [None if isinstance(v, float) and v != v else v for v in devices[column].tolist()]  # NaN: null
            assert got == [get(d) for d in cli["devices"]]
    kernels = report.kernels
    tops = [(d["id"], t["name"], t["total_ns"]) for d in cli["devices"] for t in d["kernels"]["top"]]
    assert list(kernels[["device", "name", "total_ns"]].itertuples(index=False, name=None)) == tops
    host_ops = report.host_ops
    assert host_ops["name"].tolist()[: len(cli["host_ops"]["top"])] == [o["name"] for o in cli["host_ops"]["top"]]
    assert set(host_ops.loc[host_ops["input_function"], "name"]) == {
        o["name"] for o in cli["host_ops"]["input_functions"]
    }


def test_frames_without_rows_keep_their_columns() -> None:
    report = ti.analyze(SAMPLE_TRACES / "torch_cpu_dataloader")  # CPU-only: no device, gap or kernel
    for frame, columns in (
        (report.gaps, ["device", "start_ns", "dur_ns", "cause"]),
        (report.devices, ["device", "gpu_util"]),
        (report.kernels, ["device", "name", "total_ns"]),
    ):
        assert frame.empty and set(columns) <= set(frame.columns)


# --------------------------------------------------------------------------- load


def test_load_gives_the_event_table_and_analyze_takes_it() -> None:
    profile = ti.load(INPUT_BOUND)
    assert isinstance(profile, Profile) and isinstance(profile.events, pd.DataFrame)
    assert tuple(profile.events.columns) == COLUMNS and len(profile.events) == profile.inputs[0].events
    assert profile.framework == "pytorch" and profile.name == "input_bound"
    from_profile, from_path = ti.analyze(profile).to_dict(), ti.analyze(INPUT_BOUND).to_dict()
    assert {**from_profile, "meta": None} == {**from_path, "meta": None}
    assert len(profile.events) == profile.inputs[0].events  # the profile passed in is left as it was
    assert ti.analyze(profile).files == ()
    with pytest.raises(ValueError, match="a Profile is read already"):
        ti.analyze(profile, run="other")


def _cli_error(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main(["report", str(path), "-o", str(tmp_path / "r.html"), "-q", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("traceinsight: error: ") and err.count("\n") == 1
    return err.removeprefix("traceinsight: error: ").strip()


def test_a_broken_file_raises_trace_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken_rank0.pt.trace.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": ')
    with pytest.raises(TraceError, match="broken_rank0.pt.trace.json") as error:
        ti.load(broken)
    assert str(error.value) == _cli_error(broken, tmp_path, capsys)
    with pytest.raises(TraceError, match="broken_rank0.pt.trace.json"):
        ti.analyze(broken)


@pytest.mark.parametrize("case", ["missing", "empty_folder", "saved_report", "unknown_run"])
def test_load_raises_the_cli_errors(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, run = tmp_path / "nothing", None
    if case == "empty_folder":
        path.mkdir()
    elif case == "saved_report":
        path = tmp_path / "saved.json"
        path.write_text(ti.analyze(INPUT_BOUND).to_json())
    elif case == "unknown_run":
        path, run = INPUT_BOUND, "nope"
    with pytest.raises(TraceError) as error:
        ti.load(path, run=run)
    assert str(error.value) == _cli_error(path, tmp_path, capsys, *(["--run", run] if run else []))


def test_bad_options_are_value_errors() -> None:
    with pytest.raises(ValueError, match="small_kernel_us"):
        ti.analyze(INPUT_BOUND, small_kernel_us=0)
    with pytest.raises(ValueError, match="jobs"):
        ti.load(INPUT_BOUND, jobs=0)


# --------------------------------------------------------------------------- pages and files


def test_save_writes_what_the_cli_writes(tmp_path: Path) -> None:
    report = ti.analyze(INPUT_BOUND)
    out = tmp_path / "out"
    report.save(html=out / "r.html", json=str(out / "r.json"), markdown=out / "summary.md")
    assert (out / "r.json").read_text() == report.to_json() + "\n"
    summary = (out / "summary.md").read_text()
    assert summary == report.to_markdown(html_file=str(out / "r.html"))
    assert f"HTML report: `{out / 'r.html'}`" in summary and "](" not in summary  # named, never a relative link
    page = (out / "r.html").read_text()
    assert page == report.to_html() and 'id="verdict"' in page and page.count("<svg") >= 3
    assert sorted(p.name for p in out.iterdir()) == ["r.html", "r.json", "summary.md"]  # no temporary left


def test_save_never_overwrites_a_trace_and_then_writes_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "run" / "only.pt.trace.json.gz"
    trace.parent.mkdir()
    trace.write_bytes(next(INPUT_BOUND.glob("*.pt.trace.json.gz")).read_bytes())
    report = ti.analyze(trace.parent)
    before = trace.read_bytes()
    with pytest.raises(TraceError, match="refusing to overwrite an input trace"):
        report.save(json=tmp_path / "r.json", html=trace)
    assert trace.read_bytes() == before and not (tmp_path / "r.json").exists()


def test_record_invocation_fills_meta_as_the_cli_does() -> None:
    report = ti.analyze(INPUT_BOUND)
    report.record_invocation(["traceinsight", "report", str(INPUT_BOUND)], {"run": None})
    meta = report.to_dict()["meta"]
    assert meta["command"] == ["traceinsight", "report", str(INPUT_BOUND)] and meta["input"] == str(INPUT_BOUND)
    assert meta["generated_at"] and meta["options"] == {"run": None}


def test_headline_and_projection_are_the_pages() -> None:
    """The API's sentences are the page's: `headline` its first, main sentence (the top bottleneck, its cost), and
    `projection` the what-if under it (`#projection`); no other name for either."""
    report = ti.analyze(INPUT_BOUND)
    page = report.to_html()
    header = re.search(r'<header id="headline">.*?</header>', page, re.S)
    assert header
    sentences = dict(re.findall(r'<p class="verdict" id="(\w+)">(.*?)</p>', header[0], re.S))
    assert html.unescape(sentences["verdict"]) == report.headline
    assert html.unescape(sentences["projection"]) == report.projection
    top = report.result.bottlenecks[0]
    assert "is input wait (" in report.headline and f"{top.fraction * 100:.1f} %" in report.headline
    assert report.projection is not None and report.projection.startswith("Fixing input wait")
    assert not hasattr(report, "verdict")


def test_text_and_repr() -> None:
    report = ti.analyze(INPUT_BOUND)
    assert str(report).startswith("traceinsight: input_bound") and report.headline in str(report)
    assert repr(report) == "<traceinsight.Report 'input_bound': 1 device, 6 steps, top bottleneck input_bound>"


def test_notebook_view_is_small_self_contained_and_escaped(run) -> None:
    report, _ = run
    view = report._repr_html_()
    assert len(view.encode()) < MAX_NOTEBOOK_BYTES
    assert view.lstrip().startswith('<div class="traceinsight">') and "<html" not in view
    assert not re.search(r"<script|\son\w+\s*=|javascript:|<iframe|<link|@import", view, re.I)
    # Nothing to fetch: the SVG's references (clip paths, reused shapes) point inside the view.
    assert not re.search(r"url\((?!#)|(src|href)\s*=\s*\"(?!#)", view)
    assert 'id="verdict"' in view and len(re.findall(r'class="card ', view)) == len(report.bottlenecks)


def test_notebook_view_escapes_names_from_the_trace(tmp_path: Path) -> None:
    run = tmp_path / "<img src=x onerror=alert(1)>"  # the run's name is its folder's: the view's title
    run.mkdir()
    source = next(INPUT_BOUND.glob("*.pt.trace.json.gz"))
    (run / source.name).write_bytes(source.read_bytes())
    view = ti.analyze(run)._repr_html_()
    assert "<img" not in view and "&lt;img src=x onerror=alert(1)&gt;" in view


def test_notebook_view_keeps_the_users_matplotlib_backend() -> None:
    """A notebook's backend (here: svg, chosen before) stays selected after the charts are drawn."""
    script = (
        "import matplotlib; matplotlib.use('svg'); import matplotlib.pyplot;"
        "import traceinsight as ti;"
        f"ti.analyze({str(INPUT_BOUND)!r})._repr_html_();"
        "print(matplotlib.get_backend())"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "svg"


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
@pytest.mark.parametrize(
    "trace", ["sample:synthetic_gpu/input_bound", "shared:kineto/resnet50_num_workers_0"], ids=lambda t: t.split(":")[1]
)
def test_notebook_view_renders_in_chromium_and_fetches_nothing(trace: str, tmp_path: Path) -> None:
    where, relative = trace.split(":")
    path = SAMPLE_TRACES / relative if where == "sample" else shared_trace(relative)
    # A notebook page around the view: no Content-Security-Policy of ours, so a fetch would happen and show.
    page = tmp_path / "notebook.html"
    page.write_text(f"<!DOCTYPE html><html><body><h1>cell output</h1>{ti.analyze(path)._repr_html_()}</body></html>")
    dom, requests = open_in_chromium(page, tmp_path)
    assert requests == set()
    assert 'id="verdict"' in dom and re.findall(r'id="bottleneck-(\w+)"', dom)[0] == "input_bound"
    assert dom.count("<svg") == 1 and 'id="chart-timeline"' in dom


# --------------------------------------------------------------------------- the package


def test_public_names() -> None:
    assert {"load", "analyze", "Report", "__version__"} <= set(ti.__all__)
    for name in ti.__all__:
        value = getattr(ti, name)
        assert name == "__version__" or value.__doc__, name
    import traceinsight.load  # noqa: F401  # the reader module of that name: the package's `load` stays the API's

    assert ti.load is ti.api.load and callable(ti.load)


def test_importing_the_package_stays_cheap() -> None:
    """`import traceinsight` loads neither pandas nor numpy (the API is imported on first use)."""
    script = "import sys, traceinsight; print(sorted(m for m in ('pandas', 'numpy', 'matplotlib') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_graph_replays_and_waits_frames():
    """Every replay of the piecewise vLLM step (25 graph launches, README of ../shared/traces) and the 463 ms SGLang
    wait, one row each."""
    replays = ti.analyze(shared_trace("inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"))
    assert len(replays.graph_replays) == 25 and replays.capture["kind"] == "inference"
    assert (replays.graph_replays["busy_ns"] <= replays.graph_replays["span_ns"]).all()
    waits = ti.analyze(shared_trace("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")).waits
    assert waits[["name", "outside_trace"]].values.tolist() == [["hipMemcpyWithStream", True]]


# --------------------------------------------------------------------------- the critical path

SLEEP_RANK1 = SAMPLE_TRACES / "distributed" / "sleep_rank1"  # rank 1 sleeps ~30 ms a step in `data` (its README)


@pytest.fixture(scope="module")
def straggler() -> ti.Report:
    return ti.analyze(SLEEP_RANK1)


def test_critical_path_covers_each_step_and_runs_through_the_sleeping_rank(straggler: ti.Report) -> None:
    """Each step's stretches add up to the step (`steps`), and the path runs through rank 1's `data` ops: more than
    half of it, and at least 90 % of those ops' own time in the raw events (never more than it)."""
    path = straggler.critical_path
    steps = straggler.steps.set_index("id")["dur_ns"]
    assert (path["dur_ns"] == path["end_ns"] - path["start_ns"]).all() and (path["dur_ns"] > 0).all()
    per_step = path.groupby("step")["dur_ns"].sum()
    assert list(per_step.index) == list(steps.index)
    assert ((per_step - steps).abs() <= 1000).all()
    data = path[(path["input_id"] == 1) & (path["name"] == "data")]
    assert set(data["input"]) == {"rank 1"} and set(data["resource"].str.split().str[0]) == {"thread"}
    assert data["dur_ns"].sum() > path["dur_ns"].sum() / 2
    events = ti.load(SLEEP_RANK1).events
    raw = int(events.loc[(events["input_id"] == 1) & (events["name"] == "data"), "dur_ns"].sum())
    assert 0.9 * raw <= data["dur_ns"].sum() <= raw


def test_critical_path_breakdown_is_the_path_by_group(straggler: ti.Report) -> None:
    """One row per step whose group columns sum to the step, each equal to its stretches' sum."""
    breakdown = straggler.critical_path_breakdown.set_index("id")
    groups = ["cpu", "launch", "gpu_compute", "copy", "collective", "rank_wait", "input", "idle"]
    assert list(breakdown.columns) == ["step_ns", "crossings", *groups]
    assert (breakdown[groups].sum(axis=1) == breakdown["step_ns"]).all()
    assert (breakdown["step_ns"] == straggler.steps.set_index("id")["dur_ns"]).all()
    by_group = straggler.critical_path.pivot_table("dur_ns", "step", "group", aggfunc="sum", observed=False)
    assert (by_group.reindex(columns=groups, fill_value=0).fillna(0).astype(int) == breakdown[groups]).all().all()
    assert (breakdown["crossings"] >= 1).all()  # every step waits for rank 1 at a collective


def test_critical_path_without_steps_keeps_its_columns(straggler: ti.Report) -> None:
    """A run whose path has no steps (its walks and summary emptied): frames without rows, with their columns."""
    analyzed = straggler._analyzed
    empty = ti.Report(
        replace(
            analyzed,
            analysis=replace(analyzed.analysis, walks=[]),
            report=replace(analyzed.report, critical_path=CriticalPathSummary()),
        )
    )
    assert empty.critical_path.empty and {"dur_ns", "input", "resource"} <= set(empty.critical_path.columns)
    assert empty.critical_path_breakdown.empty and "cpu" in empty.critical_path_breakdown.columns
