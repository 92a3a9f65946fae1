"""The processes of traceinsight: one function over many trace files (here, in a pool of processes, or on a
Dask cluster), and processes of their own for one job at a time (`Child`).

Files are independent until they are merged, so each is read where a core is free
and only its result travels back: the `TraceRead`, whose event table is already
columnar (numpy arrays and categoricals, about 100 bytes an event), so it pickles
without a Python object per event. Results come back in the order of the files,
whatever order they finish in, so the merged profile does not depend on `jobs`.

Dask (``dask[distributed]``, the ``dask`` extra) is imported only when a
scheduler is asked for: ``"local"`` starts a LocalCluster on this machine, any
other value is a scheduler address (``tcp://host:8786``) whose workers can read
the same paths (a shared file system; pass absolute ones).

Every process this package starts comes from here (`worker_pool`, `Child`), started as
`start_context` says: forked only on Linux and only from a process that runs no other
thread, since a thread may hold a lock at the fork that the child then waits for for ever.
So nothing here leaves a thread behind: a `Child` talks through a pipe, a pool's threads
end with it.

How many processes is decided here too (`default_jobs`, `idle_cores`, `usable_cores`, `report_workers`; the
TensorBoard tab's jobs queue for their slots in `JobSlots`), and so
is how work is shared with workers that are forked (`forks_workers`): units claimed by whichever
process is free (`Claims`), objects inherited with the fork (`inherit`) or given at a worker's
start (`give`). A run cut short leaves without exit handlers (`exit_now`). Ctrl-C and SIGTERM are held back while
a process starts (`held_signals`): the one started begins with them blocked until it is a `quiet_worker`.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import contextmanager, suppress
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, cast

import msgspec

from traceinsight.errors import TraceError

if TYPE_CHECKING:  # Windows has neither fork nor a fork server
    from multiprocessing.context import BaseContext, ForkContext, ForkServerContext, SpawnContext

    Context = ForkContext | ForkServerContext | SpawnContext

R = TypeVar("R")
U = TypeVar("U")
LOCAL = "local"
WORKERLESS_S = 60.0  # how long a Dask run waits with no worker at all before it gives up
_POLL_S = 1.0  # how often it looks
_IDLE_S = 5.0  # how long a `JobSlots` thread waits for a job before it ends
SCHEDULER_TIMEOUT_S = 10.0  # how long connecting to a `--scheduler` address may take
_HOST_PORT_SCHEMES = ("tcp", "tls", "ws", "wss")  # Dask's schemes whose addresses are HOST:PORT


class _Failed(msgspec.Struct, frozen=True):
    """A `TraceError` raised in a worker, carried back as a value (the exception does not pickle)."""

    path: str
    reason: str


def default_jobs() -> int:
    """The default ``--jobs``: the cores the machine leaves idle (`idle_cores`), not all of them. On a machine
    other work keeps busy, workers only take turns with it and cost more CPU than they save (issue 38:
    8 ranks of 0.7 MB read 1.33x slower with all cores at a load of about 6)."""
    return idle_cores()


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, at most its cgroup's CPU quota rounded up (a
    container's ``--cpus``, which the affinity does not show)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


_CGROUP_V2_MAX = Path("/sys/fs/cgroup/cpu.max")  # "QUOTA PERIOD" or "max PERIOD"
_CGROUP_V1 = Path("/sys/fs/cgroup/cpu")  # cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us


def _cgroup_quota() -> float | None:
    """The CPU quota of this process's cgroup in cores (v2, else v1), None when there is none or it is not known."""
    try:
        quota, period = _CGROUP_V2_MAX.read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (_CGROUP_V1 / "cpu.cfs_quota_us").read_text().strip()
            period = (_CGROUP_V1 / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        cores = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):  # "max": no quota
        return None
    return cores if cores > 0 else None


_LOADAVG = Path("/proc/loadavg")  # "1min 5min 15min RUNNABLE/ALL LASTPID"


def busy_cores() -> float:
    """How many cores other processes keep busy (`rules.py`, "reading in parallel", says why this measure): the
    fewer of the 1-minute load average and the processes runnable now besides this one; 0 where neither is known
    (not a Unix)."""
    try:
        fields = _LOADAVG.read_text().split()  # both figures from one read
        load, runnable_now = float(fields[0]), int(fields[3].split("/")[0]) - 1  # this process is one of them
    except (OSError, ValueError, IndexError):  # no /proc (not Linux): the load average alone
        try:
            return os.getloadavg()[0]
        except (OSError, AttributeError):  # not known here (not a Unix)
            return 0.0
    return max(0.0, min(load, runnable_now))


def idle_cores() -> int:
    """The cores this process may run on (`usable_cores`) that other processes leave idle (`busy_cores`), rounded
    up (as ``make -l`` judges a machine), at least 1: a worker on a core another process keeps busy slows both,
    and the reader's numpy passes, memory-bound, lose more than they gain from it (benchmarks/README.md)."""
    cores = usable_cores()
    return max(1, min(cores, math.ceil(cores - busy_cores())))


def report_workers() -> int:
    """How many TensorBoard report jobs run at once by default (each a process of its own): one a core, at least
    2, so one slow run leaves another free, and at most 4."""
    return max(2, min(4, os.cpu_count() or 1))


class JobSlots:
    """Background jobs, at most `slots` running at once and at most `waiting` more queued: a server (the
    TensorBoard tab) answers its requests at once while the jobs queue, and a flood of requests neither starts a
    thread each nor queues without end (`submit` raises `queue.Full`). Each job runs on one of at most `slots`
    threads, started as jobs come and ended once idle, and starts its own process (`Child`) there, so the threads
    only wait."""

    def __init__(self, slots: int, waiting: int) -> None:
        self._slots = slots
        self._queue: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue(maxsize=waiting)
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, job: Callable[[], R], name: str) -> Future[R]:
        """Run `job()` in the background once a slot is free; its result (or error) in the future returned, which
        says "running" once the slot is taken. `queue.Full` when `waiting` jobs wait already."""
        future: Future[R] = Future()
        self._queue.put_nowait((job, future))
        with self._lock:
            if self._threads < self._slots:
                self._threads += 1
                threading.Thread(target=self._work, name=name, daemon=True).start()
        return future

    def _work(self) -> None:
        """One slot: the queued jobs one after another, until none has come for `_IDLE_S`."""
        while True:
            try:
                job, future = self._queue.get(timeout=_IDLE_S)
            except queue.Empty:
                with self._lock:  # `submit` queues before it counts the threads: none is left waiting
                    if self._queue.empty():
                        self._threads -= 1
                        return
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as error:  # noqa: BLE001  # the future carries it to whoever asks
                future.set_exception(error)


def forks_workers() -> bool:
    """Whether this process's workers would be forked (`start_context`) from it, and it is not itself a worker
    (whose pool uses the cores already): a worker started otherwise imports, and reads its input's layout, anew."""
    return multiprocessing.parent_process() is None and start_context().get_start_method() == "fork"


def exit_now(code: int) -> NoReturn:
    """End this process with `code` at once, its output flushed but no exit handler run: for a command cut short
    (interrupted, or a read stopped by bad input or the memory limit), whose pools `stop_pool` killed. A normal
    exit would join a stopped pool's manager thread, and Python 3.11's exit handler (``concurrent.futures``')
    races it to the pool's wake-up pipe (a traceback)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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


def map_outcomes(func: Callable[[U], R], items: Sequence[U], jobs: int = 1) -> list[R | TraceError]:
    """``[func(x) for x in items]``, `jobs` processes at a time (here with one job or one item), in the items'
    order; a `TraceError` raised for an item is its outcome, so one bad input leaves the others' results (`traceinsight
    runs`: one row each). `func` must pickle, as for `map_files`."""
    call = partial(_call, func)
    outcomes = [call(x) for x in items] if jobs <= 1 or len(items) <= 1 else _pool_map(call, items, jobs, None)
    return [TraceError(o.path, o.reason) if isinstance(o, _Failed) else o for o in outcomes]


def _call(func: Callable[[U], R], item: U) -> R | _Failed:
    try:
        return func(item)
    except TraceError as error:
        return _Failed(error.path, error.reason)


def start_context(preload: Sequence[str] = (), threaded: bool | None = None) -> Context:
    """How this process starts its workers: forked on Linux while it runs no other thread (the child has its
    imports at once); from a fork server on Linux once threads run (a thread may hold a lock at the fork, which
    the child would wait for for ever), the server importing `preload` once; spawned elsewhere (macOS offers
    fork, but its system libraries are not fork-safe once used; Python's default there is spawn).

    `threaded`: whether this process will run other threads when it starts them (a server answering on
    threads), if not whether it runs them now. Threads only C libraries know of are not counted: OpenBLAS
    keeps an idle pool from numpy's import on, and stops it around a fork itself (``pthread_atfork``).
    """
    if not sys.platform.startswith("linux"):
        return multiprocessing.get_context("spawn")
    if not (threading.active_count() > 1 if threaded is None else threaded):
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    if preload:
        context.set_forkserver_preload(list(preload))
    return context


def start_fork_server(preload: Sequence[str]) -> None:
    """Start the fork server (`start_context` of a threaded process) now, in the background, so the first
    process started from it does not wait for its imports (`preload`); nothing where there is none (not Linux)."""
    if start_context(preload, threaded=True).get_start_method() == "forkserver":
        threading.Thread(target=_ensure_fork_server, name="traceinsight-fork-server", daemon=True).start()


def _ensure_fork_server() -> None:
    """The fork server started, with Ctrl-C and SIGTERM held back (`held_signals`): it keeps them blocked (it ends
    with this process), so the processes it forks begin with them blocked, as those forked here do."""
    from multiprocessing import forkserver

    with held_signals(multiprocessing.get_context("forkserver")):
        forkserver.ensure_running()


_PR_SET_PDEATHSIG = 1


_STOPS = (signal.SIGINT, signal.SIGTERM)  # what interrupts a run (Ctrl-C, SIGTERM)


def quiet_worker() -> None:
    """Every worker process's start: Ctrl-C (sent to the whole terminal's process group) is left to the main
    process, which prints the one line and stops the workers; SIGTERM ends a worker at once, without a
    traceback; and a worker dies with the process that forked it, so none outlives an interrupted run. It began
    with both blocked (`held_signals`), so one sent meanwhile (to the group) is ignored or ends it only now."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with suppress(OSError, AttributeError):  # Linux only
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _let_go_of_fork_server()
    if hasattr(signal, "pthread_sigmask"):  # not on Windows
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _let_go_of_fork_server() -> None:
    """Close a worker's copy of the pipe by which a fork server learns that the process that started it is gone.

    CPython hands that pipe's write end to every process the server forks (and a fork copies it), so a fork
    server outlived a TensorBoard killed with SIGKILL while a job of it ran, and the job (which dies with its
    parent, the server) ran on and wrote to the cache. Without the copy, the server ends with the process that
    started it, and its jobs with it. A worker never starts processes from that server (it forks its own)."""
    from multiprocessing import forkserver

    server = forkserver._forkserver  # CPython's one fork server client (private: hence the checks)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with suppress(OSError):
            os.close(fd)
        for name in ("_forkserver_alive_fd", "_forkserver_address", "_forkserver_pid"):
            setattr(server, name, None)


@contextmanager
def held_signals(context: BaseContext | None = None) -> Iterator[None]:
    """Ctrl-C and SIGTERM held back while the block starts a process (of `context`), then acted on.

    A signal acted on meanwhile would raise inside the start: in a fork's ``os.register_at_fork`` hooks, which
    only print it ("Exception ignored"), so the run went on, or between the fork and the pool's note of its
    new process, which then outlived the run. So they are blocked in this thread, which the process started
    inherits (it unblocks them as a `quiet_worker`, once it ignores Ctrl-C and dies of SIGTERM: one sent to
    the group meanwhile prints no traceback there), and in the main thread their Python handlers only note
    them, as another thread (numpy's OpenBLAS pool) may take them meanwhile; each noted one's handler runs
    as the block ends, raising there (`KeyboardInterrupt`, the CLI's `Terminated`)."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: neither fork nor signal masks
        yield
        return
    if context is not None and context.get_start_method() != "fork":
        # CPython's resource tracker, started by the first such start, unblocks them as it starts: start it first.
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    noted: list[int] = []
    handlers: dict[int, Callable[[int, Any], Any]] = {}

    def note(signum: int, frame: object) -> None:
        noted.append(signum)

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        if threading.current_thread() is threading.main_thread():  # the only one that runs (and sets) handlers
            for stop in _STOPS:
                handler = signal.getsignal(stop)
                if callable(handler):  # not SIG_DFL, SIG_IGN or one set outside Python: those stay as they are
                    handlers[stop] = handler
                    signal.signal(stop, note)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # one held back is noted here
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if noted:
            handlers[noted[0]](noted[0], None)


def _start_worker(setup: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    quiet_worker()
    if setup is not None:
        setup(*args)


@contextmanager
def worker_pool(
    workers: int,
    context: Context | None = None,
    setup: Callable[..., None] | None = None,
    setup_args: tuple[Any, ...] = (),
) -> Iterator[ProcessPoolExecutor]:
    """A `ProcessPoolExecutor` of `quiet_worker`s (`context`, by default `start_context`), each of which then
    runs ``setup(*setup_args)``: objects to share with them (a `multiprocessing.Value` of `context`) go there,
    as they may not go with a call. Left by an exception (Ctrl-C, SIGTERM, an error, a generator closed early)
    it kills its workers instead of waiting for their work to end; either way its threads here end with it."""
    pool = _Pool(
        max_workers=workers,
        mp_context=context or start_context(),
        initializer=_start_worker,
        initargs=(setup, setup_args),
    )
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown()


class _Pool(ProcessPoolExecutor):
    """A `ProcessPoolExecutor` whose `submit`, which starts its processes (all at the first call where they are
    forked, one as needed otherwise), holds signals back (`held_signals`): each process is in the pool's list, to
    be killed, before an interrupt raises (as the call returns). Its manager thread, started there too, keeps them
    blocked, so they land in the main thread, which a signal wakes from its wait for a result."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        with held_signals(self._mp_context):
            return super().submit(fn, *args, **kwargs)


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


class Claims(Generic[U]):
    """Units of work, largest first (by `sizes`), each claimed once by whichever process is free: the one that
    started the pool and its workers alike, so none waits to be handed work and none is left with a big one at the
    end. (A process that hands the units out cannot while it does one itself: its workers then idle.) The count of
    units claimed is a `multiprocessing.Value` of `context`, so the claims go to the workers as they start
    (`worker_pool`'s `setup`: `give`), not with a call."""

    def __init__(self, units: Sequence[U], sizes: Sequence[int], context: Context) -> None:
        self.units = units
        self.order = sorted(range(len(units)), key=lambda i: -sizes[i])
        self._claimed = Tickets(context)

    def next(self) -> int | None:
        """The index of the next unit to do, now this process's; None when every one is claimed."""
        at = self._claimed.take()
        return self.order[at] if at < len(self.order) else None


class Tickets:
    """The numbers 0, 1, 2, ... each taken once, by whichever process asks first: the one that made them and those
    it forked after (a `multiprocessing.Value` of `context`). For units of work claimed in order whose count is
    known only later (the early read's pieces)."""

    def __init__(self, context: Context) -> None:
        self._next = context.Value("q", 0)

    def take(self) -> int:
        """The next number, now this process's."""
        with self._next.get_lock():
            at = int(self._next.value)
            self._next.value = at + 1
        return at


# What the workers of a pool inherit from the process that forked them (`inherit`), and what each was given as
# it started (`give`), by key: set before the pool starts them (a pool's workers end with its work).
_INHERITED: dict[str, Any] = {}
_GIVEN: dict[str, tuple[Any, ...]] = {}


@contextmanager
def inherit(key: str, value: Any) -> Iterator[None]:
    """`value` under `key` while in the block, for the workers forked meanwhile (`inherited`): they have it with
    the fork, not pickled (a large object, or one that does not pickle)."""
    _INHERITED[key] = value
    try:
        yield
    finally:
        del _INHERITED[key]


def inherited(key: str, otherwise: Callable[[], R]) -> R:
    """In a worker, the value under `key` it inherited (`inherit`); in one not forked from the process that set
    it (spawned, from a fork server), ``otherwise()``, made once per process."""
    if key not in _INHERITED:
        _INHERITED[key] = otherwise()
    return cast(R, _INHERITED[key])


def give(key: str, *values: Any) -> None:
    """A worker's start (`worker_pool`'s `setup`): `values` kept under `key` for its calls (`given`)."""
    _GIVEN[key] = values


def given(key: str) -> tuple[Any, ...]:
    """In a worker, the values it was given under `key` as it started (`give`)."""
    return _GIVEN[key]


class Child:
    """A process of its own that runs the calls sent to it one at a time, in order: a TensorBoard report job. It is
    started at once (`start_context`, or `context`) and talks through a pipe, so this process runs no thread for it
    and a later fork from here stays safe (a `ProcessPoolExecutor` would leave two behind). As a context manager:
    left by an exception (Ctrl-C, SIGTERM, an error) it is killed, else told to end and joined."""

    def __init__(self, what: str, context: Context | None = None) -> None:
        self.what = what
        context = context or start_context()
        self._pipe, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs,), name=f"traceinsight-{what}")
        self._pending = 0
        try:
            with held_signals(context):
                self.process.start()
        except BaseException:  # interrupted as it started (raised once it had): no one else would kill it
            if self.process.pid is not None:
                self.stop()
            self._pipe.close()
            raise
        finally:
            theirs.close()

    def submit(self, func: Callable[..., Any], *args: Any) -> None:
        """Have the child call ``func(*args)`` after the calls before it; `result` gives its outcome."""
        self._pipe.send((func, args))
        self._pending += 1

    def result(self, timeout: float | None = None) -> Any:
        """The outcome of the oldest call not yet collected: its value, or its exception raised here (a
        `TraceError` as one; a `RuntimeError` when the process died, as when the kernel kills it for memory). Not
        there within `timeout` seconds: the process is killed and `TimeoutError` raised."""
        self._pending -= 1
        if timeout is not None and not self._pipe.poll(timeout):
            self.stop()
            raise TimeoutError(f"the {self.what} process took longer than {timeout:g} s and was stopped")
        try:
            ok, value, remote = self._pipe.recv()
        except EOFError:
            self.process.join()
            raise RuntimeError(
                f"the {self.what} process died (exit code {self.process.exitcode}; out of memory?)"
            ) from None
        if ok:
            return value
        if isinstance(value, _Failed):
            raise TraceError(value.path, value.reason)
        raise value from _RemoteTraceback(remote)

    def latest(self, timeout: float | None = None) -> Any:
        """The outcome of the latest call, once those before it are done (their errors raised first); each waited
        for `timeout` seconds at most (`result`)."""
        while self._pending > 1:
            self.result(timeout)
        return self.result(timeout)

    def call(self, func: Callable[..., R], *args: Any, timeout: float | None = None) -> R:
        """``func(*args)`` in the child, once the calls sent before it are done (their errors raised first); the
        process killed and `TimeoutError` raised when no outcome comes within `timeout` seconds."""
        self.submit(func, *args)
        return self.latest(timeout)  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Kill the process (SIGKILL: no handler runs, nothing is printed) and reap it. Another thread may call
        this while one waits for a `result`: that one then raises, as for a process that died."""
        self.kill()
        self.process.join()

    def kill(self) -> None:
        """Kill the process, not waiting for it to be gone (the kernel frees its memory meanwhile: 10 ms for one of
        130 MB); `stop` reaps it later, or multiprocessing as it starts another process."""
        with suppress(OSError, ValueError):  # already gone
            self.process.kill()

    def close(self) -> None:
        """Let the process end once its calls are done, and reap it."""
        with suppress(OSError):  # it died already: its end of the pipe is closed
            self._pipe.send(None)
        self.process.join()
        self._pipe.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is None:
            self.close()
        else:  # interrupted, or failed: no waiting for work nobody will use
            self.stop()
            self._pipe.close()


@contextmanager
def beside(calls: Sequence[Callable[[], Any]], fork: bool) -> Iterator[Callable[[int], Any]]:
    """The values of `calls`, taken in order by a process forked as the block begins, while the block does other
    work, where `fork` says a core is free for it and this process forks its workers (`forks_workers`): the
    process has all the calls read with the fork (`inherit`), and only their values travel back. The block's
    ``value(i)`` does here the calls that process has not claimed yet (`Claims`: whichever process is free takes
    the next), then waits for the ones it took. A value is the same wherever it was computed: those the process
    failed to give are computed here, so that an error raises here as it would have. Asked for again, it is the
    same value; if the block asks for none, the process is not waited for (killed, as it is once its values
    are in)."""
    done: dict[int, Any] = {}
    claims: Claims[Callable[[], Any]] | None = None
    child = None
    if fork and forks_workers():
        claims = Claims(calls, [1] * len(calls), start_context())  # equal sizes: in order
        child = _forked_calls(calls, claims)

    def value(i: int) -> Any:
        nonlocal child
        while child is not None and claims is not None and (mine := claims.next()) is not None:
            done[mine] = calls[mine]()
        if child is not None:  # every call is claimed: those the process took come back together
            with suppress(Exception):  # the process died or raised: what it took is computed here
                done.update(child.result())
            # Killed, not waited for: the kernel frees its memory meanwhile (where this one waited 6 ms for the
            # analyses' process to be gone), and multiprocessing reaps it as it starts another process or is asked
            # for its children (`multiprocessing.active_children`).
            child.kill()
            child = None
        if i not in done:
            done[i] = calls[i]()
        return done[i]

    try:
        yield value
    finally:
        if child is not None:
            child.stop()


def _forked_calls(calls: Sequence[Callable[[], Any]], claims: Claims[Callable[[], Any]]) -> Child | None:
    """A `Child` forked now to take `calls` from its copy of this process, one at a time as `claims` gives them it;
    None when no process can be had."""
    key = f"beside-{id(calls)}"
    with inherit(key, (calls, claims)):
        try:
            child = Child("analysis")
        except OSError:  # no process to be had (a limit on processes, say)
            return None
    with suppress(OSError):  # it died at once: `result` finds nothing, and `beside` computes the values here
        child.submit(_claimed_calls, key)
    return child


def _claimed_calls(key: str) -> dict[int, Any]:
    """In a process `beside` forked: the calls it inherited under `key` that no process had claimed as it got to
    them, done, by index. Their values are sent once all are claimed (a value sent at once would wait in the pipe
    until it is read, and this process with it)."""

    def not_forked() -> Any:
        raise RuntimeError(f"no calls inherited under {key!r}: the process was not forked")

    calls, claims = inherited(key, not_forked)
    values = {}
    while (i := claims.next()) is not None:
        values[i] = calls[i]()
    return values


SHARED_MEMORY = "/dev/shm"  # tmpfs on Linux: a file there is memory, not disk
_ALIGN = 64  # each array's bytes start on a cache line


class SharedFile:
    """An unnamed file in `SHARED_MEMORY` that workers forked from this process write their large results to
    (`pack`), for this process to map (`Parcel.open`), instead of sending them through the pool's pipe. That pipe
    is read by a thread of this process, which waits for the interpreter's lock while this process computes: a
    worker sending 35 MB of rows waited 0.1-0.15 s for an XSpace reader busy reading (benchmarks/README.md).

    Unnamed (``O_TMPFILE``), it is gone with the last process that holds it, however the run ends. A worker
    that did not inherit it (a fork server's, a spawned one), or a file that cannot take a result (no tmpfs; a
    container's 64 MB one, full), sends the result through the pipe as before. Give it to the workers with
    `worker_pool`'s `setup`, and close it once every parcel is open."""

    def __init__(self, context: Context) -> None:
        self._end = context.Value("q", 0)  # bytes reserved so far: each result takes the next piece
        self.fd = -1
        self._identity: tuple[int, int] | None = None
        with suppress(OSError, AttributeError):  # no tmpfs, no O_TMPFILE (not Linux)
            self.fd = os.open(SHARED_MEMORY, os.O_TMPFILE | os.O_RDWR, 0o600)
            st = os.fstat(self.fd)
            self._identity = (st.st_dev, st.st_ino)

    def usable(self) -> bool:
        """Whether this process holds the file (it made it, or inherited it by a fork): a spawned process's
        descriptor of the same number is another file, or none."""
        if self._identity is None:
            return False
        try:
            st = os.fstat(self.fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def pack(self, value: Any) -> Parcel:
        """`value` to send back: its arrays written to the file where it can take them."""
        buffers: list[pickle.PickleBuffer] = []
        pickled = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        raws = [buffer.raw() for buffer in buffers]
        sizes = [raw.nbytes for raw in raws]
        total = sum(size + -size % _ALIGN for size in sizes)
        if total and self.usable():
            with self._end.get_lock():
                offset = self._end.value
                self._end.value = offset + total
            try:
                at = offset
                for raw, size in zip(raws, sizes, strict=True):
                    written = 0
                    while written < size:  # one write takes at most 2 GiB
                        written += os.pwrite(self.fd, raw[written:], at + written)
                    at += size + -size % _ALIGN
                return Parcel(pickled, sizes, offset, None)
            except OSError:  # full: this result goes through the pipe
                pass
        return Parcel(pickled, sizes, -1, [bytearray(raw) for raw in raws])

    def close(self) -> None:
        """Let the file go here (mapped arrays keep their pages until they are freed)."""
        if self.fd >= 0:
            with suppress(OSError):
                os.close(self.fd)
            self.fd = -1


class Parcel(msgspec.Struct, frozen=True):
    """A value `SharedFile.pack` sent back: pickled, its arrays' bytes in the shared file at `offset` (-1: in
    `inline`)."""

    pickled: bytes
    sizes: list[int]
    offset: int
    inline: list[bytearray] | None

    def open(self, shared: SharedFile) -> Any:
        """The value, its arrays over the file's pages (copied only where written to)."""
        if self.inline is not None:
            return pickle.loads(self.pickled, buffers=self.inline)
        starts, at = [], self.offset
        for size in self.sizes:
            starts.append(at)
            at += size + -size % _ALIGN
        end = max(start + size for start, size in zip(starts, self.sizes, strict=True) if size)  # no pad written
        first = self.offset - self.offset % mmap.ALLOCATIONGRANULARITY
        mapped = memoryview(mmap.mmap(shared.fd, end - first, access=mmap.ACCESS_COPY, offset=first))
        views = [mapped[start - first : start - first + size] for start, size in zip(starts, self.sizes, strict=True)]
        return pickle.loads(self.pickled, buffers=views)


class _RemoteTraceback(Exception):
    """Where a `Child`'s call failed, in its process: the cause of the exception raised here."""

    def __str__(self) -> str:
        return str(self.args[0])


def _serve(pipe: Connection) -> None:
    """A `Child`'s process: (ok, value, traceback) back for each call, until told to end or orphaned."""
    quiet_worker()
    while True:
        try:
            call = pipe.recv()
        except EOFError:  # the parent is gone
            return
        if call is None:
            return
        func, args = call
        try:
            outcome: tuple[bool, Any, str] = (True, func(*args), "")
        except BaseException as error:  # noqa: BLE001  # every failure is the caller's to raise
            outcome = (False, _portable(error), traceback.format_exc())
        pipe.send(outcome)


def _portable(error: BaseException) -> BaseException | _Failed:
    """`error` as it can travel back: a `TraceError` as `_Failed`, one that does not pickle as a RuntimeError
    of its message."""
    if isinstance(error, TraceError):
        return _Failed(error.path, error.reason)
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001  # whatever stops it pickling
        return RuntimeError(str(error) or type(error).__name__)
    return error


def _pool_map(
    call: Callable[[Any], Any], paths: Sequence[Any], jobs: int, on_done: Callable[[int], None] | None
) -> list[Any]:
    """One process per file (or item), at most `jobs` at a time."""
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
            "--scheduler", "Dask is not installed: pip install 'dask[distributed]' (or traceinsight-report[dask])"
        ) from None
    cluster = None
    try:
        if scheduler == LOCAL:
            workers = max(1, min(jobs, len(paths)))
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
            client = Client(cluster)
        else:
            client = _connect(scheduler)
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


def _connect(scheduler: str) -> Any:
    """A Client of the Dask scheduler at `scheduler`. An address Dask cannot parse, and a service there that does
    not speak Dask's protocol (its reply read as frame sizes: exabyte allocations, assertion errors), are bad
    input (TraceError, exit 2), never an internal error."""
    from distributed import Client
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(scheduler)
        get_backend(scheme)  # a scheme Dask knows
        if scheme in _HOST_PORT_SCHEMES:
            parse_host_port(location)  # a port is needed: Dask's default is the dashboard's
    except ValueError as error:
        raise TraceError(scheduler, f"not a Dask scheduler address ({error}): e.g. tcp://HOST:8786") from None
    # Dask's handshake on a connection of our own first: a Client that fails to start is left half made, and
    # waits at exit for a scheduler that is not there.
    import asyncio  # only for a scheduler: 25 ms of every command's start otherwise

    with ThreadPoolExecutor(1) as thread:  # a loop of its own, even where one runs (a notebook)
        try:
            thread.submit(asyncio.run, _handshake(scheduler)).result()
        except OSError:
            raise  # refused, unreachable, timed out: said by the caller
        except Exception as error:  # noqa: BLE001  # whatever the service's bytes made of Dask's reader
            raise TraceError(
                scheduler, f"not a Dask scheduler: its reply is not Dask's protocol ({type(error).__name__}: {error})"
            ) from None
    return Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)


async def _handshake(address: str) -> None:
    """Connect to `address` and exchange Dask's handshake (`distributed.comm.connect` does), then hang up."""
    from distributed.comm import connect

    comm = await connect(address, timeout=SCHEDULER_TIMEOUT_S)
    await comm.close()


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
