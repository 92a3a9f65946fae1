"""The plugin object without a server: when the tab shows, what it serves, what it refuses."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight import listing, workflow
from traceinsight.cli import main as cli_main
from traceinsight.listing import ReportCache
from traceinsight.render.json import dumps
from traceinsight.result import as_dict

base_plugin = pytest.importorskip("tensorboard.plugins.base_plugin", reason="TensorBoard not installed")
werkzeug_test = pytest.importorskip("werkzeug.test")
from traceinsight.tensorboard.plugin import TraceInsightPlugin, page_csp  # noqa: E402
from traceinsight.tensorboard.reports import ReportStore  # noqa: E402

INVOCATION_FIELDS = ("generated_at", "command", "options", "input")


def plugin_for(logdir: str) -> TraceInsightPlugin:
    return TraceInsightPlugin(base_plugin.TBContext(logdir=logdir))


def client(plugin: TraceInsightPlugin):
    """The plugin's routes as TensorBoard mounts them, without the rest of TensorBoard."""
    apps = plugin.get_plugin_apps()

    def app(environ, start_response):
        route = environ["PATH_INFO"]
        if route not in apps:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b""]
        return apps[route](environ, start_response)

    return werkzeug_test.Client(app)


def test_inactive_without_profiles_or_a_local_logdir(tmp_path):
    assert not plugin_for(str(tmp_path)).is_active()
    assert not plugin_for("gs://bucket/logs").is_active()
    assert not plugin_for("").is_active()
    assert json.loads(client(plugin_for("gs://bucket/logs")).get("/runs").data) == []


def test_active_with_a_profile_and_the_frontend_is_an_es_module(tmp_path):
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", tmp_path / "run")
    plugin = plugin_for(str(tmp_path))
    assert plugin.is_active()
    meta = plugin.frontend_metadata()
    assert (meta.es_module_path, meta.tab_name) == ("/index.js", "TraceInsight")
    response = client(plugin).get("/index.js")
    assert response.status_code == 200 and b"export async function render" in response.data
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_unknown_and_bad_names_are_refused_before_any_work(tmp_path):
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", tmp_path / "run")
    http = client(plugin_for(str(tmp_path)))
    assert http.get("/report").status_code == 400
    assert http.get("/report.json", query_string={"run": "../run"}).status_code == 400
    assert http.get("/report.json", query_string={"run": str(tmp_path / "run")}).status_code == 400
    assert http.get("/report", query_string={"run": "other"}).status_code == 404
    assert http.get("/report", query_string={"run": "run"}).status_code == 404  # the name is `<logdir>/run`
    assert http.post("/report", query_string={"run": f"{tmp_path.name}/run"}).status_code == 405


def test_the_page_is_served_with_its_own_policy():
    page = '<head><meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:">'
    assert page_csp(page) == "default-src 'none'; img-src data:; frame-ancestors 'self'"
    assert page_csp("<p>no policy</p>").startswith("default-src 'none';")


def without_invocation(report: dict) -> dict:
    return {**report, "meta": {k: v for k, v in report["meta"].items() if k not in INVOCATION_FIELDS}}


def test_the_runs_route_lists_as_traceinsight_runs_with_cached_figures_and_never_analyses(
    tmp_path, monkeypatch, capsys
):
    logdir = tmp_path / "logs"
    for age, folder in enumerate(("cached", "fresh")):
        shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / folder)
        for trace in (logdir / folder).glob("*.gz"):
            os.utime(trace, (1_800_000_000 - age, 1_800_000_000 - age))
    cached, fresh = listing.list_runs(logdir)
    (report,) = listing.analyze_runs(logdir, [cached], cache=ReportCache())  # as `traceinsight runs` keeps it
    plugin = plugin_for(str(logdir))
    http = client(plugin)
    with monkeypatch.context() as patch:

        def refuse(*args, **kwargs):
            raise AssertionError("the listing started an analysis")

        patch.setattr(workflow, "analyze_path", refuse)
        patch.setattr(ReportStore, "_start", refuse)
        patch.setattr(ReportStore, "warm_up", staticmethod(lambda: None))
        rows = http.get("/runs").json
        assert rows[0] == {**as_dict(listing.summarize(cached, report)), "analysed": True}
        assert rows[0]["steps"] > 0 and rows[0]["mean_step_ns"] == report.steps.mean_ns
        bare = as_dict(listing.summarize(fresh))
        assert rows[1] == {**{k: bare[k] for k in ("name", "files", "bytes", "modified")}, "analysed": False}
        # The JSON of a cached report comes from the cache, no job: the CLI's report with the tab's command line.
        response = http.get("/report.json", query_string={"run": cached.name})
        assert response.status_code == 200
        assert response.json["meta"]["command"] == ["traceinsight", "report", str(logdir), "--run", cached.name]
        assert without_invocation(response.json) == without_invocation(json.loads(dumps(report)))

    assert cli_main(["runs", str(logdir), "-q"]) == 0  # the tab's names are the CLI's, in its order
    assert [row["name"] for row in rows] == capsys.readouterr().out.splitlines() == [cached.name, fresh.name]
    out = tmp_path / "runs.json"
    assert cli_main(["runs", str(logdir), "--json", str(out), "--jobs", "1"]) == 0  # analyses `fresh` only
    listed = json.loads(out.read_text())["runs"]
    monkeypatch.setattr(ReportStore, "warm_up", staticmethod(lambda: None))
    assert http.get("/runs").json == [{**row, "analysed": True} for row in listed]  # the CLI's analyses, shown


def test_the_runs_route_shows_the_figures_of_a_report_the_tab_made_without_the_cache(tmp_path, monkeypatch):
    """A report made here fills its row even when the report cache does not hold it (a folder that cannot be
    written): the table shows the figures of the runs analysed, not dashes."""
    from tests.tensorboard import jobs
    from tests.tensorboard.test_store import wait

    logdir = tmp_path / "logs"
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / "run")
    (run,) = listing.list_runs(logdir)
    saved = tmp_path / "report.json"
    assert cli_main(["report", str(logdir), "--run", run.name, "-o", "/dev/null", "--json", str(saved), "-q"]) == 0
    monkeypatch.setattr(ReportStore, "warm_up", staticmethod(lambda: None))
    plugin = plugin_for(str(logdir))
    store = plugin._store = ReportStore(logdir, workers=1, job=jobs.saved_report, cache=ReportCache())
    try:
        http = client(plugin)
        assert http.get("/runs").json[0]["analysed"] is False  # nothing cached, nothing made: dashes
        (listed,) = plugin._index.runs()
        assert wait(store, listed).state == "ready"
        assert ReportCache().get(listing.report_key(logdir, run)) is None  # the job wrote no cache entry
        row = http.get("/runs").json[0]
        report = json.loads(saved.read_text())
        assert row["analysed"] is True and row["steps"] == report["steps"]["count"] == 5
        assert row["mean_step_ns"] == report["steps"]["mean_ns"]
        assert row["top_bottleneck"] == report["bottlenecks"][0]["id"] == "input_bound"
    finally:
        store.close()
