"""Writing reports: atomically, and never over an input.

A CI step that uploads a report must never see half of one, so each file is
written to a temporary name beside it and renamed into place.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from traceinsight.model import TraceError


def write_atomic(path: Path, text: str, protected: tuple[Path, ...] = ()) -> None:
    """Write `text` to `path` via a temp file and rename; refuse to overwrite a protected (input) file."""
    target = path.resolve()
    if any(target == p.resolve() for p in protected):
        raise TraceError(path, "refusing to overwrite an input trace with a report")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
