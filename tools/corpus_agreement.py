"""How far the report agrees with the corpus' independent labels (`corpus/labels.json`).

    python -m tools.corpus_agreement [--data corpus/data] [--python PYTHON] [--pythonpath DIR]

For each trace: the report's top bottleneck (unexplained idle aside) agrees when it is one of the label's
`acceptable_top` (an empty list: agrees when none is named), and a claim in `must_not` that the report makes is a
contradiction.
`--python` / `--pythonpath` run another checkout (the numbers before a change). Prints one line a trace and the
totals. The labels were made from raw events by someone who never ran the tool.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
# Idle time no cause explains: a residual the report states, not a bottleneck it names.
RESIDUAL = {"idle_other"}


def _report(trace: Path, python: str, pythonpath: str | None) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / trace.stem
        folder.mkdir()
        (folder / trace.name).symlink_to(trace.resolve())
        out = Path(tmp) / "r.json"
        env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
        command = [python, "-m", "traceinsight", "report", str(folder), "-o", str(Path(tmp) / "r.html")]
        # Run from the temporary folder: `python -m` puts the working directory first on the path, which would
        # shadow the checkout named by --pythonpath.
        done = subprocess.run([*command, "--json", str(out)], capture_output=True, env=env, timeout=600, cwd=tmp)
        return json.loads(out.read_text()) if done.returncode == 0 and out.exists() else None


def _claims(report: dict) -> set[str]:
    """The claims `must_not` can name, made by this report."""
    ids = {b["id"] for b in report["bottlenecks"]}
    tips = " ".join(r for b in report["bottlenecks"] for r in b["recommendations"])
    capture = report.get("capture") or {}
    workload = capture.get("workload") or capture.get("kind")
    claims = set(ids)
    claims.add(f"workload={workload}")
    warnings = report["warnings"]
    if not report["devices"] and not warnings.get("device_events_cut") and not warnings.get("device_not_recorded"):
        claims.add("cpu_only")
    if "bucket_cap_mb" in tips or "no_sync" in tips:
        claims.add("ddp_advice")
    if "torch." in tips:
        claims.add("torch_advice")
    return claims


def agreement(data: Path, python: str, pythonpath: str | None) -> tuple[int, int, int, int]:
    labels = json.loads((CORPUS / "labels.json").read_text())
    agree = contradictions = read = 0
    for trace_id, label in sorted(labels.items()):
        trace = next(data.glob(f"{trace_id}.*"), None)
        report = _report(trace, python, pythonpath) if trace else None
        if report is None:
            print(f"{trace_id:<45} not read")
            continue
        read += 1
        leading = [b["id"] for b in report["bottlenecks"] if b["id"] not in RESIDUAL]
        top = leading[0] if leading else None
        ok = top in label["acceptable_top"] if label["acceptable_top"] else top is None
        wrong = sorted(set(label["must_not"]) & _claims(report))
        agree += ok
        contradictions += bool(wrong)
        print(f"{trace_id:<45} top={top or '-':<24} {'agrees' if ok else 'differs':<8} {', '.join(wrong)}")
    return read, agree, contradictions, len(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=CORPUS / "data")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", default=None)
    args = parser.parse_args()
    read, agree, contradictions, total = agreement(args.data, args.python, args.pythonpath)
    print(f"read {read} of {total}; top bottleneck agrees on {agree}; reports with a wrong claim: {contradictions}")


if __name__ == "__main__":
    main()
