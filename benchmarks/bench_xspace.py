"""How fast `read_xspace` turns real XSpace files into the event table (target: >= 1 M events/s).

    python -m benchmarks.bench_xspace [--repeat 5] [--scale 40]

For each real ``.xplane.pb`` in ../shared/traces: events, file size, best-of-N wall
time of `read_xspace` (file read included) and events/s. The real files are small
(4-27 k events), so fixed costs per file weigh in; ``--scale K`` also times each file
with every line repeated K times (same content, more events) for the per-event rate.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from traceinsight.readers.xplane_schema import XSpace
from traceinsight.readers.xspace import read_xspace

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
REAL_FILES = (
    "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "xprof/test_xplanes/tpu_inference_2.xplane.pb",
    "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb",
    "tf_cpu/a_input_bound/plugins/profile/*/vm.xplane.pb",
    "tf_cpu/b_input_tuned/plugins/profile/*/vm.xplane.pb",
)


def scaled(data: bytes, times: int) -> bytes:
    """The same XSpace with every line repeated `times` times (copies get fresh line ids)."""
    space = XSpace()
    space.ParseFromString(data)
    for plane in space.planes:
        originals = list(plane.lines)
        for copy in range(1, times):
            for line in originals:
                added = plane.lines.add()
                added.CopyFrom(line)
                added.id = line.id + copy * 1_000_003
    return space.SerializeToString()


def best_time(path: Path, data: bytes | None, repeat: int) -> tuple[float, int]:
    """Best wall time of `read_xspace` over `repeat` runs, and the rows it made."""
    best, rows = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        rows = len(read_xspace(path, data).events)
        best = min(best, time.perf_counter() - start)
    return best, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs per file; the best one counts")
    parser.add_argument("--scale", type=int, default=40, help="also time each file with lines repeated K times")
    args = parser.parse_args()
    paths = [p for pattern in REAL_FILES for p in sorted(SHARED_TRACES.glob(pattern))]
    if not paths:
        raise SystemExit(f"no XSpace files under {SHARED_TRACES}")
    print(f"{'file':<58} {'events':>9} {'MB':>6} {'ms':>8} {'M events/s':>10}")
    for path in paths:
        label = str(path.relative_to(SHARED_TRACES))
        label = label if len(label) <= 58 else "..." + label[-55:]
        runs: list[tuple[str, bytes | None, int]] = [(label, None, path.stat().st_size)]
        if args.scale > 1:
            big = scaled(path.read_bytes(), args.scale)
            runs.append((f"  x{args.scale} lines", big, len(big)))
        for name, data, size in runs:
            seconds, rows = best_time(path, data, args.repeat)
            print(f"{name:<58} {rows:>9,} {size / 1e6:>6.1f} {seconds * 1e3:>8.1f} {rows / seconds / 1e6:>10.2f}")


if __name__ == "__main__":
    main()
