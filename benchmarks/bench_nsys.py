"""`traceinsight report` on Nsight Systems SQLite exports: the real one, and the same run repeated to a size.

Makes a larger export from `../shared/traces/nsys/perlmutter-cloverleaf-cuda.sqlite` by repeating its activity
rows (kernels, copies, runtime calls, syncs) --copies times, each copy shifted past the previous one's span with
fresh correlation ids, then times the whole command (best of --repeat, a fresh process each) and its peak RSS.

    python -m benchmarks.bench_nsys [--copies 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

from benchmarks.bench_scale import run_child

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "nsys" / "perlmutter-cloverleaf-cuda.sqlite"
ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
)


def replicate(source: Path, target: Path, copies: int) -> int:
    """`source` with its activity rows `copies` times over (shifted in time and correlation id); the rows."""
    shutil.copyfile(source, target)
    with closing(sqlite3.connect(target)) as db:
        span_start, span_end = db.execute("SELECT MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        span = span_end - span_start + 1_000_000
        most = max(db.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0 for t in ACTIVITY) + 1
        for table in ACTIVITY:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            moved = {"start": f"start + {span} * k", "end": f"end + {span} * k"}
            if "correlationId" in columns:
                moved["correlationId"] = f"correlationId + {most} * k"
            picked = ", ".join(moved.get(c, c) for c in columns)
            db.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) "
                f"WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < {copies - 1}) "
                f"SELECT {picked} FROM {table}, n"
            )
        db.execute(f"UPDATE ANALYSIS_DETAILS SET stopTime = stopTime + {span} * {copies - 1}")
        db.commit()
        return sum(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ACTIVITY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not SOURCE.exists():
        sys.exit(f"{SOURCE} not found (../shared/traces)")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.sqlite"
        rows = replicate(SOURCE, big, args.copies)
        for path, label in ((SOURCE, "the real export"), (big, f"{args.copies} copies")):
            command = [sys.executable, "-m", "traceinsight", "report", str(path), "-o", f"{tmp}/r.html", "-q"]
            runs = [run_child([*command, "--json", f"{tmp}/r.json"]) for _ in range(args.repeat)]
            seconds, rss, _ = min(runs)
            size = path.stat().st_size / 1e6
            extra = f", {rows:,} activity rows" if path == big else ""
            print(f"{label}: {size:,.1f} MB{extra}: {seconds:.2f} s, peak RSS {rss:,.0f} MB")


if __name__ == "__main__":
    main()
