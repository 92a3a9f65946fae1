"""Hostile inputs built to a size, for the tests of issue 36 (`tests/test_hostile_sizes.py`, reduced sizes) and the
benchmark that runs them at full size (`benchmarks/bench_hostile.py`): one home for how each is made.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def kernel_event(index: int, name: str = "k") -> bytes:
    return json.dumps(
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": 1000 + 2 * index,
            "dur": 1,
            "args": {"device": 0, "stream": 7},
        }  # fmt: skip
    ).encode()


def blank_bomb(path: Path, blanks: int) -> Path:
    """A ``.gz`` trace whose four events have `blanks` bytes of blanks between the first and the rest."""
    with gzip.open(path, "wb", compresslevel=6) as file:
        file.write(b'{"schemaVersion": 1, "traceEvents": [' + kernel_event(0) + b",")
        for _ in range(blanks >> 20):
            file.write(b" " * (1 << 20))
        file.write(b",".join(kernel_event(i) for i in range(1, 4)) + b"]}")
    return path


def empty_planes(path: Path, planes: int) -> Path:
    path.write_bytes(b"\x0a\x00" * planes)  # XSpace field 1 (planes), each of length 0
    return path


def tiny_events(path: Path, count: int) -> Path:
    """`count` kernel events of a few fields each: all their memory is the per-event cost."""
    with open(path, "wb") as file:
        file.write(b'{"schemaVersion": 1, "traceEvents": [')
        file.write(b",".join(kernel_event(i, f"k{i % 50}") for i in range(count)))
        file.write(b"]}")
    return path


# The child's own peak (VmHWM, reset by exec), and any worker's: ru_maxrss from wait4 keeps the parent's peak at
# the fork, which here is pytest's, after the in-process reads.
PEAK_AT_EXIT = (
    "import atexit, os, runpy, sys\n"
    "def peak():\n"
    "    hwm = next(line for line in open('/proc/self/status') if line.startswith('VmHWM'))\n"
    "    print('PEAK', int(hwm.split()[1]) * 1024, file=sys.__stderr__, flush=True)\n"
    "atexit.register(peak)\n"
    "exit_at_once = os._exit\n"  # a read refused leaves without exit handlers (`parallel.exit_now`)
    "os._exit = lambda code: (peak(), exit_at_once(code))\n"
    "sys.argv = ['traceinsight', *sys.argv[1:]]\n"
    "runpy.run_module('traceinsight', run_name='__main__')\n"
)
