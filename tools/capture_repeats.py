"""Real captures of one process in one folder, as users make them: what `discover.group_captures` must split.

Why: `tensorboard_trace_handler` writes a new file into the same folder at every cycle of a repeating
`torch.profiler.schedule`, and a script profiled twice adds a second file beside the first. Those files are not
the ranks of one run: each is a capture of its own, and the newest is the one to report on.

    python -m tools.capture_repeats   # PyTorch (CPU is enough): sample_traces/repeating_schedule/

It profiles a small MLP under `schedule(wait=1, warmup=1, active=2, repeat=3)`: three files from one process, one
per cycle, whose windows do not overlap. (`sample_traces/two_captures/` holds two runs of
`examples/profile_torch.py --logdir sample_traces/two_captures`, a couple of minutes apart.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

OUT = Path(__file__).resolve().parents[1] / "sample_traces" / "repeating_schedule"
CYCLES = 3


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=2, repeat=CYCLES),
        on_trace_ready=tensorboard_trace_handler(str(OUT), use_gzip=True),
    ) as prof:
        for _ in range(4 * CYCLES + 1):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    print(f"{len(list(OUT.glob('*.json.gz')))} captures in {OUT}")


if __name__ == "__main__":
    main()
