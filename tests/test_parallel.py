"""Many inputs read in parallel (a process per file, or Dask workers): the same report as reading them one by one.

The eight rank files are synthetic timelines (tools/synth.py) whose steps wait
longer for input the higher the rank, so each rank's mean step, idle fraction
and the slowest rank are known from the timelines' ground truth.
"""

from __future__ import annotations

import importlib
import json
import math
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO, shared_trace
from tests.corpus import move_capture
from tools.synth import GpuTimeline, TimelineBuilder
from traceinsight import parallel
from traceinsight.cli import main
from traceinsight.discover import discover
from traceinsight.errors import TraceError
from traceinsight.load import load_run
from traceinsight.parallel import map_files

RANKS = 8
XSPACE_GPU = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


def _timeline(rank: int) -> GpuTimeline:
    """Three steps: an input wait of (1 + rank / 2) ms, then a 0.3 ms kernel."""
    b = TimelineBuilder(seed=rank)
    for step in range(3):
        with b.step(step):
            b.input_wait(1_000_000 + rank * 500_000)
            b.launch_kernel("gemm", 300_000, op="aten::mm")
    return b.build(f"rank{rank}", "one rank of a data-parallel job")


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A folder of eight rank traces, as tensorboard_trace_handler leaves them, and their ground truths."""
    folder = tmp_path_factory.mktemp("ranks")
    truths = []
    for rank in range(RANKS):
        timeline = _timeline(rank)
        doc = timeline.to_kineto()
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": RANKS}
        (folder / f"worker{rank}.pt.trace.json").write_text(json.dumps(doc))
        truths.append(timeline.ground_truth())
    return folder, truths


@pytest.fixture(autouse=True)
def small_runs_in_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runs are far below the size from which a run's files are read in processes of their own: read them
    in processes all the same, as a big run's are."""
    monkeypatch.setattr(importlib.import_module("traceinsight.load"), "PARALLEL_RUN_MIN_BYTES", 0)


def _report(path: Path, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["report", str(path), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q", *extra])
    return code, _analyzed(json.loads((out / "r.json").read_text())) if code in (0, 1) else {}


def _analyzed(report: dict[str, Any]) -> dict[str, Any]:
    """The report less what only says how it was asked for (`meta`: when, the command line, its paths)."""
    meta = {k: v for k, v in report["meta"].items() if k not in ("generated_at", "command", "options", "input")}
    return {**report, "meta": meta}


@pytest.fixture(scope="module")
def one_by_one(rank_dir, tmp_path_factory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("jobs1")
    code, report = _report(rank_dir[0], out, "--jobs", "1")
    assert code == 0
    return report, json.dumps(report, sort_keys=True)


def test_two_processes_give_the_same_json_as_one(rank_dir, one_by_one, tmp_path: Path) -> None:
    code, report = _report(rank_dir[0], tmp_path, "--jobs", "2")
    assert code == 0 and json.dumps(report, sort_keys=True) == one_by_one[1]


def test_eight_inputs_with_their_ranks_and_devices(one_by_one) -> None:
    report = one_by_one[0]
    assert [i["rank"] for i in report["inputs"]] == list(range(RANKS))
    assert [d["id"] for d in report["devices"]] == [f"rank{r}/GPU:0" for r in range(RANKS)]


def test_ranks_section_from_the_ground_truth(rank_dir, one_by_one) -> None:
    ranks = one_by_one[0]["ranks"]
    truths = rank_dir[1]
    means = [sum(s["dur_ns"] for s in t["steps"]["items"]) // t["steps"]["count"] for t in truths]
    assert means == sorted(means) and len(set(means)) == RANKS  # the higher the rank, the longer its steps
    assert ranks["count"] == RANKS
    for item, truth, mean in zip(ranks["items"], truths, means, strict=True):
        device = truth["devices"]["GPU:0"]
        assert item["steps"]["mean_ns"] == mean and item["steps"]["count"] == 3
        assert (item["span_ns"], item["busy_ns"]) == (device["span_ns"], device["busy_ns"])
        steps_ns = sum(s["dur_ns"] for s in truth["steps"]["items"])
        assert item["idle_fraction"] == pytest.approx(1 - device["busy_in_steps_ns"] / steps_ns)
    assert (ranks["step_mean_min_ns"], ranks["step_mean_max_ns"]) == (means[0], means[-1])
    assert ranks["step_mean_spread_ns"] == means[-1] - means[0]
    assert ranks["step_mean_spread_fraction"] == pytest.approx((means[-1] - means[0]) / means[0])
    assert ranks["slowest"]["rank"] == RANKS - 1 and ranks["slowest"]["label"] == "rank 7"


def test_html_shows_the_ranks_only_with_several_inputs(rank_dir, tmp_path: Path) -> None:
    folder = rank_dir[0]
    code, _ = _report(folder, tmp_path, "--jobs", "1")
    page = (tmp_path / "r.html").read_text()
    assert code == 0 and 'id="ranks"' in page and "rank 7 <strong>(slowest)</strong>" in page
    code, single = _report(folder / "worker3.pt.trace.json", tmp_path)
    assert code == 0 and single["ranks"] is None and 'id="ranks"' not in (tmp_path / "r.html").read_text()


def test_a_bad_file_read_in_a_worker_is_one_line_and_exit_2(rank_dir, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for source in sorted(rank_dir[0].iterdir())[:3]:
        (folder / source.name).write_bytes(source.read_bytes())
    (folder / "worker9.pt.trace.json").write_bytes(b'{"traceEvents": [{"ph": "X",')
    code, _ = _report(folder, tmp_path, "--jobs", "2")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "worker9.pt.trace.json: invalid JSON at byte" in err


def _square(path: Path) -> int:
    if path.name == "bad":
        raise TraceError(path, "no good")
    return int(path.name) ** 2


def test_map_files_keeps_the_order_and_reports_each_file_done() -> None:
    done: list[int] = []
    paths = [Path(str(n)) for n in range(6)]
    assert map_files(_square, paths, jobs=2, on_done=done.append) == [n * n for n in range(6)]
    assert sorted(done) == list(range(6))
    with pytest.raises(TraceError) as info:
        map_files(_square, [Path("1"), Path("bad")], jobs=2)
    assert (info.value.path, info.value.reason) == ("bad", "no good")


def test_dask_workers_give_the_same_json(rank_dir, one_by_one, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        code, report = _report(rank_dir[0], tmp_path, "--scheduler", cluster.scheduler_address)
    assert code == 0 and json.dumps(report, sort_keys=True) == one_by_one[1]


def test_without_dask_the_scheduler_option_says_what_to_install(
    rank_dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    code, _ = _report(rank_dir[0], tmp_path, "--scheduler", "local")
    err = capsys.readouterr().err
    assert code == 2 and "Dask is not installed: pip install 'dask[distributed]'" in err


@pytest.mark.parametrize(
    "files",
    [
        # Two hosts' XSpace: the steps come from a device Steps line, named with its host's prefix.
        {"plugins/profile/r/w1.xplane.pb": XSPACE_GPU, "plugins/profile/r/w0.xplane.pb": XSPACE_GPU},
        # A CPU-only rank (no devices at all) beside two GPU ones of other makes and schemas.
        {
            "a.pt.trace.json.gz": "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
            "b.pt.trace.json.gz": "hta/nccl_parser_config/nccl_data.json.gz",
            "c.pt.trace.json.gz": "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        },
    ],
    ids=["xspace-steps-lines", "cpu-only-and-gpu-ranks"],
)
def test_inputs_analyzed_apart_give_the_json_of_the_merged_table(files: dict[str, str], tmp_path: Path) -> None:
    """With several files and jobs, each input is analyzed where it is read and the results merged
    (`merge_analyses`); one job analyses the merged table. The reports are the same."""
    run = tmp_path / "run"
    for name, source in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_trace(source), run / name)
        if name.endswith(".json.gz"):  # traces of different days, made one run's ranks: captured at once
            move_capture(run / name, 1_700_000_000 * 10**9)
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        out.mkdir()
        code, report = _report(run, out, "--jobs", jobs)
        assert code == 0
        reports.append(report)
    assert reports[0] == reports[1]
    assert len(reports[0]["inputs"]) == len(files) and reports[0]["steps"]["count"] > 0


def test_load_run_reads_the_files_in_processes_into_the_same_table(rank_dir) -> None:
    """`load_run` (the library's way to get a run's merged table) maps files over processes with jobs > 1:
    the table is the one read file by file here."""
    folder = rank_dir[0]
    here = load_run(discover(folder), folder, jobs=1)
    apart = load_run(discover(folder), folder, jobs=2)
    pd.testing.assert_frame_equal(apart.events, here.events)
    assert [i.rank for i in apart.inputs] == list(range(RANKS))


def test_trace_out_reads_the_files_in_processes(rank_dir, one_by_one, tmp_path: Path, monkeypatch) -> None:
    """``--trace-out`` needs the run's event table here, so the files are read in processes by `load_run`
    (not read and analyzed apart): the same JSON, and the timeline holds every rank's device."""
    load = importlib.import_module("traceinsight.load")  # the package's `load` is the API's function
    mapped = []
    real = load.map_run

    def spied(func: Any, *args: Any) -> Any:
        mapped.append(func.func.__name__)
        return real(func, *args)

    monkeypatch.setattr(load, "map_run", spied)
    code, report = _report(rank_dir[0], tmp_path, "--jobs", "2", "--trace-out", str(tmp_path / "t.json"))
    assert code == 0 and report == one_by_one[0] and mapped == ["read_input"]
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {f"rank{r}/device:GPU:0" for r in range(RANKS)} <= processes


@pytest.mark.parametrize("over", [False, True])
def test_a_run_is_read_in_processes_only_from_its_size_on(rank_dir, monkeypatch, over: bool) -> None:
    """Workers are started for a run's files only when they hold `PARALLEL_RUN_MIN_BYTES` of JSON in all (the
    eight plain JSON files here: their sizes on disk); below it they are read here one after another, whatever
    the jobs."""
    load = importlib.import_module("traceinsight.load")
    total = sum(f.stat().st_size for f in rank_dir[0].iterdir())
    monkeypatch.setattr(load, "PARALLEL_RUN_MIN_BYTES", total if over else total + 1)
    mapped = []
    real = load.map_run
    monkeypatch.setattr(load, "map_run", lambda *args: mapped.append(1) or real(*args))
    profile = load_run(discover(rank_dir[0]), rank_dir[0], jobs=2)
    assert len(mapped) == int(over) and [i.rank for i in profile.inputs] == list(range(RANKS))


@pytest.mark.parametrize(
    ("cores", "load", "runnable", "idle"),
    [
        (2, 0.1, 1, 2),  # nothing else runs
        (2, 1.6, 1, 2),  # the load average still counts a run that ended: nothing runs now besides this one
        (2, 0.4, 3, 2),  # a burst now, on a machine idle the last minute
        (2, 1.0, 2, 1),  # one other process, busy for a minute
        (2, 6.2, 7, 1),  # a busy machine: at least one job
        (8, 3.2, 5, 5),  # 3.2 cores busy leave 4.8: rounded up
    ],
)
def test_default_jobs_are_the_cores_other_processes_leave_idle(
    monkeypatch, tmp_path: Path, cores: int, load: float, runnable: int, idle: int
) -> None:
    """The default jobs: the usable cores less the fewer of the 1-minute load average and the processes runnable
    now besides this one (/proc/loadavg's fourth field counts this one), rounded up, at least 1."""
    loadavg = tmp_path / "loadavg"
    loadavg.write_text(f"{load:.2f} {load:.2f} {load:.2f} {runnable}/300 4242\n")
    monkeypatch.setattr(parallel, "usable_cores", lambda: cores)
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(parallel, "_LOADAVG", loadavg)
    assert parallel.default_jobs() == parallel.idle_cores() == idle
    monkeypatch.setattr(parallel, "_LOADAVG", tmp_path / "none")  # no /proc: the load average alone
    assert parallel.idle_cores() == max(1, min(cores, math.ceil(cores - load)))


@pytest.mark.parametrize(
    ("v2", "v1", "cores"),
    [
        ("150000 100000", None, 2),  # 1.5 cores, rounded up
        ("max 100000", None, 64),  # no quota
        (None, ("50000", "100000"), 1),
        (None, ("-1", "100000"), 64),
        (None, None, 64),  # no cgroup files
    ],
)
def test_usable_cores_are_at_most_the_cgroup_quota(
    monkeypatch, tmp_path: Path, v2: str | None, v1: tuple[str, str] | None, cores: int
) -> None:
    """A container's CPU quota (cgroup v2 ``cpu.max``, else v1 ``cfs_quota_us / cfs_period_us``) caps the cores
    the affinity gives (64 here)."""
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(parallel, "_CGROUP_V2_MAX", tmp_path / "cpu.max")
    monkeypatch.setattr(parallel, "_CGROUP_V1", tmp_path / "cpu")
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    assert parallel.usable_cores() == cores


@pytest.mark.parametrize(("platform", "method"), [("linux", "fork"), ("darwin", "spawn"), ("win32", "spawn")])
def test_workers_fork_only_on_linux(monkeypatch, platform, method):
    """macOS offers fork, but forking a process whose threads ran is unsafe there (issue 13): spawn."""
    monkeypatch.setattr(parallel.sys, "platform", platform)
    assert parallel.start_context(threaded=False).get_start_method() == method


@pytest.fixture
def live_thread() -> Iterator[threading.Thread]:
    """Another thread of this process, alive until the test ends (as a server's, or a pool's)."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="a server thread")
    thread.start()
    yield thread
    stop.set()
    thread.join()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is Linux's only")
def test_a_process_with_another_thread_never_forks(live_thread) -> None:
    """A thread may hold a lock at a fork that the child then waits for for ever: with one alive, workers start
    from the fork server, whose process runs no thread; a server's choice does not depend on the moment."""
    assert live_thread.is_alive()
    assert parallel.start_context().get_start_method() == "forkserver"
    assert parallel.start_context(threaded=True).get_start_method() == "forkserver"
    with parallel.Child("test", parallel.start_context()) as child:  # works as a forked one does
        assert child.call(_square, Path("7")) == 49


# A report in a fresh interpreter (this one may hold other tests' threads), each fork, in whichever process,
# writing its process's thread count to a file first; then the threads and processes it left behind.
_LOGGED_REPORT = """
import importlib, multiprocessing, os, sys, threading
from traceinsight.cli import main
importlib.import_module("traceinsight.load").PARALLEL_RUN_MIN_BYTES = 0  # the small ranks read as a big run's
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
fork = os.fork
def logged_fork():
    os.write(log, f"{os.getpid()} {threading.active_count()}\\n".encode())
    return fork()
os.fork = logged_fork
code = main(sys.argv[2:])
print(code, os.getpid(), threading.active_count(), len(multiprocessing.active_children()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is Linux's only")
def test_a_report_forks_only_from_processes_without_threads(rank_dir, one_by_one, tmp_path: Path) -> None:
    """Every fork of a report (the two workers reading the eight ranks) happens in a
    process that runs no other thread, and the report leaves no thread or process behind."""
    log = tmp_path / "forks"
    argv = ["report", str(rank_dir[0]), "-o", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json"), "-q"]
    done = subprocess.run(
        [sys.executable, "-c", _LOGGED_REPORT, str(log), *argv, "--jobs", "2"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    code, pid, threads, children = done.stdout.split()
    assert code == "0" and _analyzed(json.loads((tmp_path / "r.json").read_text())) == one_by_one[0]
    forks = [line.split() for line in log.read_text().splitlines()]
    assert [p for p, _ in forks] == [pid] * 2  # the two workers
    assert {count for _, count in forks} == {"1"}
    assert (threads, children) == ("1", "0")


def _fails(kind: str) -> None:
    if kind == "trace":
        raise TraceError("some.json", "cut short")
    if kind == "value":
        raise ValueError("no good")
    os._exit(9)


def test_a_child_raises_its_calls_errors_here() -> None:
    """A call's exception comes back as itself (a `TraceError` too, which does not pickle) with the child's
    traceback as its cause; a child that dies is an error naming it; either way the process is gone after."""
    with pytest.raises(TraceError) as trace_error, parallel.Child("test") as child:
        child.call(_fails, "trace")
    assert (trace_error.value.path, trace_error.value.reason) == ("some.json", "cut short")
    assert not child.process.is_alive()
    with pytest.raises(ValueError, match="no good") as value_error, parallel.Child("test") as child:
        child.call(_fails, "value")
    assert "in _fails" in str(value_error.value.__cause__)
    with pytest.raises(RuntimeError, match=r"the test process died \(exit code 9"), parallel.Child("test") as child:
        child.call(_fails, "exit")
    assert child.process.exitcode == 9


def test_a_child_runs_its_calls_in_order_and_ends_when_told() -> None:
    with parallel.Child("test") as child:
        child.submit(_square, Path("2"))
        child.submit(_square, Path("3"))
        assert (child.result(), child.result()) == (4, 9)
        assert child.call(os.getpid) == child.process.pid != os.getpid()
    assert child.process.exitcode == 0


_SHARED: list[parallel.SharedFile] = []


def _keep_shared(shared: parallel.SharedFile) -> None:
    _SHARED[:] = [shared]


def _packed_rows(n: int) -> parallel.Parcel:
    """A worker's result: arrays of several sizes and dtypes (one empty), and plain values beside them."""
    rows = {"ts": np.arange(n, dtype=np.int64) * 3, "keep": np.arange(n) % 3 == 0, "none": np.zeros(0, np.float32)}
    return _SHARED[0].pack({"rows": rows, "names": ["gemm", "copy"], "n": n})


@pytest.mark.parametrize("room", ["tmpfs", "no folder", "full"])
def test_results_come_back_through_the_shared_file_or_else_the_pipe(monkeypatch, room: str) -> None:
    """A forked worker's arrays come back through the unnamed file in shared memory, mapped here and still
    writable; with no such folder, or no room left in it, they come back through the pipe, the same."""
    if not os.path.isdir(parallel.SHARED_MEMORY):
        pytest.skip("no /dev/shm here")
    if room == "no folder":
        monkeypatch.setattr(parallel, "SHARED_MEMORY", "/nonexistent-shm")
    if room == "full":
        monkeypatch.setattr(parallel.os, "pwrite", _no_room)
    context = multiprocessing.get_context("fork")
    shared = parallel.SharedFile(context)
    try:
        with parallel.worker_pool(1, context, _keep_shared, (shared,)) as pool:
            parcels = [pool.submit(_packed_rows, n).result() for n in (5, 100_003)]
        values = [parcel.open(shared) for parcel in parcels]
    finally:
        shared.close()
    assert [parcel.inline is None for parcel in parcels] == [room == "tmpfs"] * 2
    for n, value in zip((5, 100_003), values, strict=True):
        assert value["names"] == ["gemm", "copy"] and value["n"] == n
        np.testing.assert_array_equal(value["rows"]["ts"], np.arange(n, dtype=np.int64) * 3)
        np.testing.assert_array_equal(value["rows"]["keep"], np.arange(n) % 3 == 0)
        assert value["rows"]["none"].dtype == np.float32 and not len(value["rows"]["none"])
        value["rows"]["keep"] &= False  # writable, as the reader's rows must be (`keep &= ...`)


def _no_room(*args: Any) -> int:
    raise OSError(28, "No space left on device")


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process forks its workers, as a command's does: not Linux skips the test; the idle thread the Dask
    tests leave behind (``Dask-Offload``) is not counted."""
    if not sys.platform.startswith("linux"):
        pytest.skip("`beside` forks only on Linux")
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert parallel.forks_workers()


def _pid_and_square(n: int) -> tuple[int, int]:
    return os.getpid(), n * n


def _pid_once_marked(marker: Path) -> int:
    marker.touch()
    time.sleep(0.5)  # busy: the next call is left to the process that gets to it first
    return os.getpid()


def _dies_beside(parent: int) -> int:
    if os.getpid() != parent:
        os._exit(3)  # the process beside dies: no value from it
    return os.getpid()


def _sleeps(seconds: float) -> int:
    time.sleep(seconds)
    return 1


def test_beside_computes_in_a_process_of_its_own_what_it_would_here(forks) -> None:
    """Forked: the values come from another process, the same values as here; asked for again, the same ones."""
    calls = [partial(_pid_and_square, 7), partial(_pid_and_square, 8)]
    with parallel.beside(calls, fork=True) as value:
        time.sleep(0.2)  # the process beside takes both meanwhile
        (pid, square), (pid_2, square_2) = value(0), value(1)
        assert value(0) == (pid, square)
    assert (square, square_2, pid == pid_2 != os.getpid()) == (49, 64, True)
    with parallel.beside(calls, fork=False) as value:
        assert (value(1), value(0)) == ((os.getpid(), 64), (os.getpid(), 49))


def test_beside_kills_its_process_once_its_values_are_in_and_leaves_no_zombie(forks) -> None:
    """Its values in, the process beside is killed, not waited for (the kernel frees its memory meanwhile); the next
    process started, or `multiprocessing.active_children`, reaps it."""
    with parallel.beside([partial(_pid_and_square, 2)], fork=True) as value:
        time.sleep(0.2)  # the process beside takes it meanwhile
        pid, _ = value(0)
    assert pid != os.getpid()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        multiprocessing.active_children()
        time.sleep(0.01)
    assert not Path(f"/proc/{pid}").exists()  # gone, and reaped: no zombie left


def test_beside_leaves_here_what_its_process_has_not_taken(forks, tmp_path: Path) -> None:
    """The process beside takes the calls in order; one it has not got to when this one asks is done here."""
    marker = tmp_path / "taken"
    with parallel.beside([partial(_pid_once_marked, marker), partial(_pid_and_square, 3)], fork=True) as value:
        started = time.monotonic()
        while not marker.exists() and time.monotonic() - started < 10:
            time.sleep(0.01)
        assert value(1) == (os.getpid(), 9)
        assert value(0) != os.getpid()


def test_beside_computes_here_what_its_process_did_not_give(forks) -> None:
    """A process that died leaves the values to this one; an error of a call itself raises here, as it would."""
    with parallel.beside([partial(_dies_beside, os.getpid())], fork=True) as value:
        assert value(0) == os.getpid()
    with pytest.raises(ValueError, match="no good"), parallel.beside([partial(_fails, "value")], fork=True) as failing:
        failing(0)


def test_beside_does_not_wait_for_values_the_block_left_without(forks) -> None:
    started = time.monotonic()
    with pytest.raises(KeyError), parallel.beside([partial(_sleeps, 60)], fork=True):
        raise KeyError("the block failed")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("source", ["synthetic", "ns_resolution_trace"])
def test_analyses_beside_give_the_report_of_one_process(forks, source: str, monkeypatch, tmp_path: Path) -> None:
    """With a core free, the critical path's walks and compute efficiency come from a process of their own
    (`analysis.analyze`): the same report, byte for byte, as with one process. A synthetic rank (the size from
    which it forks lowered to it), and a real trace above that size (45,419 events)."""
    from traceinsight import analysis
    from traceinsight.render.json import dumps
    from traceinsight.workflow import analyze_path

    if source == "synthetic":
        path = tmp_path / "rank0.pt.trace.json"
        path.write_text(json.dumps(_timeline(0).to_kineto()))
        monkeypatch.setattr(analysis, "ANALYSIS_BESIDE_MIN_EVENTS", 0)
    else:
        path = shared_trace("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    forked: list[int] = []
    fork = parallel._forked_calls

    def counted(*args: Any) -> parallel.Child | None:
        forked.append(1)
        return fork(*args)

    monkeypatch.setattr(parallel, "_forked_calls", counted)
    alone = dumps(analyze_path(path, jobs=1).report)
    assert not forked
    beside = dumps(analyze_path(path, jobs=2).report)
    assert forked == [1]
    assert re.sub(r'"generated_at": "[^"]*"', "", beside) == re.sub(r'"generated_at": "[^"]*"', "", alone)
