"""`traceinsight report` on a big Kineto trace: its time against a bare ``orjson.loads``, and its peak memory.

The trace is made by `replicate` (copies of a real trace laid end to end on the
clock, ids and step numbers renumbered; Kineto's layout), plain ``.json`` by
default, ``--gz`` for ``.json.gz``. Every measurement runs in a fresh Python
process; peak RSS is that process's ``ru_maxrss`` (``os.wait4``). Rows:

* ``orjson.loads``: the parse alone, garbage collector off, file already in memory (best of --repeat);
* ``report``: ``traceinsight report FILE -o .. --json .. -q`` as a user runs it (best of --repeat);
* stages: the same work in one process, timed step by step (imports, loading = `load_run`
  with ``jobs`` = the cores, `analyze`, findings + JSON, HTML) with the peak RSS reached by the end
  of each step (loading's worker processes are separate processes, their peak is shown apart).

Run from the repository root: ``python -m benchmarks.bench_scale [--mb 300 1000] [--repeat 3] [--gz]``.
Figures measured on the project's 2-core / 24 GB VM are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORJSON_PARSE = """
import gc, sys, time, orjson
raw = open(sys.argv[1], "rb").read()
if raw[:2] == b"\\x1f\\x8b":
    import gzip; raw = gzip.decompress(raw)
best = float("inf")
for _ in range(int(sys.argv[2])):
    gc.disable(); start = time.perf_counter(); doc = orjson.loads(raw); best = min(best, time.perf_counter() - start)
    del doc; gc.enable()
print(best)
"""


def run_child(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB, 10**6 bytes, like file sizes) and stdout of a child process."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if child.returncode:
        raise RuntimeError(f"{argv} failed ({child.returncode}): {text}")
    return seconds, usage.ru_maxrss * 1024 / 1e6, text


def stages(path: Path) -> None:
    """Time each step of `report` in this process (run by the benchmark in a child), as the command runs them:
    the page drawn by a painting process that imports matplotlib while this one reads and analyses."""
    start = last = time.perf_counter()

    def mark(label: str) -> None:
        nonlocal last
        now = time.perf_counter()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
        print(f"    {label:22s} {now - last:7.2f} s   peak RSS {peak:6.0f} MB")
        last = now

    from traceinsight.analysis import analyze
    from traceinsight.assemble import report_of
    from traceinsight.discover import discover
    from traceinsight.load import load_run
    from traceinsight.parallel import default_jobs
    from traceinsight.render.html import render_html
    from traceinsight.render.json import dumps

    mark("imports")
    profile = load_run(discover(path), path, jobs=default_jobs())
    rows = len(profile.events)
    mark(f"load ({rows:,} rows)")
    analysis = analyze(profile)
    del profile
    mark("analyze")
    report = report_of(analysis)
    dumps(report)
    mark("findings + JSON")
    render_html(report, analysis.without_events())
    mark("HTML")
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e6
    total = time.perf_counter() - start
    print(f"    {'total':22s} {total:7.2f} s   (the largest other process peaked at {workers:,.0f} MB)")


def json_megabytes(path: Path) -> float:
    """MB of JSON text in the file (decompressed, for .gz)."""
    if not path.name.endswith(".gz"):
        return path.stat().st_size / 1e6
    total = 0
    with gzip.open(path) as stream:
        while block := stream.read(1 << 24):
            total += len(block)
    return total / 1e6


def measure(path: Path, repeat: int) -> None:
    size = json_megabytes(path)
    parse, parse_rss, text = run_child([sys.executable, "-c", ORJSON_PARSE, str(path), str(repeat)])
    parse = float(text.split()[-1])
    runs = []
    with tempfile.TemporaryDirectory() as out:
        command = ["-m", "traceinsight", "report", str(path), "-o", f"{out}/r.html", "--json", f"{out}/r.json", "-q"]
        for _ in range(repeat):
            runs.append(run_child([sys.executable, *command]))
    seconds, rss, _ = min(runs)
    print(f"{path.name}: {path.stat().st_size / 1e6:,.0f} MB on disk, {size:,.0f} MB of JSON")
    print(f"  orjson.loads (gc off)   {parse:7.2f} s   (its process peaked at {parse_rss:,.0f} MB)")
    print(f"  traceinsight report     {seconds:7.2f} s   = {seconds / parse:.2f} x orjson   peak RSS {rss:,.0f} MB")
    print(f"                          {'':7s}     {'':14s}   = {rss / size:.2f} x the JSON size")
    print("  stages (one process):")
    print(run_child([sys.executable, "-m", "benchmarks.bench_scale", "--stages", str(path)])[2], end="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[300.0], help="trace sizes (uncompressed MB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gz", action="store_true", help="write .json.gz instead of .json")
    parser.add_argument("--source", type=Path, help="the real trace to replicate (default: replicate.DEFAULT_SOURCE)")
    parser.add_argument("--file", type=Path, nargs="+", help="measure these traces as they are (no replica)")
    parser.add_argument("--stages", type=Path, help=argparse.SUPPRESS)  # the child of `measure`
    args = parser.parse_args()
    if args.stages:
        stages(args.stages)
        return
    for path in args.file or []:
        measure(path, args.repeat)
    if args.file:
        return
    from benchmarks.replicate import DEFAULT_SOURCE, Replicator  # here: the --stages child times its imports

    replicator = Replicator(args.source or DEFAULT_SOURCE)
    with tempfile.TemporaryDirectory() as tmp:
        for mb in args.mb:
            path = Path(tmp) / f"big{mb:.0f}.pt.trace.json{'.gz' if args.gz else ''}"
            replicator.write(path, replicator.copies_for(mb))
            measure(path, args.repeat)
            path.unlink()


if __name__ == "__main__":
    main()
