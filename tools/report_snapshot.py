"""Write the JSON report (without `meta`) of every run under ../shared/traces and sample_traces, one file each.

A refactor that must not change behaviour is checked by two snapshots, before and after:

    python -m tools.report_snapshot /tmp/before      # on the old commit
    python -m tools.report_snapshot /tmp/after       # on the new one
    diff -r /tmp/before /tmp/after                    # nothing

Each run is reported as `traceinsight report BASE --run NAME --json` would report it (`workflow.analyze_path`),
with one process per file (`--jobs 1`), so the snapshot does not depend on the machine's cores.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from traceinsight.discover import find_runs
from traceinsight.render.json import dumps
from traceinsight.result import to_document
from traceinsight.workflow import analyze_path

REPO = Path(__file__).resolve().parents[1]
BASES = (REPO.parent / "shared" / "traces", REPO / "sample_traces")


def snapshot(out: Path, bases: tuple[Path, ...] = BASES) -> int:
    """Write one `<run name>.json` per run under `bases` into `out`; return how many."""
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for base in bases:
        if not base.is_dir():
            print(f"report_snapshot: {base} not found, skipped", file=sys.stderr)
            continue
        for run in find_runs(base):
            document = to_document(analyze_path(base, run.name).report)
            document.pop("meta")
            name = re.sub(r"[^A-Za-z0-9_.-]+", "__", run.name)
            (out / f"{name}.json").write_text(dumps(document) + "\n")
            written += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the reports into")
    count = snapshot(parser.parse_args().out)
    print(f"report_snapshot: {count} reports")


if __name__ == "__main__":
    main()
