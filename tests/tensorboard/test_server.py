"""The TraceInsight tab in a real `tensorboard --logdir`, beside XProf's Profile tab.

One TensorBoard serves a logdir of real TensorFlow (XSpace) and PyTorch (Kineto) profiles from
`sample_traces/`. The routes are checked as a contract: the run list, 202 then 200, the JSON equal to
`traceinsight report --json` for the same run (but for the invocation fields), the HTML page with its CSP,
and 4xx for every path trick. Then headless Chromium opens the tab (DevTools protocol, `cdp.py`) and reads
the report inside it. `TRACEINSIGHT_UPDATE_SCREENSHOT=1` writes its screenshot to docs/tensorboard-tab.png.
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
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, SAMPLE_TRACES
from tests.tensorboard.cdp import CHROMIUM, Browser
from traceinsight.cli import main as cli_main

pytest.importorskip("tensorboard", reason="TensorBoard not installed (pip install -e '.[tensorboard]')")

TF_RUN = "a_input_bound/2026_12_02_18_12_53"
TORCH_RUN = "torch_cpu"
SECRET = "top-secret-outside-the-logdir"
INVOCATION_FIELDS = ("generated_at", "command", "options", "input")
SCREENSHOT = REPO / "docs" / "tensorboard-tab.png"
MAX_SCREENSHOT_BYTES = 300_000


class Server:
    """A running TensorBoard: its base URL and logdir."""

    def __init__(self, url: str, logdir: Path) -> None:
        self.url = url
        self.logdir = logdir

    def get(self, route: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of `route` (a path with its query, already encoded)."""
        request = urllib.request.Request(self.url + route, method=method)
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
    PyTorch trace-handler folder; beside them runs whose trace or run_info.json links to a secret outside."""
    logdir = root / "logs"
    shutil.copytree(SAMPLE_TRACES / "tf_input_bound", logdir / "a_input_bound")
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / TORCH_RUN)
    (root / "secret").mkdir()
    (root / "secret" / "run_info.json").write_text(json.dumps({"secret": SECRET}))
    shutil.copy(next((logdir / TORCH_RUN).glob("*.gz")), root / "secret" / "x.pt.trace.json.gz")
    (logdir / "leak").mkdir()
    (logdir / "leak" / "x.pt.trace.json.gz").symlink_to(root / "secret" / "x.pt.trace.json.gz")
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / "infoleak")
    (logdir / "infoleak" / "run_info.json").unlink()
    (logdir / "infoleak" / "run_info.json").symlink_to(root / "secret" / "run_info.json")
    traces = [next(logdir.rglob("*.xplane.pb")), next((logdir / TORCH_RUN).glob("*.gz"))]
    for age, trace in enumerate(traces):
        os.utime(trace, (1_800_000_000 - 100 * age, 1_800_000_000 - 100 * age))
    return logdir


def tensorboard_command() -> list[str]:
    script = Path(sys.executable).with_name("tensorboard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tensorboard.main"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    names = {e.name for e in metadata.entry_points(group="tensorboard_plugins")}
    assert "traceinsight" in names, "the entry point is not installed: pip install -e '.[tensorboard]'"
    root = tmp_path_factory.mktemp("tensorboard")
    logdir = make_logdir(root)
    log = root / "tensorboard.log"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
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
        yield Server(url, logdir)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def without_invocation(report: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in report["meta"].items() if k not in INVOCATION_FIELDS}
    return {**report, "meta": meta}


def cli_report(logdir: Path, run: str, out: Path) -> dict[str, Any]:
    """The `--json` of `traceinsight report LOGDIR --run <logdir name>/RUN`."""
    json_path = out / "cli.json"
    args = [
        "report",
        str(logdir),
        "--run",
        f"{logdir.name}/{run}",
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


def test_runs_are_listed_newest_first(server):
    status, headers, body = server.get("/data/plugin/traceinsight/runs")
    assert status == 200 and headers["Content-Type"] == "application/json"
    runs = json.loads(body)
    assert [r["run"] for r in runs] == [TF_RUN, TORCH_RUN]  # `leak`, `infoleak` read outside the logdir
    assert runs[0]["files"] == 1 and runs[0]["bytes"] == 377095


@pytest.mark.parametrize("run", [TF_RUN, TORCH_RUN])
def test_the_json_is_the_clis_and_the_page_keeps_its_csp(server, run, tmp_path):
    status, headers, body = server.report("report.json", run)
    assert status == 202 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["state"] in ("queued", "running")
    _, body = server.wait_ready("report.json", run)
    served = json.loads(body)
    assert served["meta"]["command"] == ["traceinsight", "report", str(server.logdir), "--run", f"logs/{run}"]
    assert without_invocation(served) == without_invocation(cli_report(server.logdir, run, tmp_path))

    headers, body = server.wait_ready("report", run)
    page = body.decode()
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"].startswith("default-src 'none';")
    assert "frame-ancestors 'self'" in headers["Content-Security-Policy"]
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'' in page
    assert f"traceinsight: logs/{run}" in page and 'id="verdict"' in page


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
        "run=%2Fetc%2Fpasswd",
        "run=leak",
        "run=infoleak",
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


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_the_tab_shows_the_report_in_chromium(server, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        browser.navigate(server.url + "/#traceinsight")
        # The tab's frame (TensorBoard's plugin frame) holds the run picker and the report's frame.
        found = browser.wait_for(
            """(() => {
              const frames = (w) =>
                [...Array(w.frames.length).keys()].flatMap((i) => [w.frames[i], ...frames(w.frames[i])]);
              const all = frames(window);
              const tab = all.find((f) => f.document.getElementById("ti-run"));
              const report = all.find(
                (f) => f.location.pathname.endsWith("/report") && f.document.getElementById("verdict"));
              return tab && report && {
                runs: [...tab.document.querySelectorAll("#ti-run option")].map((o) => o.value),
                shown: new URLSearchParams(report.location.search).get("run"),
                text: report.document.body.innerText,
              };
            })()""",
            timeout=60,
        )
        assert found["runs"] == [TF_RUN, TORCH_RUN] and found["shown"] == TF_RUN
        assert f"traceinsight: logs/{TF_RUN}" in found["text"]
        assert "Waiting for input data" in found["text"] and "num_parallel_calls" in found["text"]
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
