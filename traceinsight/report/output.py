"""Writing reports: atomically, and never over an input.

A CI step that uploads a report must never see half of one, so each file is
written to a temporary name beside it and renamed into place. Devices and pipes
(``-o /dev/null``, ``/dev/stdout``) are written in place: renaming over them
would replace the device node itself with a regular file (which root can do).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from traceinsight.model import TraceError


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
