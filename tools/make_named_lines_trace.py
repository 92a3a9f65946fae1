"""A home-grown tracer's Chrome trace: the array form, no cats, device lines told only by their names.

`TinyTracer` is the kind of tracer a training script writes for itself: each span
an "X" event appended to a file as it ends, one per line, each followed by a
comma, with ``process_name`` / ``thread_name`` metadata events naming its lines.
It never writes the closing ``]`` (the Trace Event Format allows that, for
tracers that may be killed). The spans here are a simulated training loop on a
simulated clock (so the file is byte-reproducible): per step, a host thread loads
a batch and launches the work of two GPUs ("GPU 0", "GPU 1" processes, threads
"stream 7" for kernels and "stream 13" for host-to-device copies that overlap the
kernels of the step before).

`python -m tools.make_named_lines_trace` rewrites sample_traces/named_lines/trainer/trace.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

OUT = Path(__file__).resolve().parents[1] / "sample_traces" / "named_lines" / "trainer" / "trace.json"
STEPS = 4
HOST_PID, HOST_TID = 100, 1
KERNEL_STREAM, COPY_STREAM = 7, 13
# Per step: (kernel name, µs on GPU 0); GPU 1 runs the same kernels 10 % slower.
KERNELS = (("embedding_fwd", 40), ("gemm_fwd", 220), ("relu_fwd", 15), ("gemm_bwd", 410), ("sgd_update", 35))


class TinyTracer:
    """Appends Chrome-trace events to an open file, the array form, one event a line."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file
        file.write("[\n")

    def _write(self, event: dict[str, Any]) -> None:
        self.file.write(json.dumps(event) + ",\n")

    def name_process(self, pid: int, name: str) -> None:
        self._write({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})

    def name_thread(self, pid: int, tid: int, name: str) -> None:
        self._write({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})

    def span(self, name: str, pid: int, tid: int, ts_us: float, dur_us: float) -> None:
        self._write({"name": name, "ph": "X", "ts": ts_us, "dur": dur_us, "pid": pid, "tid": tid})


def _trace(tracer: TinyTracer) -> None:
    """The simulated loop: per step, load (host), then per GPU an H2D copy on the copy stream and the kernels on
    the compute stream, launched from the host; the next step's copy overlaps this step's kernels."""
    tracer.name_process(HOST_PID, "trainer")
    tracer.name_thread(HOST_PID, HOST_TID, "MainThread")
    for gpu in (0, 1):
        tracer.name_process(gpu, f"GPU {gpu}")
        tracer.name_thread(gpu, KERNEL_STREAM, f"stream {KERNEL_STREAM}")
        tracer.name_thread(gpu, COPY_STREAM, f"stream {COPY_STREAM}")
    clock = 1000.0
    stream_free = {0: 0.0, 1: 0.0}
    for step in range(STEPS):
        step_start = clock
        tracer.span("load_batch", HOST_PID, HOST_TID, clock, 300.0)
        clock += 300.0
        launch_start = clock
        for gpu in (0, 1):
            scale = 1.0 + 0.1 * gpu
            copy_start = clock + 10.0
            tracer.span("MemcpyHtoD", gpu, COPY_STREAM, copy_start, 120.0)
            start = max(copy_start + 120.0, stream_free[gpu])
            for name, dur in KERNELS:
                tracer.span(name, gpu, KERNEL_STREAM, start, dur * scale)
                start += dur * scale + 4.0
            stream_free[gpu] = start
        clock += 60.0
        tracer.span("launch", HOST_PID, HOST_TID, launch_start, clock - launch_start)
        wait = max(stream_free.values()) - clock if step == STEPS - 1 else 0.0
        if wait > 0:
            tracer.span("cudaDeviceSynchronize", HOST_PID, HOST_TID, clock, wait)
            clock += wait
        tracer.span(f"ProfilerStep#{step}", HOST_PID, HOST_TID, step_start, clock - step_start)
        clock += 5.0


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w") as file:
        _trace(TinyTracer(file))
    print(OUT, OUT.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
