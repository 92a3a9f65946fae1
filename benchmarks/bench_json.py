"""How fast the JSON readers are: MB/s of the streamed reader next to ``orjson.loads`` on the same bytes.

For every Kineto trace in ../shared/traces, and for a ~100 MB trace made in a
temporary directory by repeating one trace's events with shifted timestamps
(benchmarks/replicate.py). MB are of the uncompressed JSON. Columns:

* read: `readers.read_trace`, the one reader (gunzip, streamed decode, event table), best of --repeat;
* whole: its whole-document path for Chrome-trace JSON (`_read_document`: `load_trace_json` at once), then
  the same table;
* decode: `load_trace_json` alone on the uncompressed bytes (msgspec into structs);
* orjson: ``orjson.loads`` with the garbage collector off, i.e. only a parse into dicts,
  no table (orjson with the collector on is 1.2-1.6x slower still).

Run from the repository root: ``python -m benchmarks.bench_json [--repeat 3] [--big-mb 100]``
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks.replicate import Replicator
from tests.conftest import KINETO_TRACES, SHARED_TRACES
from traceinsight.readers import _read_document, read_trace
from traceinsight.readers.json_document import load_trace_json
from traceinsight.readers.json_files import read_json_bytes

TRACES = SHARED_TRACES
# The Kineto traces the tests use, minus the tb_plugin counter copy (it only repeats its input).
KINETO = tuple(t for t in KINETO_TRACES if "expected" not in t)
REPLICATED_FROM = "hta/nccl_parser_config/nccl_data.json.gz"


def best_of(repeat: int, run: Callable[[], Any], gc_off: bool = False) -> float:
    """Fastest wall time of `repeat` runs (result dropped outside the timing)."""
    best = float("inf")
    for _ in range(repeat):
        if gc_off:
            gc.disable()
        try:
            start = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
        del result
    return best


def measure(label: str, path: Path, repeat: int) -> None:
    raw = read_json_bytes(path)
    mb = len(raw) / 1e6
    rows = len(read_trace(path).events)
    streamed = best_of(repeat, lambda: read_trace(path))
    whole = best_of(repeat, lambda: _read_document(path, None))
    decode = best_of(repeat, lambda: load_trace_json(path, raw))
    parse = best_of(repeat, lambda: orjson.loads(raw), gc_off=True)
    speeds = " ".join(f"{mb / seconds:8.0f}" for seconds in (streamed, whole, decode, parse))
    print(f"{label[:44]:44s} {mb:7.1f} {rows:9,d} {streamed:7.3f} {speeds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big-mb", type=float, default=100.0, help="size of the replicated trace")
    args = parser.parse_args()
    print(
        f"{'trace':44s} {'MB':>7s} {'rows':>9s} {'read s':>7s} {'read':>8s} {'whole':>8s} {'decode':>8s} {'orjson':>8s}"
    )
    print(f"{'':44s} {'':>7s} {'':>9s} {'':>7s} {'MB/s':>8s} {'MB/s':>8s} {'MB/s':>8s} {'MB/s':>8s}")
    for rel in KINETO:
        if (TRACES / rel).exists():
            measure(rel, TRACES / rel, args.repeat)
    if (TRACES / REPLICATED_FROM).exists():
        with tempfile.TemporaryDirectory() as tmp:
            replicator = Replicator(TRACES / REPLICATED_FROM)
            big = Path(tmp) / "replicated.pt.trace.json"
            replicator.write(big, replicator.copies_for(args.big_mb))
            measure(f"replicated {Path(REPLICATED_FROM).name} (.json)", big, args.repeat)


if __name__ == "__main__":
    main()
