"""Regenerate everything under sample_traces/ (synthetic GPU traces, real TF and PyTorch profiles).

python -m tools.make_samples                  # all
python -m tools.make_samples synthetic        # only the synthetic GPU traces (fast, byte-reproducible)
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

from tools.synth import KINETO_FILE, SCENARIOS, write_kineto, write_xspace

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"


def make_synthetic() -> None:
    """`synthetic_gpu/<scenario>/` (Kineto) and `synthetic_gpu_xspace/<scenario>/` (XSpace logdir),
    each with the scenario's `ground_truth.json`."""
    for fmt in ("synthetic_gpu", "synthetic_gpu_xspace"):
        shutil.rmtree(SAMPLES / fmt, ignore_errors=True)
    for name, build in SCENARIOS.items():
        timeline = build()
        truth = json.dumps(timeline.ground_truth(), indent=1) + "\n"
        for path in (
            write_kineto(timeline, SAMPLES / "synthetic_gpu" / name / KINETO_FILE),
            write_xspace(timeline, SAMPLES / "synthetic_gpu_xspace" / name),
        ):
            root = SAMPLES / path.relative_to(SAMPLES).parts[0] / name
            (root / "ground_truth.json").write_text(truth)
            print(f"{path.relative_to(REPO)}: {path.stat().st_size:,} bytes")


def main(argv: list[str]) -> None:
    # TensorFlow and torch are imported only when their part runs (seconds each).
    parts = {
        "synthetic": make_synthetic,
        "tf": lambda: importlib.import_module("tools.make_tf_samples").main(),
        "torch": lambda: importlib.import_module("tools.make_torch_sample").main(),
    }
    for name in argv or list(parts):
        parts[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
