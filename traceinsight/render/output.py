"""Writing reports: atomically, as one set, and never over an input.

A CI step that uploads a report must never see half of one, nor a new page beside an old JSON, so every output is
written to a temporary name beside it (`stage`) and all are renamed into place together at the end (`commit`).
Devices and pipes (``-o /dev/null``, ``/dev/stdout``) are written in place: renaming over them would replace the
device node itself with a regular file (which root can do). `preflight_outputs` checks every output before a
command's work (and removes temporary files a killed run left), `removed_on_interrupt` removes what an
interrupted command staged, and `finish` writes a command's outputs,
prints its summary and gives its exit code. (This module imports no pandas: a command
uses it to check its outputs before it imports the analyses: `commands/report.py`.)
"""

from __future__ import annotations

import os
import re
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

import msgspec

from traceinsight.errors import TraceError
from traceinsight.gating import Gate


def _same_file(target: Path, protected: tuple[Path, ...]) -> bool:
    """Whether `target` is one of `protected`, through symlinks and hard links alike."""
    try:
        mine = target.stat()
    except OSError:
        return False  # a file that does not exist yet is no input
    for path in protected:
        try:
            theirs = path.stat()
        except OSError:
            continue
        if (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino):
            return True
    return False


# Our temporary files, beside each output: `.NAME.traceinsight-PID-RANDOM.tmp`. Only names of this pattern are
# ever removed: those of this process on an interrupt, and those a dead process left (or older than
# `STALE_TEMP_S`: a pid reused since) on the next run that writes there.
_TEMP_MARK = ".traceinsight-"
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.traceinsight-(?P<pid>\d+)-[a-z0-9_]+\.tmp")
STALE_TEMP_S = 3600


def check_output(path: Path, protected: tuple[Path, ...] = ()) -> int | None:
    """Raise TraceError when `path` may not take a report (an input, a directory); else its mode (None: new).
    `path` itself is looked at, not its resolved name: `/dev/stdout` on a pipe resolves to no file at all."""
    if _same_file(path, protected):
        raise TraceError(path, "refusing to overwrite an input trace with a report")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as err:  # a folder on the way is a file, or may not be entered
        raise TraceError(path, err.strerror or str(err)) from None
    if stat.S_ISDIR(mode):
        raise TraceError(path, "is a directory, not a report file name")
    return mode


def preflight_output(path: Path, protected: tuple[Path, ...] = ()) -> None:
    """Raise TraceError, naming `path` as the user gave it, when a report could not be written there: an input,
    a directory, a folder that is a file, or one this user may not write (nor create). Run before the analysis,
    so a long one never fails at its end."""
    mode = check_output(path, protected)
    if mode is not None and not stat.S_ISREG(mode):
        if not os.access(path, os.W_OK):
            raise TraceError(path, "Permission denied")
        return  # a device or a pipe, written in place
    folder = path.resolve().parent
    while not folder.exists():  # created on writing, so the nearest existing folder must take it
        if folder.is_symlink():
            raise TraceError(path, f"{folder} is a dangling symlink")
        folder = folder.parent
    if not folder.is_dir():
        raise TraceError(path, f"{folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TraceError(path, f"Permission denied: cannot write in {folder}")


class Staged(msgspec.Struct):
    """An output written to its temporary file (`temp`), to be renamed onto `target` with the others
    (`commit`); `temp` None: a device or a pipe, already written in place."""

    path: Path  # as the user gave it
    target: Path
    temp: Path | None


def stage(path: Path, write: Callable[[BinaryIO], None], protected: tuple[Path, ...] = ()) -> Staged:
    """Write an output through `write` (given the open file) to a temporary file of ours beside `path` (never
    over one of `protected`); a device or a pipe (``/dev/null``, ``/dev/stdout``) is written in place now:
    renaming over it would replace the node itself (which root can do). A failure names `path`."""
    mode = check_output(path, protected)
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "wb") as f:
                write(f)
        except OSError as err:
            raise TraceError(path, err.strerror or str(err)) from None
        return Staged(path, path, None)
    target = path.resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{_TEMP_MARK}{os.getpid()}-", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise TraceError(path, err.strerror or str(err)) from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
            write(f)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise TraceError(path, err.strerror or str(err)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Staged(path, target, Path(tmp))


def discard(staged: Sequence[Staged]) -> None:
    """Remove the temporary files of outputs that will not be committed."""
    for item in staged:
        if item.temp is not None:
            item.temp.unlink(missing_ok=True)


def commit(staged: Sequence[Staged]) -> None:
    """Rename every staged output onto its target, one after the other with Ctrl-C and SIGTERM held back
    (`_signals_held`: they land once all are in place), so an interrupted run leaves the previous set, never a
    mix. On a failure the temporary files left are removed, and the error names the output as given."""
    with _signals_held():
        for i, item in enumerate(staged):
            if item.temp is None:
                continue
            try:
                os.replace(item.temp, item.target)
            except BaseException as error:
                discard(staged[i:])
                if isinstance(error, OSError):
                    raise TraceError(item.path, error.strerror or str(error)) from None
                raise


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM noted meanwhile and delivered (to the handlers there were) once the block ends; a
    signal mask would not do, as the kernel hands a signal to any thread that does not block it. Nothing off
    the main thread, where Python runs no handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, frame: caught.append(signum)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for number in dict.fromkeys(caught):
            signal.raise_signal(number)


def _text_writer(text: str) -> Callable[[BinaryIO], None]:
    def write(f: BinaryIO) -> None:
        f.write(text.encode("utf-8"))

    return write


def write_atomic(path: Path, text: str, protected: tuple[Path, ...] = ()) -> None:
    """Write `text` to `path` via a temp file and rename; refuse to overwrite a protected (input) file. A failure
    names `path` (not the temp file) in a TraceError."""
    commit([stage(path, _text_writer(text), protected)])


def write_outputs(outputs: Mapping[Path, str | Staged], protected: tuple[Path, ...]) -> None:
    """Write every output as one set, never over an input (`protected`): each is checked, then written to its
    temporary file (a `Staged` one already is: the timeline, written while the analysis ran), then all are
    renamed at once (`commit`). A refused or failed one leaves the previous set as it was and no temp file."""
    for path, content in outputs.items():
        if not isinstance(content, Staged):
            check_output(path, protected)
    staged = [content for content in outputs.values() if isinstance(content, Staged)]
    try:
        for path, content in outputs.items():
            if not isinstance(content, Staged):
                staged.append(stage(path, _text_writer(content), protected))
    except BaseException:
        discard(staged)
        raise
    commit(staged)


def preflight_outputs(outputs: Sequence[Path | None], inputs: Sequence[Path]) -> None:
    """Check every output path before any work (`preflight_output`): a long analysis must not fail at its end.
    `inputs` are the paths the user gave: a file among them is refused here; a trace found under a folder
    among them is refused on writing (`write_outputs`, against the files actually read). Temporary files of
    ours that a killed run left beside an output are removed (`remove_stale_temps`)."""
    protected = tuple(p for p in inputs if p.is_file())
    for path in outputs:
        if path is not None:
            preflight_output(path, protected)
            remove_stale_temps(path)


def _our_temps(path: Path) -> Iterator[tuple[Path, int]]:
    """Our temporary files beside `path` (the output's own name), with the pid that wrote each."""
    target = path.resolve()
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return
    for entry in entries:
        match = _TEMP_NAME.fullmatch(entry.name)
        if match and match["name"] == target.name and entry.is_file(follow_symlinks=False):
            yield Path(entry.path), int(match["pid"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def remove_stale_temps(path: Path) -> None:
    """Remove our temporary files beside `path` that no run is writing: their process is gone, or they are older
    than `STALE_TEMP_S` (a killed run's; `kill -9` runs no handler)."""
    too_old = time.time() - STALE_TEMP_S
    for temp, pid in _our_temps(path):
        with suppress(OSError):
            if pid != os.getpid() and (not _alive(pid) or temp.stat().st_mtime < too_old):
                temp.unlink()


@contextmanager
def removed_on_interrupt(paths: Sequence[Path | None]) -> Iterator[None]:
    """On Ctrl-C or SIGTERM, remove the temporary files this process staged beside `paths`: outputs are only
    renamed into place together at the end (`commit`), so an interrupted run leaves the previous set as it was."""
    try:
        yield
    except KeyboardInterrupt:
        for path in paths:
            if path is not None:
                for temp, pid in _our_temps(path):
                    if pid == os.getpid():
                        temp.unlink(missing_ok=True)
        raise


def finish(
    outputs: Mapping[Path, str | Staged],
    protected: tuple[Path, ...],
    summary: str | None,
    gate: Gate,
    label: str,
) -> int:
    """Write every output (`write_outputs`), print `summary` and where the files went (unless quiet:
    `summary` None), one stderr line per threshold crossed, failed or skipped; the exit code (1 when the gate
    failed)."""
    write_outputs(outputs, protected)
    if summary is not None:
        print(summary)
        print(f"\n{label}: " + ", ".join(str(p) for p in outputs))
    for line in gate.lines():
        print(f"traceinsight: {line}", file=sys.stderr)
    return 1 if gate.failed else 0
