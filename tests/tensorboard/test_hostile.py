"""The tab against hostile and odd inputs (issue 36): a stuck walk holds up no other request, a flood of requests
starts bounded work, a slow run cannot hold a slot for good, another site's page starts nothing, nothing outside
the logdir is opened or read beside a run, a malformed cache entry is a miss, and jobs die with TensorBoard."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, SAMPLE_TRACES, shared_trace, typed_report
from tests.tensorboard import jobs
from tests.tensorboard.test_store import run_named, wait
from traceinsight import discover as discover_module
from traceinsight import listing
from traceinsight.listing import ReportCache, report_key
from traceinsight.tensorboard import reports as reports_module
from traceinsight.tensorboard import runs as runs_module
from traceinsight.tensorboard.reports import ReportStore, compute_report
from traceinsight.tensorboard.runs import ProfileRun, RunIndex, has_profiles, list_runs

HANG_S = 3.0  # a call that takes longer than this is stuck behind the walk


def finishes(call: Callable[[], Any], within: float = HANG_S) -> tuple[bool, Any]:
    """Whether `call()` returns within `within` seconds (on a thread: a call stuck for good leaves the test), and
    its value."""
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    thread.join(within)
    return bool(done), done[0] if done else None


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Runs `a_slow`, `b_slow` (whose stand-in jobs wait for a `release` file) and `quick`."""
    for name in ("a_slow", "b_slow", "quick"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.pt.trace.json").write_text('{"traceEvents": []}')
    return tmp_path


@pytest.fixture
def stores() -> Iterator[list[ReportStore]]:
    made: list[ReportStore] = []
    yield made
    for store in made:
        store.close()


# Case 1 (the tab's side): a walk stuck in I/O (a FIFO opened for reading) holds the index for no one else.


def test_a_stuck_walk_holds_up_no_other_request(logdir, monkeypatch):
    monkeypatch.setattr(runs_module, "MIN_WALK_S", 0.0, raising=False)
    monkeypatch.setattr(runs_module, "WALK_WAIT_S", 0.5, raising=False)
    index = RunIndex(logdir)
    listed = [run.name for run in index.runs(fresh=True)]
    assert listed == [f"{logdir.name}/{name}" for name in ("quick", "b_slow", "a_slow")]  # newest (mtime) first
    release = threading.Event()

    def stuck(path: Path) -> list[ProfileRun]:
        release.wait(30)
        return []

    monkeypatch.setattr(runs_module, "list_runs", stuck)
    monkeypatch.setattr(runs_module, "has_profiles", stuck)
    try:
        threading.Thread(target=index.runs, kwargs={"fresh": True}, daemon=True).start()
        time.sleep(0.2)  # the walk is stuck now
        for call in (lambda: index.runs(fresh=True), index.runs, lambda: index.find(listed[0])):
            ok, value = finishes(call)
            assert ok and value  # the latest listing, at once
        assert finishes(index.is_active) == (True, True)
        # A fresh index whose first walk is stuck: TensorBoard's plugin listing waits `WALK_WAIT_S`, not for ever.
        fresh = RunIndex(logdir)
        threading.Thread(target=fresh.is_active, daemon=True).start()
        threading.Thread(target=fresh.runs, daemon=True).start()
        time.sleep(0.2)
        assert finishes(fresh.is_active) == (True, False)
        assert finishes(fresh.runs) == (True, [])
    finally:
        release.set()


# Case 5: starvation. A run built to be slow cannot hold a slot for good, a flood of requests starts bounded work,
# unknown names never walk, fresh walks are shared and rate-limited, and another site's page starts nothing.


def test_slow_runs_are_stopped_at_the_deadline_and_a_normal_run_gets_through(logdir, stores):
    stores.append(ReportStore(logdir, workers=2, job=jobs.slow_or_quick, deadline_s=1.0))
    store = stores[0]
    slow = [run_named(logdir, name) for name in ("a_slow", "b_slow")]
    started = time.monotonic()
    assert all(store.get(run).state in ("queued", "running") for run in slow)  # both slots taken
    queued = store.get(run_named(logdir, "quick"))
    assert queued.state in ("queued", "running")
    done = wait(store, run_named(logdir, "quick"), timeout=15)  # the slow jobs wait 30 s for a release
    assert done.state == "ready" and '"size": 19' in (done.json or "")
    for run in slow:
        failed = wait(store, run, timeout=5)
        assert failed.state == "failed" and "stopped after 1 s" in (failed.error or "")
        assert store.failure(run) == failed.error  # the runs table's error for the run
    assert time.monotonic() - started < 10
    assert not store._children  # the stopped jobs' processes are gone


def test_the_deadline_is_configurable(monkeypatch):
    monkeypatch.setenv(reports_module.DEADLINE_ENV, "42")
    assert reports_module.deadline_s() == 42.0
    for bad in ("", "soon", "-1", "0", "inf", "nan"):
        monkeypatch.setenv(reports_module.DEADLINE_ENV, bad)
        assert reports_module.deadline_s() == reports_module.DEFAULT_DEADLINE_S


def test_a_full_queue_answers_busy_and_jobs_run_on_one_thread_a_slot(tmp_path, stores):
    names = [f"{i}_slow" for i in range(8)]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.pt.trace.json").write_text('{"traceEvents": []}')
    stores.append(ReportStore(tmp_path, workers=1, job=jobs.slow_or_quick, queued=2))
    store = stores[0]
    before = set(threading.enumerate())
    states = [store.get(run_named(tmp_path, name)).state for name in names]
    assert states.count("busy") >= len(names) - 3  # 1 running and 2 waiting at most
    assert store.get(run_named(tmp_path, names[-1])).progress(names[-1])["error"].startswith("too many")
    started = [t for t in threading.enumerate() if t not in before]
    assert [t.name for t in started] == ["traceinsight-report"]  # one slot, one thread
    (tmp_path / "release").touch()
    assert wait(store, run_named(tmp_path, names[0])).state == "ready"


def counting_walks(monkeypatch: pytest.MonkeyPatch, pause_s: float = 0.0) -> list[Path]:
    """The logdir walks the index makes from now on (each taking `pause_s` more)."""
    walks: list[Path] = []
    real = runs_module.list_runs

    def walk(path: Path) -> list[ProfileRun]:
        walks.append(path)
        time.sleep(pause_s)
        return real(path)

    monkeypatch.setattr(runs_module, "list_runs", walk)
    return walks


def test_unknown_names_never_walk(logdir, monkeypatch):
    walks = counting_walks(monkeypatch)
    index = RunIndex(logdir)
    assert index.find(f"{logdir.name}/quick") is not None
    assert len(walks) == 1
    assert all(index.find(f"{logdir.name}/nope{i}") is None for i in range(150))
    assert len(walks) == 1


def test_fresh_walks_are_shared_and_rate_limited(logdir, monkeypatch):
    walks = counting_walks(monkeypatch, pause_s=0.3)
    index = RunIndex(logdir)
    threads = [threading.Thread(target=index.runs, kwargs={"fresh": True}) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(walks) == 1  # twenty reloads at once: one walk
    for _ in range(20):
        assert len(index.runs(fresh=True)) == 3
    assert len(walks) == 1  # within `MIN_WALK_S` of it: none
    monkeypatch.setattr(runs_module, "MIN_WALK_S", 0.0)
    index.runs(fresh=True)
    assert len(walks) == 2


def test_has_profiles_and_the_listing_open_nothing_outside_the_logdir(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / "inside")
    outside = tmp_path / "outside"
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", outside)
    (logdir / "leak").mkdir()
    for trace in outside.glob("*.gz"):
        (logdir / "leak" / trace.name).symlink_to(trace)
    (logdir / "aaa").mkdir()  # walked first: a link to a JSON file outside, named like a trace
    (outside / "x.json").write_text('{"traceEvents": []}')
    (logdir / "aaa" / "x.json").symlink_to(outside / "x.json")
    opened: list[Path] = []
    real_head, real_stamp = discover_module.looks_like_trace, discover_module.capture_stamp
    monkeypatch.setattr(discover_module, "looks_like_trace", lambda p: opened.append(p) or real_head(p))
    monkeypatch.setattr(discover_module, "capture_stamp", lambda p, **kw: opened.append(p) or real_stamp(p, **kw))
    assert has_profiles(logdir)
    assert [run.name for run in list_runs(logdir)] == ["logs/inside"]
    assert opened and all(p.resolve().is_relative_to(logdir.resolve()) for p in opened)
    assert {run.name for run in listing.list_runs(logdir)} >= {"logs/inside", "logs/leak"}  # the CLI reads them


# Case 7: a run's neighbours pass the same check as the run.


def test_meta_runs_names_no_run_the_tab_refuses(tmp_path):
    logdir = tmp_path / "logs"
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / "inside")
    outside = tmp_path / "outside"
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", outside)
    (logdir / "leak").mkdir()
    for trace in outside.glob("*.gz"):
        (logdir / "leak" / trace.name).symlink_to(trace)
    (run,) = list_runs(logdir)
    text, _ = compute_report(logdir, run.run, ReportCache(tmp_path / "cache"))
    assert [listed["name"] for listed in json.loads(text)["meta"]["runs"]] == ["logs/inside"]


def test_a_capture_pass_outside_the_logdir_is_not_read_beside_a_run(tmp_path):
    vllm = shared_trace("inference/vllm_decode_full")
    # The replay alone, as a logdir without its capture pass: what the tab must report.
    alone = tmp_path / "alone" / "logs"
    (alone / "vllm").mkdir(parents=True)
    shutil.copy(vllm / "graph_execution.json.gz", alone / "vllm")
    (alone_run,) = list_runs(alone)
    expected = json.loads(compute_report(alone, alone_run.run, ReportCache(tmp_path / "c1"))[0])
    # The same replay with its capture pass beside it, linked from outside the logdir.
    logdir = tmp_path / "tab" / "logs"
    (logdir / "vllm" / "capture_traces").mkdir(parents=True)
    shutil.copy(vllm / "graph_execution.json.gz", logdir / "vllm")
    for trace in (vllm / "capture_traces").glob("*.pt.trace.json.gz"):
        (logdir / "vllm" / "capture_traces" / trace.name).symlink_to(trace)
    assert {run.name for run in listing.list_runs(logdir)} == {"logs/vllm", "logs/vllm/capture_traces"}
    (run,) = list_runs(logdir)
    assert run.name == "logs/vllm"
    served = json.loads(compute_report(logdir, run.run, ReportCache(tmp_path / "c2"))[0])
    assert expected["compute"]["mfu"] is not None
    assert served["compute"]["mfu"] == expected["compute"]["mfu"]
    assert [listed["name"] for listed in served["meta"]["runs"]] == ["logs/vllm"]


# Case 13: a malformed cache entry is a miss.


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_cache_entry_nested_300_deep_is_a_miss(logdir, stores, report_cache):
    cache = ReportCache(report_cache)
    run = run_named(logdir, "quick")
    cache.put(report_key(logdir, run.run), typed_report(run=run.name))
    (entry,) = cache.entries.glob("*.json")
    doc = json.loads(entry.read_text())
    doc["report"]["meta"]["versions"] = nested(300)  # reads back, but cannot be written out again
    entry.write_text(json.dumps(doc))
    stores.append(ReportStore(logdir, workers=1, job=jobs.quick, cache=cache))
    outcome = stores[0].get(run, page=False)
    assert outcome.state in ("queued", "running")  # a miss: the report is made anew
    assert wait(stores[0], run).state == "ready"


# Case 16: killing TensorBoard with -9 ends its jobs and fork server.

_TAB = """
import sys, time
from pathlib import Path
from tests.tensorboard import jobs
from traceinsight.tensorboard.reports import ReportStore
from traceinsight.tensorboard.runs import list_runs

if __name__ == "__main__":
    logdir = Path(sys.argv[1])
    store = ReportStore(logdir, workers=2, job=jobs.slow_or_quick, deadline_s=600)
    store.warm_up()
    for run in list_runs(logdir):
        if run.name.endswith("slow"):
            store.get(run)
    while len(store._children) < 2:
        time.sleep(0.05)
    print("running", flush=True)
    time.sleep(120)
"""


def descendants(pid: int) -> set[int]:
    """The processes below `pid`, by their parents in /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        children = {child for child, p in parents.items() if p == parent}
        todo.extend(children - found)
        found |= children
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork server and /proc: Linux")
def test_jobs_and_the_fork_server_die_with_the_tab(logdir, tmp_path):
    script = tmp_path / "tab.py"
    script.write_text(_TAB)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    tab = subprocess.Popen([sys.executable, str(script), str(logdir)], stdout=subprocess.PIPE, env=env, cwd=REPO)
    below: set[int] = set()
    try:
        assert tab.stdout is not None and tab.stdout.readline() == b"running\n"
        below = descendants(tab.pid)
        assert len(below) >= 3  # the fork server and the two jobs it forked (and CPython's resource tracker)
        tab.send_signal(signal.SIGKILL)
        tab.wait()
        deadline = time.monotonic() + 5
        while (left := {pid for pid in below if alive(pid)}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"still running after the tab was killed: {left}"
    finally:
        tab.kill()
        for pid in below:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# The routes: another site's page starts nothing, a full queue is a quick 503, unknown names are a 404 without a walk.


def tab_client(logdir: Path, store: ReportStore | None = None) -> Any:
    """The plugin's routes for `logdir` (TensorBoard's plugin test client), with `store` for its jobs."""
    pytest.importorskip("tensorboard", reason="TensorBoard not installed")
    from tests.tensorboard.test_plugin import client, plugin_for

    plugin = plugin_for(str(logdir))
    if store is not None:
        plugin._store = store
    return client(plugin)


FOREIGN = [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Origin": "http://localhost:1"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "http://localhost"},
]
OWN = [{}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {"Origin": "http://localhost"}]


def test_a_request_from_another_site_starts_nothing(tmp_path, monkeypatch, report_cache, stores):
    logdir = tmp_path / "logs"
    for name in ("cached", "fresh"):
        shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / name)
    monkeypatch.setattr(ReportStore, "warm_up", staticmethod(lambda: None))
    walks = counting_walks(monkeypatch)
    stores.append(ReportStore(logdir, workers=1, job=jobs.quick, cache=ReportCache(report_cache)))
    http = tab_client(logdir, stores[0])
    for headers in FOREIGN:  # before any listing: nothing to list, no walk
        assert http.get("/runs", headers=headers).json == [] and not walks
    assert len(http.get("/runs").json) == 2 and len(walks) == 1  # the tab's own page lists
    cached, fresh = (f"logs/{name}" for name in ("cached", "fresh"))
    run = next(r for r in list_runs(logdir) if r.name == cached)
    ReportCache(report_cache).put(report_key(logdir, run.run), typed_report(run=cached))
    before = sorted(report_cache.iterdir())
    for headers in FOREIGN:
        assert sorted(row["name"] for row in http.get("/runs", headers=headers).json) == [cached, fresh]
        assert http.get("/report.json", query_string={"run": cached}, headers=headers).status_code == 200
        for route in ("/report", "/report.json"):
            response = http.get(route, query_string={"run": fresh}, headers=headers)
            assert response.status_code == 403 and "only the tab" in response.json["error"]
        assert http.get("/report", query_string={"run": cached}, headers=headers).status_code == 403
    assert len(walks) == 1 and sorted(report_cache.iterdir()) == before  # nothing walked, analysed or written
    for headers in OWN:
        assert http.get("/report.json", query_string={"run": fresh}, headers=headers).status_code in (200, 202)


def test_a_full_queue_is_a_quick_503(tmp_path, monkeypatch, stores):
    names = [f"{i}_slow" for i in range(4)]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.pt.trace.json").write_text('{"traceEvents": []}')
    monkeypatch.setattr(ReportStore, "warm_up", staticmethod(lambda: None))
    stores.append(ReportStore(tmp_path, workers=1, job=jobs.slow_or_quick, queued=1))
    http = tab_client(tmp_path, stores[0])
    started = time.monotonic()
    answers = [http.get("/report.json", query_string={"run": f"{tmp_path.name}/{name}"}) for name in names]
    assert time.monotonic() - started < HANG_S
    busy = [a for a in answers if a.status_code == 503]
    assert len(busy) >= 2 and all(a.headers["Retry-After"] == "5" and a.json["state"] == "busy" for a in busy)
    (tmp_path / "release").touch()


def test_unknown_names_are_a_404_without_a_walk(logdir, monkeypatch):
    walks = counting_walks(monkeypatch)
    http = tab_client(logdir)
    monkeypatch.setattr(ReportStore, "warm_up", staticmethod(lambda: None))
    for i in range(150):
        assert http.get("/report.json", query_string={"run": f"{logdir.name}/nope{i}"}).status_code == 404
    assert len(walks) <= 1


def test_the_runs_route_shows_a_failed_jobs_error(logdir, monkeypatch, stores):
    monkeypatch.setattr(ReportStore, "warm_up", staticmethod(lambda: None))
    stores.append(ReportStore(logdir, workers=1, job=jobs.failing))
    http = tab_client(logdir, stores[0])
    assert wait(stores[0], run_named(logdir, "quick")).state == "failed"
    rows = {row["name"]: row for row in http.get("/runs").json}
    assert rows[f"{logdir.name}/quick"]["error"] == f"cannot read {logdir.name}/quick"
    assert not rows[f"{logdir.name}/quick"]["analysed"] and "error" not in rows[f"{logdir.name}/a_slow"]
