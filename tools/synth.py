"""Synthetic GPU traces whose right answers are known exactly.

Real GPU traces are scarce here, and their "right answers" are only what another tool
says. So we simulate one host thread launching work onto CUDA streams, keep the result
as a plain spec (`GpuTimeline`: device ops + host events, integer ns since profile
start), write that spec as a PyTorch Kineto JSON trace or as a TensorFlow/XLA XSpace,
and compute the answers (busy/idle, gaps and why, copies, steps) from the spec by plain
arithmetic in `GpuTimeline.ground_truth()`.

Both writers emit the same timeline, so one ground truth serves both formats.

Gap causes (one per idle gap between device work, first rule that holds wins); "the
launch" is the host runtime call of the op that ends the gap:

* ``other``: the launch had ended by the time the gap began (the work was already
  queued; the device waited on something else, e.g. a dependency or its own latency).
* ``input_wait``: otherwise, if a host input wait (DataLoader ``__next__`` / tf.data
  ``IteratorGetNextOp::DoCompute``) overlaps the gap.
* ``sync``: otherwise, if a host synchronisation call (``cudaStreamSynchronize``)
  overlaps the gap.
* ``host_launch``: otherwise (the host was busy issuing work: Python, launch overhead).

Overlap means a shared stretch of positive length. Typical use::

    b = TimelineBuilder(seed=0)
    with b.step(1):
        b.input_wait(2_000_000)
        b.launch_kernel("gemm", 300_000, op="aten::mm")
    tl = b.build("tiny", "one step")
    tl.ground_truth(); tl.to_kineto(); tl.to_xspace()
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from traceinsight.readers.xplane_schema import XSpace

# Kineto's `baseTimeNanoseconds` (2026-01-01T00:00:00Z) and the epoch ns of t=0 of every
# timeline: Kineto `ts` = (PROFILE_START_EPOCH_NS - BASE_TIME_NS + t) / 1000 µs,
# XSpace `Task Environment.profile_start_time` = PROFILE_START_EPOCH_NS.
BASE_TIME_NS = 1_767_225_600_000_000_000
PROFILE_START_EPOCH_NS = BASE_TIME_NS + 3_723_456_789_123
PID = 4242
MAIN_TID = 4242
INPUT_TID = 4250  # XSpace only: tf.data's GetNext runs on its own `tf_data_iterator_get_next` thread
SMALL_KERNEL_NS = 10_000
CAUSES = ("input_wait", "sync", "host_launch", "other")
COPY_KINDS = ("h2d", "d2h", "d2d")
DATALOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
TF_GET_NEXT = "IteratorGetNextOp::DoCompute"


@dataclass(frozen=True)
class DeviceOp:
    """One piece of device work. Memcpy/memset names come from the writer's format."""

    kind: str  # "kernel" | "memcpy" | "memset"
    start_ns: int
    dur_ns: int
    correlation: int
    name: str = ""  # kernel symbol
    stream: int = 7
    copy_kind: str = ""  # memcpy: "h2d" | "d2h" | "d2d"
    host_memory: str = ""  # memcpy to/from the host: "pageable" | "pinned"
    nbytes: int = 0
    grid: int = 128  # blocks (x); block is 256 threads, 32 registers
    device: int = 0

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class HostEvent:
    """One host event; launch/sync/step/input-wait names come from the writer's format."""

    kind: str  # "step" | "input_wait" | "launch" | "sync" | "cpu_op"
    start_ns: int
    dur_ns: int
    name: str = ""  # cpu_op name; sync: the CUDA runtime call (cudaStreamSynchronize, cudaEventSynchronize)
    correlation: int = -1  # launch: id shared with its DeviceOp; sync: its own id
    external_id: int = -1  # Kineto "External id": a cpu_op and the launch inside it share one
    step_id: int = -1
    thread: int = MAIN_TID

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class GpuSpec:
    """What the trace says about the GPU (an H100 SXM by default)."""

    name: str = "NVIDIA H100 80GB HBM3"
    sm_count: int = 132
    compute_major: int = 9
    compute_minor: int = 0
    memory_bytes: int = 85_017_755_648
    clock_khz: int = 1_980_000
    memory_bandwidth_bps: int = 3_352_320_000_000


def _overlaps(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 < b1 and b0 < a1


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge intervals into disjoint sorted ones (touching intervals merge)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The intervals shared by two lists of disjoint sorted intervals."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def _intersection_ns(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length shared by two lists of disjoint sorted intervals."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass
class GpuTimeline:
    """A trace as a spec: device ops and host events in ns since profile start (t=0)."""

    name: str
    description: str
    device_ops: list[DeviceOp]
    host_events: list[HostEvent]
    end_ns: int  # the profile window is [0, end_ns)
    gpu: GpuSpec = field(default_factory=GpuSpec)

    def _of_kind(self, kind: str) -> list[HostEvent]:
        return sorted((h for h in self.host_events if h.kind == kind), key=lambda h: h.start_ns)

    # ------------------------------------------------------------------ ground truth
    def ground_truth(self) -> dict[str, Any]:
        """The exact answers, JSON-serialisable; every `*_ns` is ns since profile start."""
        steps = self._of_kind("step")
        waits = self._of_kind("input_wait")
        syncs = self._of_kind("sync")
        launches = self._of_kind("launch")
        return {
            "scenario": self.name,
            "description": self.description,
            "profile_start_epoch_ns": PROFILE_START_EPOCH_NS,
            "window": {"start_ns": 0, "end_ns": self.end_ns},
            "steps": {
                "count": len(steps),
                "total_ns": sum(s.dur_ns for s in steps),
                "items": [{"id": s.step_id, "start_ns": s.start_ns, "dur_ns": s.dur_ns} for s in steps],
            },
            "input_wait": {"count": len(waits), "total_ns": sum(w.dur_ns for w in waits)},
            "sync": {"count": len(syncs), "total_ns": sum(s.dur_ns for s in syncs)},
            "launches": {"count": len(launches)},
            "devices": {
                f"GPU:{d}": self._device_truth(d, waits, syncs, launches)
                for d in sorted({op.device for op in self.device_ops})
            },
        }

    def _device_truth(
        self, device: int, waits: list[HostEvent], syncs: list[HostEvent], launches: list[HostEvent]
    ) -> dict[str, Any]:
        ops = sorted((op for op in self.device_ops if op.device == device), key=lambda o: (o.start_ns, o.correlation))
        busy = _union([(op.start_ns, op.end_ns) for op in ops])
        first_at: dict[int, DeviceOp] = {}
        for op in ops:
            first_at.setdefault(op.start_ns, op)
        launch_of = {h.correlation: h for h in launches}

        def cause(g0: int, g1: int) -> str:
            launch = launch_of.get(first_at[g1].correlation)
            if launch is None or launch.end_ns <= g0:
                return "other"
            if any(_overlaps(g0, g1, w.start_ns, w.end_ns) for w in waits):
                return "input_wait"
            if any(_overlaps(g0, g1, s.start_ns, s.end_ns) for s in syncs):
                return "sync"
            return "host_launch"

        gaps = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
        causes = [cause(g0, g1) for g0, g1 in gaps]
        start, end = ops[0].start_ns, max(op.end_ns for op in ops)
        busy_ns = sum(e - s for s, e in busy)
        kernels = [op for op in ops if op.kind == "kernel"]
        small = [k for k in kernels if k.dur_ns < SMALL_KERNEL_NS]
        kernel_union = _union([(k.start_ns, k.end_ns) for k in kernels])
        memsets = [op for op in ops if op.kind == "memset"]
        copies = {}
        for kind in COPY_KINDS:
            sel = [op for op in ops if op.kind == "memcpy" and op.copy_kind == kind]
            copy_union = _union([(op.start_ns, op.end_ns) for op in sel])
            copies[kind] = {
                "count": len(sel),
                "total_ns": sum(op.dur_ns for op in sel),
                "bytes": sum(op.nbytes for op in sel),
                "pageable_count": sum(op.host_memory == "pageable" for op in sel),
                "exposed_ns": sum(e - s for s, e in copy_union) - _intersection_ns(copy_union, kernel_union),
            }
        steps = [(h.start_ns, h.end_ns) for h in self._of_kind("step")]
        return {
            "start_ns": start,
            "end_ns": end,
            "span_ns": end - start,
            "busy_ns": busy_ns,
            # Busy time inside the step windows (the ledger's busy parts): idle over the steps is 1 - this / steps.
            "busy_in_steps_ns": _intersection_ns(busy, _union(steps)),
            # The ledger's input wait: the host waiting for input in the steps, no runtime call or sync running and
            # the device idle.
            "input_wait_in_steps_ns": _length(
                _intersection(_union([(w.start_ns, w.end_ns) for w in waits]), _union(steps))
            )
            - _intersection_ns(
                _intersection(_union([(w.start_ns, w.end_ns) for w in waits]), _union(steps)),
                _union(busy + [(h.start_ns, h.end_ns) for h in (*launches, *syncs)]),
            ),
            "idle_ns": end - start - busy_ns,
            "idle_fraction": (end - start - busy_ns) / (end - start),
            "gaps": {
                "count": len(gaps),
                "total_ns": sum(g1 - g0 for g0, g1 in gaps),
                "max_ns": max((g1 - g0 for g0, g1 in gaps), default=0),
                "by_cause": {
                    c: sum(g1 - g0 for (g0, g1), k in zip(gaps, causes, strict=True) if k == c) for c in CAUSES
                },
                "count_by_cause": {c: causes.count(c) for c in CAUSES},
            },
            "kernels": {
                "count": len(kernels),
                "total_ns": sum(k.dur_ns for k in kernels),
                "small_threshold_ns": SMALL_KERNEL_NS,
                "small_count": len(small),
                "small_total_ns": sum(k.dur_ns for k in small),
                "shorter_than_launch_count": sum(
                    k.dur_ns < launch_of[k.correlation].dur_ns for k in kernels if k.correlation in launch_of
                ),
            },
            "copies": copies,
            "memset": {"count": len(memsets), "total_ns": sum(m.dur_ns for m in memsets)},
        }

    # ------------------------------------------------------------------ Kineto
    def to_kineto(self) -> dict[str, Any]:
        """The timeline as torch.profiler writes it (new schema, fractional-µs ts, ac2g flows)."""
        offset = PROFILE_START_EPOCH_NS - BASE_TIME_NS

        def us(ns: int) -> float:
            # Exact to the ns: round(us * 1000) gives the integer back.
            return (offset + ns) / 1000

        def x(cat: str, name: str, pid: int, tid: int, start: int, dur: int, args: dict[str, Any]) -> dict:
            return {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": us(start),
                "dur": dur / 1000,
                "args": args,
            }

        def ext(h: HostEvent) -> dict[str, int]:
            return {"External id": h.external_id} if h.external_id >= 0 else {}

        launch_of = {h.correlation: h for h in self.host_events if h.kind == "launch"}
        op_of = {op.correlation: op for op in self.device_ops}
        events: list[dict[str, Any]] = []
        for h in sorted(self.host_events, key=lambda h: (h.start_ns, -h.dur_ns)):
            if h.kind == "step":
                events.append(
                    x("user_annotation", f"ProfilerStep#{h.step_id}", PID, h.thread, h.start_ns, h.dur_ns, ext(h))
                )
            elif h.kind == "input_wait":
                events.append(x("user_annotation", DATALOADER_NEXT, PID, h.thread, h.start_ns, h.dur_ns, ext(h)))
            elif h.kind == "cpu_op":
                events.append(x("cpu_op", h.name, PID, h.thread, h.start_ns, h.dur_ns, ext(h)))
            elif h.kind == "sync":
                events.append(
                    x(
                        "cuda_runtime",
                        h.name,
                        PID,
                        h.thread,
                        h.start_ns,
                        h.dur_ns,
                        {"cbid": _KINETO_SYNC_CBID[h.name], "correlation": h.correlation},
                    )
                )
            else:
                name, cbid = _KINETO_LAUNCH[op_of[h.correlation].kind]
                events.append(
                    x(
                        "cuda_runtime",
                        name,
                        PID,
                        h.thread,
                        h.start_ns,
                        h.dur_ns,
                        {**ext(h), "cbid": cbid, "correlation": h.correlation},
                    )
                )
                events.append(
                    {
                        "ph": "s",
                        "id": h.correlation,
                        "pid": PID,
                        "tid": h.thread,
                        "ts": us(h.start_ns),
                        "cat": "ac2g",
                        "name": "ac2g",
                    }
                )
        for op in sorted(self.device_ops, key=lambda o: (o.start_ns, o.correlation)):
            launch = launch_of.get(op.correlation)
            args: dict[str, Any] = {
                **(ext(launch) if launch else {}),
                "device": op.device,
                "context": 1,
                "stream": op.stream,
                "correlation": op.correlation,
            }
            if op.kind == "kernel":
                blocks_per_sm = op.grid / self.gpu.sm_count
                args |= {
                    "queued": 0,
                    "registers per thread": 32,
                    "shared memory": 0,
                    "blocks per SM": round(blocks_per_sm, 6),
                    "warps per SM": round(blocks_per_sm * 8, 6),
                    "grid": [op.grid, 1, 1],
                    "block": [256, 1, 1],
                    "est. achieved occupancy %": min(100, round(blocks_per_sm * 256 / 2048 * 100)),
                }
                events.append(x("kernel", op.name, op.device, op.stream, op.start_ns, op.dur_ns, args))
            else:
                args |= {"bytes": op.nbytes, "memory bandwidth (GB/s)": op.nbytes / op.dur_ns}
                cat = "gpu_memcpy" if op.kind == "memcpy" else "gpu_memset"
                events.append(x(cat, _kineto_copy_name(op), op.device, op.stream, op.start_ns, op.dur_ns, args))
            events.append(
                {
                    "ph": "f",
                    "id": op.correlation,
                    "pid": op.device,
                    "tid": op.stream,
                    "ts": us(op.start_ns),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
        events += self._kineto_gpu_steps(launch_of, x)
        events += self._kineto_metadata(us)
        return {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": 0,
                    "name": self.gpu.name,
                    "totalGlobalMem": self.gpu.memory_bytes,
                    "computeMajor": self.gpu.compute_major,
                    "computeMinor": self.gpu.compute_minor,
                    "maxThreadsPerBlock": 1024,
                    "maxThreadsPerMultiprocessor": 2048,
                    "regsPerBlock": 65536,
                    "warpSize": 32,
                    "sharedMemPerBlock": 49152,
                    "numSms": self.gpu.sm_count,
                    "regsPerMultiprocessor": 65536,
                    "sharedMemPerBlockOptin": 232448,
                    "sharedMemPerMultiprocessor": 233472,
                }
            ],
            "cupti_version": 22,
            "cuda_runtime_version": 12040,
            "cuda_driver_version": 12090,
            "record_shapes": 0,
            "with_stack": 0,
            "profile_memory": 0,
            "trace_id": "5EC0FFEE5EC0FFEE5EC0FFEE5EC0FFEE",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_TIME_NS,
            "traceEvents": events,
            "traceName": f"/tmp/traceinsight/{self.name}.pt.trace.json",
        }

    def _kineto_gpu_steps(self, launch_of: dict[int, HostEvent], x: Callable[..., dict]) -> list[dict]:
        """`gpu_user_annotation` copies of each step: the device work launched inside it."""
        out = []
        for step in self._of_kind("step"):
            ops = [
                op
                for op in self.device_ops
                if op.correlation in launch_of and step.start_ns <= launch_of[op.correlation].start_ns < step.end_ns
            ]
            if ops:
                start = min(op.start_ns for op in ops)
                end = max(op.end_ns for op in ops)
                out.append(
                    x(
                        "gpu_user_annotation",
                        f"ProfilerStep#{step.step_id}",
                        ops[0].device,
                        7,
                        start,
                        end - start,
                        {"External id": step.external_id},
                    )
                )
        return out

    def _kineto_metadata(self, us: Callable[[int], float]) -> list[dict]:
        """Process/thread names, the profiler's Trace span and its window-end marker."""
        ts = us(0)

        def m(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict:
            return {"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args}

        out = [
            m("process_name", PID, 0, {"name": "python3"}),
            m("process_labels", PID, 0, {"labels": "CPU"}),
            m("process_sort_index", PID, 0, {"sort_index": PID}),
        ]
        for device in sorted({op.device for op in self.device_ops}):
            out += [
                m("process_name", device, 0, {"name": "python3"}),
                m("process_labels", device, 0, {"labels": f"GPU {device}"}),
                m("process_sort_index", device, 0, {"sort_index": 5000000 + device}),
            ]
            for stream in sorted({op.stream for op in self.device_ops if op.device == device}):
                out += [
                    m("thread_name", device, stream, {"name": f"stream {stream} "}),
                    m("thread_sort_index", device, stream, {"sort_index": stream}),
                ]
        for tid in sorted({h.thread for h in self.host_events}):
            out += [
                m("thread_name", PID, tid, {"name": f"thread {tid} (python3)"}),
                m("thread_sort_index", PID, tid, {"sort_index": tid}),
            ]
        out.append(
            {
                "ph": "X",
                "cat": "Trace",
                "ts": ts,
                "dur": self.end_ns / 1000,
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            }
        )
        out.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": us(self.end_ns)})
        return out

    # ------------------------------------------------------------------ XSpace
    def to_xspace(self, host: str = "sample") -> bytes:
        """The timeline as a saved TF/JAX profile (`<host>.xplane.pb` bytes), clocks normalised."""
        space = XSpace()
        space.hostnames.append(host)
        cpu = _PlaneWriter(space.planes.add(id=0, name="/host:CPU"))
        op_of = {op.correlation: op for op in self.device_ops}
        for h in self.host_events:
            if h.kind == "step":
                cpu.event(MAIN_TID, "python", "train", h, {"step_num": h.step_id, "_r": 1})
            elif h.kind == "input_wait":
                cpu.event(INPUT_TID, f"tf_data_iterator_get_next/{INPUT_TID}", TF_GET_NEXT, h, {})
            elif h.kind == "cpu_op":
                cpu.event(h.thread, "python", h.name, h, {})
            else:
                api = {"device_id": _U64(0), "correlation_id": _U64(h.correlation), "context_id": "$$1"}
                if h.kind == "sync":  # the driver API name: cudaStreamSynchronize -> cuStreamSynchronize
                    cpu.event(h.thread, "python", "cu" + h.name.removeprefix("cuda"), h, api)
                else:
                    op = op_of[h.correlation]
                    cpu.event(h.thread, "python", _xspace_op_name(op), h, api | _xspace_details(op, host_side=True))
        writers = [cpu]
        for device in sorted({op.device for op in self.device_ops}):
            gpu = _PlaneWriter(space.planes.add(id=device, name=f"/device:GPU:{device}"))
            writers.append(gpu)
            gpu.plane_stats(
                {
                    "device_vendor": "Nvidia",
                    "gpu_device_name": self.gpu.name,
                    "clock_rate": self.gpu.clock_khz,
                    "core_count": self.gpu.sm_count,
                    "memory_bandwidth": _U64(self.gpu.memory_bandwidth_bps),
                    "memory_size": _U64(self.gpu.memory_bytes),
                    "compute_cap_major": self.gpu.compute_major,
                    "compute_cap_minor": self.gpu.compute_minor,
                }
            )
            ops = [op for op in self.device_ops if op.device == device]
            for op in ops:
                types = sorted({_XSPACE_LINE_TYPE[o.kind] or _xspace_op_name(o) for o in ops if o.stream == op.stream})
                stats = {"correlation_id": _U64(op.correlation), "context_id": "$$1"} | _xspace_details(op)
                gpu.event(op.stream, f"Stream #{op.stream}({','.join(types)})", _xspace_op_name(op), op, stats)
        env = _PlaneWriter(space.planes.add(id=0, name="Task Environment"))
        env.plane_stats(
            {
                "profile_start_time": _U64(PROFILE_START_EPOCH_NS),
                "profile_stop_time": _U64(PROFILE_START_EPOCH_NS + self.end_ns),
            }
        )
        for writer in writers:
            writer.flush()
        return space.SerializeToString(deterministic=True)


_KINETO_LAUNCH = {
    "kernel": ("cudaLaunchKernel", 211),
    "memcpy": ("cudaMemcpyAsync", 41),
    "memset": ("cudaMemsetAsync", 51),
}
_KINETO_SYNC_CBID = {"cudaStreamSynchronize": 131, "cudaEventSynchronize": 126}
_KINETO_COPY = {
    "h2d": ("HtoD", "{mem} -> Device"),
    "d2h": ("DtoH", "Device -> {mem}"),
    "d2d": ("DtoD", "Device -> Device"),
}
_XSPACE_COPY = {"h2d": "MemcpyH2D", "d2h": "MemcpyD2H", "d2d": "MemcpyD2D"}
_XSPACE_LINE_TYPE = {"kernel": "Compute", "memset": "Memset", "memcpy": ""}


def _kineto_copy_name(op: DeviceOp) -> str:
    if op.kind == "memset":
        return "Memset (Device)"
    short, direction = _KINETO_COPY[op.copy_kind]
    return f"Memcpy {short} ({direction.format(mem=op.host_memory.capitalize())})"


def _xspace_op_name(op: DeviceOp) -> str:
    """XSpace names device work and its host API call alike (kernel symbol, MemcpyH2D, ...)."""
    if op.kind == "kernel":
        return op.name
    return _XSPACE_COPY[op.copy_kind] if op.kind == "memcpy" else "Memset 3"


def _xspace_details(op: DeviceOp, host_side: bool = False) -> dict[str, Any]:
    """CUPTI's detail stats; host API events have no memory kinds (`unknown`)."""
    if op.kind == "kernel":
        if host_side:
            return {}
        return {
            "kernel_details": _Ref(
                f"regs:32 static_shared:0 dynamic_shared:0 grid:{op.grid},1,1 block:256,1,1 occ_pct:100"
            ),
            "theoretical_occupancy_pct": 100.0,
        }
    if op.kind == "memset":
        return {"Memset_details": _Ref(f"kind:{'unknown' if host_side else 'device'} num_bytes:{op.nbytes} async:1")}
    src, dst = {"h2d": (op.host_memory, "device"), "d2h": ("device", op.host_memory), "d2d": ("device", "device")}[
        op.copy_kind
    ]
    if host_side:
        src = dst = "unknown"
    is_async = int(op.host_memory != "pageable")
    return {"memcpy_details": _Ref(f"kind_src:{src} kind_dst:{dst} size:{op.nbytes} dest:{op.device} async:{is_async}")}


class _Ref(str):
    """A string stat stored XSpace-style as a reference to a stat-metadata name."""


class _U64(int):
    """An integer stat stored as uint64 (CUPTI ids, byte counts, clocks)."""


class _PlaneWriter:
    """Interns event/stat metadata of one XPlane and collects its lines' events."""

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self._events: dict[str, int] = {}
        self._stats: dict[str, int] = {}
        self._lines: dict[int, tuple[str, list[tuple[int, int, str, dict[str, Any]]]]] = {}

    def stat_id(self, name: str) -> int:
        if name not in self._stats:
            self._stats[name] = len(self._stats) + 1
            self.plane.stat_metadata[self._stats[name]].name = name
            self.plane.stat_metadata[self._stats[name]].id = self._stats[name]
        return self._stats[name]

    def event_id(self, name: str) -> int:
        if name not in self._events:
            self._events[name] = len(self._events) + 1
            self.plane.event_metadata[self._events[name]].name = name
            self.plane.event_metadata[self._events[name]].id = self._events[name]
        return self._events[name]

    def _add_stats(self, target: Any, stats: dict[str, Any]) -> None:
        for key, value in stats.items():
            stat = target.stats.add(metadata_id=self.stat_id(key))
            if isinstance(value, _Ref):
                stat.ref_value = self.stat_id(value)
            elif isinstance(value, str):
                stat.str_value = value
            elif isinstance(value, float):
                stat.double_value = value
            elif isinstance(value, _U64):
                stat.uint64_value = value
            else:
                stat.int64_value = value

    def plane_stats(self, stats: dict[str, Any]) -> None:
        self._add_stats(self.plane, stats)

    def event(self, line_id: int, line_name: str, name: str, ev: DeviceOp | HostEvent, stats: dict[str, Any]) -> None:
        self._lines.setdefault(line_id, (line_name, []))[1].append((ev.start_ns, ev.dur_ns, name, stats))

    def flush(self) -> None:
        """Write lines sorted by id, each timed from its first event (ns) with ps offsets."""
        for line_id in sorted(self._lines):
            line_name, events = self._lines[line_id]
            events.sort(key=lambda e: (e[0], -e[1]))
            line_ts = events[0][0]
            line = self.plane.lines.add(
                id=line_id, display_id=line_id, name=line_name, display_name=line_name, timestamp_ns=line_ts
            )
            for start, dur, name, stats in events:
                xev = line.events.add(
                    metadata_id=self.event_id(name), offset_ps=(start - line_ts) * 1000, duration_ps=dur * 1000
                )
                self._add_stats(xev, stats)
            line.duration_ps = (max(s + d for s, d, _, _ in events) - line_ts) * 1000


class TimelineBuilder:
    """Simulates one host thread issuing work to CUDA streams, to build a `GpuTimeline`.

    The host clock `now` only moves forward. A device op starts when its launch call has
    returned plus `latency_ns`, its stream is free (plus `queue_gap_ns` when it had to
    queue) and the op it waits `after` has ended. Pageable copies block the host until
    they finish, as `cudaMemcpyAsync` from pageable memory does.
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        launch_ns: int = 5_000,
        latency_ns: int = 1_000,
        queue_gap_ns: int = 0,
        start_ns: int = 100_000,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.now = start_ns
        self.launch_ns = launch_ns
        self.latency_ns = latency_ns
        self.queue_gap_ns = queue_gap_ns
        self._device_ops: list[DeviceOp] = []
        self._host_events: list[HostEvent] = []
        self._stream_free: dict[int, int] = {}
        self._ids = iter(range(1, 1 << 62))

    def uniform_ns(self, low_ns: int, high_ns: int) -> int:
        """A random duration in [low_ns, high_ns] from the builder's seeded generator."""
        return int(self.rng.integers(low_ns, high_ns + 1))

    def cpu(self, dur_ns: int, name: str = "") -> None:
        """Host work that launches nothing (Python, data prep); a `cpu_op` event when named."""
        if name:
            self._host_events.append(HostEvent("cpu_op", self.now, dur_ns, name=name, external_id=next(self._ids)))
        self.now += dur_ns

    def input_wait(self, dur_ns: int) -> HostEvent:
        """The training loop blocks for its next batch."""
        event = HostEvent("input_wait", self.now, dur_ns, external_id=next(self._ids))
        self._host_events.append(event)
        self.now += dur_ns
        return event

    def synchronize(self, until: DeviceOp | None = None, return_ns: int = 3_000) -> HostEvent:
        """Block until all device work is done (`cudaStreamSynchronize`), or only until `until`
        has ended (`cudaEventSynchronize` on an event recorded after it), plus `return_ns`."""
        if until is None:
            name, done_at = "cudaStreamSynchronize", max((op.end_ns for op in self._device_ops), default=self.now)
        else:
            name, done_at = "cudaEventSynchronize", until.end_ns
        event = HostEvent(
            "sync", self.now, max(self.now, done_at) + return_ns - self.now, name=name, correlation=next(self._ids)
        )
        self._host_events.append(event)
        self.now = event.end_ns
        return event

    @contextmanager
    def step(self, step_id: int) -> Iterator[None]:
        """A training step marker around whatever the body issues."""
        start, ext = self.now, next(self._ids)
        yield
        self._host_events.append(HostEvent("step", start, self.now - start, step_id=step_id, external_id=ext))

    def launch_kernel(
        self,
        name: str,
        dur_ns: int,
        *,
        stream: int = 7,
        grid: int = 128,
        op: str = "",
        after: DeviceOp | None = None,
        launch_ns: int | None = None,
    ) -> DeviceOp:
        """Launch a kernel, inside a `cpu_op` named `op` when given."""
        return self._launch(DeviceOp("kernel", 0, dur_ns, 0, name=name, stream=stream, grid=grid), op, after, launch_ns)

    def launch_copy(
        self,
        copy_kind: str,
        nbytes: int,
        dur_ns: int,
        *,
        host_memory: str = "pinned",
        stream: int = 8,
        op: str = "",
        after: DeviceOp | None = None,
    ) -> DeviceOp:
        """Launch a memcpy; one from/to pageable host memory blocks the host until it is done."""
        spec = DeviceOp(
            "memcpy",
            0,
            dur_ns,
            0,
            stream=stream,
            copy_kind=copy_kind,
            host_memory="" if copy_kind == "d2d" else host_memory,
            nbytes=nbytes,
        )
        return self._launch(spec, op, after, None)

    def launch_memset(self, nbytes: int, dur_ns: int, *, stream: int = 7, op: str = "") -> DeviceOp:
        return self._launch(DeviceOp("memset", 0, dur_ns, 0, stream=stream, nbytes=nbytes), op, None, None)

    def _launch(self, spec: DeviceOp, op: str, after: DeviceOp | None, launch_ns: int | None) -> DeviceOp:
        ext = next(self._ids) if op else -1
        op_start = self.now
        if op:
            self.now += 1_000
        corr = next(self._ids)
        launch_start = self.now
        launch_end = launch_start + (self.launch_ns if launch_ns is None else launch_ns)
        start = launch_end + self.latency_ns
        if spec.stream in self._stream_free:
            start = max(start, self._stream_free[spec.stream] + self.queue_gap_ns)
        if after is not None:
            start = max(start, after.end_ns)
        dev = DeviceOp(**{**spec.__dict__, "start_ns": start, "correlation": corr})
        self._device_ops.append(dev)
        self._stream_free[dev.stream] = dev.end_ns
        if spec.host_memory == "pageable":
            launch_end = max(launch_end, dev.end_ns + 2_000)
        self._host_events.append(
            HostEvent("launch", launch_start, launch_end - launch_start, correlation=corr, external_id=ext)
        )
        self.now = launch_end
        if op:
            self.now += 1_000
            self._host_events.append(HostEvent("cpu_op", op_start, self.now - op_start, name=op, external_id=ext))
        return dev

    def build(self, name: str, description: str, tail_ns: int = 200_000) -> GpuTimeline:
        """Freeze into a timeline whose window ends `tail_ns` after the last event."""
        last = max([op.end_ns for op in self._device_ops] + [h.end_ns for h in self._host_events] + [self.now])
        return GpuTimeline(name, description, list(self._device_ops), list(self._host_events), last + tail_ns)


# ---------------------------------------------------------------------------- scenarios
# (aten op, kernel symbol) pairs, as PyTorch on an H100 names them.
_KERNELS = (
    (
        "aten::addmm",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_o"
        "ff_kernel__5x_cublas",
    ),
    (
        "aten::relu",
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clam"
        "p_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{l"
        "ambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<"
        "char*, 2ul> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase"
        "&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const:"
        ":{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)",
    ),
    (
        "aten::add_",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array"
        "<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
    ),
    (
        "aten::mul",
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float,"
        " at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::Bin"
        "aryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<cha"
        "r*, 3ul>)",
    ),
    (
        "aten::sum",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<fl"
        "oat, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(floa"
        "t, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<"
        "float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(fl"
        "oat, float)#1}>, unsigned int, float, 4>)",
    ),
    (
        "aten::_softmax",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::"
        "(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    ),
)
_BATCH_BYTES = 8 * 3 * 224 * 224 * 4  # a batch of 8 fp32 224x224 RGB images


def _kernels(
    b: TimelineBuilder,
    count: int,
    low_ns: int,
    high_ns: int,
    *,
    python_ns: tuple[int, int],
    first_after: DeviceOp | None = None,
    grid: int = 128,
    launch_ns: tuple[int, int] | None = None,
) -> DeviceOp:
    """`count` kernels, each after some Python time, cycling through `_KERNELS`; returns the last."""
    last = first_after
    for i in range(count):
        b.cpu(b.uniform_ns(*python_ns))
        op, name = _KERNELS[i % len(_KERNELS)]
        last = b.launch_kernel(
            name,
            b.uniform_ns(low_ns, high_ns),
            op=op,
            grid=grid,
            after=first_after if i == 0 else None,
            launch_ns=None if launch_ns is None else b.uniform_ns(*launch_ns),
        )
    assert last is not None
    return last


def input_bound(steps: int = 6) -> GpuTimeline:
    """DataLoader(num_workers=0): each step the GPU idles ~15 ms while the host loads the batch."""
    b = TimelineBuilder(seed=1)
    for step_id in range(5, 5 + steps):
        with b.step(step_id):
            b.input_wait(b.uniform_ns(18_000_000, 24_000_000))
            copy = b.launch_copy("h2d", _BATCH_BYTES, b.uniform_ns(230_000, 260_000), op="aten::copy_")
            b.launch_memset(4_096, 2_000, op="aten::zero_")
            _kernels(b, 40, 60_000, 250_000, python_ns=(10_000, 30_000), first_after=copy)
    return b.build(
        "input_bound",
        "Input-bound training: the GPU idles while the host waits in DataLoader.__next__ "
        "each step (~70 % idle, almost all of it input_wait).",
    )


def launch_bound(steps: int = 3, kernels_per_step: int = 500) -> GpuTimeline:
    """Thousands of 3-5 µs kernels; Python + launch overhead (~13 µs each) leaves the GPU idle."""
    b = TimelineBuilder(seed=2)
    for step_id in range(1, 1 + steps):
        with b.step(step_id):
            b.input_wait(b.uniform_ns(30_000, 50_000))
            _kernels(b, kernels_per_step, 3_000, 5_000, python_ns=(4_000, 9_000), grid=4, launch_ns=(5_000, 7_000))
    return b.build(
        "launch_bound",
        "Launch-bound: thousands of 3-5 us kernels, each shorter than its launch call; "
        "host launch gaps dominate (~70 % idle, host_launch).",
    )


def healthy(steps: int = 4) -> GpuTimeline:
    """Long kernels queued well ahead of the GPU; only the ~4 µs inter-kernel gaps remain (~1 %)."""
    b = TimelineBuilder(seed=3, queue_gap_ns=4_000)
    previous_last: DeviceOp | None = None
    for step_id in range(1, 1 + steps):
        with b.step(step_id):
            b.input_wait(b.uniform_ns(30_000, 60_000))
            copy = b.launch_copy("h2d", _BATCH_BYTES, b.uniform_ns(230_000, 260_000), op="aten::copy_")
            b.launch_memset(4_096, 2_000, op="aten::zero_")
            last = _kernels(b, 30, 150_000, 600_000, python_ns=(10_000, 20_000), first_after=copy)
            if previous_last is not None:  # stay at most one step ahead of the GPU
                b.synchronize(until=previous_last)
            previous_last = last
    return b.build(
        "healthy",
        "Healthy: the host runs a step ahead, prefetched pinned copies overlap compute; "
        "~1 % idle, all of it 'other' (inter-kernel gaps).",
    )


def h2d_pageable(steps: int = 4) -> GpuTimeline:
    """Each step copies 4 x 8 MiB from pageable memory (~1.5 ms each) before ~2 ms of kernels."""
    b = TimelineBuilder(seed=4)
    for step_id in range(1, 1 + steps):
        with b.step(step_id):
            b.input_wait(b.uniform_ns(50_000, 80_000))
            last = None
            for _ in range(4):
                b.cpu(b.uniform_ns(8_000, 15_000))
                last = b.launch_copy(
                    "h2d", 8 << 20, b.uniform_ns(1_450_000, 1_600_000), host_memory="pageable", op="aten::copy_"
                )
            b.launch_memset(4_096, 2_000, op="aten::zero_")
            _kernels(b, 25, 60_000, 120_000, python_ns=(8_000, 15_000), first_after=last)
    return b.build(
        "h2d_pageable",
        "H2D-heavy: 16 pageable host-to-device copies of 8 MiB (~6 ms per step) "
        "dominate device time; copies block the host.",
    )


def sync_heavy(steps: int = 4) -> GpuTimeline:
    """Three `.item()` calls per step: a 4-byte D2H + cudaStreamSynchronize drain the GPU, then Python runs."""
    b = TimelineBuilder(seed=5)
    for step_id in range(1, 1 + steps):
        with b.step(step_id):
            b.input_wait(b.uniform_ns(30_000, 50_000))
            copy = b.launch_copy("h2d", _BATCH_BYTES, b.uniform_ns(230_000, 260_000), op="aten::copy_")
            for phase in range(3):
                _kernels(b, 12, 80_000, 200_000, python_ns=(8_000, 15_000), first_after=copy if phase == 0 else None)
                b.launch_copy("d2h", 4, 2_000, stream=7, op="aten::_local_scalar_dense")
                b.synchronize()
                b.cpu(b.uniform_ns(500_000, 1_200_000), name="metrics")
            _kernels(b, 10, 80_000, 150_000, python_ns=(8_000, 15_000))
    return b.build(
        "sync_heavy",
        "Sync-heavy: three .item() per step (D2H + cudaStreamSynchronize) drain "
        "the GPU, which then idles while Python runs; sync dominates the idle time.",
    )


SCENARIOS: dict[str, Callable[[], GpuTimeline]] = {
    "input_bound": input_bound,
    "launch_bound": launch_bound,
    "healthy": healthy,
    "h2d_pageable": h2d_pageable,
    "sync_heavy": sync_heavy,
}


# ---------------------------------------------------------------------------- files
KINETO_FILE = "sample_1.1767229323456.pt.trace.json.gz"  # <worker>.<ms>.pt.trace.json.gz, as tensorboard_trace_handler
XSPACE_RUN = "2026_01_01_01_02_03"


def write_kineto(timeline: GpuTimeline, path: Path) -> Path:
    """Write the Kineto JSON (gzip, byte-reproducible, when `path` ends in .gz)."""
    data = json.dumps(timeline.to_kineto()).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def write_xspace(timeline: GpuTimeline, logdir: Path, host: str = "sample") -> Path:
    """Write `<logdir>/plugins/profile/<run>/<host>.xplane.pb`, the layout TF's profiler writes."""
    path = logdir / "plugins" / "profile" / XSPACE_RUN / f"{host}.xplane.pb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(timeline.to_xspace(host))
    return path
