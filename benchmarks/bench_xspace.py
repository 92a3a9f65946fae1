"""How fast `read_xspace` turns XSpace files into the event table (target: 1.5 M events/s on the stat-heavy file).

    python -m benchmarks.bench_xspace [--repeat 3] [--copies 60] [--in-process]

For each real ``.xplane.pb`` in ../shared/traces: its events (XEvents, every line's), the rows they
make, file size, best-of-N wall time of `read_xspace` (file read included) in one process and in two
(a worker process reads runs of lines too: what the CLI does for a file of 16 MB of lines or more
when the load average leaves a core idle), and events/s of the faster. Each read runs in a fresh
process, as the CLI reads a file, and is timed alone (the imports before it are not);
``--in-process`` times them one after another in this process instead, as this script did until December
2026 (its two-process reads then fork a process that holds what the reads before it left). The real
files are small (4-27 k events), so fixed costs weigh in; ``--copies K`` also times each file with
every line's events copied K times end to end on the clock (`replicate_xspace`; the 8xV100 file x60
is the 114 MB, 1.39 M-event file of issue 15), for the per-event rate. Peak memory is
`bench_xprof`'s, in a process of its own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.replicate_xspace import SHARED_TRACES, XSpaceReplicator
from traceinsight.readers.xplane_schema import XSpace
from traceinsight.readers.xspace import read_xspace

REAL_FILES = (
    "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "xprof/test_xplanes/tpu_inference_2.xplane.pb",
    "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb",
    "tf_cpu/a_input_bound/plugins/profile/*/vm.xplane.pb",
    "tf_cpu/b_input_tuned/plugins/profile/*/vm.xplane.pb",
)


def xevents(path: Path) -> int:
    """Events of every line of every plane, counted with the protobuf classes."""
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    return sum(len(line.events) for plane in space.planes for line in plane.lines)


# One read in a fresh process: its wall time and rows.
_FRESH_READ = """
import sys, time
from pathlib import Path
from traceinsight.readers.xspace import read_xspace
start = time.perf_counter()
rows = len(read_xspace(Path(sys.argv[1]), jobs=int(sys.argv[2])).events)
print(time.perf_counter() - start, rows)
"""


def timed_read(path: Path, jobs: int, in_process: bool) -> tuple[float, int]:
    """Wall time of one `read_xspace` and the rows it made."""
    if in_process:
        start = time.perf_counter()
        rows = len(read_xspace(path, jobs=jobs).events)
        return time.perf_counter() - start, rows
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_READ, str(path), str(jobs)], check=True, capture_output=True, text=True
    )
    seconds, rows = done.stdout.split()
    return float(seconds), int(rows)


def best_times(path: Path, repeat: int, in_process: bool) -> tuple[float, float, int]:
    """Best wall times of `read_xspace` over `repeat` runs, in one process and in two (the runs alternated, so a
    busy moment of the machine weighs on both alike), and the rows it made."""
    best = {1: float("inf"), 2: float("inf")}
    rows = 0
    for _ in range(repeat):
        for jobs in best:
            seconds, rows = timed_read(path, jobs, in_process)
            best[jobs] = min(best[jobs], seconds)
    return best[1], best[2], rows


def report(label: str, path: Path, repeat: int, in_process: bool) -> None:
    one, two, rows = best_times(path, repeat, in_process)
    events = xevents(path)
    faster = min(one, two)
    print(
        f"{label:<46} {events:>10,} {rows:>10,} {path.stat().st_size / 1e6:>7.1f} {one * 1e3:>8.0f} {two * 1e3:>8.0f}"
        f" {events / faster / 1e6:>9.2f} {rows / faster / 1e6:>7.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per file; the best one counts")
    parser.add_argument("--copies", type=int, default=60, help="also time each file with its events copied K times")
    parser.add_argument("--in-process", action="store_true", help="time the reads in this process, one after another")
    args = parser.parse_args()
    paths = [p for pattern in REAL_FILES for p in sorted(SHARED_TRACES.glob(pattern))]
    if not paths:
        raise SystemExit(f"no XSpace files under {SHARED_TRACES}")
    columns = ("events", "rows", "MB", "ms, 1 p", "ms, 2 p", "M ev/s", "M rows/s")
    print(f"{'file':<46} " + " ".join(f"{c:>{w}}" for c, w in zip(columns, (10, 10, 7, 8, 8, 9, 7), strict=True)))
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            label = str(path.relative_to(SHARED_TRACES))
            report(label if len(label) <= 46 else "..." + label[-43:], path, args.repeat, args.in_process)
            if args.copies > 1:
                copy = XSpaceReplicator(path).write(Path(tmp) / path.name, args.copies)
                report(f"  x{args.copies}, end to end", copy, args.repeat, args.in_process)
                copy.unlink()


if __name__ == "__main__":
    main()
