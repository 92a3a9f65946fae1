"""Stand-in report jobs for `ReportStore` tests: module-level so a worker process can import them."""

from __future__ import annotations

import os
import time
from pathlib import Path


def quick(logdir: str, run: str, root: str, cache: str) -> tuple[str, str]:
    """A report that names the run and the size of its first file when made (to see re-analysis)."""
    sizes = [f.stat().st_size for f in sorted(Path(root).iterdir()) if f.is_file()]
    return f'{{"run": "{run}", "size": {sizes[0]}}}', f"<p>{run}</p>"


def slow_or_quick(logdir: str, run: str, root: str, cache: str) -> tuple[str, str]:
    """Slow for a run named `slow` (it waits for a `release` file in the logdir), quick otherwise."""
    if run.endswith("slow"):
        release = Path(logdir) / "release"
        deadline = time.monotonic() + 30
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return quick(logdir, run, root, cache)


def failing(logdir: str, run: str, root: str, cache: str) -> tuple[str, str]:
    raise ValueError(f"cannot read {run}")


def dying(logdir: str, run: str, root: str, cache: str) -> tuple[str, str]:
    """The process vanishes (as when the kernel kills it for memory)."""
    os._exit(9)


def saved_report(logdir: str, run: str, root: str, cache: str) -> tuple[str, str]:
    """The `--json` report saved beside the logdir (`report.json`), as a job returns it, without writing the report
    cache: the tab knows it only from its own job (as when the cache folder cannot be written)."""
    return (Path(logdir).parent / "report.json").read_text(), f"<p>{run}</p>"
