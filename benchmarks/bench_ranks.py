"""`traceinsight report` on a run of many rank files: ``--jobs 1`` against ``--jobs N`` (one process per file).

Makes --ranks rank files (`replicate`: copies of a real trace, ``distributedInfo.rank``
set to 0..N-1) of --mb MB each in a temporary folder, then times the whole command
(best of --repeat, each run a fresh process) with one job and with as many as
there are cores, and checks that the JSON reports are identical and hold every
rank once with its own device.

Run from the repository root: ``python -m benchmarks.bench_ranks [--ranks 8] [--mb 40] [--repeat 3]``.
Figures measured on the project's 2-core VM are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_scale import run_child
from benchmarks.replicate import DEFAULT_SOURCE, Replicator
from traceinsight.parallel import default_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=40.0, help="size of each rank file (uncompressed MB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gz", action="store_true", help="write .json.gz rank files")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    replicator = Replicator(args.source)
    jobs = default_jobs()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        for rank in range(args.ranks):
            name = f"rank{rank}.pt.trace.json{'.gz' if args.gz else ''}"
            replicator.write(run / name, replicator.copies_for(args.mb), rank=rank)
        size = sum(f.stat().st_size for f in run.iterdir()) / 1e6
        print(f"{args.ranks} rank files, {size:,.0f} MB on disk in all; {jobs} cores")
        reports = {}
        best = {}
        for n in sorted({1, jobs}):
            out = Path(tmp) / f"jobs{n}.json"
            command = ["-m", "traceinsight", "report", str(run), "-o", f"{tmp}/r.html", "--json", str(out), "-q"]
            runs = [run_child([sys.executable, *command, "--jobs", str(n)]) for _ in range(args.repeat)]
            best[n] = min(runs)
            reports[n] = out.read_text()
            print(f"  --jobs {n}: {best[n][0]:6.2f} s   peak RSS {best[n][1]:,.0f} MB (the largest process)")
        report = json.loads(reports[1])
        ranks = [i["rank"] for i in report["inputs"]]
        devices = [d["id"] for d in report["devices"]]
        print(f"  speed-up --jobs {jobs} over --jobs 1: {best[1][0] / best[jobs][0]:.2f} x")
        # `meta` says how each report was made (its command line, `--jobs` included): the rest must be the same.
        figures = [{k: v for k, v in json.loads(r).items() if k != "meta"} for r in reports.values()]
        differing = sorted({k for f in figures for k in f if f[k] != figures[0].get(k)})
        same = "yes" if not differing else f"no, differing in {differing}"
        print(f"  same JSON but `meta`: {same}; inputs {len(ranks)} (ranks {ranks}); devices {devices}")


if __name__ == "__main__":
    main()
