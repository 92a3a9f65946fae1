"""Real before/after GPU profiles (PyTorch on CUDA), one change each: the projections a CPU cannot check.

Why: a projection is a claim, checked on real re-runs (`tools.projection_accuracy`). The `.item()`-every-step
pair needs a GPU (on the CPU there is no device to wait for), and the input, batch and precision rules read
kernels, copies and idle gaps that only a GPU run has. This is the one prepared script to run when a GPU machine
is lent: every pair in one process (CUDA starts once), a minute or two in all.

    python -m tools.capture_gpu_pairs --out $OUT/gpu_pairs            # on the GPU machine
    python -m tools.capture_gpu_pairs --out /tmp/gp --device cpu      # the same code on the CPU (a dry run)

Each `<out>/<pair>/<side>/` holds the profiler's own output (`tensorboard_trace_handler`, CUDA activity traced)
and `run_info.json` with the wall time of every profiled step. A GPU runs behind its host, so the last profiled
step ends with `torch.cuda.synchronize()`: the steps' wall times then add up to the window's real length
(`mean_step_ms`, the throughput a projection is compared with), where the host's own step markers may end
before the GPU's work does. Copy the result to `sample_traces/gpu_pairs/`; `projection_accuracy` reads it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.capture_pairs import TORCH_ACTIVE, TORCH_SKIP, profile_torch, side_dir, train_step, write_run_info
from tools.make_tf_samples import SAMPLES

GPU_PAIRS_DIR = SAMPLES / "gpu_pairs"
FEATURES = 1024
Batches = Callable[[], Iterator[tuple[Any, Any]]]
Job = tuple[Batches, Callable[[Any, Any], None], dict[str, Any]]  # batches, the step, run_info details


@dataclass(frozen=True)
class GpuPair:
    fix: str  # the bottleneck id the change addresses
    before: str
    after: str
    job: Callable[[bool, Any], Job]  # (fixed, device) -> the side's job


def _mlp(device: Any, width: int, depth: int = 3, features: int = FEATURES) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for i in range(depth):
        layers += [torch.nn.Linear(features if i == 0 else width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _in_memory(device: Any, batch: int) -> Batches:
    """Batches of seeded data already on the device, endlessly."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch * 8, FEATURES, generator=gen).to(device)
    y = torch.randint(0, 10, (batch * 8,), generator=gen).to(device)

    def batches() -> Iterator[tuple[Any, Any]]:
        while True:
            for i in range(0, len(x), batch):
                yield x[i : i + batch], y[i : i + batch]

    return batches


def item_sync(fixed: bool, device: Any) -> Job:
    """Loss and accuracy read with `.item()` every step (the host waits for the GPU, which then waits for the
    host's next launches) -> kept on the GPU, read after the loop."""
    import torch

    model, optimizer = _mlp(device, 2048)
    kept: list[Any] = []

    def step(x: Any, y: Any) -> None:
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        accuracy = (logits.argmax(1) == y).float().mean()
        kept.append((loss.detach(), accuracy) if fixed else (loss.item(), accuracy.item()))

    info = {"settings": {"item_every_step": not fixed}, "batch_size": 256, "model": f"MLP {FEATURES}-2048x3-10, SGD"}
    return _in_memory(device, 256), step, info


def dataloader_workers(fixed: bool, device: Any) -> Job:
    """A DataLoader of 2 ms items, batch 64, `num_workers=0`, pageable copies -> 4 workers, pinned memory,
    non-blocking copies."""
    from torch.utils.data import DataLoader

    from tools.make_torch_sample import SlowDataset

    model, optimizer = _mlp(device, 1024, features=64)  # SlowDataset's items have 64 features
    workers = 4 if fixed else 0
    loader = DataLoader(
        SlowDataset(), batch_size=64, num_workers=workers, persistent_workers=fixed, pin_memory=fixed, drop_last=True
    )

    def batches() -> Iterator[tuple[Any, Any]]:
        while True:
            for x, y in loader:
                yield x.to(device, non_blocking=fixed), y.to(device, non_blocking=fixed)

    info = {
        "settings": {"per_item_sleep_s": 0.002, "num_workers": workers, "pin_memory": fixed, "non_blocking": fixed},
        "batch_size": 64,
        "model": "MLP 64-1024x3-10, SGD",
    }
    return batches, train_step(model, optimizer), info


def small_batch(fixed: bool, device: Any) -> Job:
    """Batch 32 -> 128: the 4x batch `small_batch` projects."""
    batch = 128 if fixed else 32
    model, optimizer = _mlp(device, 1024)
    info = {"settings": {"batch_size": batch}, "batch_size": batch, "model": f"MLP {FEATURES}-1024x3-10, SGD"}
    return _in_memory(device, batch), train_step(model, optimizer), info


def amp(fixed: bool, device: Any) -> Job:
    """A matmul-heavy step in fp32 -> the same under `autocast(bfloat16)` (`fp32_compute`'s advice from Ampere)."""
    import torch

    model, optimizer = _mlp(device, 4096, depth=4)
    train = train_step(model, optimizer)

    def step(x: Any, y: Any) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=fixed):
            train(x, y)

    info = {"settings": {"autocast_bf16": fixed}, "batch_size": 1024, "model": f"MLP {FEATURES}-4096x4-10, SGD"}
    return _in_memory(device, 1024), step, info


GPU_PAIRS: dict[str, GpuPair] = {
    "item_sync": GpuPair(
        "d2h_sync",
        "loss and accuracy read with `.item()` every step",
        "kept on the GPU, read after the loop",
        item_sync,
    ),
    "dataloader_workers": GpuPair(
        "input_bound",
        "DataLoader, 2 ms per item, batch 64, `num_workers=0`, pageable copies",
        "`num_workers=4`, `pin_memory=True`, `non_blocking=True`",
        dataloader_workers,
    ),
    "small_batch": GpuPair("small_batch", "batch 32", "batch 128 (the 4x `small_batch` projects)", small_batch),
    "amp": GpuPair("fp32_compute", "fp32 MLP 4096 wide, batch 1024", "the same under `autocast(bfloat16)`", amp),
}


def capture(name: str, device: Any, root: Path) -> None:
    """Both sides of one pair into `root/<name>/`."""
    import torch

    pair = GPU_PAIRS[name]
    cuda = device.type == "cuda"
    for side, fixed in (("before", False), ("after", True)):
        out = side_dir(name, side, root)
        batches, step, info = pair.job(fixed, device)
        trace, wall_ms, nums = profile_torch(
            out, batches, step, cuda=cuda, finish=torch.cuda.synchronize if cuda else None
        )
        info = {
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            **info,
            "schedule": {"skip_first": TORCH_SKIP, "wait": 1, "warmup": 1, "active": TORCH_ACTIVE},
            "step_marker": "ProfilerStep#N",
            "step_nums": nums,
        }
        write_run_info(out, trace, wall_ms, info, getattr(pair, side))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="*", help=f"default: every pair ({', '.join(GPU_PAIRS)})")
    parser.add_argument("--out", type=Path, default=GPU_PAIRS_DIR)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    unknown = [name for name in args.pairs if name not in GPU_PAIRS]
    if unknown:
        parser.error(f"unknown pair(s) {unknown}; choose from {list(GPU_PAIRS)}")
    import torch

    for name in args.pairs or list(GPU_PAIRS):
        capture(name, torch.device(args.device), args.out)


if __name__ == "__main__":
    main()
