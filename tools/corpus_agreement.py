"""How far the report agrees with the corpus' independent labels (`corpus/labels.json`).

    python -m tools.corpus_agreement [--data corpus/data] [--python PYTHON] [--pythonpath DIR]

    python -m tools.corpus_agreement [--shared ../shared/traces] [--hta-mirror DIR]

For each trace: the report's top bottleneck (unexplained idle aside) agrees when it is one of the label's
`acceptable_top` (an empty list: agrees when none is named), and a claim in `must_not` that the report makes is a
contradiction.
Critical-path agreement, printed beside: the report's `critical_path.dominant` is one of the label's
`critical_path_acceptable` and none of its `critical_path_must_not`, over the corpus traces and those of
`corpus/labels_shared_paths.json` (shared traces, and HTA's critical-path test files read from its git mirror);
a trace whose report has no `critical_path` or whose acceptable list is empty is skipped.
`--python` / `--pythonpath` run another checkout (the numbers before a change). Prints one line a trace and the
totals. The labels were made from raw events by someone who never ran the tool.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
# Idle time no cause explains: a residual the report states, not a bottleneck it names.
RESIDUAL = {"idle_other"}
SHARED = CORPUS.parents[1] / "shared" / "traces"
HTA_MIRROR = Path("/work/.mirror/facebookresearch+HolisticTraceAnalysis/repo")
HTA_KEY = re.compile(r"^hta-repo:(?P<path>.+)@(?P<commit>[0-9a-f]{40})$")


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


def _path_agrees(report: dict, label: dict) -> bool | None:
    """Whether the report's dominant critical-path group is acceptable and not forbidden; None when not judged."""
    dominant = (report.get("critical_path") or {}).get("dominant") if "critical_path" in report else None
    if "critical_path" not in report or not label.get("critical_path_acceptable"):
        return None
    return dominant in label["critical_path_acceptable"] and dominant not in label.get("critical_path_must_not", [])


def _hta_file(key: str, mirror: Path, tmp: Path) -> Path | None:
    """HTA's test trace named by `hta-repo:<path>@<commit>`, written out of its git mirror (None without it)."""
    match = HTA_KEY.match(key)
    if not match or not mirror.exists():
        return None
    done = subprocess.run(
        ["git", "--git-dir", str(mirror), "show", f"{match['commit']}:{match['path']}"], capture_output=True
    )
    if done.returncode != 0:
        return None
    target = tmp / match["path"].replace("/", "__")
    target.write_bytes(done.stdout)
    return target


def path_agreement(
    reports: dict[str, dict], python: str, pythonpath: str | None, shared: Path, mirror: Path
) -> tuple[int, int]:
    """(judged, agree) over the critical-path labels: corpus reports already made, then the shared/HTA traces."""
    judged = agree = 0
    labels = json.loads((CORPUS / "labels.json").read_text())
    for trace_id, report in sorted(reports.items()):
        ok = _path_agrees(report, labels[trace_id])
        if ok is not None:
            judged += 1
            agree += ok
            dominant = report["critical_path"].get("dominant")
            print(f"{trace_id:<45} critical path={dominant or '-':<12} {'agrees' if ok else 'differs'}")
    shared_labels = json.loads((CORPUS / "labels_shared_paths.json").read_text())["traces"]
    with tempfile.TemporaryDirectory() as tmp:
        for key, label in sorted(shared_labels.items()):
            trace = _hta_file(key, mirror, Path(tmp)) if key.startswith("hta-repo:") else shared / key
            report = _report(trace, python, pythonpath) if trace and trace.exists() else None
            if report is None:
                print(f"{key[-60:]:<60} not read")
                continue
            ok = _path_agrees(report, label)
            if ok is None:
                continue
            judged += 1
            agree += ok
            dominant = report["critical_path"].get("dominant")
            print(f"{key[-60:]:<60} critical path={dominant or '-':<12} {'agrees' if ok else 'differs'}")
    return judged, agree


def agreement(
    data: Path, python: str, pythonpath: str | None, reports: dict[str, dict] | None = None
) -> tuple[int, int, int, int]:
    """Read/agree/contradiction counts over corpus/labels.json; each report read is kept in `reports`."""
    labels = json.loads((CORPUS / "labels.json").read_text())
    agree = contradictions = read = 0
    for trace_id, label in sorted(labels.items()):
        trace = next(data.glob(f"{trace_id}.*"), None)
        report = _report(trace, python, pythonpath) if trace else None
        if report is None:
            print(f"{trace_id:<45} not read")
            continue
        read += 1
        if reports is not None:
            reports[trace_id] = report
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
    parser.add_argument("--shared", type=Path, default=SHARED, help="folder of the shared traces (skipped if absent)")
    parser.add_argument("--hta-mirror", type=Path, default=HTA_MIRROR, help="HolisticTraceAnalysis bare git mirror")
    args = parser.parse_args()
    reports: dict[str, dict] = {}
    read, agree, contradictions, total = agreement(args.data, args.python, args.pythonpath, reports)
    judged, path_agree = path_agreement(reports, args.python, args.pythonpath, args.shared, args.hta_mirror)
    print(
        f"read {read} of {total}; top bottleneck agrees on {agree}; reports with a wrong claim: {contradictions}; "
        f"critical path agrees on {path_agree} of {judged} judged"
    )


if __name__ == "__main__":
    main()
