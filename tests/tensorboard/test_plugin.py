"""The plugin object without a server: when the tab shows, what it serves, what it refuses."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import SAMPLE_TRACES

base_plugin = pytest.importorskip("tensorboard.plugins.base_plugin", reason="TensorBoard not installed")
werkzeug_test = pytest.importorskip("werkzeug.test")
from traceinsight.tensorboard.plugin import TraceInsightPlugin, page_csp  # noqa: E402


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
    assert http.post("/report", query_string={"run": "run"}).status_code == 405


def test_the_page_is_served_with_its_own_policy():
    page = '<head><meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:">'
    assert page_csp(page) == "default-src 'none'; img-src data:; frame-ancestors 'self'"
    assert page_csp("<p>no policy</p>").startswith("default-src 'none';")
