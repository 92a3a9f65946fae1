"""Hostile inputs at full size (issue 36, cases 2, 3, 4, 6): each read by ``report`` in a child process under a
``--max-memory``, with its time, peak RSS and exit code; every peak must stay within the limit given (plus the
interpreter, about 130 MB). The inputs are written to a temporary folder and removed.

    python -m benchmarks.bench_hostile [--skip-big]   # --skip-big: leave out the 2.3 GB one-line JSON
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.hostile_inputs import PEAK_AT_EXIT, kernel_event, tiny_events

GZIP_PART = 50_000_000  # a gzip member of this many blanks or letters, repeated: a bomb written in seconds


def _member(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9)


def long_name(path: Path, chars: int) -> None:
    """One kernel named ``gemm_`` repeated to `chars` characters among ordinary events (case 2)."""
    events = [kernel_event(i) for i in range(100)] + [kernel_event(100, "gemm_" * (chars // 5))]
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + b",".join(events) + b"]}"))


def blank_bomb(path: Path, size: int) -> None:
    """`size` bytes of blanks inside ``traceEvents``, between two events (case 3)."""
    head = _member(b'{"schemaVersion": 1, "traceEvents": [' + kernel_event(0) + b",")
    blanks = _member(b" " * GZIP_PART)
    path.write_bytes(head + blanks * (size // GZIP_PART) + _member(kernel_event(1) + b"]}"))


def string_bomb(path: Path, size: int, as_name: bool) -> None:
    """A string of `size` bytes after the events (a top-level key), or as a kernel's name (case 3)."""
    letters = _member(b"gemm_" * (GZIP_PART // 5))
    if as_name:
        head = b'{"traceEvents": [' + kernel_event(0) + b',{"ph":"X","cat":"kernel","name":"'
        tail = b'","pid":0,"tid":7,"ts":5,"dur":1}]}'
    else:
        head, tail = b'{"traceEvents": [' + kernel_event(0) + b'], "note": "', b'"}'
    path.write_bytes(_member(head) + letters * (size // GZIP_PART) + _member(tail))


def empty_planes(path: Path, planes: int) -> None:
    path.write_bytes(b"\x0a\x00" * planes)  # case 4


CASES: list[tuple[str, str, str, Callable[[Path], None]]] = [
    ("regex: one 1 MB kernel name", "x.pt.trace.json.gz", "2GB", lambda p: long_name(p, 1_000_000)),
    ("8 GB of blanks in traceEvents (.gz)", "x.pt.trace.json.gz", "1GB", lambda p: blank_bomb(p, 8_000_000_000)),
    ("1 GB string after the events", "x.pt.trace.json.gz", "1GB", lambda p: string_bomb(p, 1_000_000_000, False)),
    ("1 GB string as a kernel name", "x.pt.trace.json.gz", "1GB", lambda p: string_bomb(p, 1_000_000_000, True)),
    ("5M empty XSpace planes (10 MB)", "x.xplane.pb", "500MB", lambda p: empty_planes(p, 5_000_000)),
    ("10M tiny events (one line, 1.3 GB)", "x.pt.trace.json", "2.2GB", lambda p: tiny_events(p, 10_000_000)),
]


def run(folder: Path, max_memory: str) -> tuple[float, float, int, str]:
    """Seconds, peak RSS (MB) of the process and its workers, exit code and last line of ``report``."""
    argv = [sys.executable, "-c", PEAK_AT_EXIT, "report", str(folder), "-o", str(folder.parent / "r.html")]
    start = time.perf_counter()
    done = subprocess.run([*argv, "--max-memory", max_memory], capture_output=True, check=False)
    seconds = time.perf_counter() - start
    lines = done.stdout.decode().splitlines() + done.stderr.decode().splitlines()
    peak = max((int(line.split()[1]) for line in lines if line.startswith("PEAK ")), default=0)
    said = [line for line in lines if line.strip() and not line.startswith("PEAK ")]
    return seconds, peak / 1e6, done.returncode, said[-1][:110] if said else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-big", action="store_true", help="leave out the 10M tiny events (1.3 GB on disk)")
    args = parser.parse_args()
    print(f"{'case':38s} {'limit':>6s} {'time':>8s} {'peak RSS':>9s} exit  says")
    for label, name, limit, make in CASES:
        if args.skip_big and label.startswith("10M"):
            continue
        with tempfile.TemporaryDirectory(prefix="bench_hostile_") as tmp:
            folder = Path(tmp) / "run"
            folder.mkdir()
            make(folder / name)
            seconds, peak, code, said = run(folder, limit)
        print(f"{label:38s} {limit:>6s} {seconds:7.1f}s {peak:6.0f} MB {code:4d}  {said}", flush=True)


if __name__ == "__main__":
    main()
