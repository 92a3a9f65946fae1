"""A real PyTorch CPU profile of a DataLoader-bound training loop.

Why: the Kineto reader and the input-wait rule need a real `*.pt.trace.json.gz` as
`tensorboard_trace_handler` writes it, with `ProfilerStep#N` markers and the DataLoader's
`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` waits. The dataset sleeps
2 ms per item and `num_workers=0`, so each step spends ~32 ms loading a batch of 16 and
about a millisecond training a small MLP. record_shapes/with_stack stay off to keep it small.

    python -m tools.make_torch_sample          # writes sample_traces/torch_cpu_dataloader/
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "sample_traces" / "torch_cpu_dataloader"
SLEEP_S = 0.002
BATCH = 16
WAIT, WARMUP, ACTIVE = 1, 1, 5


class SlowDataset(Dataset[tuple[torch.Tensor, int]]):
    """Random features whose every item costs `SLEEP_S` (a stand-in for decoding)."""

    def __len__(self) -> int:
        return 1024

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(SLEEP_S)
        return torch.randn(64, generator=torch.Generator().manual_seed(index)), index % 10


def profile_dataloader(out: Path) -> Path:
    """Profile WAIT+WARMUP+ACTIVE steps into `out`; return the trace file (also writes run_info.json)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=BATCH, num_workers=0)
    out.mkdir(parents=True, exist_ok=True)
    wall_ms = []
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
        on_trace_ready=tensorboard_trace_handler(str(out), worker_name="sample", use_gzip=True),
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
    ) as prof:
        t0 = time.perf_counter()
        for step, (x, y) in enumerate(loader):
            if step == WAIT + WARMUP + ACTIVE:
                break
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            wall_ms.append(round((time.perf_counter() - t0) * 1000, 3))  # batch fetch + training
            prof.step()
            t0 = time.perf_counter()
    (trace,) = out.glob("*.pt.trace.json.gz")
    info = {
        "torch": torch.__version__,
        "dataset": f"SlowDataset: {SLEEP_S * 1000:g} ms sleep per item, batch {BATCH}, num_workers=0",
        "model": "MLP 64-256-256-10, SGD",
        "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE},
        "profiled_steps": list(range(WAIT + WARMUP, WAIT + WARMUP + ACTIVE)),
        "profiled_step_wall_ms": wall_ms[WAIT + WARMUP :],
        "trace_file": trace.name,
        "trace_bytes": trace.stat().st_size,
    }
    (out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return trace


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    trace = profile_dataloader(OUT)
    print(f"{trace.relative_to(REPO)}: {trace.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
