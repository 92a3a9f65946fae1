"""The profile runs under a TensorBoard logdir, as `traceinsight runs LOGDIR` lists them (`listing.list_runs`).

A run's name is the one `--run` takes: the logdir's name and the run's folder under it without TensorBoard's
``plugins/profile/`` (``logs/a_input_bound/2026_12_02_13_47_03``); a ``tensorboard_trace_handler`` folder is a run
too. The name only ever *selects* one of the runs found here: it is never joined into a path. A run that would read
a file resolving outside the logdir (a symbolic link) is not offered, so nothing outside it is read.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from traceinsight import listing
from traceinsight.discover import Run, is_trace, resolves_within, walk
from traceinsight.errors import TraceError
from traceinsight.listing import FilesKey, ReportCache, files_key, report_key, summarize
from traceinsight.result import RunReport, RunSummary, as_dict

# `is_active` looks at this many directory entries at most, so a huge logdir never stalls TensorBoard.
ACTIVE_WALK_LIMIT = 20_000
# An inactive answer is looked at again after this long (profiles appear while TensorBoard runs).
INACTIVE_RECHECK_S = 30.0
# The run list is reused this long: the tab polls the report routes about once a second.
RUNS_TTL_S = 3.0
# Walks of the logdir for the runs route (a reload of the table) start at most this often, however many ask.
MIN_WALK_S = 2.0
# Before the first listing, a request waits this long at most for the walk another one started.
WALK_WAIT_S = 10.0
# A walk running this long is taken as stuck (a file that never answers): another may start.
STUCK_WALK_S = 60.0
# Rows of cached reports kept in memory (a few hundred bytes each); all forgotten past this.
MAX_ROWS = 4096
# What the `runs` route tells of a run whose report is not cached: its files only.
_FILES_ONLY = ("name", "files", "bytes", "modified")
T = TypeVar("T")


class ProfileRun(msgspec.Struct, frozen=True):
    """One run the tab offers: traceinsight's `Run`, checked to read nothing outside the logdir, and its name (the
    `Run`'s, which `traceinsight report LOGDIR --run` takes)."""

    name: str
    run: Run

    def key(self) -> FilesKey:
        """Each file's path, size and mtime (`listing.files_key`): a report is stale once this changes (a run still
        being written)."""
        return files_key(self.run.files)


# Longer `run` values are refused before any lookup; so is a Windows drive ('C:').
_MAX_RUN_NAME = 4096
_DRIVE = re.compile(r"^[A-Za-z]:")


def is_run_name(text: str) -> bool:
    """Whether `text` could be a name the `runs` route lists: relative, no '..', no NUL or backslash. Names
    are only compared with the listed ones; this refuses path tricks with a 400 before any lookup."""
    if not text or len(text) > _MAX_RUN_NAME or any(c in text for c in "\x00\\") or text.startswith("/"):
        return False
    return all(p not in ("", ".", "..") for p in text.split("/")) and not _DRIVE.match(text)


def list_runs(logdir: Path) -> list[ProfileRun]:
    """The runs of `traceinsight runs LOGDIR` (`listing.list_runs`: same order, same names) that read nothing
    outside the logdir, found without opening anything there. Of runs sharing a name only the first is offered:
    the one `--run NAME` opens."""
    if not logdir.is_dir():
        return []
    try:
        runs = listing.list_runs(logdir, within=logdir)
    except TraceError:  # no traces (yet)
        return []
    found: list[ProfileRun] = []
    names: set[str] = set()
    for run in runs:
        if run.name in names:
            continue
        names.add(run.name)
        found.append(ProfileRun(run.name, run))
    return found


def has_profiles(logdir: Path, limit: int = ACTIVE_WALK_LIMIT) -> bool:
    """Whether some file under `logdir` is a trace as discovery tells one (`discover.is_trace`: JSON by the head
    of its text, so the tab is active exactly when it has runs to list), looking at no more than `limit`
    entries (files, in folders walked as discovery walks them: `discover.walk`, a loop, however deep)."""
    seen = 0
    root = logdir.resolve()
    for _, entries in walk(logdir):
        paths = (Path(entry.path) for entry in entries)
        if any(resolves_within(path, root) and is_trace(path) for path in paths):  # nothing outside is opened
            return True
        seen += len(entries) + 1
        if seen >= limit:
            return False
    return False


class SharedWalk(Generic[T]):
    """The latest result of a slow look at the logdir (a walk), made by one caller at a time and never under a
    lock: a walk stuck in I/O holds up no one but its caller. Callers meanwhile get the latest result at once, or,
    before there is any, wait for the walk under way for `WALK_WAIT_S` at most; a walk older than `STUCK_WALK_S`
    no longer counts as under way (another may start)."""

    def __init__(self, initial: T) -> None:
        self._lock = threading.Lock()
        self._value = initial
        self._at: float | None = None  # when the latest walk ended (None: none has)
        self._walking: threading.Event | None = None
        self._walk_started = 0.0

    def get(self, walk: Callable[[], T], max_age: float) -> T:
        """The latest result, walked again first (by this caller) when older than `max_age` seconds and no walk
        is under way."""
        with self._lock:
            now = time.monotonic()
            if self._at is not None and now - self._at < max_age:
                return self._value
            under_way = self._walking
            if under_way is not None and now - self._walk_started < STUCK_WALK_S:
                first = self._at is None
            else:
                under_way = None
                done = self._walking = threading.Event()
                self._walk_started = now
        if under_way is not None:
            if first:
                under_way.wait(WALK_WAIT_S)
            with self._lock:
                return self._value
        try:
            value = walk()
        except BaseException:
            with self._lock:
                self._at = time.monotonic()  # a failing walk is not retried at once either
                if self._walking is done:
                    self._walking = None
            done.set()
            raise
        with self._lock:
            self._value, self._at = value, time.monotonic()
            if self._walking is done:
                self._walking = None
        done.set()
        return value

    def latest(self) -> T:
        """The latest result, without a walk."""
        with self._lock:
            return self._value


class RunIndex:
    """The logdir's runs and whether it has any, each remembered for a while: TensorBoard asks `is_active`
    on every page load and the tab polls, and neither should walk a large logdir every time. Walks are shared
    (`SharedWalk`): however many requests come, at most one walks at a time, at most once per `MIN_WALK_S`, and
    a name not listed is looked up in the latest listing, never by a walk of its own."""

    def __init__(self, logdir: Path | None) -> None:
        self._logdir = logdir
        self._listing: SharedWalk[list[ProfileRun]] = SharedWalk([])
        self._activity: SharedWalk[bool] = SharedWalk(False)

    @property
    def logdir(self) -> Path | None:
        return self._logdir

    def is_active(self) -> bool:
        """True once a trace is seen (for good); False is checked again after `INACTIVE_RECHECK_S`."""
        logdir = self._logdir
        if logdir is None:
            return False
        if self._activity.latest() or self._listing.latest():
            return True
        return self._activity.get(lambda: logdir.is_dir() and has_profiles(logdir), INACTIVE_RECHECK_S)

    def runs(self, fresh: bool = False) -> list[ProfileRun]:
        """The runs, newest first; walked again when older than `RUNS_TTL_S`, or `MIN_WALK_S` when `fresh` (the
        runs route: a new run shows as the table is reloaded)."""
        logdir = self._logdir
        if logdir is None:
            return []
        return self._listing.get(lambda: list_runs(logdir), MIN_WALK_S if fresh else RUNS_TTL_S)

    def listed(self) -> list[ProfileRun]:
        """The runs of the latest listing, without a walk."""
        return self._listing.latest()

    def find(self, name: str, walk: bool = True) -> ProfileRun | None:
        """The run called exactly `name` in the listing (`runs`; without `walk`, the latest one as it is), else
        None."""
        return next((run for run in (self.runs() if walk else self.listed()) if run.name == name), None)


class RunRows:
    """Each run's row of the `runs` route: its `RunSummary` (`listing.summarize`, the row `traceinsight runs` prints)
    when the report of its files as they are now is known (in the report cache, else `made` here by the tab), else
    its files only, `analysed` false. Never an analysis, so listing a large logdir stays fast. A row found is kept by
    its report key (the same files make the same report): each report is read once, not on every listing."""

    def __init__(self, logdir: Path, cache: ReportCache) -> None:
        self._logdir = logdir
        self._cache = cache
        self._lock = threading.Lock()
        self._found: dict[tuple[Any, ...], RunSummary] = {}

    def row(self, run: ProfileRun, made: Callable[[ProfileRun], RunReport | None] | None = None) -> dict[str, Any]:
        key = report_key(self._logdir, run.run)
        with self._lock:
            summary = self._found.get(key)
        if summary is None:
            report = self._cache.get(key) or (made(run) if made else None)
            if report is None:
                bare = as_dict(summarize(run.run))
                return {**{field: bare[field] for field in _FILES_ONLY}, "analysed": False}
            summary = summarize(run.run, report)
            with self._lock:
                if len(self._found) >= MAX_ROWS:
                    self._found.clear()
                self._found[key] = summary
        return {**as_dict(summary), "analysed": True}
