"""`traceinsight report` on a big XSpace, side by side with XProf's own C++ converter in the same run.

The XSpace is made by `replicate_xspace` (every line's events of the 8xV100 BERT file
copied end to end on the clock; ``--copies 60``: 114 MB, 1.39 M events). Each
measurement runs in a fresh Python process; peak RSS is that process's ``ru_maxrss``
(``os.wait4``). Rows, best of --repeat:

* ``xprof overview_page``: ``xprof.convert.raw_to_tool_data.xspace_to_tool_data([file],
  "overview_page", {"use_saved_result": False})``, the conversion alone (timed inside the
  process) and the whole process. XProf runs from its own virtual environment
  (``--xprof-python``; by default one made here, in the system's temporary folder, with
  ``pip install --no-deps xprof six protobuf numpy``: no TensorFlow needed). It writes cache
  files next to its input, so it reads a copy in a folder of its own.
* ``traceinsight report``: ``traceinsight report FILE -o .. --json .. -q`` as a user runs it.

``--mb`` sizes (a gigabyte, say) are measured with the report alone: XProf took 11x the
file in memory on the 114 MB one, more than a 24 GB machine shared with others should lend.

Run from the repository root: ``python -m benchmarks.bench_xprof [--copies 60] [--repeat 3]
[--mb 1000] [--file FILE]``. Figures measured on the project's 2-core VM are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_scale import run_child
from benchmarks.replicate_xspace import DEFAULT_SOURCE, XSpaceReplicator

XPROF_VERSION = "2.24.2"
DEFAULT_XPROF_VENV = Path(tempfile.gettempdir()) / f"traceinsight-bench-xprof-{XPROF_VERSION}"
XPROF_CONVERT = """
import os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # no INFO lines from the C++ side
from xprof.convert import raw_to_tool_data
start = time.perf_counter()
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "overview_page", {"use_saved_result": False})
assert data, "xprof produced no overview page"
print(time.perf_counter() - start)
"""


def xprof_python(venv: Path) -> Path:
    """The Python of a virtual environment with xprof, made at `venv` if it is not there."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        packages = [f"xprof=={XPROF_VERSION}", "six", "protobuf", "numpy"]
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", *packages], check=True)
    return python


def measure(path: Path, python: Path | None, repeat: int) -> None:
    """`traceinsight report`, and XProf's conversion unless `python` is None, best of `repeat`, each in a
    fresh process, and their ratios."""
    size = path.stat().st_size / 1e6
    xprof_runs, report_runs = [], []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(repeat):  # alternated, so a busy moment of the machine weighs on both alike
            if python is not None:
                folder = Path(tempfile.mkdtemp(dir=work))  # a fresh copy: no cache files from the last run
                copy = folder / path.name
                shutil.copyfile(path, copy)
                seconds, rss, text = run_child([str(python), "-c", XPROF_CONVERT, str(copy)])
                xprof_runs.append((float(text.split()[-1]), seconds, rss))
                shutil.rmtree(folder)
            out = f"{work}/report"
            command = ["-m", "traceinsight", "report", str(path), "-o", f"{out}.html", "--json", f"{out}.json", "-q"]
            report_runs.append(run_child([sys.executable, *command]))
    seconds, rss, _ = min(report_runs)
    print(f"{path.name}: {size:,.1f} MB")
    print(f"  traceinsight report       {seconds:7.2f} s   peak RSS {rss:,.0f} MB = {rss / size:.2f} x the file")
    if not xprof_runs:
        return
    convert, process, xprof_rss = min(xprof_runs)
    print(
        f"  xprof overview_page       {convert:7.2f} s   ({process:.2f} s its process)   peak RSS {xprof_rss:,.0f} MB"
    )
    print(
        f"  report / xprof            {seconds / convert:7.2f} x the conversion, {seconds / process:.2f} x its process"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=60, help="copies of the source's events (default 60: 114 MB)")
    parser.add_argument(
        "--mb", type=float, nargs="*", default=[], help="also XSpaces of about these sizes (the report alone)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real XSpace to replicate")
    parser.add_argument("--file", type=Path, nargs="+", help="measure these XSpaces as they are (no replica)")
    parser.add_argument("--xprof-python", type=Path, help="a Python with xprof installed (default: made here)")
    args = parser.parse_args()
    python = args.xprof_python or xprof_python(DEFAULT_XPROF_VENV)
    for path in args.file or []:
        measure(path, python, args.repeat)
    if args.file:
        return
    replicator = XSpaceReplicator(args.source)
    with tempfile.TemporaryDirectory() as tmp:
        for copies, side_by_side in [(args.copies, True), *((replicator.copies_for(mb), False) for mb in args.mb)]:
            path = replicator.write(Path(tmp) / f"x{copies}.xplane.pb", copies)
            measure(path, python if side_by_side else None, args.repeat)
            path.unlink()


if __name__ == "__main__":
    main()
