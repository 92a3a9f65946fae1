"""Legacy `torch.autograd.profiler` Chrome traces (the array form, pids written as names) in sample_traces/.

* ``cpu_mlp/trace.json``: real. A small MLP trained for one warm-up step, then 2 steps (each in
  ``record_function("ProfilerStep#N")``) under ``torch.autograd.profiler_legacy.profile()``, written by its
  ``export_chrome_trace``, which still writes the legacy form: ``[{"name": ..., "ph": "X", ..., "pid": "CPU
  functions", "args": {}}, ...]``, no cat, no metadata events.
* ``use_cuda_mlp/trace.json``: the form torch 1.5-1.7 wrote with ``profile(use_cuda=True)``, which no torch of
  today writes (torch 1.8 moved CUDA to Kineto; ``profiler_legacy`` writes only the CPU ops and their flow
  starts) and a CPU build cannot time. Written byte for byte as torch 1.7's ``EventList.export_chrome_trace``
  did (`write_v17_trace`, its format strings; pytorch/pytorch#33961 shows such a file), from the CPU ops of the
  same real run; each leaf op's CUDA time (the interval its CUDA events timed) is made up by `_cuda_interval`:
  it starts 5 µs after the op does, or when the op before it on the device ends, and lasts a quarter of the
  op's CPU time plus 3 µs. Its GPU figures are therefore synthetic, the layout real.

`python -m tools.make_legacy_autograd` rewrites both (with /work/torchvenv's torch, or any torch with
``torch.autograd.profiler_legacy``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "sample_traces" / "legacy_autograd"
STEPS = 2  # profiled, after one unprofiled warm-up step
# `_cuda_interval`'s made-up CUDA time of a leaf op (see the module docstring).
_LAUNCH_US = 5.0
_CUDA_SHARE = 0.25
_CUDA_FLOOR_US = 3.0


@dataclass(frozen=True)
class LegacyOp:
    """One op as torch 1.7's FunctionEvent gives it to export_chrome_trace: its CPU interval, thread, and the
    CUDA intervals (``kernels``: (name, device, start, duration) in µs) its CUDA events timed."""

    name: str
    start_us: float
    dur_us: float
    thread: int
    kernels: tuple[tuple[str, int, float, float], ...] = ()


def write_v17_trace(ops: list[LegacyOp], path: Path) -> None:
    """Write `ops` as torch 1.7's ``EventList.export_chrome_trace`` did (torch/autograd/profiler.py, v1.5-v1.7):
    per op an "X" event of pid "CPU functions", and per CUDA interval an "s"/"f" flow pair (cat ``cpu_to_cuda``)
    and an "X" event of pid "CUDA functions" whose tid is the device; each event followed by ", ", the last
    ", " cut and ``]`` written. torch's own %-format strings, kept as they were."""
    with open(path, "w") as f:
        next_id = 0
        f.write("[")
        for op in ops:
            f.write(
                '{"name": "%s", "ph": "X", "ts": %s, "dur": %s, "tid": %s, "pid": "CPU functions", "args": {}}, '  # noqa: UP031
                % (op.name, op.start_us, op.dur_us, op.thread)
            )
            for name, device, start, dur in op.kernels:
                f.write(
                    '{"name": "%s", "ph": "s", "ts": %s, "tid": %s, "pid": "CPU functions", "id": %s, '  # noqa: UP031
                    '"cat": "cpu_to_cuda", "args": {}}, ' % (op.name, op.start_us, op.thread, next_id)
                )
                f.write(
                    '{"name": "%s", "ph": "f", "ts": %s, "tid": %s, "pid": "CUDA functions", "id": %s, '  # noqa: UP031
                    '"cat": "cpu_to_cuda", "args": {}}, ' % (name, start, device, next_id)
                )
                f.write(
                    '{"name": "%s", "ph": "X", "ts": %s, "dur": %s, "tid": %s, "pid": "CUDA functions", '  # noqa: UP031
                    '"args": {}}, ' % (name, start, dur, device)
                )
                next_id += 1
        f.seek(f.tell() - 2, os.SEEK_SET)  # remove trailing whitespace and comma
        f.truncate()
        f.write("]")


def _profile(path: Path) -> None:
    """Profile a few training steps with the legacy profiler and write its export to `path`."""
    import torch
    from torch.autograd import profiler_legacy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def train_step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    train_step()  # warm-up, not profiled
    with profiler_legacy.profile() as prof:
        for step in range(1, STEPS + 1):
            with torch.autograd.profiler.record_function(f"ProfilerStep#{step}"):
                train_step()
    prof.export_chrome_trace(str(path))


def _cuda_interval(op: dict, device_free_us: float) -> tuple[float, float]:
    """The made-up CUDA interval (start, duration) of a leaf op (see the module docstring)."""
    start = max(op["ts"] + _LAUNCH_US, device_free_us)
    return start, round(op["dur"] * _CUDA_SHARE + _CUDA_FLOOR_US, 3)


def _with_cuda_times(cpu_events: list[dict]) -> list[LegacyOp]:
    """The real run's CPU ops as torch 1.7 had them with use_cuda=True: each leaf op (one enclosing no other op on
    its thread) with one CUDA interval on device 0, named as the op (torch 1.7 named it so)."""
    ops = sorted((e for e in cpu_events if e["ph"] == "X"), key=lambda e: (e["ts"], -e["dur"]))
    leaves = set()
    for i, op in enumerate(ops):
        end = op["ts"] + op["dur"]
        inner = (o for o in ops[i + 1 :] if o["ts"] < end)
        if not any(o["tid"] == op["tid"] for o in inner):
            leaves.add(i)
    legacy, device_free = [], 0.0
    for i, op in enumerate(ops):
        kernels: tuple[tuple[str, int, float, float], ...] = ()
        if i in leaves and not op["name"].startswith("ProfilerStep#"):
            start, dur = _cuda_interval(op, device_free)
            device_free = start + dur
            kernels = ((op["name"], 0, round(start, 3), dur),)
        legacy.append(LegacyOp(op["name"], op["ts"], op["dur"], op["tid"], kernels))
    return legacy


def main() -> None:
    cpu = OUT / "cpu_mlp" / "trace.json"
    cpu.parent.mkdir(parents=True, exist_ok=True)
    _profile(cpu)
    cuda = OUT / "use_cuda_mlp" / "trace.json"
    cuda.parent.mkdir(parents=True, exist_ok=True)
    write_v17_trace(_with_cuda_times(json.loads(cpu.read_text())), cuda)
    for path in (cpu, cuda):
        print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
