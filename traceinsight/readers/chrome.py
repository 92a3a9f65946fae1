"""Read Chrome-trace JSON that is not Kineto's into the event table: XProf's trace_viewer export (an XSpace written
as a Chrome trace), TF1 timelines, legacy ``torch.autograd.profiler`` exports and traces whose device lines are
told by their process and thread names alone.

The export keeps XSpace's structure in Chrome-trace terms: a process per plane
(``process_name`` ``/device:GPU:4``, ``/host:CPU``), a thread per line
(``thread_name`` ``Stream #134(Compute)``, tid = line id) and the stats as string
args (``correlation_id``, ``memcpy_details``, ``kernel_details``). Lines are read
with the XSpace reader's rules (xspace.py), so both formats of one profile give
the same rows:

* GPU ``Stream #`` lines: ``Memcpy*`` -> memcpy, ``Memset*`` -> memset, CUPTI
  bookkeeping -> other, else kernel; the derived ``Steps`` line -> step (step id =
  name); other derived lines (``TensorFlow Ops``, ``XLA Ops``, ...) repeat the stream
  events and are skipped.
* TPU: ``XLA Ops`` -> kernel, ``XLA Modules`` -> annotation, ``Steps`` -> step, other
  lines -> other.
* Host processes: an event with ``correlation_id`` is an API call (runtime, or sync
  for ``*Synchronize``); step markers with ``step_num`` -> step; ``$...`` -> python;
  TF ops -> cpu_op; the rest -> other.

Traces without XProf's process names and without cats (home-grown tracers, legacy
exports, in either JSON form) are read by their line names (`_named_lines`): a
process or thread named for a GPU, device, stream or CUDA (`rules.DEVICE_LINE_PATTERN`)
holds device work, read like a ``Stream #`` line; every other line holds host ops.
A pid written as a name (legacy autograd's ``"CPU functions"`` / ``"CUDA functions"``)
is that process's name.

Timestamps are µs since the profile start (the export has no wall clock).

Damaged events are skipped and counted in the warnings (`_repair`): a ts or dur
no int64 ns can hold, durations over 7 days, exact duplicates; occupancies
outside 0-100 % are dropped.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
from msgspec.structs import replace

from traceinsight.errors import TraceError, is_truncation_warning
from traceinsight.events import (
    COPY_KINDS,
    KINDS,
    MEMORY_KINDS,
    DeviceInfo,
    InputInfo,
    TraceRead,
    concat_event_tables,
    make_event_table,
)
from traceinsight.readers._classify import (
    copy_kind,
    details_bytes,
    details_copy_memory,
    details_occupancy,
    device_activity_kind,
    is_sync_api,
    per_category,
    step_number,
    xprof_framework,
    xprof_host_kind,
)
from traceinsight.readers._repair import drop_duplicates, usable_json_times, valid_occupancy
from traceinsight.readers.columns import category_column, float_column, int_column
from traceinsight.readers.json_document import load_trace_json
from traceinsight.readers.json_events import NO_ARGS, Args, Event, TraceDoc
from traceinsight.readers.json_times import complete_events, exact_times
from traceinsight.rules import (
    DEVICE_LINE_PATTERN,
    DEVICE_NUMBER_PATTERN,
    LEGACY_AUTOGRAD_CPU_PROCESS,
    LEGACY_AUTOGRAD_CUDA_PROCESS,
    STEP_MARKER_PATTERN,
    STREAM_NUMBER_PATTERN,
)

# XProf's process names, and those of our own `--trace-out` export of a run of several inputs, whose devices
# and hosts carry the input's label (``rank0/device:GPU:0``, ``rank0/host:CPU``).
_DEVICE_PROCESS = re.compile(r"^(?:([^/]+)/)?/?device:(GPU|TPU):(\d+)$")
_HOST_PROCESS = re.compile(r"^(?:[^/]+/)?/?host:(?!metadata$)")
# TensorFlow 1's `tensorflow.python.client.timeline` (the step stats of `session.run(..., options=RunOptions(
# trace_level=FULL_TRACE))`): a process per device stream (`/device:GPU:0/stream:15 Compute`, its ops and
# `MEMCPYHtoD` / `MEMCPYDtoH` copies), per device the ops as the executor ran them (`/job:localhost/replica:0/
# task:0/device:GPU:0 Compute`: host work). `/device:GPU:0/stream:all` and `/device:GPU:0/memcpy` repeat the
# streams' rows, and `... Tensors` / `Allocators` hold memory: not read.
_TF1_STREAM = re.compile(r"^/(?:device:)?(GPU|TPU|gpu):(\d+)/stream:(\d+) Compute$")
# TF before 1.4 named devices `/job:localhost/replica:0/task:0/cpu:0`.
# The step a TF1 timeline holds, as its marker is named.
TF1_STEP = "session.run"
_TF1_OPS = re.compile(r"^/job:[^/]+/replica:\d+/task:\d+/(?:device:\w+|cpu|gpu):\d+ Compute$")
# What the events of one (process, thread) line become; lines without a role are not read.
_HOST, _STREAM, _DEVICE_STEPS, _DEVICE_KERNEL, _DEVICE_ANNOTATION, _DEVICE_OTHER, _SKIPPED, _HOST_OPS, _NAMED_HOST = (
    range(9)
)
_HOST_ROLES = (_HOST, _HOST_OPS, _NAMED_HOST)
_TPU_LINE_ROLES = {"XLA Ops": _DEVICE_KERNEL, "XLA Modules": _DEVICE_ANNOTATION, "Steps": _DEVICE_STEPS}
_ROLE_KINDS = {
    _DEVICE_STEPS: "step",
    _DEVICE_KERNEL: "kernel",
    _DEVICE_ANNOTATION: "annotation",
    _DEVICE_OTHER: "other",
    _HOST_OPS: "cpu_op",
    _NAMED_HOST: "cpu_op",
}
# The phases of spans written as two events: duration begin/end (per thread) and async begin/end (per name).
_SPAN_PHASES = {"B": 1, "E": -1, "b": 2, "e": -2}
# `TraceRead.metadata["chrome_form"]` of the traces without XProf's names (else "xprof").
LEGACY_AUTOGRAD_FORM = "legacy autograd"
NAMED_LINES_FORM = "named lines"


class _Lines(msgspec.Struct):
    """What each (process, thread) line of a trace is: its role, its device label (None: a host line) and the
    stream its device rows are on."""

    roles: np.ndarray
    devices: list[str | None]
    streams: np.ndarray


def read_chrome(path: Path | str, doc: TraceDoc | None = None) -> TraceRead:
    """Read an XProf trace_viewer JSON export, a TF1 timeline, a legacy autograd export or a Chrome trace whose
    device lines are told by their names; `doc` skips loading when already decoded."""
    doc = doc if doc is not None else load_trace_json(path)
    doc.events.extend(paired_spans(doc.events, doc.warnings))
    processes, threads = _process_and_thread_names(doc.events)
    devices = {p: d for p, name in processes.items() if (d := _device_of(name)) is not None}
    xprof = bool(devices) or any(_HOST_PROCESS.match(name) or _TF1_OPS.match(name) for name in processes.values())
    _drop_impossible_times(path, doc)
    complete = complete_events(doc)
    if not len(complete.events) and not any(is_truncation_warning(w) for w in doc.warnings):  # cut: `read_trace` says
        raise TraceError(path, "no timed events: no complete ('X') event, nor a begin ('B') with its end ('E')")
    pids = [e.pid for e in complete.events]
    pid = int_column(pids) if xprof else _process_ids(pids, processes)
    tid = int_column([e.tid for e in complete.events])
    lines, line_of = np.unique(np.stack([pid, tid], axis=1).reshape(-1, 2), axis=0, return_inverse=True)
    line_of = line_of.reshape(-1)
    layout = (
        _xprof_lines(lines, processes, threads, devices) if xprof else _named_lines(path, lines, processes, threads)
    )
    role = layout.roles[line_of]
    keep = role != _SKIPPED
    if not keep.all():
        doc.warnings["chrome: derived-line and non-profile events skipped"] += int((~keep).sum())
    events = [e for e, k in zip(complete.events, keep, strict=True) if k]
    role, pid, tid, line_of = role[keep], pid[keep], tid[keep], line_of[keep]
    args = [e.args or NO_ARGS for e in events]
    names = category_column([e.name for e in events])
    # XSpace names host events by their full name, which the export moves to long_name.
    full_names = category_column(
        [e.name if a.long_name is None else a.long_name for e, a in zip(events, args, strict=True)]
    )
    correlation = int_column([a.correlation_id for a in args])
    kind, step_id = _kinds(role, names, full_names, correlation, int_column([a.step_num for a in args]))
    on_device = ~np.isin(role, _HOST_ROLES)
    labels = sorted({*devices.values(), *(d for d in layout.devices if d is not None)})  # devices with no rows too
    line_device = np.array([-1 if d is None else labels.index(d) for d in layout.devices], np.int64)
    table = make_event_table(
        {
            "ts_ns": complete.ts_ns[keep],
            "dur_ns": complete.dur_ns[keep],
            "kind": pd.Categorical.from_codes(kind, KINDS),
            "device": pd.Categorical.from_codes(np.where(on_device, line_device[line_of], -1), labels),
            "stream": np.where(on_device, layout.streams[line_of], -1),
            "thread": np.where(on_device, -1, np.where(role == _HOST_OPS, pid, tid)),
            "name": names,
            "correlation": correlation,
            "step_id": step_id,
            **_activity_columns(events, args, names, kind, doc.warnings),
        },
        len(events),
    )
    table = drop_duplicates(table, doc.warnings, "chrome")
    if any(_TF1_OPS.match(name) for name in processes.values()) and len(table):
        table = concat_event_tables([table, _tf1_step(table)])
    legacy = _is_legacy_autograd(processes)
    if xprof:
        host_threads = [threads.get((p, t), "") for p, t in lines if devices.get(p) is None]
        host_names = {str(c) for c in pd.unique(full_names[role == _HOST].dropna())}
        framework = xprof_framework(host_threads, host_names, bool((kind == KINDS.index("cpu_op")).any()))
    else:
        framework = "pytorch" if legacy else "unknown"
    form = "xprof" if xprof else LEGACY_AUTOGRAD_FORM if legacy else NAMED_LINES_FORM
    return TraceRead(
        events=table,
        input=InputInfo(path=str(path), format="chrome", events=len(table)),
        framework=framework,
        devices={d: DeviceInfo(id=d) for d in labels},
        metadata={
            **{k: v for k, v in doc.top.items() if isinstance(v, str | int | float)},
            "processes": sorted(processes.values()),
            "clock": "relative",
            "chrome_form": form,
            "json_form": "array" if doc.array_form else "object",
        },
        warnings=doc.warnings,
    )


def _xprof_lines(
    lines: np.ndarray, processes: dict[int, str], threads: dict[tuple[int, int], str], devices: dict[int, str]
) -> _Lines:
    """The lines of an XProf export or TF1 timeline: roles as the XSpace reader gives them; a line's stream is its
    XLine id, or for a TF1 timeline the one its process names (`stream:15`)."""
    roles = np.array([_line_role(processes.get(p), devices.get(p), threads.get((p, t), "")) for p, t in lines], np.int8)
    line_ids = np.where(lines[:, 1] >= 2**31, lines[:, 1] - 2**32, lines[:, 1])  # the export writes XLine ids as uint32
    tf1 = [_TF1_STREAM.match(processes.get(int(p), "")) for p in lines[:, 0]]
    streams = np.array([int(m[3]) if m else line_id for m, line_id in zip(tf1, line_ids, strict=True)], np.int64)
    return _Lines(roles, [devices.get(int(p)) for p in lines[:, 0]], streams)


def _named_lines(
    path: Path | str, lines: np.ndarray, processes: dict[int, str], threads: dict[tuple[int, int], str]
) -> _Lines:
    """The lines of a Chrome trace without XProf's process names (no cat either, or Kineto's reader would have
    taken it): a line whose process or thread is named for a device (`rules.DEVICE_LINE_PATTERN`) holds device
    work, the others host ops. Its device is the number in those names (legacy autograd's "CUDA functions": the
    tid), its stream the thread name's stream number, else the tid. A trace that names no device line is host work
    alone (a legacy autograd export of CPU ops, a server's request spans): read as such, the report says so."""
    named = [(processes.get(int(p), ""), threads.get((int(p), int(t)), ""), int(t)) for p, t in lines]
    on_device = [
        bool(DEVICE_LINE_PATTERN.search(process) or DEVICE_LINE_PATTERN.search(thread)) for process, thread, _ in named
    ]
    streams = [STREAM_NUMBER_PATTERN.search(thread) for _, thread, _ in named]
    return _Lines(
        np.where(on_device, _STREAM, _NAMED_HOST).astype(np.int8),
        [_named_device(*line) if device else None for line, device in zip(named, on_device, strict=True)],
        np.array([int(m[1]) if m else t for m, (_, _, t) in zip(streams, named, strict=True)], np.int64),
    )


def paired_spans(events: list[Event], warnings: Counter[str]) -> list[Event]:
    """The spans the Trace Event Format writes as two events, as complete (``X``) events: duration events (``B`` /
    ``E``), which nest per thread, and async ones (``b`` / ``e``), which nest per process, category and name (the
    ``id`` that would tell concurrent same-named ones apart is not decoded: they pair innermost first). A begin
    pairs with the next event at its nesting level in its line when that is an end; the rest are counted."""
    at = [i for i, e in enumerate(events) if e.ph in _SPAN_PHASES]
    if not at:
        return []
    chosen = [events[i] for i in at]
    phases = np.array([_SPAN_PHASES[e.ph] for e in chosen], np.int8)  # type: ignore[index]
    ts = float_column([e.ts for e in chosen])
    keys = [
        (e.pid, e.tid) if abs(phase) == 1 else (e.pid, e.cat, e.name)
        for e, phase in zip(chosen, phases.tolist(), strict=True)
    ]
    _, line = np.unique(np.array([repr(k) for k in keys]), return_inverse=True)
    order = np.lexsort((np.arange(len(chosen)), ts, line.reshape(-1)))
    line, phases, ts = line.reshape(-1)[order], phases[order], ts[order]
    step = np.sign(phases).astype(np.int64)
    depth = np.cumsum(step)
    starts = np.flatnonzero(np.r_[True, line[1:] != line[:-1]])
    depth -= np.repeat(np.r_[0, depth[starts[1:] - 1]], np.diff(np.r_[starts, len(line)]))
    level = np.where(step > 0, depth, depth + 1)  # a begin opens its level, an end closes the one above it
    by_level = np.lexsort((np.arange(len(line)), level, line))
    begin, end = by_level[:-1], by_level[1:]
    paired = (
        (step[begin] > 0)
        & (step[end] < 0)
        & (line[begin] == line[end])
        & (level[begin] == level[end])
        & (ts[end] >= ts[begin])
    )
    begins, ends = begin[paired], end[paired]
    if unpaired := len(chosen) - 2 * len(begins):
        warnings["chrome: begin/end events without their other half skipped"] += unpaired
    return [
        replace(chosen[order[b]], ph="X", dur=float(ts[e] - ts[b]))
        for b, e in zip(begins.tolist(), ends.tolist(), strict=True)
    ]


def _named_device(process: str, thread: str, tid: int) -> str:
    """``GPU:n`` of a device line told by its names: the number after GPU / cuda / device in its process name, else
    its thread name (legacy autograd's "CUDA functions": the tid, which is the device index there), else 0."""
    if process == LEGACY_AUTOGRAD_CUDA_PROCESS:
        return f"GPU:{tid}"
    match = DEVICE_NUMBER_PATTERN.search(process) or DEVICE_NUMBER_PATTERN.search(thread)
    return f"GPU:{int(match[1]) if match else 0}"


def _is_legacy_autograd(processes: dict[int, str]) -> bool:
    """Whether the processes are legacy `torch.autograd.profiler` export's (`rules.LEGACY_AUTOGRAD_CPU_PROCESS`)."""
    return any(name in (LEGACY_AUTOGRAD_CPU_PROCESS, LEGACY_AUTOGRAD_CUDA_PROCESS) for name in processes.values())


def _process_ids(pids: list[Any], processes: dict[int, str]) -> np.ndarray:
    """The pid column of a trace that may write a pid as a name (legacy autograd's "CPU functions"): such a pid
    gets an id of its own, below -1, and is its process's name in `processes` (as chrome://tracing shows it)."""
    try:
        return np.array(pids, np.int64)
    except (TypeError, ValueError, OverflowError):
        codes, uniques = pd.factorize(np.asarray(pids, dtype=object))
    ids = int_column(list(uniques))  # a number written as a string ("12") is that number
    for i, value in enumerate(uniques):
        if isinstance(value, str) and ids[i] == -1:
            ids[i] = -2 - i
            processes.setdefault(int(ids[i]), value)
    return np.append(ids, -1)[codes]


def _process_and_thread_names(events: list[Event]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """pid -> process name and (pid, tid) -> thread name, from the ``M`` metadata events."""
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    named = [(e, e.args.name) for e in events if e.ph == "M" and e.args is not None and isinstance(e.args.name, str)]
    for e, name in named:
        if e.name == "process_name" and isinstance(e.pid, int):
            processes[e.pid] = name
        elif e.name == "thread_name" and isinstance(e.pid, int) and isinstance(e.tid, int):
            threads[(e.pid, e.tid)] = name
    return processes, threads


def _drop_impossible_times(path: Path | str, doc: TraceDoc) -> None:
    """Drop the complete events whose ts or dur no int64 ns can hold (inf, 1e300, > 7 days), before conversion.

    When that is every one of them, the file is not a trace with a few damaged events: TraceError.
    """
    complete = [e for e in doc.events if e.ph == "X"]
    literals: list[Any] = [e.ts for e in complete]  # Raw literals in a document that needs exact ts
    ts = exact_times(literals)[1] if doc.exact_ts else literals
    keep = usable_json_times(ts, [e.dur for e in complete], doc.warnings, "chrome")
    if keep.all():
        return
    if not keep.any():
        raise TraceError(path, f"all {len(complete):,} complete events have impossible times (inf, 1e300, > 7 days)")
    doc.events = list(itertools.compress(complete, keep))


def _device_of(process: str) -> str | None:
    """``GPU:4`` for ``/device:GPU:4`` (TPU likewise), ``rank0/GPU:4`` for ``rank0/device:GPU:4`` (the device
    ids of a run of several inputs), ``GPU:0`` for a TF1 timeline's ``/device:GPU:0/stream:15 Compute``; None for
    host and other processes."""
    if tf1 := _TF1_STREAM.match(process):
        return f"{tf1[1].upper()}:{tf1[2]}"
    match = _DEVICE_PROCESS.match(process)
    if match is None:
        return None
    device = f"{match[2]}:{match[3]}"
    return device if match[1] is None else f"{match[1]}/{device}"


def _tf1_step(table: pd.DataFrame) -> pd.DataFrame:
    """A TF1 timeline is the step stats of one `session.run`: the whole of it is one step, marked as such (a host
    step row over its events), or the steps would be guessed from bursts of device work."""
    start = int(table["ts_ns"].min())
    end = int((table["ts_ns"] + table["dur_ns"]).max())
    return make_event_table(
        {
            "ts_ns": np.array([start], np.int64),
            "dur_ns": np.array([end - start], np.int64),
            "kind": pd.Categorical.from_codes([KINDS.index("step")], KINDS),
            "name": category_column([TF1_STEP]),
            "step_id": np.array([0], np.int64),
        },
        1,
    )


def _line_role(process: str | None, device: str | None, thread: str) -> int:
    """What the events of one line mean, as the XSpace reader decides for the same line."""
    if process is not None and _TF1_STREAM.match(process):
        return _STREAM
    if device is None:
        if process is not None and _TF1_OPS.match(process):
            return _HOST_OPS
        return _HOST if process is not None and _HOST_PROCESS.match(process) else _SKIPPED
    if device.rpartition("/")[2].startswith("GPU"):
        if thread.startswith("Stream #"):
            return _STREAM
        return _DEVICE_STEPS if thread == "Steps" else _SKIPPED
    return _TPU_LINE_ROLES.get(thread, _DEVICE_OTHER)


def _kinds(
    role: np.ndarray,
    names: pd.Categorical,
    full_names: pd.Categorical,
    correlation: np.ndarray,
    step_num: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Kind code and step id of every row from its line role, (full) name and stats."""
    kind = np.full(len(role), KINDS.index("other"), np.int8)
    step_id = np.full(len(role), -1, np.int64)
    stream = role == _STREAM
    unnamed = KINDS.index(device_activity_kind(""))  # as XSpace reads a stream event without a name
    kind[stream] = per_category(names, lambda c: KINDS.index(device_activity_kind(c)), unnamed, np.int8)[stream]
    for line_role, line_kind in _ROLE_KINDS.items():
        kind[role == line_role] = KINDS.index(line_kind)
    steps = role == _DEVICE_STEPS
    step_id[steps] = per_category(names, step_number, -1, np.int64)[steps]

    host = role == _HOST
    other = KINDS.index("other")
    kind[host] = per_category(full_names, lambda c: KINDS.index(xprof_host_kind(c)), other, np.int8)[host]
    marker = host & (step_num >= 0) & per_category(names, lambda c: bool(STEP_MARKER_PATTERN.match(c)), False, bool)
    kind[marker] = KINDS.index("step")
    step_id[marker] = step_num[marker]
    api = host & (correlation >= 0)
    sync = per_category(names, is_sync_api, False, bool)
    kind[api] = np.where(sync[api], KINDS.index("sync"), KINDS.index("runtime"))
    kind[(role == _NAMED_HOST) & sync] = KINDS.index("sync")
    return kind, step_id


def _activity_columns(
    events: list[Event], args: list[Args], names: pd.Categorical, kind: np.ndarray, warnings: Counter[str]
) -> dict[str, Any]:
    """Copy kind, bytes and memory of copies and memsets, occupancy of kernels, from their stats."""
    memcpy = kind == KINDS.index("memcpy")
    memset = kind == KINDS.index("memset")
    kernel = kind == KINDS.index("kernel")
    nbytes = np.full(len(events), -1, np.int64)
    nbytes[memcpy] = [details_bytes(a.memcpy_details or "") for a in _select(args, memcpy)]
    nbytes[memset] = [details_bytes(a.memset_details or "") for a in _select(args, memset)]
    memory = np.full(len(events), -1, np.int8)
    memory[memcpy] = [
        MEMORY_KINDS.index(details_copy_memory(e.name or "", a.memcpy_details or ""))
        for e, a in zip(_select(events, memcpy), _select(args, memcpy), strict=True)
    ]
    copies = per_category(names, lambda c: COPY_KINDS.index(copy_kind(c)), -1, np.int8)
    # The theoretical_occupancy_pct stat if it is a possible one, else occ_pct of kernel_details.
    theoretical = valid_occupancy(
        float_column([a.theoretical_occupancy_pct for a in _select(args, kernel)]), warnings, "chrome"
    )
    fallback = np.isnan(theoretical)
    from_details = np.array([details_occupancy(a.kernel_details or "") for a in _select(args, kernel)], np.float64)
    theoretical[fallback] = valid_occupancy(from_details[fallback], warnings, "chrome")
    occupancy = np.full(len(events), np.nan)
    occupancy[kernel] = theoretical
    return {
        "bytes": nbytes,
        "copy_kind": pd.Categorical.from_codes(np.where(memcpy, copies, -1), COPY_KINDS),
        "src_memory": pd.Categorical.from_codes(memory, MEMORY_KINDS),
        "occupancy_pct": occupancy,
    }


def _select(items: list, mask: np.ndarray) -> list:
    """The items where `mask` is true (mask rows are usually few: copies, kernels)."""
    return [items[i] for i in np.flatnonzero(mask)]
