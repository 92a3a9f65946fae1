"""The TraceInsight tab in a real `tensorboard --logdir`, beside XProf's Profile tab.

One TensorBoard serves a logdir of real TensorFlow (XSpace) and PyTorch (Kineto) profiles from
`sample_traces/`. The routes are checked as a contract: the run list (`traceinsight runs`' names and order), 202
then 200, the JSON equal to `traceinsight report --json` for the same run (but for the invocation fields), the HTML
page with its CSP, and 4xx for every path trick. Then headless Chromium opens the tab (DevTools protocol, `cdp.py`):
its first view is the runs table, a name opens the report, and the table then shows its figures.
`TRACEINSIGHT_UPDATE_SCREENSHOT=1` writes its screenshot to docs/tensorboard-tab.png. The report cache the tab and
the CLI share is a temporary folder (`TRACEINSIGHT_CACHE`), in this process and TensorBoard's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import REPO, SAMPLE_TRACES
from tests.corpus import shift_capture
from tests.tensorboard.cdp import CHROMIUM, Browser
from traceinsight import listing
from traceinsight.cli import main as cli_main
from traceinsight.commands.runs import _cells
from traceinsight.discover import reads_inside
from traceinsight.result import RunSummary

pytest.importorskip(
    "tensorboard", reason="TensorBoard not installed (pip install -e '.[tensorboard]', traceinsight-report)"
)

TORCH_DIR = "torch_cpu"
# Named as `traceinsight runs LOGDIR` names them (the logdir is `logs`); the oldest is opened in the browser only.
TF_RUN = "logs/a_input_bound/2026_12_02_18_12_53"
TORCH_RUN = f"logs/{TORCH_DIR}"
OLDEST_RUN = "logs/torch_oldest"
SECRET = "top-secret-outside-the-logdir"
INVOCATION_FIELDS = ("generated_at", "command", "options", "input")
SCREENSHOT = REPO / "docs" / "tensorboard-tab.png"
MAX_SCREENSHOT_BYTES = 300_000
# A row's figures that come from the run's report.
FIGURES = (
    "steps",
    "mean_step_ns",
    "gpu_util",
    "mfu",
    "capture_time",
    "top_bottleneck",
    "top_severity",
    "top_step_ns_after",
)
T = TypeVar("T")


class Server:
    """A running TensorBoard: its base URL, logdir and report cache folder."""

    def __init__(self, url: str, logdir: Path, cache: Path) -> None:
        self.url = url
        self.logdir = logdir
        self.cache = cache

    def get(
        self, route: str, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of `route` (a path with its query, already encoded)."""
        request = urllib.request.Request(self.url + route, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def report(self, route: str, run: str) -> tuple[int, dict[str, str], bytes]:
        return self.get(f"/data/plugin/traceinsight/{route}?" + urllib.parse.urlencode({"run": run}))

    def wait_ready(self, route: str, run: str, timeout: float = 60.0) -> tuple[dict[str, str], bytes]:
        """Poll a report route as the tab does: 202 with a progress state until 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, headers, body = self.report(route, run)
            if status == 200:
                return headers, body
            assert status == 202, (status, body)
            state = json.loads(body)
            assert state["run"] == run and state["state"] in ("queued", "running"), state
            time.sleep(0.2)
        raise AssertionError(f"{route} of {run} not ready in {timeout} s")


def make_logdir(root: Path) -> Path:
    """Real profiles as a training job leaves them: an XSpace session under plugins/profile/ (newest) and a
    PyTorch trace-handler folder, and an older one; beside them runs whose trace or run_info.json links to a secret
    outside."""
    logdir = root / "logs"
    shutil.copytree(SAMPLE_TRACES / "tf_input_bound", logdir / "a_input_bound")
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / TORCH_DIR)
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / "torch_oldest")
    (root / "secret").mkdir()
    (root / "secret" / "run_info.json").write_text(json.dumps({"secret": SECRET}))
    shutil.copy(next((logdir / TORCH_DIR).glob("*.gz")), root / "secret" / "x.pt.trace.json.gz")
    (logdir / "leak").mkdir()
    (logdir / "leak" / "x.pt.trace.json.gz").symlink_to(root / "secret" / "x.pt.trace.json.gz")
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / "infoleak")
    (logdir / "infoleak" / "run_info.json").unlink()
    (logdir / "infoleak" / "run_info.json").symlink_to(root / "secret" / "run_info.json")
    traces = [
        next(logdir.rglob("*.xplane.pb")),
        *(next((logdir / d).glob("*.gz")) for d in (TORCH_DIR, "torch_oldest")),
    ]
    for age, trace in enumerate(traces):
        if age:  # the PyTorch copies captured 1,000 s and 2,000 s before the XSpace session, on their own clocks
            shift_capture(trace, -1000 * age)
        os.utime(trace, (1_800_000_000 - 100 * age, 1_800_000_000 - 100 * age))
    return logdir


def tensorboard_command() -> list[str]:
    script = Path(sys.executable).with_name("tensorboard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tensorboard.main"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    names = {e.name for e in metadata.entry_points(group="tensorboard_plugins")}
    not_installed = "the entry point is not installed: pip install -e '.[tensorboard]' (traceinsight-report)"
    assert "traceinsight" in names, not_installed
    root = tmp_path_factory.mktemp("tensorboard")
    logdir = make_logdir(root)
    cache = root / "cache"
    log = root / "tensorboard.log"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", listing.CACHE_ENV: str(cache)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*tensorboard_command(), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
        )
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline and process.poll() is None:
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("TensorBoard ") and " at http://127.0.0.1:" in line:
                    url = line.split(" at ", 1)[1].split()[0].rstrip("/")
            time.sleep(0.2)
        assert url is not None, log.read_text(errors="replace")[-3000:]
        yield Server(url, logdir, cache)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def without_invocation(report: dict[str, Any], logdir: Path | None = None) -> dict[str, Any]:
    """`report` without the fields that name its invocation; with `logdir`, its `meta.runs` without the runs the tab
    refuses (they read outside it): the tab's report names no run it would not open."""
    meta = {k: v for k, v in report["meta"].items() if k not in INVOCATION_FIELDS}
    if logdir is not None:
        meta["runs"] = [run for run in meta["runs"] if run["name"] in listed(logdir)]
    return {**report, "meta": meta}


def cli_report(logdir: Path, run: str, out: Path) -> dict[str, Any]:
    """The `--json` of `traceinsight report LOGDIR --run RUN`."""
    json_path = out / "cli.json"
    args = [
        "report",
        str(logdir),
        "--run",
        run,
        "-o",
        str(out / "cli.html"),
        "--json",
        str(json_path),
    ]
    assert cli_main([*args, "-q"]) == 0
    return json.loads(json_path.read_text())


def test_the_tab_is_registered_beside_xprof(server):
    status, _, body = server.get("/data/plugins_listing")
    listing = json.loads(body)
    assert status == 200 and "profile" in listing  # XProf's tab loads alongside
    tab = listing["traceinsight"]
    assert tab["tab_name"] == "TraceInsight" and tab["enabled"]
    assert tab["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/traceinsight/index.js"}
    status, headers, body = server.get("/data/plugin/traceinsight/index.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert b"export async function render" in body


def listed(logdir: Path) -> list[str]:
    """The names `traceinsight runs LOGDIR` lists, in its order, but for runs that read outside the logdir."""
    return [run.name for run in listing.list_runs(logdir) if reads_inside(run, logdir)]


def test_runs_are_listed_as_traceinsight_runs_lists_them(server):
    status, headers, body = server.get("/data/plugin/traceinsight/runs")
    assert status == 200 and headers["Content-Type"] == "application/json"
    runs = json.loads(body)
    assert [r["name"] for r in runs] == listed(server.logdir) == [TF_RUN, TORCH_RUN, OLDEST_RUN]
    assert {"logs/leak", "logs/infoleak"} <= {r.name for r in listing.list_runs(server.logdir)}  # refused here
    assert runs[0] == {"name": TF_RUN, "files": 1, "bytes": 377095, "modified": 1_800_000_000, "analysed": False}


@pytest.mark.parametrize("run", [TF_RUN, TORCH_RUN])
def test_the_json_is_the_clis_and_the_page_keeps_its_csp(server, run, tmp_path):
    status, headers, body = server.report("report.json", run)
    assert status == 202 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["state"] in ("queued", "running")
    _, body = server.wait_ready("report.json", run)
    served = json.loads(body)
    assert served["meta"]["command"] == ["traceinsight", "report", str(server.logdir), "--run", run]
    cli = cli_report(server.logdir, run, tmp_path)
    assert {"logs/leak", "logs/infoleak"} <= {listed["name"] for listed in cli["meta"]["runs"]}
    assert without_invocation(served) == without_invocation(cli, server.logdir)

    headers, body = server.wait_ready("report", run)
    page = body.decode()
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"].startswith("default-src 'none';")
    assert "frame-ancestors 'self'" in headers["Content-Security-Policy"]
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'' in page
    assert f"traceinsight: {run}" in page and 'id="verdict"' in page


@pytest.mark.parametrize(
    "query",
    [
        "",
        "run=",
        "run=..",
        "run=../secret",
        "run=..%2fsecret",
        "run=%2e%2e%2fsecret",
        "run=%252e%252e%252fsecret",
        f"run={TORCH_RUN}%2f..%2f..%2fsecret",
        "run=logs/..%2Fsecret",
        "run=%2Fetc%2Fpasswd",
        "run=leak",
        "run=logs/leak",
        "run=logs%2Finfoleak",
        "run=a_input_bound/2026_12_02_18_12_53",
        "run=..%5csecret",
        "run=secret%00",
        "run=nope",
        "run=.%2F" + TORCH_RUN,
    ],
)
@pytest.mark.parametrize("route", ["report", "report.json"])
def test_path_tricks_get_4xx(server, route, query):
    status, _, body = server.get(f"/data/plugin/traceinsight/{route}?{query}")
    assert 400 <= status < 500 and SECRET.encode() not in body


def test_a_run_outside_the_logdir_by_absolute_path_gets_4xx(server):
    secret = server.logdir.parent / "secret"
    status, _, body = server.report("report.json", str(secret))
    assert status == 400 and SECRET.encode() not in body
    status, _, _ = server.get("/data/plugin/traceinsight/report", method="POST")
    assert 400 <= status < 500


def test_a_page_of_another_site_starts_no_analysis(server):
    """A request a browser sends for another site's page (an <img>, a fetch) is refused before any work: the run
    has no report yet, and none is made."""
    runs_route(server)  # the tab's page has listed the runs
    before = sorted(server.cache.glob("*"))
    query = "?" + urllib.parse.urlencode({"run": OLDEST_RUN})
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        for route in ("report", "report.json"):
            status, _, body = server.get(f"/data/plugin/traceinsight/{route}{query}", headers=headers)
            assert status == 403 and json.loads(body)["state"] == "refused"
    time.sleep(1)
    assert sorted(server.cache.glob("*")) == before
    assert not next(row for row in runs_route(server) if row["name"] == OLDEST_RUN)["analysed"]


# JavaScript that finds the tab's frame (TensorBoard's plugin frame) and the report's frame among the page's frames.
_FRAMES = """
  const frames = (w) => [...Array(w.frames.length).keys()].flatMap((i) => [w.frames[i], ...frames(w.frames[i])]);
  const all = frames(window);
  const tab = all.find((f) => f.document.getElementById("ti-runs"));
  const report = all.find((f) => f.location.pathname.endsWith("/report") && f.document.getElementById("verdict"));
"""


def table(browser: Browser) -> list[list[str]] | None:
    """The runs table's cells, row by row, once the table is the view shown and its rows are in."""
    return browser.evaluate(
        f"""(() => {{ {_FRAMES}
          const rows = tab && !tab.document.getElementById("ti-table").hidden
            && [...tab.document.querySelectorAll("#ti-runs tbody tr")];
          return rows && rows.length ? rows.map((r) => [...r.cells].map((c) => c.textContent)) : null;
        }})()"""
    )


def hint(browser: Browser) -> str | None:
    """The line above the runs table (what a click does), when shown."""
    return browser.evaluate(
        f"""(() => {{ {_FRAMES}
          const line = tab && tab.document.getElementById("ti-hint");
          return line && !line.hidden ? line.textContent : null;
        }})()"""
    )


def expected_hint(rows: list[dict[str, Any]]) -> str:
    """The line over the table for the route's `rows`: how many wait for a click (the earlier tests may have
    analysed some), and what the click does."""
    waiting = sum(not row["analysed"] for row in rows)
    if not waiting:
        return "Click a run to open its report."
    which = "No run is analysed yet" if waiting == len(rows) else f"{waiting} of {len(rows)} runs are not analysed yet"
    return (
        f"{which} (dashes): click a run to analyse it; its figures fill in here once its report is made "
        "(traceinsight runs LOGDIR analyses them all)."
    )


def open_report(browser: Browser, run: str) -> str:
    """Click `run`'s name in the table; the text of its report page once shown."""
    name = json.dumps(run)
    clicked = browser.evaluate(
        f"""(() => {{ {_FRAMES}
          const row = [...tab.document.querySelectorAll("#ti-runs tbody tr")].find((r) => r.dataset.run === {name});
          row.querySelector("button.ti-name").click();
          return true;
        }})()"""
    )
    assert clicked
    return browser.wait_for(
        f"""(() => {{ {_FRAMES}
          return report && new URLSearchParams(report.location.search).get("run") === {name}
            && !tab.document.getElementById("ti-report").hidden && report.document.body.innerText;
        }})()""",
        timeout=90,
    )


def expected_cells(row: dict[str, Any]) -> list[str]:
    """The cells `traceinsight runs` prints for the route's `row`; a run not analysed yet: its files only."""
    if row["analysed"]:
        return _cells(RunSummary(**{k: v for k, v in row.items() if k != "analysed"}))
    summary = _cells(RunSummary(name=row["name"], files=row["files"], bytes=row["bytes"]))
    return [*summary[:5], *["-"] * 9]


def runs_route(server: Server) -> list[dict[str, Any]]:
    status, _, body = server.get("/data/plugin/traceinsight/runs")
    assert status == 200
    return json.loads(body)


def poll(what: Callable[[], T | None], timeout: float = 60.0) -> T:
    """`what()` once it is truthy (AssertionError with the last value on timeout)."""
    deadline = time.monotonic() + timeout
    while not (value := what()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert value, f"timed out (last value {value!r})"
    return value


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_the_tab_opens_on_the_runs_table_and_each_name_opens_its_report(server, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        browser.navigate(server.url + "/#traceinsight")
        # The first view: the runs table, the runs `traceinsight runs LOGDIR` lists, in its order, as it prints them.
        first = poll(lambda: table(browser))
        assert [cells[0] for cells in first] == listed(server.logdir) == [TF_RUN, TORCH_RUN, OLDEST_RUN]
        rows = runs_route(server)
        assert not rows[2]["analysed"]  # opened here only: "-" until then
        assert first == [expected_cells(row) for row in rows]
        # A line above the table says what the dashes are and what a click does.
        assert hint(browser) == expected_hint(rows)

        # A name opens its report; the way back is the table.
        text = open_report(browser, TF_RUN)
        assert f"traceinsight: {TF_RUN}" in text
        assert "Waiting for input data" in text and "num_parallel_calls" in text
        browser.evaluate(f"(() => {{ {_FRAMES} tab.document.getElementById('ti-back').click(); return true; }})()")
        poll(lambda: table(browser))

        # Once a run's report is made, the table shows its figures: those of `traceinsight report --json`.
        assert f"traceinsight: {OLDEST_RUN}" in open_report(browser, OLDEST_RUN)
        browser.evaluate(f"(() => {{ {_FRAMES} tab.document.getElementById('ti-back').click(); return true; }})()")
        shown = poll(lambda: (cells := table(browser)) and cells[2][8] != "-" and cells)
        rows = runs_route(server)
        assert rows[2]["analysed"] and shown == [expected_cells(row) for row in rows]
        assert hint(browser) == expected_hint(rows)
        report = cli_report(server.logdir, OLDEST_RUN, tmp_path)
        top = report["bottlenecks"][0] if report["bottlenecks"] else None
        after = top["projection"]["step_ns_after"] if top and top["projection"]["basis"] != "none" else None
        assert {k: rows[2][k] for k in FIGURES} == {
            "steps": report["steps"]["count"],
            "mean_step_ns": report["steps"]["mean_ns"],
            "gpu_util": report["totals"]["step_gpu_util"],
            "mfu": report["compute"]["mfu"],
            "capture_time": report["meta"]["capture_date"],
            "top_bottleneck": top and top["id"],
            "top_severity": top and top["severity"],
            "top_step_ns_after": after,
        }
        # TensorBoard, the tab and the report load everything from this server.
        outside = [u for u in browser.requested_urls() if not u.startswith((server.url + "/", "data:", "about:"))]
        assert outside == []
        time.sleep(0.5)  # fonts settle
        png = browser.screenshot()
    finally:
        browser.close()
    assert png.startswith(b"\x89PNG") and len(png) < MAX_SCREENSHOT_BYTES
    target = SCREENSHOT if os.environ.get("TRACEINSIGHT_UPDATE_SCREENSHOT") == "1" else tmp_path / SCREENSHOT.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(png)


def test_the_tab_and_traceinsight_runs_share_names_and_reports(server, tmp_path, capsys, monkeypatch):
    """The CLI lists the tab's runs under the same names, and finds the reports the tab made in the shared cache."""
    monkeypatch.setenv(listing.CACHE_ENV, str(server.cache))
    assert cli_main(["runs", str(server.logdir), "-q"]) == 0
    names = capsys.readouterr().out.splitlines()
    assert [row["name"] for row in runs_route(server)] == [n for n in names if n in listed(server.logdir)]
    out = tmp_path / "runs.json"
    assert cli_main(["runs", str(server.logdir), "--json", str(out), "--jobs", "1"]) == 0
    cli_rows = {row["name"]: row for row in json.loads(out.read_text())["runs"]}
    for row in runs_route(server):
        assert row["analysed"] and {**cli_rows[row["name"]], "analysed": True} == row
