"""Run one function over many trace files: here, in a pool of processes, or on a Dask cluster.

Files are independent until they are merged, so each is read where a core is free
and only its result travels back: the `TraceRead`, whose event table is already
columnar (numpy arrays and categoricals, about 100 bytes an event), so it pickles
without a Python object per event. Results come back in the order of the files,
whatever order they finish in, so the merged profile does not depend on `jobs`.

Dask (``dask[distributed]``, the ``dask`` extra) is imported only when a
scheduler is asked for: ``"local"`` starts a LocalCluster on this machine, any
other value is a scheduler address (``tcp://host:8786``) whose workers can read
the same paths (a shared file system; pass absolute ones).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, TypeVar

from traceinsight.model import TraceError

R = TypeVar("R")
LOCAL = "local"
WORKERLESS_S = 60.0  # how long a Dask run waits with no worker at all before it gives up
_POLL_S = 1.0  # how often it looks


@dataclass(frozen=True)
class _Failed:
    """A `TraceError` raised in a worker, carried back as a value (the exception does not pickle)."""

    path: str
    reason: str


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def map_files(
    func: Callable[[Path], R],
    paths: Sequence[Path],
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[int], None] | None = None,
) -> list[R]:
    """``[func(p) for p in paths]``, `jobs` processes at a time or on the Dask `scheduler`.

    `func` must pickle (a module-level function, or a partial of one). `on_done(i)`
    is called as each file finishes, in this process. A `TraceError` raised for a
    file is raised here.
    """
    call = partial(_call, func)
    if scheduler is not None:
        outcomes = _dask_map(call, paths, scheduler, jobs)
    elif jobs <= 1 or len(paths) <= 1:
        outcomes = []
        for i, path in enumerate(paths):
            outcomes.append(call(path))
            if on_done is not None:
                on_done(i)
    else:
        outcomes = _pool_map(call, paths, jobs, on_done)
    for outcome in outcomes:
        if isinstance(outcome, _Failed):
            raise TraceError(outcome.path, outcome.reason)
    return outcomes


def _call(func: Callable[[Path], R], path: Path) -> R | _Failed:
    try:
        return func(path)
    except TraceError as error:
        return _Failed(error.path, error.reason)


def fork_context() -> BaseContext:
    """How worker processes start: forked on Linux (no imports to repeat), spawned elsewhere. macOS offers fork
    too, but its system libraries are not fork-safe once threads ran (Python's default there is spawn)."""
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


_PR_SET_PDEATHSIG = 1


def quiet_worker() -> None:
    """Every worker process's start: Ctrl-C (sent to the whole terminal's process group) is left to the main
    process, which prints the one line and stops the workers; SIGTERM ends a worker at once, without a
    traceback; and a worker dies with the process that forked it, so none outlives an interrupted run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with suppress(OSError, AttributeError):  # Linux only
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A `ProcessPoolExecutor` of forked `quiet_worker`s. Left by an exception (Ctrl-C, SIGTERM, an error, a
    generator closed early) it kills its workers instead of waiting for their work to end."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=fork_context(), initializer=quiet_worker)
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown()


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Kill `pool`'s workers (SIGKILL: no handler runs, nothing is printed) and reap them.

    A worker killed while it sent a result leaves half a message in the pool's result pipe, and the pool's
    manager thread, reading it, would wait for the rest for ever (and the interpreter's exit, which joins that
    thread, with it): this process's own writing end of the pipe is closed too, so the thread reads its end.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    results = getattr(pool, "_result_queue", None)
    for process in processes:
        with suppress(OSError, ValueError):  # already gone, or closed
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with suppress(OSError, ValueError, AssertionError):
            process.join(5)
    with suppress(OSError, AttributeError):  # the workers are gone: no one else writes there
        results._writer.close()  # type: ignore[union-attr]


def _pool_map(
    call: Callable[[Path], Any], paths: Sequence[Path], jobs: int, on_done: Callable[[int], None] | None
) -> list[Any]:
    """One process per file, at most `jobs` at a time."""
    with worker_pool(min(jobs, len(paths))) as pool:
        futures = {pool.submit(call, path): i for i, path in enumerate(paths)}
        outcomes: list[Any] = [None] * len(paths)
        for future in as_completed(futures):
            outcomes[futures[future]] = future.result()
            if on_done is not None:
                on_done(futures[future])
    return outcomes


def _dask_map(call: Callable[[Path], Any], paths: Sequence[Path], scheduler: str, jobs: int) -> list[Any]:
    """Each file read by a Dask worker; `scheduler` is an address or ``"local"`` (a LocalCluster of `jobs` workers)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise TraceError(
            "--scheduler", "Dask is not installed: pip install 'dask[distributed]' (or traceinsight[dask])"
        ) from None
    cluster = None
    try:
        if scheduler == LOCAL:
            workers = max(1, min(jobs, len(paths)))
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(scheduler, timeout=10)
    except OSError as error:  # refused, unreachable, timed out
        if cluster is not None:
            cluster.close()
        raise TraceError(scheduler, f"cannot reach the Dask scheduler ({error})") from None
    try:
        return _gathered(client, client.map(call, list(paths), pure=False), paths, scheduler)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _gathered(client: Any, futures: list[Any], paths: Sequence[Path], scheduler: str) -> list[Any]:
    """The futures' results, in order. A worker lost mid-task is Dask's to handle: it runs the task again on
    another, up to ``distributed.scheduler.allowed-failures`` times, then gives up on it (`KilledWorker`),
    which is a `TraceError` naming that input. A cluster left without any worker for `WORKERLESS_S`
    seconds is one too, so a run never hangs."""
    from distributed import KilledWorker, wait
    from distributed import TimeoutError as DaskTimeout

    workerless_since = None
    while True:
        try:
            wait(futures, timeout=_POLL_S)
            break
        except DaskTimeout:
            if client.scheduler_info().get("workers"):
                workerless_since = None
            elif workerless_since is None:
                workerless_since = time.monotonic()
            elif time.monotonic() - workerless_since > WORKERLESS_S:
                raise TraceError(scheduler, f"no Dask worker left for {WORKERLESS_S:.0f} s to read the files") from None
    try:
        return list(client.gather(futures))
    except KilledWorker as error:
        lost = next((path for path, f in zip(paths, futures, strict=True) if f.key == error.task), scheduler)
        raise TraceError(
            lost, f"the Dask workers reading it died {error.allowed_failures + 1} times (out of memory?)"
        ) from None
