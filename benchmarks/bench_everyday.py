"""Everyday latency (issue 15): `traceinsight report` on real 1-50 MB traces against a bare ``import pandas``.

The target: at most 2x ``python -c "import pandas"`` in the same venv (a report needs pandas whatever it
does). Every run is a fresh process (``traceinsight report FILE -o .. --json .. -q``, jobs = the cores).
Each figure is the best of --repeat, the runs taking turns (pandas, then every trace with every checkout,
--repeat times) so that a busy machine slows them alike. Besides the wall time, the CPU time of the run and
all its processes (user + system): on a shared machine it moves far less than the wall time does.
``--checkout DIR ...`` runs these checkouts' code (``git archive COMMIT | tar -x -C DIR``) in the same venv,
side by side: a before and after.

Run from the repository root: ``python -m benchmarks.bench_everyday [--repeat 3] [--checkout DIR ...]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_scale import json_megabytes
from benchmarks.replicate import SHARED_TRACES

# (format, trace under ../shared/traces): Kineto's own names, Kineto-written Chrome-trace JSON under other names
# (the corpus has no other Chrome-trace JSON), XSpace from TensorFlow, JAX on TPU and on AMD GPUs.
TRACES = [
    ("Kineto", "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"),
    ("Kineto", "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"),
    ("Kineto", "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
    ("Chrome JSON", "hta/nccl_parser_config/nccl_data.json.gz"),
    ("Chrome JSON", "hta/trace_diff/control/control.json.gz"),
    ("Chrome JSON", "tracelens/b200/eager_trace.json.gz"),
    ("XSpace", "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"),
    ("XSpace", "xprof/test_xplanes/tpu_inference_2.xplane.pb"),
    ("XSpace", "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb"),
]


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, its children's included) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--checkout", type=Path, nargs="+", default=[Path.cwd()], help="the code to run")
    args = parser.parse_args()
    traces = [(kind, SHARED_TRACES / name) for kind, name in TRACES]
    best: dict[tuple[str, Path], tuple[float, float]] = {}

    def measure(key: tuple[str, Path], argv: list[str], cwd: Path) -> None:
        wall, cpu = timed(argv, cwd)
        old = best.get(key, (float("inf"), float("inf")))
        best[key] = (min(old[0], wall), min(old[1], cpu))

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeat):
            measure(("pandas", Path()), [sys.executable, "-c", "import pandas"], Path.cwd())
            for _, path in traces:
                for checkout in args.checkout:
                    command = [sys.executable, "-m", "traceinsight", "report", str(path), "-q"]
                    command += ["-o", f"{out}/r.html", "--json", f"{out}/r.json"]
                    measure((str(path), checkout), command, checkout)
    pandas = best[("pandas", Path())]
    print(f"python -c 'import pandas': {pandas[0]:.2f} s ({pandas[1]:.2f} s CPU): the target is {2 * pandas[0]:.2f} s")
    print("checkouts: " + ", ".join(f"{i}: {c.resolve()}" for i, c in enumerate(args.checkout)))
    columns = " | ".join(f"`report` {i} (CPU) | x pandas" for i in range(len(args.checkout)))
    print(f"| format | trace | MB (JSON) | {columns} |\n|---|---|---|{'---|---|' * len(args.checkout)}")
    for kind, path in traces:
        size = f"{path.stat().st_size / 1e6:.1f}" + (f" ({json_megabytes(path):.0f})" if path.suffix == ".gz" else "")
        cells = []
        for checkout in args.checkout:
            wall, cpu = best[(str(path), checkout)]
            cells.append(f"{wall:.2f} s ({cpu:.2f} s) | {wall / pandas[0]:.2f}")
        print(f"| {kind} | `{path.relative_to(SHARED_TRACES)}` | {size} | {' | '.join(cells)} |")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
