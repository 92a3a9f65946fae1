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
    if stat.S_ISDIR(mode):
        raise TraceError(path, "is a directory, not a report file name")
    return mode


def write_atomic(path: Path, text: str, protected: tuple[Path, ...] = ()) -> None:
    """Write `text` to `path` via a temp file and rename; refuse to overwrite a protected (input) file."""
    mode = check_output(path, protected)
    target = path.resolve()
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
