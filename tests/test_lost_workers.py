"""Workers lost mid-run. Dask's (``--scheduler``): Dask runs the task again on another worker and the run goes
on; a task that kills every worker it runs on is a `TraceError` (exit 2) naming its input; a cluster left
without workers is one too, after a while, never a hang. The workers are processes (a nanny each, which
starts a new worker when one dies); a task kills its worker with ``os._exit``, as the OOM killer would.

A process pool's workers, killed by `stop_pool` (an interrupt, a read stopped by the memory limit) while one
sent a result, leave the pool's manager thread nothing to wait for: the interpreter's exit, which joins it,
does not hang.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from traceinsight import parallel
from traceinsight.errors import TraceError
from traceinsight.parallel import map_files, stop_pool, worker_pool

ALLOWED_FAILURES = 1  # a task may lose one worker, not two


def _drained(fd: int, seconds: float = 10.0) -> bool:
    """Wait until nothing is left to read in pipe `fd` (its reader has taken every byte written)."""
    import fcntl
    import termios

    deadline = time.monotonic() + seconds
    while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, bytes(4)))[0]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_worker_killed_while_sending_leaves_no_thread_waiting() -> None:
    """Half a result in the pipe (a length saying 1,000 bytes, then 10 of them), as a worker killed mid-send
    leaves it: once the workers are stopped, the manager thread reading it ends."""
    with worker_pool(1) as pool:
        assert pool.submit(int, "7").result() == 7
        reader = pool._result_queue._reader.fileno()  # type: ignore[attr-defined]
        os.write(pool._result_queue._writer.fileno(), struct.pack("!i", 1000) + bytes(10))  # type: ignore[attr-defined]
        assert _drained(reader), "the manager thread did not read the half result"  # it waits for the rest now
        manager = pool._executor_manager_thread  # type: ignore[attr-defined]
        stop_pool(pool)
    manager.join(5)
    assert not manager.is_alive()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}),
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as local,
    ):
        yield local


def _dies_once(path: Path) -> str:
    """Kill the worker the first time this path is read (a marker file remembers), then read it."""
    marker = path.with_name(path.name + ".died")
    if not marker.exists():
        marker.touch()
        os._exit(1)
    return path.name


def _poison_kills(path: Path) -> str:
    if path.name == "poison":
        os._exit(1)
    return path.name


# One input at a time: Dask counts a lost worker against every task assigned to it, running or waiting.


def test_a_lost_worker_is_replaced_and_the_run_goes_on(cluster: Any, tmp_path: Path) -> None:
    path = tmp_path / "trace"
    assert map_files(_dies_once, [path], scheduler=cluster.scheduler_address) == ["trace"]
    assert path.with_name("trace.died").exists()  # it did kill a worker


def test_an_input_that_kills_every_worker_is_named(cluster: Any, tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(TraceError) as info:
        map_files(_poison_kills, [tmp_path / "poison"], scheduler=cluster.scheduler_address)
    assert info.value.path == str(tmp_path / "poison")
    assert info.value.reason == f"the Dask workers reading it died {ALLOWED_FAILURES + 1} times (out of memory?)"
    assert time.monotonic() - start < 60


def test_a_cluster_without_workers_gives_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "WORKERLESS_S", 1.0)
    with (
        distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty,
        pytest.raises(TraceError, match="no Dask worker left for 1 s"),
    ):
        map_files(_poison_kills, [tmp_path / "fine"], scheduler=empty.scheduler_address)
