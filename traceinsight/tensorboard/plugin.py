"""The TensorBoard plugin: a "TraceInsight" tab that shows traceinsight's report of each profile run.

Routes under ``/data/plugin/traceinsight/`` (a contract the tests hold):

* ``runs``: JSON list of the profile runs under the logdir as ``traceinsight runs LOGDIR`` lists them (newest
  first, NAME as ``--run`` takes it): each the row ``traceinsight runs --json`` writes (`RunSummary`'s fields) and
  ``"analysed": true`` when the report cache holds its report (or the tab made one, where the cache cannot be
  written), else ``{"name", "files", "bytes", "modified", "analysed": false}`` (listing never analyses).
* ``report?run=NAME``: the HTML page ``traceinsight report`` writes, served with its own CSP.
* ``report.json?run=NAME``: the JSON ``traceinsight report --json`` writes.

Both report routes answer 202 with a small JSON progress state while the report is computed (in a worker
process, `reports.ReportStore`), 200 once ready, 500 with the error when the run cannot be analyzed (or ran past
its deadline), 503 when too many reports are queued; the JSON comes straight from the report cache when that holds
it. ``run`` only selects one of the listed runs (the latest listing: an unknown name never starts a walk):
anything else is a 4xx, and it is never joined into a path.

Only the tab's own pages start work (an analysis, a walk of the logdir): a request a browser sends from another
site (`from_the_tab`) gets what is made already (a report, the latest listing), else a 403.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from traceinsight.listing import ReportCache
from traceinsight.tensorboard.reports import Outcome, ReportStore
from traceinsight.tensorboard.runs import ProfileRun, RunIndex, RunRows, is_run_name

PLUGIN_NAME = "traceinsight"
TAB_NAME = "TraceInsight"
_STATIC = Path(__file__).resolve().parent / "static"
# Route -> (file in `static/`, content type): the only files this plugin serves.
_STATIC_ROUTES = {"/index.js": ("index.js", "text/javascript; charset=utf-8")}
# The report's own policy (its <meta> tag), used when the page does not carry one.
_FALLBACK_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_META_CSP = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)"')
_STATUS = {"ready": 200, "queued": 202, "running": 202, "failed": 500, "busy": 503, "refused": 403}
# What a browser's `Sec-Fetch-Site` says of a request the tab's own page sent (or the user typed or bookmarked).
_OWN_SITE = ("same-origin", "none")

# A route's WSGI application (TensorBoard mounts them under /data/plugin/traceinsight/).
App = Callable[..., Any]
Handler = Callable[[wrappers.Request], wrappers.Response]


def _respond(
    body: bytes | str, content_type: str, status: int = 200, headers: dict[str, str] | None = None
) -> wrappers.Response:
    """A response TensorBoard's security check accepts: typed, `nosniff`, never cached (reports change)."""
    response = wrappers.Response(body, status=status, content_type=content_type)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _json(doc: Any, status: int = 200) -> wrappers.Response:
    return _respond(json.dumps(doc), "application/json", status)


def _error(status: int, message: str) -> wrappers.Response:
    return _json({"error": message}, status)


def from_the_tab(request: wrappers.Request) -> bool:
    """Whether a request may start work: not one a page of another site made a browser send (an ``<img>``, a
    form, a fetch). Every current browser says where a request comes from in `Sec-Fetch-Site`, and older ones send
    `Origin` with cross-origin fetches and posts: either must name this server. A request with neither comes from
    no browser (curl, a script, the tests), which another site cannot make send anything, so it may."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in _OWN_SITE
    origin = request.headers.get("Origin")
    return origin is None or origin == f"{request.scheme}://{request.host}"


def page_csp(html: str) -> str:
    """The policy the report page declares, sent as a header as well (with `frame-ancestors`, which only a
    header can set: the page may be framed by TensorBoard, nobody else)."""
    found = _META_CSP.search(html)
    return f"{found.group(1) if found else _FALLBACK_CSP}; frame-ancestors 'self'"


def _static_handler(name: str, content_type: str) -> Handler:
    """The route serving `static/<name>`: a fixed file, never one named by the request."""

    def serve(request: wrappers.Request) -> wrappers.Response:
        return _respond((_STATIC / name).read_bytes(), content_type)

    return serve


class TraceInsightPlugin(base_plugin.TBPlugin):
    """The "TraceInsight" tab: registered under the `tensorboard_plugins` entry point (see pyproject.toml)."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        logdir = getattr(context, "logdir", None) or ""
        # Local folders only: a gs:// or s3:// logdir (or a --logdir_spec) leaves the tab inactive.
        local = bool(logdir) and "://" not in logdir
        self._logdir = Path(logdir).expanduser().absolute() if local else None
        self._index = RunIndex(self._logdir)
        # The reports `traceinsight runs` keeps: the runs table's figures, and where every report made here goes.
        cache = ReportCache()
        self._rows = RunRows(self._logdir, cache) if self._logdir is not None else None
        self._store = ReportStore(self._logdir, cache=cache) if self._logdir is not None else None

    def get_plugin_apps(self) -> dict[str, App]:
        handlers = {route: _static_handler(name, kind) for route, (name, kind) in _STATIC_ROUTES.items()}
        handlers.update(
            {
                "/runs": self._serve_runs,
                "/report": partial(self._serve_report, as_json=False),
                "/report.json": partial(self._serve_report, as_json=True),
            }
        )
        return {route: wrappers.Request.application(handler) for route, handler in handlers.items()}

    def is_active(self) -> bool:
        """Whether the logdir holds a profile: a bounded walk, remembered (`RunIndex.is_active`)."""
        return self._index.is_active()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        # The tab has its own refresh button; TensorBoard's reload timer would not reach the module's frame.
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME, disable_reload=True)

    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        own = from_the_tab(request)
        runs = self._index.runs(fresh=True) if own else self._index.listed()
        if not runs or self._rows is None or self._store is None:
            return _json([])
        if own:
            self._store.warm_up()  # the tab is open: a report will be asked for next
        return _json([self._row(run) for run in runs])

    def _row(self, run: ProfileRun) -> dict[str, Any]:
        """The run's row (`RunRows`: the figures of a report cached or made here), with the error of its latest job
        here when that failed and left no report."""
        assert self._rows is not None and self._store is not None
        row = self._rows.row(run, self._store.made)
        if not row["analysed"] and (error := self._store.failure(run)) is not None:
            row["error"] = error
        return row

    def _serve_report(self, request: wrappers.Request, as_json: bool) -> wrappers.Response:
        if request.method not in ("GET", "HEAD"):
            return _error(405, "GET only")
        own = from_the_tab(request)
        found = self._find(request.args.get("run", ""), walk=own)
        if not isinstance(found, ProfileRun):
            return found
        assert self._store is not None  # a run was found, so there is a logdir
        outcome: Outcome = self._store.get(found, page=not as_json, start=own)
        if outcome.state != "ready":
            response = _json(outcome.progress(found.name), _STATUS[outcome.state])
            if outcome.state == "busy":
                response.headers["Retry-After"] = "5"
            return response
        if as_json:
            return _respond(outcome.json or "", "application/json")
        html = outcome.html or ""
        return _respond(html, "text/html; charset=utf-8", headers={"Content-Security-Policy": page_csp(html)})

    def _find(self, name: str, walk: bool) -> ProfileRun | wrappers.Response:
        """The listed run called `name`, else the 4xx response that refuses it; `walk`: whether the listing may be
        walked again first (when old, `RunIndex.find`)."""
        if not name:
            return _error(400, "the 'run' parameter is required")
        if not is_run_name(name):
            return _error(400, "not a run name")
        run = self._index.find(name, walk=walk)
        if run is None:
            return _error(404, "no such run under the logdir")
        return run
