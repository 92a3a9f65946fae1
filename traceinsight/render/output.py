"""Writing reports: atomically, and never over an input.

A CI step that uploads a report must never see half of one, so each file is
written to a temporary name beside it and renamed into place. Devices and pipes
(``-o /dev/null``, ``/dev/stdout``) are written in place: renaming over them
would replace the device node itself with a regular file (which root can do).
`preflight_outputs` checks every output before a command's work, `removed_on_interrupt`
takes back what an interrupted command wrote, and `finish` writes a command's outputs,
prints its summary and gives its exit code. (This module imports no pandas: a command
uses it before it forks its painter: `commands/report.py`.)
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from traceinsight.errors import TraceError


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


def check_output(path: Path, protected: tuple[Path, ...] = ()) -> int | None:
    """Raise TraceError when `path` may not take a report (an input, a directory); else its mode (None: new)."""
    target = path.resolve()
    if _same_file(target, protected):
        raise TraceError(path, "refusing to overwrite an input trace with a report")
    try:
        mode = target.stat().st_mode
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


def write_atomic(path: Path, text: str, protected: tuple[Path, ...] = ()) -> None:
    """Write `text` to `path` via a temp file and rename; refuse to overwrite a protected (input) file. A failure
    names `path` (not the temp file) in a TraceError."""
    mode = check_output(path, protected)
    target = path.resolve()
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as err:
            raise TraceError(path, err.strerror or str(err)) from None
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise TraceError(path, err.strerror or str(err)) from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
            f.write(text)
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise TraceError(path, err.strerror or str(err)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_outputs(outputs: dict[Path, str], protected: tuple[Path, ...]) -> None:
    """Write every output atomically, never over an input (`protected`). Every path is checked before any is
    written, so a refused one leaves no other behind."""
    for path in outputs:
        check_output(path, protected)
    for path, text in outputs.items():
        write_atomic(path, text, protected=protected)


def preflight_outputs(outputs: Sequence[Path | None], inputs: Sequence[Path]) -> None:
    """Check every output path before any work (`preflight_output`): a long analysis must not fail at its end.
    `inputs` are the paths the user gave: a file among them is refused here; a trace found under a folder
    among them is refused on writing (`write_outputs`, against the files actually read)."""
    protected = tuple(p for p in inputs if p.is_file())
    for path in outputs:
        if path is not None:
            preflight_output(path, protected)


@contextmanager
def removed_on_interrupt(paths: Sequence[Path | None]) -> Iterator[None]:
    """On Ctrl-C or SIGTERM, remove every one of `paths` that this command wrote (a regular file that is not
    the one that was there before), so an interrupted run leaves no output behind."""
    before = {path: _identity(path) for path in paths if path is not None}
    try:
        yield
    except KeyboardInterrupt:
        for path, identity in before.items():
            now = _identity(path)
            if now is not None and now != identity:
                with suppress(OSError):
                    path.unlink()
        raise


def _identity(path: Path) -> tuple[int, int, int] | None:
    """A regular file's (device, inode, mtime); None for anything else or nothing."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def relative_link(target: Path, page: Path) -> str:
    """`target` as a link from `page`'s folder (both are written side by side in most CI jobs)."""
    try:
        return Path(os.path.relpath(target.absolute(), page.absolute().parent)).as_posix()
    except ValueError:  # another drive (Windows)
        return target.absolute().as_posix()


def finish(
    outputs: dict[Path, str], protected: tuple[Path, ...], summary: str | None, crossed: list[str], label: str
) -> int:
    """Write every output (`write_outputs`), print `summary` and where the files went (unless quiet:
    `summary` None), one stderr line per crossed threshold; the exit code (1 when any)."""
    write_outputs(outputs, protected)
    if summary is not None:
        print(summary)
        print(f"\n{label}: " + ", ".join(str(p) for p in outputs))
    for msg in crossed:
        print(f"traceinsight: threshold crossed: {msg}", file=sys.stderr)
    return 1 if crossed else 0
