"""Make big or many-rank Kineto traces out of a real one, for the benchmarks.

A copy of the source's events is laid after the previous one on the clock (shifted
by the source's span plus 1 ms), with fresh correlation, External id and flow ids
and renumbered ``ProfilerStep#N``, so the result is what a longer run of the same
job would have written: same event mix, same top-level keys, Kineto's layout (one
event per line). The file is written as it is made, copy by copy, so making a
gigabyte trace needs about the source's memory, not the target's.

    python -m benchmarks.replicate TARGET [--source SOURCE] [--mb 300] [--rank 3]
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from traceinsight.readers.json_files import read_json_bytes

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT_SOURCE = SHARED_TRACES / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = ("correlation", "External id", "external id")


class Replicator:
    """One source trace, ready to be written `copies` times over with shifted times and ids."""

    def __init__(self, source: Path) -> None:
        self.doc: dict[str, Any] = orjson.loads(read_json_bytes(source))
        self.events: list[dict[str, Any]] = self.doc["traceEvents"]
        timed = [e for e in self.events if isinstance(e.get("ts"), int | float) and e.get("ph") != "M"]
        start = min(e["ts"] for e in timed)
        self.shift_us = max(e["ts"] + (e.get("dur") or 0) for e in timed) - start + 1000
        ids = [e["args"][k] for e in self.events for k in _ID_ARGS if isinstance(e.get("args", {}).get(k), int)]
        ids += [e["id"] for e in self.events if isinstance(e.get("id"), int)]
        self.id_shift = max(ids, default=0) + 1
        steps = [int(m[1]) for e in self.events if (m := _STEP.match(str(e.get("name", ""))))]
        self.step_shift = max(steps) - min(steps) + 1 if steps else 0
        self.one_copy_bytes = sum(len(orjson.dumps(e)) + 6 for e in self.events)

    def copies_for(self, megabytes: float) -> int:
        return max(1, round(megabytes * 1e6 / self.one_copy_bytes))

    def _copy(self, k: int) -> Iterator[bytes]:
        """The events of copy `k` (copy 0 is the source itself), serialised."""
        if k == 0:
            yield from map(orjson.dumps, self.events)
            return
        for e in self.events:
            out = dict(e)
            if e.get("ph") != "M" and isinstance(e.get("ts"), int | float):
                out["ts"] = e["ts"] + k * self.shift_us
            if isinstance(e.get("id"), int):
                out["id"] = e["id"] + k * self.id_shift
            args = e.get("args")
            if isinstance(args, dict) and any(isinstance(args.get(key), int) for key in _ID_ARGS):
                out["args"] = {
                    key: value + k * self.id_shift if key in _ID_ARGS and isinstance(value, int) else value
                    for key, value in args.items()
                }
            step = _STEP.match(str(e.get("name", "")))
            if step:
                out["name"] = f"ProfilerStep#{int(step[1]) + k * self.step_shift}"
            yield orjson.dumps(out)

    def write(self, target: Path, copies: int, rank: int | None = None) -> Path:
        """Write `copies` copies to `target` (gzip when it ends in .gz); `rank` sets distributedInfo.rank."""
        top = dict(self.doc)
        if rank is not None:
            top["distributedInfo"] = {**top.get("distributedInfo", {}), "rank": rank}
        keys = list(top)
        split = keys.index("traceEvents")
        opener = gzip.open if target.name.endswith(".gz") else open
        with opener(target, "wb") as out:
            out.write(b"{\n")
            for key in keys[:split]:
                out.write(b"  " + orjson.dumps(key) + b": " + orjson.dumps(top[key]) + b",\n")
            out.write(b'  "traceEvents": [\n')
            self._write_events(out, copies)
            out.write(b"\n  ]")
            for key in keys[split + 1 :]:
                out.write(b",\n  " + orjson.dumps(key) + b": " + orjson.dumps(top[key]))
            out.write(b"\n}\n")
        return target

    def _write_events(self, out: BinaryIO | gzip.GzipFile, copies: int) -> None:
        for k in range(copies):
            if k:
                out.write(b",\n")
            out.write(b",\n".join(b"    " + line for line in self._copy(k)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--mb", type=float, default=300.0, help="target size of the uncompressed JSON")
    parser.add_argument("--rank", type=int, help="set distributedInfo.rank")
    args = parser.parse_args()
    rep = Replicator(args.source)
    rep.write(args.target, rep.copies_for(args.mb), args.rank)
    print(f"{args.target}: {args.target.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
