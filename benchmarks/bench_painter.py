"""Does the painting process earn its keep, and would ``malloc_trim`` after loading? `traceinsight report` three ways.

Each variant runs ``traceinsight report FILE -o .. --json .. -q`` (jobs = the cores) in a fresh process,
with one piece of the command replaced before it starts (nothing in the package has a switch for this):

* ``as shipped``: the charts drawn in the painting process (`report.painter.Painter`);
* ``drawn here``: no painting process, the page drawn in the command's own process after the analyses;
* ``malloc_trim after loading``: as shipped, with `memory.release_free_memory` once `load_run` is done (as
  `load_run` did until this benchmark showed the peak RSS the same without it).

on a small trace (``hta/nccl_parser_config``, 0.75 MB ``.json.gz``), a 35 MB Kineto trace
(``kineto/resnet50_num_workers_0``) and the 300 MB replica `bench_scale` makes. Best of --repeat, the
variants taking turns so that a busy machine slows them alike; peak RSS is the largest process's
(``os.wait4``). Run from the repository root: ``python -m benchmarks.bench_painter [--repeat 3] [--mb 300]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_scale import json_megabytes, run_child
from benchmarks.replicate import DEFAULT_SOURCE, SHARED_TRACES, Replicator

PATCHES = {
    "as shipped": "",
    "drawn here": (
        "import contextlib, traceinsight.commands.report as r; r.Painter = lambda **_: contextlib.nullcontext()\n"
    ),
    "malloc_trim after loading": (
        "import traceinsight.workflow as p; from traceinsight.heap import release_free_memory; load = p.load_run\n"
        "def trimmed(*args, **kwargs):\n    profile = load(*args, **kwargs); release_free_memory(); return profile\n"
        "p.load_run = trimmed\n"
    ),
}
REPORT = "import sys\n{patch}from traceinsight.cli import main\nsys.exit(main())\n"
SMALL = DEFAULT_SOURCE
KINETO_35MB = SHARED_TRACES / "kineto" / "resnet50_num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"


def measure(path: Path, repeat: int) -> None:
    """Every variant on `path`, best of `repeat` (time, and the peak RSS of that run)."""
    runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name in PATCHES}
    with tempfile.TemporaryDirectory() as out:
        command = ["report", str(path), "-o", f"{out}/r.html", "--json", f"{out}/r.json", "-q"]
        for _ in range(repeat):
            for name, patch in PATCHES.items():
                runs[name].append(run_child([sys.executable, "-c", REPORT.format(patch=patch), *command]))
    print(f"{path.name}: {path.stat().st_size / 1e6:,.1f} MB on disk, {json_megabytes(path):,.1f} MB of JSON")
    shipped = min(runs["as shipped"])[0]
    for name, measured in runs.items():
        seconds, rss, _ = min(measured)
        spread = max(m[0] for m in measured)
        print(
            f"  {name:26s} {seconds:6.2f} s (worst {spread:5.2f} s)  {seconds / shipped:5.2f}x   peak RSS {rss:5.0f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mb", type=float, default=300.0, help="size of the replica (uncompressed MB); 0: none")
    parser.add_argument("--file", type=Path, help="a big trace made before (`replicate`), instead of a new replica")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    measure(SMALL, args.repeat)
    measure(KINETO_35MB, args.repeat)
    if args.file:
        measure(args.file, args.repeat)
    elif args.mb:
        replicator = Replicator(DEFAULT_SOURCE)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"big{args.mb:.0f}.pt.trace.json"
            replicator.write(path, replicator.copies_for(args.mb))
            measure(path, args.repeat)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
