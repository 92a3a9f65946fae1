"""Read every trace file of a run and merge them into one `Profile`.

Files are read in parallel (`parallel.map_files`: `jobs` processes, or a Dask
cluster) and merged on one clock, each by `readers.read_trace` (Kineto JSON
streamed). Reading a large run can show a progress bar on stderr.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TextIO, TypeVar

from traceinsight.discover import Run
from traceinsight.events import Profile, TraceRead, merge_reads
from traceinsight.limits import MemoryLimit
from traceinsight.parallel import map_files
from traceinsight.readers import read_trace
from traceinsight.readers.json_files import json_size_guess
from traceinsight.rules import PARALLEL_RUN_MIN_BYTES

R = TypeVar("R")
# Below this much input a progress bar would only flicker.
PROGRESS_MIN_BYTES = 32 << 20


def read_input(
    path: Path,
    base: Path,
    on_bytes: Callable[[int], None] | None = None,
    jobs: int = 1,
    limit: MemoryLimit | None = None,
    step_range: str | None = None,
) -> TraceRead:
    """`read_trace`, its path recorded relative to the folder `base` (see `input_base`)."""
    read = read_trace(path, on_bytes, jobs, limit, step_range)
    try:
        read.input.path = str(path.relative_to(base))
    except ValueError:
        read.input.path = str(path)
    return read


def load_run(
    run: Run,
    base: Path,
    jobs: int = 1,
    scheduler: str | None = None,
    progress: TextIO | None = None,
    limit: MemoryLimit | None = None,
    step_range: str | None = None,
) -> Profile:
    """All inputs of `run`, paths recorded relative to `base` (the path the user gave).

    `jobs` files are read at a time (one process each; a single large file is cut
    into chunks decoded by `jobs` processes), or each by a worker of the Dask
    `scheduler` (an address or ``"local"``). `progress`: where to draw a
    progress bar while a large run is read (a terminal), or None. `limit`: the
    memory the run's events may take here (`limits`); the files read in
    processes of their own split it, as all their tables come back here.
    `step_range`: the name of the host ranges that mark steps (`read_trace`).
    """
    base = input_base(base)
    if reads_in_parallel(run, jobs, scheduler):
        each = shared_limit(limit, scheduler, len(run.files))
        reads = map_run(
            partial(read_input, base=base, limit=each, step_range=step_range), run, jobs, scheduler, progress
        )
    else:  # here, with a bar that moves within files
        files = [f.absolute() for f in run.files]
        sizes = [f.stat().st_size for f in files]
        bar = _bar(sizes, progress)
        reads = []
        try:
            for path, size in zip(files, sizes, strict=True):
                on_bytes = bar.within_next(size) if bar else None
                reads.append(read_input(path, base, on_bytes, jobs, limit, step_range))
                if limit is not None:  # the next file's events are held besides this one's
                    limit = limit.after(len(reads[-1].events))
        finally:
            if bar:
                bar.close()
    return merge_reads(reads, name=run.name)


def input_base(path: Path) -> Path:
    """The folder input paths are recorded relative to: the path the user gave, or its folder."""
    return (path if path.is_dir() else path.parent).absolute()


def shared_limit(limit: MemoryLimit | None, scheduler: str | None, holders: int) -> MemoryLimit | None:
    """The limit of each process reading a file of a run while `holders` tables are held at once (`limit`
    split among them); none for Dask workers, whose own memory limits apply (another machine, say)."""
    return None if limit is None or scheduler is not None else limit.shared(holders)


def reads_in_parallel(run: Run, jobs: int, scheduler: str | None) -> bool:
    """Whether the files of `run` are mapped over processes or a cluster (`map_run`), not read here one by one:
    on a cluster, or with jobs and files to share and enough bytes for workers to pay for themselves
    (`rules.PARALLEL_RUN_MIN_BYTES`)."""
    if scheduler is not None:
        return True
    return jobs > 1 and len(run.files) > 1 and sum(map(json_size_guess, run.files)) >= PARALLEL_RUN_MIN_BYTES


def map_run(func: Callable[[Path], R], run: Run, jobs: int, scheduler: str | None, progress: TextIO | None) -> list[R]:
    """``func(path)`` of every file of `run`, `jobs` processes at a time or on the Dask `scheduler`, in file
    order, with a progress bar that moves file by file."""
    files = [f.absolute() for f in run.files]
    sizes = [f.stat().st_size for f in files]
    bar = _bar(sizes, progress)
    try:
        return map_files(func, files, jobs, scheduler, None if bar is None else lambda i: bar.finished(sizes[i]))
    finally:
        if bar:
            bar.close()


def _bar(sizes: list[int], progress: TextIO | None) -> Progress | None:
    return Progress(sum(sizes), progress) if progress is not None and sum(sizes) >= PROGRESS_MIN_BYTES else None


class Progress:
    """A one-line bar on a terminal: bytes of the run read so far, redrawn at most ten times a second."""

    WIDTH = 30

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = max(1, total)
        self.out = out
        self.done = 0
        self._drawn = 0.0

    def show(self, done: int) -> None:
        done = min(done, self.total)
        now = time.monotonic()
        if now - self._drawn < 0.1 and done < self.total:
            return
        self._drawn = now
        filled = self.WIDTH * done // self.total
        self.out.write(
            f"\rtraceinsight: reading [{'#' * filled}{' ' * (self.WIDTH - filled)}] "
            f"{100 * done // self.total:3d} % of {self.total / 1e6:,.0f} MB"
        )
        self.out.flush()

    def finished(self, size: int) -> None:
        """One more file, of `size` bytes, has been read."""
        self.done += size
        self.show(self.done)

    def within_next(self, size: int) -> Callable[[int], None]:
        """The `on_bytes` of the next file of `size` bytes (told its own position), which it then counts as read."""
        start = self.done
        self.done += size
        return lambda n: self.show(start + n)

    def close(self) -> None:
        """Clear the line, so the summary that follows starts clean."""
        self.out.write("\r" + " " * (self.WIDTH + 40) + "\r")
        self.out.flush()


def progress_stream(quiet: bool) -> TextIO | None:
    """stderr when it is a terminal and the user did not ask for quiet, else None (no bar)."""
    return None if quiet or not sys.stderr.isatty() else sys.stderr
