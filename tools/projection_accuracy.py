"""Projection accuracy: for each real before/after pair, the step the report projects for the fix against the
step the fixed run measured.

Why: a projection is a claim, so it is checked on real re-runs. Pairs are the real traces in
`../shared/traces` (when present) and our own captures in `sample_traces/pairs/` (`tools/capture_pairs.py`)
and, once a GPU machine has made them, `sample_traces/gpu_pairs/` (`tools/capture_gpu_pairs.py`). The measured
step of the fixed run is its traced mean step (`steps.mean_ns`), the same measure the projection starts from;
for a GPU pair, its `run_info.json` mean step, whose last step waits for the device. Prints a Markdown table
for docs/methodology.md.

    python -m tools.projection_accuracy
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tools.capture_gpu_pairs import GPU_PAIRS, GPU_PAIRS_DIR
from traceinsight.analysis import Analysis, analyze
from traceinsight.discover import discover
from traceinsight.findings import find_bottlenecks
from traceinsight.load import load_run

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
PAIRS = REPO / "sample_traces" / "pairs"


@dataclass(frozen=True)
class Pair:
    name: str
    before: Path
    after: Path
    fix: str  # the bottleneck id the change addresses
    cached: bool = False  # the change also caches the input: compare the "input fully hidden" step
    synced: bool = False  # a GPU pair: measured = run_info's mean step, the window up to the device's end


def pairs() -> list[Pair]:
    """Every pair whose both sides are on disk."""
    found = [
        Pair(
            "ResNet-50 V100, DataLoader num_workers 0 -> 4",
            SHARED / "kineto/resnet50_num_workers_0",
            SHARED / "kineto/resnet50_num_workers_4",
            "input_bound",
        ),
        Pair(
            "TF CPU, sequential py_function map -> parallel map + cache + prefetch",
            SHARED / "tf_cpu/a_input_bound",
            SHARED / "tf_cpu/b_input_tuned",
            "input_bound",
            cached=True,
        ),
    ]
    for name, fix in (
        ("tf_data_parallel", "input_bound"),
        ("torch_dataloader_workers", "input_bound"),
        ("tf_prefetch_slow_map", "input_bound"),
        ("tf_interleave", "input_bound"),
        ("torch_dataloader_2workers_bound", "input_bound"),
        ("tf_eager_vs_function", "host_bound"),
        ("tf_eager_vs_function_wide", "host_bound"),
    ):
        found.append(Pair(f"ours: {name}", PAIRS / name / "before", PAIRS / name / "after", fix))
    found.append(  # held back: the same kind of change as tf_cpu a -> b, on our own job
        Pair(
            "ours: tf_data_parallel before -> tf_tuned (parallel map + cache + prefetch)",
            PAIRS / "tf_data_parallel" / "before",
            PAIRS / "tf_tuned" / "after",
            "input_bound",
            cached=True,
        )
    )
    for name, gpu_pair in GPU_PAIRS.items():
        sides = GPU_PAIRS_DIR / name
        found.append(Pair(f"ours, GPU: {name}", sides / "before", sides / "after", gpu_pair.fix, synced=True))
    return [p for p in found if p.before.exists() and p.after.exists()]


def _run_info_mean_ns(side: Path) -> float:
    return float(json.loads((side / "run_info.json").read_text())["mean_step_ms"]) * 1e6


def _analyze(path: Path) -> Analysis:
    return analyze(load_run(discover(path), path))


def _change(before: float, after: float) -> str:
    return f"{before / 1e6:.1f} -> {after / 1e6:.1f} ms ({before / after:.2f}x)"


def _error(projected: float | None, measured: float) -> str:
    return "-" if projected is None else f"{(projected / measured - 1) * 100:+.0f} %"


def row(pair: Pair) -> str:
    """One table row: top bottleneck, the step model's and the critical path's projected step after, the measured
    step after, and each projection's error."""
    analysis = _analyze(pair.before)
    after_mean = _run_info_mean_ns(pair.after) if pair.synced else _analyze(pair.after).steps.mean_ns or 0
    found = find_bottlenecks(analysis)
    top = found[0].id if found else "-"
    mine = next((b for b in found if b.id == pair.fix), None)
    if mine is None or not after_mean:
        return f"| {pair.name} | {top} | - | - | {after_mean / 1e6:.1f} ms | - | - |"
    p = mine.projection
    before = p.step_ns_before
    if pair.cached:  # the input fully hidden, on the step model and on the path
        model, path = mine.evidence["step_ns_after_hidden"], mine.evidence.get("path_step_ns_after_hidden")
    else:
        model, path = p.step_ns_after, p.path_step_ns_after
    which = " (input fully hidden)" if pair.cached else ""
    path_text = "-" if path is None else _change(before, path)
    return (
        f"| {pair.name} | {top} | {_change(before, model)}{which} | {path_text} "
        f"| {after_mean / 1e6:.1f} ms ({before / after_mean:.2f}x) | {_error(model, after_mean)} "
        f"| {_error(path, after_mean)} |"
    )


def main() -> None:
    print(
        "| pair | top bottleneck (before) | step model: step after the fix | critical path: step after the fix "
        "| measured step after | step model error | critical path error |"
    )
    print("|---|---|---|---|---|---|---|")
    for pair in pairs():
        print(row(pair))


if __name__ == "__main__":
    main()
