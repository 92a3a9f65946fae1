"""How fast `discover` finds the run in a big logdir: 10,000 files in 100 run folders, one trace among them.

Issue 16 asks that discovery stay fast on trees of 10,000 files (CI logdirs collect checkpoints, event
files and logs beside the profiles). Best of --repeat, in a temporary folder.

    python -m benchmarks.bench_discover [--repeat 3] [--runs 100] [--files 100]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from traceinsight.discover import discover

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "pairs" / "torch_small_batch" / "before"


def make_tree(root: Path, runs: int, files: int) -> None:
    """`runs` TensorBoard-style run folders of `files - 1` small non-trace files; one real trace in the first."""
    for run in range(runs):
        folder = root / f"run{run}" / "plugins" / "profile" / "2026_12_03_00_00_00"
        folder.mkdir(parents=True)
        for i in range(files - 1):
            (folder / f"events.{i}.txt").write_bytes(b"x")
    trace = next(SAMPLE.glob("*.pt.trace.json.gz"))
    shutil.copy(trace, root / "run0" / trace.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--files", type=int, default=100, help="files per run folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_tree(root, args.runs, args.files)
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            run = discover(root)
            best = min(best, time.perf_counter() - start)
        print(f"{args.runs * args.files:,} files: discover {best * 1000:.0f} ms, {len(run.files)} trace file(s) found")


if __name__ == "__main__":
    main()
