"""Profile a few training steps with torch.profiler, in the layout `traceinsight report` reads.

Replace `build_model_and_loader` with your own; everything else is what CI needs.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def build_model_and_loader() -> tuple[torch.nn.Module, torch.utils.data.DataLoader]:
    data = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=2, pin_memory=torch.cuda.is_available())
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    return model, loader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--logdir", default="runs/profile")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, loader = build_model_and_loader()
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    # Skip 1, warm up 2, record 5 steps (ProfilerStep#N markers are added by prof.step()).
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=2, active=5, repeat=1),
        on_trace_ready=tensorboard_trace_handler(args.logdir, use_gzip=True),
    ) as prof:
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
            if step >= 8:
                break


if __name__ == "__main__":
    main()
