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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from traceinsight import listing
from traceinsight.discover import RUN_INFO, Run, is_trace, walk
from traceinsight.errors import TraceError
from traceinsight.listing import FilesKey, ReportCache, files_key, report_key, summarize
from traceinsight.result import RunSummary

# `is_active` looks at this many directory entries at most, so a huge logdir never stalls TensorBoard.
ACTIVE_WALK_LIMIT = 20_000
# An inactive answer is looked at again after this long (profiles appear while TensorBoard runs).
INACTIVE_RECHECK_S = 30.0
# The run list is reused this long: the tab polls the report routes about once a second.
RUNS_TTL_S = 3.0
# Rows of cached reports kept in memory (a few hundred bytes each); all forgotten past this.
MAX_ROWS = 4096
# What the `runs` route tells of a run whose report is not cached: its files only.
_FILES_ONLY = ("name", "files", "bytes", "modified")


@dataclass(frozen=True)
class ProfileRun:
    """One run the tab offers: traceinsight's `Run`, checked to read nothing outside the logdir, and its name (the
    `Run`'s, which `traceinsight report LOGDIR --run` takes)."""

    name: str
    run: Run

    def key(self) -> FilesKey:
        """Each file's path, size and mtime (`listing.files_key`): a report is stale once this changes (a run still
        being written)."""
        return files_key(self.run.files)


def _inside(path: Path, root: Path) -> bool:
    """Whether `path`, links resolved, lies under `root` (already resolved)."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a link loop
        return False


def reads_inside(run: Run, logdir: Path) -> bool:
    """Whether everything a report of `run` reads lies under `logdir`: its trace files, and the
    `run_info.json` files the report's `meta` reads in its folder and each one above it."""
    root = logdir.resolve()
    readable = list(run.files)
    folder = run.root
    while True:
        readable.append(folder / RUN_INFO)
        if folder == logdir or logdir not in folder.parents:
            break
        folder = folder.parent
    return all(_inside(f, root) for f in readable if f.is_symlink() or f in run.files)


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
    outside the logdir. Of runs sharing a name only the first is offered: the one `--run NAME` opens."""
    if not logdir.is_dir():
        return []
    try:
        runs = listing.list_runs(logdir)
    except TraceError:  # no traces (yet)
        return []
    found: list[ProfileRun] = []
    names: set[str] = set()
    for run in runs:
        if run.name in names or not reads_inside(run, logdir):
            continue
        names.add(run.name)
        found.append(ProfileRun(run.name, run))
    return found


def has_profiles(logdir: Path, limit: int = ACTIVE_WALK_LIMIT) -> bool:
    """Whether some file under `logdir` is a trace as discovery tells one (`discover.is_trace`: JSON by the head
    of its text, so the tab is active exactly when it has runs to list), looking at no more than `limit`
    entries (files, in folders walked as discovery walks them: `discover.walk`, a loop, however deep)."""
    seen = 0
    for _, entries in walk(logdir):
        if any(is_trace(Path(entry.path)) for entry in entries):
            return True
        seen += len(entries) + 1
        if seen >= limit:
            return False
    return False


class RunIndex:
    """The logdir's runs and whether it has any, each remembered for a while: TensorBoard asks `is_active`
    on every page load and the tab polls, and neither should walk a large logdir every time."""

    def __init__(self, logdir: Path | None) -> None:
        self._logdir = logdir
        self._lock = threading.Lock()
        self._active: bool | None = None
        self._active_at = 0.0
        self._runs: list[ProfileRun] = []
        self._runs_at = -RUNS_TTL_S

    @property
    def logdir(self) -> Path | None:
        return self._logdir

    def is_active(self) -> bool:
        """True once a trace is seen (for good); False is checked again after `INACTIVE_RECHECK_S`."""
        if self._logdir is None:
            return False
        with self._lock:
            now = time.monotonic()
            if self._active is None or (not self._active and now - self._active_at >= INACTIVE_RECHECK_S):
                self._active = self._logdir.is_dir() and has_profiles(self._logdir)
                self._active_at = now
            return self._active

    def runs(self, fresh: bool = False) -> list[ProfileRun]:
        """The runs, newest first; walked again when `fresh` or older than `RUNS_TTL_S`."""
        if self._logdir is None:
            return []
        with self._lock:
            now = time.monotonic()
            if fresh or now - self._runs_at >= RUNS_TTL_S:
                self._runs = list_runs(self._logdir)
                self._runs_at = now
                if self._runs:
                    self._active = True
            return self._runs

    def find(self, name: str) -> ProfileRun | None:
        """The run called exactly `name`, else None (looked up once more in a fresh walk: a new run)."""
        for fresh in (False, True):
            for run in self.runs(fresh=fresh):
                if run.name == name:
                    return run
        return None


class RunRows:
    """Each run's row of the `runs` route: its `RunSummary` (`listing.summarize`, the row `traceinsight runs` prints)
    when the report cache holds the report of its files as they are now, else its files only, `analysed` false.
    Never an analysis, so listing a large logdir stays fast. A row found is kept by its report key (the same files
    make the same report): each cached report is read once, not on every listing."""

    def __init__(self, logdir: Path, cache: ReportCache) -> None:
        self._logdir = logdir
        self._cache = cache
        self._lock = threading.Lock()
        self._found: dict[tuple[Any, ...], RunSummary] = {}

    def row(self, run: ProfileRun) -> dict[str, Any]:
        key = report_key(self._logdir, run.run)
        with self._lock:
            summary = self._found.get(key)
        if summary is None:
            report = self._cache.get(key)
            if report is None:
                bare = asdict(summarize(run.run))
                return {**{field: bare[field] for field in _FILES_ONLY}, "analysed": False}
            summary = summarize(run.run, report)
            with self._lock:
                if len(self._found) >= MAX_ROWS:
                    self._found.clear()
                self._found[key] = summary
        return {**asdict(summary), "analysed": True}
