"""The profile runs under a TensorBoard logdir, named the way TensorBoard's users see them.

A run's name is its folder relative to the logdir without TensorBoard's ``plugins/profile/`` (XProf's
``a_input_bound/2026_12_02_13_47_03``); a ``tensorboard_trace_handler`` folder is a run too. The name
only ever *selects* one of the runs found here: it is never joined into a path. A run that would read a
file resolving outside the logdir (a symbolic link) is not offered, so nothing outside it is read.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceinsight.discover import RUN_INFO, Run, find_runs, is_trace
from traceinsight.errors import TraceError
from traceinsight.listing import FilesKey, files_key

# What TensorBoard calls a run at the root of the logdir.
ROOT_RUN = "."
# `is_active` looks at this many directory entries at most, so a huge logdir never stalls TensorBoard.
ACTIVE_WALK_LIMIT = 20_000
# An inactive answer is looked at again after this long (profiles appear while TensorBoard runs).
INACTIVE_RECHECK_S = 30.0
# The run list is reused this long: the tab polls the report routes about once a second.
RUNS_TTL_S = 3.0


@dataclass(frozen=True)
class ProfileRun:
    """One run the tab offers: its name relative to the logdir and traceinsight's own `Run` (whose name
    `traceinsight report LOGDIR --run` takes)."""

    name: str
    run: Run

    def key(self) -> FilesKey:
        """Each file's path, size and mtime (`listing.files_key`): a report is stale once this changes (a run still
        being written)."""
        return files_key(self.run.files)

    def describe(self) -> dict[str, Any]:
        """The run as the `runs` route lists it (no paths: the name is all the tab needs)."""
        sizes, mtimes = [], []
        for f in self.run.files:
            try:
                st = f.stat()
            except OSError:
                continue
            sizes.append(st.st_size)
            mtimes.append(st.st_mtime)
        return {
            "run": self.name,
            "files": len(self.run.files),
            "bytes": sum(sizes),
            "modified": max(mtimes, default=0.0),
        }


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


def _relative_name(folder: Path, logdir: Path) -> str:
    """`folder` relative to `logdir`, without `plugins/profile` (as `discover` names runs), or '.'."""
    parts = [p for p in folder.relative_to(logdir).parts if p not in ("plugins", "profile")]
    return "/".join(parts) or ROOT_RUN


# Longer `run` values are refused before any lookup; so is a Windows drive ('C:').
_MAX_RUN_NAME = 4096
_DRIVE = re.compile(r"^[A-Za-z]:")


def is_run_name(text: str) -> bool:
    """Whether `text` could be a name the `runs` route lists: relative, no '..', no NUL or backslash. Names
    are only compared with the listed ones; this refuses path tricks with a 400 before any lookup."""
    if not text or len(text) > _MAX_RUN_NAME or any(c in text for c in "\x00\\") or text.startswith("/"):
        return False
    if text == ".":
        return True
    return all(p not in ("", ".", "..") for p in text.split("/")) and not _DRIVE.match(text)


def list_runs(logdir: Path) -> list[ProfileRun]:
    """Every profile run under `logdir`, newest first, with names unique (a clash keeps the full path)."""
    if not logdir.is_dir():
        return []
    try:
        runs = find_runs(logdir)
    except TraceError:  # no traces (yet)
        return []
    found: list[ProfileRun] = []
    names: set[str] = set()
    for run in reversed(runs):  # find_runs: newest last
        if not reads_inside(run, logdir):
            continue
        name = _relative_name(run.root, logdir)
        if name in names:
            name = run.root.relative_to(logdir).as_posix()
        if name in names:
            continue
        names.add(name)
        found.append(ProfileRun(name, run))
    return found


def has_profiles(logdir: Path, limit: int = ACTIVE_WALK_LIMIT) -> bool:
    """Whether some file under `logdir` is a trace as discovery tells one (`discover.is_trace`: JSON by the head
    of its text, so the tab is active exactly when it has runs to list), looking at no more than `limit`
    entries."""
    seen = 0
    for folder, dirnames, filenames in os.walk(logdir):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if any(is_trace(Path(folder, name)) for name in filenames):
            return True
        seen += len(dirnames) + len(filenames)
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
