"""Do the analyses scale linearly? Their time on a trace and on the same trace 10x longer.

Two traces are made by `replicate` (--copies and 10x --copies copies of a real
trace laid end to end; `replicate_xspace` for a ``--source`` that is an XSpace), read
(not timed), and each analysis of `analyze`, the findings + JSON report, and the
HTML page are timed on both (best of --repeat).
Linear means the 10x trace takes about 10x the time; a ratio well above 10 is
a super-linear step, one well below means fixed costs dominate the small trace.

Run from the repository root: ``python -m benchmarks.bench_analysis [--copies 3] [--repeat 3] [--source FILE]``.
Figures measured on the project's 2-core VM are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.replicate import DEFAULT_SOURCE, Replicator
from benchmarks.replicate_xspace import XSpaceReplicator
from traceinsight import analysis
from traceinsight.analysis.compute import compute_efficiency
from traceinsight.analysis.devices import device_usage
from traceinsight.analysis.host_ops import host_op_rows
from traceinsight.analysis.steps import find_steps
from traceinsight.assemble import report_of
from traceinsight.events import Profile, merge_reads
from traceinsight.readers import read_trace
from traceinsight.render.html import render_html


def best_of(repeat: int, run: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def timings(profile: Profile, repeat: int) -> dict[str, float]:
    """Seconds of each step of the report after loading."""
    events = profile.events
    usages = device_usage(events)
    steps = find_steps(events)
    result = analysis.analyze(profile)
    report = report_of(result)
    steps_of = {
        "device_usage": lambda: device_usage(events),
        "find_steps": lambda: find_steps(events),
        "idle_gaps": lambda: analysis.idle_gaps(events, usages),
        "kernel_stats": lambda: analysis.kernel_stats(events, usages, analysis.DEFAULT_SMALL_KERNEL_NS),
        "copy_stats": lambda: analysis.copy_stats(events, usages),
        "input_pipeline": lambda: analysis.input_pipeline(events, steps),
        "step_model": lambda: analysis.step_model(events, usages, result.gaps, steps),
        "host_ops": lambda: analysis.host_ops(events, steps.input_id),
        "host_op_rows": lambda: host_op_rows(events, steps.input_id),
        "compute_efficiency": lambda: compute_efficiency(profile, usages, steps),
        "analyze (all)": lambda: analysis.analyze(profile),
        "findings + JSON": lambda: report_of(result),
        "HTML": lambda: render_html(report, result),
    }
    return {name: best_of(repeat, run) for name, run in steps_of.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3, help="copies in the small trace (the big one has 10x)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    xspace = args.source.name.endswith(".xplane.pb")
    replicator = XSpaceReplicator(args.source) if xspace else Replicator(args.source)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (args.copies, 10 * args.copies):
            path = replicator.write(Path(tmp) / f"x{copies}{'.xplane.pb' if xspace else '.pt.trace.json'}", copies)
            profile = merge_reads([read_trace(path)], name=path.name)
            results.append((len(profile.events), timings(profile, args.repeat)))
    (small_n, small), (big_n, big) = results
    print(f"{'':18s} {small_n:>10,d} {big_n:>10,d}   events")
    for name in small:
        print(f"{name:18s} {small[name]:9.3f}s {big[name]:9.3f}s   x{big[name] / small[name]:5.1f}")


if __name__ == "__main__":
    main()
