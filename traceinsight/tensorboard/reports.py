"""Reports computed on demand in worker processes, cached per run by its files' size and mtime.

A report takes seconds to minutes, so TensorBoard's request threads never compute one: the first request
starts a job and answers a progress state, later ones find the job running or its result. Each job runs in
a process of its own, at most `workers` at a time, so one slow (or crashing) run leaves the others free and
its memory goes back when it ends. Processes start as `parallel.start_context` says for a process that
answers on threads (TensorBoard's server: forking it directly is unsafe; pyplot in threads is unsafe too):
from a fork server that has imported the analysis on Linux, else spawned. A run whose files change (still
being written) gets a new job once the running one ends: at most one job per run runs. A job past its deadline
(`deadline_s`) is stopped and its run failed; a full queue starts nothing ('busy'). TensorBoard's exit, however it
dies, ends the jobs still running (`parallel.quiet_worker`). Every report a job makes goes to the on-disk report
cache `traceinsight runs` reads (`listing.ReportCache`), and the tab's runs table reads its figures from there: the
tab and the CLI share analyses both ways.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import orjson
from msgspec import field

from traceinsight.discover import Run
from traceinsight.listing import ReportCache, report_key
from traceinsight.parallel import Child, JobSlots, report_workers, start_context, start_fork_server
from traceinsight.render.json import dumps
from traceinsight.render.meta import add_invocation
from traceinsight.result import RunReport, from_document
from traceinsight.rules import DEFAULT_SMALL_KERNEL_US
from traceinsight.tensorboard.runs import ProfileRun

# Finished reports kept (HTML and JSON of a run are some 100 KB to a few MB).
MAX_CACHED = 32
# Jobs that wait for a slot at most (the logdir's runs, one job each): a request beyond is answered "busy" (503).
MAX_QUEUED = 32
# A job still running this long after it took its slot is stopped and its run reported failed, so a trace built
# to be slow cannot hold a slot for good; `DEADLINE_ENV` (seconds) sets another.
DEFAULT_DEADLINE_S = 300.0
DEADLINE_ENV = "TRACEINSIGHT_TAB_DEADLINE"
# What the fork server imports once, so each job starts in milliseconds.
_PRELOAD = ["traceinsight.tensorboard.reports", "traceinsight.api", "traceinsight.render.charts"]

Job = Callable[[str, str, str, str], tuple[str, str]]


def invocation(logdir: Path, run: str) -> tuple[list[str], dict[str, Any]]:
    """The command line (and its options) that makes the same report from a shell: what the report's `meta` says."""
    return ["traceinsight", "report", str(logdir), "--run", run], {"run": run}


def compute_report(logdir: Path, run: Run, cache: ReportCache) -> tuple[str, str]:
    """(JSON text, HTML page) of `run` (one `find_runs(logdir)` gave), as `traceinsight report LOGDIR --run NAME
    --json` writes them: the one place the tab meets the analysis, through the Python API. The report goes to the
    report `cache` too, so `traceinsight runs LOGDIR` and the tab's runs table show its figures without analysing."""
    import traceinsight

    key = report_key(logdir, run)  # the files as they are before being read: one still being written is stale
    report = traceinsight.analyze(logdir, DEFAULT_SMALL_KERNEL_US, run=run.name, within=logdir)  # the CLI's
    cache.put(key, report.result)
    report.record_invocation(*invocation(logdir, run.name))
    return report.to_json() + "\n", report.to_html()


def _job(logdir: str, run: str, root: str, cache: str) -> tuple[str, str]:
    """A worker's job: the report of `run`, kept in the report cache folder `cache`; refused if discovery now
    picks another folder than the one listed or a file that leads outside the logdir (a link made since the
    listing). Discovery, here and in the analysis, skips every file that leads outside the logdir, so no run beside
    this one (a capture pass read with it, a run `meta.runs` lists) comes from there either."""
    from traceinsight.discover import discover

    found = discover(Path(logdir), run, within=Path(logdir))  # a run that links outside is not found
    if found.root != Path(root):
        raise RuntimeError(f"run {run!r} is ambiguous under the logdir")
    return compute_report(Path(logdir), found, ReportCache(Path(cache)))


class _Entry(msgspec.Struct):
    """The latest job of one run: the files' key it was started for, its future and when it was asked for."""

    key: tuple[Any, ...]
    future: Future[tuple[str, str]]
    started: float = field(default_factory=time.monotonic)
    files: int = 0
    bytes: int = 0


class Outcome(msgspec.Struct, frozen=True):
    """What a report route answers: `state` 'ready' (with `json`, `html`), 'queued', 'running', 'failed', 'busy'
    (the queue is full: nothing started) or 'refused' (no report made yet, and the request may not start one)."""

    state: str
    json: str | None = None
    html: str | None = None
    error: str | None = None
    elapsed_s: float = 0.0
    files: int = 0
    bytes: int = 0

    def progress(self, run: str) -> dict[str, Any]:
        """The small JSON state a 202 (or a failure) carries."""
        doc: dict[str, Any] = {"run": run, "state": self.state, "elapsed_s": round(self.elapsed_s, 1)}
        doc.update(files=self.files, bytes=self.bytes)
        if self.error is not None:
            doc["error"] = self.error
        return doc


def deadline_s() -> float:
    """How long a job may run: `DEADLINE_ENV` seconds when that is a positive number, else `DEFAULT_DEADLINE_S`."""
    try:
        value = float(os.environ.get(DEADLINE_ENV, ""))
    except ValueError:
        return DEFAULT_DEADLINE_S
    return value if 0 < value < float("inf") else DEFAULT_DEADLINE_S


BUSY = Outcome("busy", error="too many reports are queued: try again in a moment")
REFUSED = Outcome("refused", error="no report of this run yet, and only the tab's own page may start one")


class ReportStore:
    """Starts, tracks and caches report jobs; thread-safe (TensorBoard serves requests on many threads).
    `job(logdir, run name, run folder, cache folder)` makes one report (tests pass their own). `cache`: the on-disk
    reports `traceinsight runs` shares, where each job's report goes (`compute_report`) and the JSON is looked for
    first. `workers` jobs run at once and `queued` more wait (`JobSlots`); a job still running `deadline_s` seconds
    after it started is stopped and its run failed."""

    def __init__(
        self,
        logdir: Path,
        workers: int | None = None,
        job: Job | None = None,
        cache: ReportCache | None = None,
        deadline_s: float | None = None,
        queued: int = MAX_QUEUED,
    ) -> None:
        self._logdir = logdir
        self._job: Job = job or _job
        self._cache = cache or ReportCache()
        self._jobs = JobSlots(workers or report_workers(), queued)
        self._deadline_s = deadline_s
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._children: set[Child] = set()
        atexit.register(self.close)

    @staticmethod
    def warm_up() -> None:
        """Start the fork server (it imports the analysis) before the first report is asked for."""
        start_fork_server(_PRELOAD)

    def get(self, run: ProfileRun, page: bool = True, start: bool = True) -> Outcome:
        """The report of `run` if ready for its files as they are now, else the job's state (started here, when
        `start`: else `REFUSED`; `BUSY` when the queue is full). The JSON alone (`page` false) is read from the
        report cache when no job here is for these files: a run `traceinsight runs` analysed needs none. The page
        needs one: its charts are drawn from the analysis."""
        key = run.key()
        if not page:
            with self._lock:
                entry = self._entries.get(run.name)
            if (entry is None or entry.key != key) and (text := self._cached_json(run)) is not None:
                return Outcome("ready", json=text)
        with self._lock:
            entry = self._entries.get(run.name)
            if entry is not None and entry.key != key and entry.future.done():
                entry = None  # stale and finished: analyze the files as they are now
            if entry is None:
                if not start:
                    return REFUSED
                entry = self._start(run, key)
                if entry is None:
                    return BUSY
            self._entries.move_to_end(run.name)
            self._trim()
        return self._outcome(entry, key)

    def failure(self, run: ProfileRun) -> str | None:
        """Why the latest job of `run`, for its files as they are now, failed (None: it did not, or there is none):
        the runs table's error."""
        key = run.key()
        with self._lock:
            entry = self._entries.get(run.name)
        if entry is None or entry.key != key or not entry.future.done():
            return None
        error = entry.future.exception()
        return None if error is None else str(error) or type(error).__name__

    def made(self, run: ProfileRun) -> RunReport | None:
        """The report a job here finished for `run`'s files as they are now (None: none), for the runs table to
        show where the on-disk cache does not hold it (a cache folder that cannot be written)."""
        key = run.key()
        with self._lock:
            entry = self._entries.get(run.name)
        if entry is None or entry.key != key or not entry.future.done() or entry.future.exception() is not None:
            return None
        try:
            return from_document(orjson.loads(entry.future.result()[0]))
        except (ValueError, KeyError, TypeError, RecursionError):  # not a report (a test's stand-in job)
            return None

    def _cached_json(self, run: ProfileRun) -> str | None:
        """The JSON of the report the cache holds for `run`'s files as they are now, as a job would write it; an
        entry that cannot be written out again (however malformed: nested too deep) is a miss."""
        report = self._cache.get(report_key(self._logdir, run.run))
        if report is None:
            return None
        try:
            add_invocation(report, *invocation(self._logdir, run.name), self._logdir)
            return dumps(report) + "\n"
        except (ValueError, TypeError, RecursionError):  # orjson's errors are both
            return None

    def _start(self, run: ProfileRun, key: tuple[Any, ...]) -> _Entry | None:
        """A job for `run` queued (None: the queue is full)."""
        args = (str(self._logdir), run.run.name, str(run.run.root), str(self._cache.directory))
        try:
            future = self._jobs.submit(partial(self._in_process, args), "traceinsight-report")
        except queue.Full:
            return None
        entry = _Entry(key, future, files=len(key), bytes=sum(max(size, 0) for _, size, _ in key))
        self._entries[run.name] = entry
        return entry

    def _in_process(self, args: tuple[str, str, str, str]) -> tuple[str, str]:
        child = Child("analysis", start_context(_PRELOAD, threaded=True))
        with self._lock:
            self._children.add(child)
        deadline = self._deadline_s or deadline_s()
        try:
            with child:
                return child.call(self._job, *args, timeout=deadline)
        except TimeoutError:
            raise RuntimeError(
                f"stopped after {deadline:g} s, the tab's deadline for a report ({DEADLINE_ENV}=SECONDS sets another)"
            ) from None
        finally:
            with self._lock:
                self._children.discard(child)

    def _trim(self) -> None:
        """Forget the least recently asked finished reports beyond `MAX_CACHED`."""
        for name in list(self._entries):
            if len(self._entries) <= MAX_CACHED:
                break
            if self._entries[name].future.done():
                del self._entries[name]

    @staticmethod
    def _outcome(entry: _Entry, key: tuple[Any, ...]) -> Outcome:
        future = entry.future
        if not future.done() or entry.key != key:
            done: dict[str, Any] = {"state": "running" if future.running() else "queued"}
        elif (error := future.exception()) is not None:
            done = {"state": "failed", "error": str(error) or type(error).__name__}
        else:
            json_text, html = future.result()
            done = {"state": "ready", "json": json_text, "html": html}
        return Outcome(**done, elapsed_s=time.monotonic() - entry.started, files=entry.files, bytes=entry.bytes)

    def close(self) -> None:
        """End the jobs still running (TensorBoard exits; tests), so no analysis outlives the server."""
        with self._lock:
            running = list(self._children)
        for child in running:
            child.stop()
