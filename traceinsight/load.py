"""Read every trace file of a run and merge them into one `Profile`."""

from __future__ import annotations

from pathlib import Path

from traceinsight.discover import Run
from traceinsight.model import Profile, TraceRead, merge_reads
from traceinsight.readers import read_trace


def _read(path: Path, base: Path) -> TraceRead:
    read = read_trace(path)
    try:
        read.input.path = str(path.relative_to(base))
    except ValueError:
        read.input.path = str(path)
    return read


def load_run(run: Run, base: Path) -> Profile:
    """All inputs of `run`, paths recorded relative to `base` (the path the user gave)."""
    base = base if base.is_dir() else base.parent
    return merge_reads([_read(f, base) for f in run.files], name=run.name)
