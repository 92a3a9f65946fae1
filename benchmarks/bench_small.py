"""Small inputs and the processes of a report (issue 38), each a whole process under ``/usr/bin/time -v``.

Every figure is the median of --repeat runs; the runs of one case take turns (A, B, A, B, ...), so that a busy
moment of the machine weighs on each side alike. Beside the wall time, the CPU time (user + system, the
process's children included, as ``time`` gives it): on a shared machine it moves far less than the wall time.
Python writes and reuses compiled modules here (``PYTHONDONTWRITEBYTECODE`` is dropped), as an installed
package has them, and each command runs once unmeasured first.

The cases and their targets (``--case``, all by default):

* ``hta``: ``traceinsight report`` on HTA's two-rank ``tests/data/trace_filter`` folder (124 + 120 kB of GPU
  traces, read out of its git mirror at `HTA_COMMIT`) against HTA 0.5.0 loading the folder and running eight
  analyses (`HTA_EIGHT`; its venv from `hta_critical_path.hta_python`): at most 1x.
* ``single``: the report of every trace in ../shared/traces under 5 MB against
  ``python -c "import pandas, matplotlib"``: at most 1.5x.
* ``ranks-small``: 8 copies of ``hta/nccl_parser_config`` (0.7 MB .gz each) as ranks 0-7 (`replicate`): the
  default ``--jobs`` against ``--jobs 1``: not slower.
* ``ranks-big``: 8 ranks of 30 MB of JSON each: the default ``--jobs`` at least 1.3x faster than ``--jobs 1``.
* ``xspace``: the 114 MB XSpace (`replicate_xspace`, 60 copies of ``xprof/GPU-multi-worker``) against XProf's
  ``overview_page`` conversion, its whole process (`bench_xprof`): at most 0.65x.

``--checkout DIR ...`` runs these trees' code (``PYTHONPATH=DIR``, from a folder of their own) side by side with
the same venv, a before and an after (``git worktree add`` or ``git archive COMMIT | tar -x -C DIR``); the
first is the one the targets are checked on.

Run from the repository root: ``python -m benchmarks.bench_small [--repeat 5] [--case hta single ...]
[--checkout DIR ...] [--hta-python PY] [--xprof-python PY] [--xspace FILE]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_xprof import DEFAULT_XPROF_VENV, XPROF_CONVERT, xprof_python
from benchmarks.hta_critical_path import DEFAULT_HTA_VENV, HTA_COMMIT, HTA_MIRROR, hta_python
from benchmarks.replicate import DEFAULT_SOURCE, SHARED_TRACES, Replicator
from benchmarks.replicate_xspace import DEFAULT_SOURCE as XSPACE_SOURCE
from benchmarks.replicate_xspace import XSpaceReplicator

CASES = ("hta", "single", "ranks-small", "ranks-big", "xspace")
SMALL_BYTES = 5_000_000
TRACE_SUFFIXES = (".json", ".json.gz", ".xplane.pb", ".sqlite")
NOT_TRACES = ("run_info.json", "execution_details.json")  # JSON beside the traces, not traces
NOT_TRACE_FOLDERS = ("xprof_reference", "perf_csvs")  # peers' figures
HTA_FOLDER = "tests/data/trace_filter"
# HTA's load of a folder (every rank, in its own pool of processes) and eight of its analyses, as a user of it
# would run them on a training job's ranks.
HTA_EIGHT = """
import sys, tempfile
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
with tempfile.TemporaryDirectory() as out:
    for run in (
        lambda: analysis.get_temporal_breakdown(visualize=False),
        lambda: analysis.get_idle_time_breakdown(visualize=False),
        lambda: analysis.get_gpu_kernel_breakdown(visualize=False),
        lambda: analysis.get_comm_comp_overlap(visualize=False),
        lambda: analysis.get_cuda_kernel_launch_stats(visualize=False),
        lambda: analysis.get_queue_length_summary(ranks=None),
        lambda: analysis.get_memory_bw_summary(ranks=None),
        lambda: analysis.get_frequent_cuda_kernel_sequences(operator_name="aten::", output_dir=out),
    ):
        run()
"""
_TIME_FIELDS = {
    "wall": re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)"),
    "user": re.compile(r"User time \(seconds\): ([\d.]+)"),
    "sys": re.compile(r"System time \(seconds\): ([\d.]+)"),
    "rss": re.compile(r"Maximum resident set size \(kbytes\): (\d+)"),
}


@dataclass(frozen=True)
class Timing:
    """One run: wall and CPU seconds (user + system, children included) and the peak RSS of its largest process."""

    wall: float
    cpu: float
    rss_mb: float


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> Timing:
    """`argv` under ``/usr/bin/time -v``; its output thrown away, a failure raised."""
    done = subprocess.run(
        ["/usr/bin/time", "-v", *argv], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    found = {name: pattern.search(done.stderr) for name, pattern in _TIME_FIELDS.items()}
    if not all(found.values()):
        raise RuntimeError(f"no /usr/bin/time -v figures in:\n{done.stderr[-2000:]}")
    hours, minutes, seconds = found["wall"].groups()  # type: ignore[union-attr]
    wall = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    cpu = float(found["user"].group(1)) + float(found["sys"].group(1))  # type: ignore[union-attr]
    return Timing(wall, cpu, int(found["rss"].group(1)) / 1000)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Command:
    """One side of a comparison: a label, its command line and where it runs."""

    label: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    before: Callable[[], None] | None = None  # run before each measurement (a fresh copy of an input)


def compare(commands: list[Command], repeat: int) -> dict[str, tuple[Timing, list[Timing]]]:
    """Each command run once unmeasured, then `repeat` times in turn; the medians (wall, CPU, RSS) and the runs."""
    runs: dict[str, list[Timing]] = {c.label: [] for c in commands}
    for round_ in range(repeat + 1):
        for command in commands:
            if command.before is not None:
                command.before()
            timing = timed(command.argv, command.env, command.cwd)
            if round_:
                runs[command.label].append(timing)
    return {
        label: (
            Timing(
                statistics.median(t.wall for t in timed_runs),
                statistics.median(t.cpu for t in timed_runs),
                statistics.median(t.rss_mb for t in timed_runs),
            ),
            timed_runs,
        )
        for label, timed_runs in runs.items()
    }


def show(title: str, medians: dict[str, tuple[Timing, list[Timing]]], base: str, target: str) -> None:
    """The medians of a comparison, each against `base` (wall and CPU ratios), and what the target is."""
    print(f"\n{title} (target: {target})")
    ref = medians[base][0]
    for label, (median, runs) in medians.items():
        walls = ", ".join(f"{t.wall:.2f}" for t in runs)
        print(
            f"  {label:34s} wall {median.wall:6.2f} s = {median.wall / ref.wall:5.2f}x   "
            f"CPU {median.cpu:6.2f} s = {median.cpu / ref.cpu:5.2f}x   RSS {median.rss_mb:6.0f} MB   ({walls})"
        )


def small_traces() -> list[Path]:
    """Every trace file of ../shared/traces under `SMALL_BYTES`, by name (not the peers' figures beside them)."""
    found = []
    for path in sorted(SHARED_TRACES.rglob("*")):
        if not path.is_file() or path.stat().st_size >= SMALL_BYTES or path.name in NOT_TRACES:
            continue
        if path.name.endswith(TRACE_SUFFIXES) and not set(NOT_TRACE_FOLDERS) & set(path.parts):
            found.append(path)
    return found


class Bench:
    """The checkouts to run, their environment and a scratch folder."""

    def __init__(self, checkouts: list[Path], work: Path) -> None:
        self.checkouts = [c.resolve() for c in checkouts]
        self.work = work
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        self.cwd = work / "cwd"  # not a checkout: PYTHONPATH alone says which code runs
        self.cwd.mkdir()

    def report(self, path: Path, *extra: str, label: str = "") -> list[Command]:
        """``traceinsight report PATH`` with each checkout (labelled by its index, and `label`)."""
        commands = []
        for i, checkout in enumerate(self.checkouts):
            out = self.work / f"out{i}"
            argv = [sys.executable, "-m", "traceinsight", "report", str(path), "-q", *extra]
            argv += ["-o", f"{out}.html", "--json", f"{out}.json"]
            name = f"report {label}".strip() + (f" [{i}]" if len(self.checkouts) > 1 else "")
            commands.append(Command(name, argv, {**self.env, "PYTHONPATH": str(checkout)}, self.cwd))
        return commands


def hta_case(bench: Bench, repeat: int, python: Path) -> None:
    folder = bench.work / "trace_filter"
    folder.mkdir()
    listing = subprocess.run(
        ["git", f"--git-dir={HTA_MIRROR}", "ls-tree", "--name-only", f"{HTA_COMMIT}:{HTA_FOLDER}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in listing:
        blob = subprocess.run(
            ["git", f"--git-dir={HTA_MIRROR}", "show", f"{HTA_COMMIT}:{HTA_FOLDER}/{name}"],
            check=True,
            capture_output=True,
        ).stdout
        (folder / name).write_bytes(blob)
    size = sum(f.stat().st_size for f in folder.iterdir()) / 1e3
    hta = Command("HTA 0.5.0 load + 8 analyses", [str(python), "-c", HTA_EIGHT, str(folder)], bench.env, bench.cwd)
    medians = compare([hta, *bench.report(folder)], repeat)
    show(f"HTA's {HTA_FOLDER}: {len(listing)} ranks, {size:,.0f} kB", medians, hta.label, "report <= 1x HTA")


def single_case(bench: Bench, repeat: int) -> None:
    imports = Command(
        "import pandas, matplotlib", [sys.executable, "-c", "import pandas, matplotlib"], bench.env, bench.cwd
    )
    for path in small_traces():
        medians = compare([imports, *bench.report(path)], repeat)
        name = path.relative_to(SHARED_TRACES)
        show(f"{name}: {path.stat().st_size / 1e6:.2f} MB", medians, imports.label, "report <= 1.5x the imports")


def ranks_case(bench: Bench, repeat: int, megabytes: float | None, target: str) -> None:
    """8 ranks of one copy of the default source (.gz), or of `megabytes` of JSON each: default jobs vs 1."""
    replicator = Replicator(DEFAULT_SOURCE)
    run = bench.work / f"ranks{megabytes or 0:g}"
    run.mkdir()
    copies = 1 if megabytes is None else replicator.copies_for(megabytes)
    for rank in range(8):
        replicator.write(run / f"rank{rank}.pt.trace.json{'.gz' if megabytes is None else ''}", copies, rank=rank)
    size = sum(f.stat().st_size for f in run.iterdir()) / 1e6
    one_job = bench.report(run, "--jobs", "1", label="--jobs 1")
    medians = compare([*bench.report(run, label="default --jobs"), *one_job], repeat)
    show(f"8 ranks, {size:,.1f} MB on disk, load {os.getloadavg()[0]:.1f}", medians, one_job[0].label, target)


def xspace_case(bench: Bench, repeat: int, python: Path, xspace: Path | None) -> None:
    if xspace is None:
        xspace = bench.work / "big.xplane.pb"
        XSpaceReplicator(XSPACE_SOURCE).write(xspace, 60)
    folder = bench.work / "xprof"

    def fresh_copy() -> None:  # XProf writes its cache files next to its input
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        shutil.copyfile(xspace, folder / xspace.name)

    xprof = Command(
        "xprof overview_page (process)",
        [str(python), "-c", XPROF_CONVERT, str(folder / xspace.name)],
        bench.env,
        bench.cwd,
        fresh_copy,
    )
    medians = compare([xprof, *bench.report(xspace)], repeat)
    show(f"{xspace.name}: {xspace.stat().st_size / 1e6:,.0f} MB", medians, xprof.label, "report <= 0.65x XProf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--case", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--checkout", type=Path, nargs="+", default=[Path.cwd()], help="the code to run")
    parser.add_argument("--hta-python", type=Path, help="a Python with HTA 0.5.0 (default: made here)")
    parser.add_argument("--xprof-python", type=Path, help="a Python with xprof (default: made here)")
    parser.add_argument("--xspace", type=Path, help="the big XSpace, if made already (default: made here)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("checkouts: " + ", ".join(f"[{i}] {c.resolve()}" for i, c in enumerate(args.checkout)))
    with tempfile.TemporaryDirectory() as work:
        bench = Bench(args.checkout, Path(work))
        if "hta" in args.case:
            hta_case(bench, args.repeat, args.hta_python or hta_python(DEFAULT_HTA_VENV))
        if "single" in args.case:
            single_case(bench, args.repeat)
        if "ranks-small" in args.case:
            ranks_case(bench, args.repeat, None, "default --jobs <= 1x --jobs 1")
        if "ranks-big" in args.case:
            ranks_case(bench, args.repeat, 30.0, "--jobs 1 / default --jobs >= 1.3")
        if "xspace" in args.case:
            xspace_case(bench, args.repeat, args.xprof_python or xprof_python(DEFAULT_XPROF_VENV), args.xspace)


if __name__ == "__main__":
    main()
