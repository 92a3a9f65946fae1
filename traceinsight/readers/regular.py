"""Only regular files are opened, told by the file's type (links followed), never by its name.

Why: a FIFO named like a trace blocks `open()` until a writer comes (forever), a
device (a link to /dev/zero) reads without end, and a socket cannot be opened at
all. Discovery skips such files and counts them (`discover.find_runs`); a reader
refuses one in one line (`open_regular`), without waiting on it: the type is
checked before the open, and again on the open file (opened without blocking),
so a file swapped in between is caught too.
"""

from __future__ import annotations

import errno
import os
import stat
from io import BufferedReader
from pathlib import Path

# Opening a FIFO for reading waits for a writer unless non-blocking; Windows has neither FIFOs nor the flag.
_NON_BLOCKING = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def not_regular(path: Path | str) -> str | None:
    """None when `path` is a regular file (through links) or cannot be looked at for another reason (opening it
    then says why: permission denied, say); else what it is: 'a FIFO', 'a socket', 'a character device', 'a
    dangling link', 'a link loop'..."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a dangling link" if os.path.islink(path) else None
    except OSError as exc:
        return "a link loop" if exc.errno == errno.ELOOP else None
    return None if stat.S_ISREG(mode) else _kind(mode)


def refusal(kind: str) -> str:
    """What a message says of a file that is `kind` (`not_regular`)."""
    return f"not a regular file ({kind}): only regular files are read"


def open_regular(path: Path | str) -> BufferedReader:
    """`open(path, "rb")` of a regular file; an OSError saying what it is otherwise, raised at once (never waiting
    on a FIFO)."""
    if kind := not_regular(path):
        raise OSError(errno.EINVAL, refusal(kind))
    fd = os.open(path, os.O_RDONLY | _NON_BLOCKING)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped in since the check above
            raise OSError(errno.EINVAL, refusal(_kind(mode)))
        if _NON_BLOCKING & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
