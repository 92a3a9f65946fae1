"""The annotated timeline: one Chrome Trace Event Format file with the run's activity and traceinsight's findings.

Perfetto (ui.perfetto.dev) and ``chrome://tracing`` open it (``{"traceEvents": [...], "displayTimeUnit": "ns"}``,
gzip when the name ends in ``.gz``). It holds:

* **device activity**: every kernel, memcpy and memset, names verbatim, a process per device
  (``/device:GPU:0``; ``rank0/device:GPU:0`` when the run has several inputs) and a thread per stream
  (``Stream #7``; TPU ``XLA Ops``), plus the device's own ``Steps`` line where the trace has one;
* **the host threads that matter**: launch calls (kind ``runtime``), input waits, syncs (with the blocking calls
  such as ``aten::item`` that gap causes count as syncs) and step markers (and framework ops, kind ``cpu_op``,
  on a CPU-only run), a process per input (``/host:CPU``, ``rank0/host:CPU``)
  and a thread per host thread;
* per device an **idle gaps** track (`gap_track_name`): its gaps as the ledger splits them (`ledger.idle_layers`),
  a slice per stretch of one part, named by the part (``input_wait``, ``host_launch``, ``blocking_wait``...), args
  ``length_ns``, ``part`` and, on the slice a longest gap of the report starts with, ``host_activity``;
* per device a **GPU-Util** counter: the share of each fixed bin (1 ms) in which some kernel runs, in %;
* a process ``traceinsight`` with a **steps** track (the run's steps) and a **bottlenecks** track: per step, one
  slice per finding that costs that step time (`Findings.step_costs`), starting at the step's start and as long as that
  cost, costliest first so they nest; args ``id``, ``rank``, ``severity``, ``saving_ns`` (this step's); a **critical
  path** track: each step's critical path (`analysis/critical_path.py`), end to end, a slice per stretch (one op's
  consecutive stretches merged) named after the op, call or kernel on it, args ``part``, ``group``, ``input``,
  ``step``; and per input
  with collective waits a **collective waits** track (`wait_track_name`): one slice per wait inside a collective for
  later ranks (`analysis/collectives.py`), from the rank's arrival for its wait, named after the collective, args
  ``rank``, ``wait_ns``, ``key`` (the instance: how it was matched across ranks). Waits that overlap (DDP's buckets
  of one step wait at once) go on further tracks (``collective waits (rank0) 2``): Perfetto drops a slice that
  overlaps another of its track without nesting in it.

Devices and hosts follow XProf's trace_viewer export (those process and thread names, stats as args
``correlation_id``, ``memcpy_details``, ``Memset_details``, ``step_num``), so ``traceinsight report`` reads the
file back as a Chrome trace with the same device activity; the tracks added here lie where that reader does
not look (a TPU's gap slices come back as ``other`` rows, which are no device work). A run of several inputs
reads back as one input whose devices keep their ``rank0/`` prefixes.

Timestamps are µs written exactly from the int64 ns (``1623143089861123.456``, `trace_ts`): a float would lose
the ns of an epoch time, and Perfetto reads the digits back into the same int64 ns (``slice.ts``). Durations are
never negative. Stream and thread ids become tids modulo 2**32 (Perfetto reads tids as uint32). Events are
written as the profiler recorded them: kernels that overlap on one stream (programmatic dependent launch, clock
skew) are drawn stacked, as in the original trace.

The event table must still be there: export before `Analysis.without_events()` (which empties it). Big
inputs are cut to whole steps: those asked for, or by default the longest `DEFAULT_MAX_STEPS` whose events fit
`DEFAULT_MAX_EVENTS`, and a warning says so.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from contextlib import nullcontext
from pathlib import Path
from typing import Any, BinaryIO, cast

import msgspec
import numpy as np
import orjson
import pandas as pd

from traceinsight import __version__
from traceinsight.analysis import Analysis
from traceinsight.analysis.gaps import DeviceGaps, gap_intervals
from traceinsight.analysis.ledger import idle_layers
from traceinsight.analysis.step_model import input_wait_intervals
from traceinsight.analysis.steps import Step
from traceinsight.events import (
    COPY_KINDS,
    DEVICE_WORK_KINDS,
    KINDS,
    MEMORY_KINDS,
    blocking_mask,
    input_labels,
    kind_mask,
)
from traceinsight.findings import Findings
from traceinsight.intervals import Intervals, intersection, union, union_of
from traceinsight.render.output import Staged, commit, stage
from traceinsight.result import Bottleneck

DEFAULT_MAX_EVENTS = 1_000_000  # beyond this a browser struggles: the file is cut to whole steps
DEFAULT_MAX_STEPS = 3  # the longest steps kept when it is
DEFAULT_UTIL_BIN_NS = 1_000_000
MAX_UTIL_BINS = 100_000  # per device; a longer span gets wider bins
FINDINGS_PROCESS = "traceinsight"
STEPS_TRACK = "steps"
BOTTLENECKS_TRACK = "bottlenecks"
PATH_TRACK = "critical path"
UTIL_COUNTER = "GPU-Util"
HOST_KINDS = ("runtime", "input_wait", "sync", "step")
_FINDINGS_PID = 1
_STEPS_TID, _BOTTLENECKS_TID, _PATH_TID, _WAITS_TID = 1, 2, 3, 4  # _WAITS_TID: the first waits track; one an
# (input, lane) after
_FRACTIONS = np.array([f".{i:03d}" for i in range(1000)], dtype=object)
_SEP = ",\n"
_ROW_COLUMNS = ["ts_ns", "dur_ns", "kind", "device", "stream", "thread", "name", "correlation", "bytes"]
_ROW_COLUMNS += ["copy_kind", "src_memory", "step_id", "input_id"]


def gap_track_name(device: str) -> str:
    """The thread (track) of the exported file that holds `device`'s idle gaps (in the device's process)."""
    return f"idle gaps ({device})"


def wait_track_name(label: str | None, lane: int = 0) -> str:
    """The thread (track) of the traceinsight process that holds an input's collective waits (`label`: the input's
    prefix in a run of several, ``rank1``; None for a run of one); `lane` > 0: its waits that overlap others."""
    name = "collective waits" if label is None else f"collective waits ({label})"
    return f"{name} {lane + 1}" if lane else name


def trace_ts(ns: int) -> str:
    """`ns` as the exported file writes it: exact µs with three decimals (what the gap slices' ``ts`` hold)."""
    return "".join(part[0] for part in _us_parts(np.array([ns], np.int64)))


def parse_steps(text: str) -> tuple[int, int]:
    """``--steps`` as `write_annotated_trace` takes it: ``"3:5"`` -> (3, 5) (step ids 3 to 5), ``"4"`` -> (4, 4).
    Raises ValueError with a message for people."""
    first, _, last = text.partition(":")
    try:
        bounds = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"--steps takes step ids A:B (e.g. 3:5) or one id, not {text!r}") from None
    if bounds[0] > bounds[1]:
        raise ValueError(f"--steps {text}: the first step id is after the last")
    return bounds


def write_annotated_trace(
    analysis: Analysis,
    findings: Findings,
    path: Path,
    steps: tuple[int, int] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    *,
    max_events: int = DEFAULT_MAX_EVENTS,
    util_bin_ns: int = DEFAULT_UTIL_BIN_NS,
    protected: tuple[Path, ...] = (),
) -> list[str]:
    """Write the annotated timeline of `analysis` (its `findings`, from `findings.evaluate`, give the bottlenecks) to
    `path`, atomically and never over one of `protected` (the inputs); returns the warnings (steps cut, bins
    widened).

    `steps` = (A, B) keeps step ids A..B; without it, a trace of more than `max_events` events keeps its
    `max_steps` longest steps (fewer when they hold more than `max_events`). Raises ValueError when the
    event table was emptied (`Analysis.without_events`) or no step has an id in A..B.
    """
    staged, warnings = stage_annotated_trace(
        analysis, findings, path, steps, max_steps, max_events=max_events, util_bin_ns=util_bin_ns, protected=protected
    )
    commit([staged])
    return warnings


def stage_annotated_trace(
    analysis: Analysis,
    findings: Findings,
    path: Path,
    steps: tuple[int, int] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    *,
    max_events: int = DEFAULT_MAX_EVENTS,
    util_bin_ns: int = DEFAULT_UTIL_BIN_NS,
    protected: tuple[Path, ...] = (),
) -> tuple[Staged, list[str]]:
    """`write_annotated_trace`, written to a temporary file only: the CLI renames it into place with the report's
    other outputs, as one set (`output.write_outputs`)."""
    chunks, warnings = _trace_chunks(analysis, findings, steps, max_steps, max_events, util_bin_ns)
    return _stage_chunks(Path(path), chunks, protected), warnings


def annotated_trace(
    analysis: Analysis,
    findings: Findings,
    steps: tuple[int, int] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_events: int = DEFAULT_MAX_EVENTS,
    util_bin_ns: int = DEFAULT_UTIL_BIN_NS,
) -> tuple[str, list[str]]:
    """The JSON text `write_annotated_trace` writes, and its warnings."""
    chunks, warnings = _trace_chunks(analysis, findings, steps, max_steps, max_events, util_bin_ns)
    return "".join(chunks), warnings


def _trace_chunks(
    analysis: Analysis,
    findings: Findings,
    steps: tuple[int, int] | None,
    max_steps: int,
    max_events: int,
    util_bin_ns: int,
) -> tuple[list[str], list[str]]:
    """The document in pieces (a big one is written piece by piece, never whole in memory twice)."""
    events = analysis.profile.events
    if events.empty and (analysis.devices or analysis.steps.items):
        raise ValueError("the analysis has no event table left: export the trace before Analysis.without_events()")
    rows = _exported_rows(events)
    warnings: list[str] = []
    chosen, windows = _choose_steps(analysis, events, rows, steps, max_steps, max_events, warnings)
    if windows is not None:
        ts = events["ts_ns"].to_numpy()[rows]
        rows = rows[_overlapping(ts, ts + events["dur_ns"].to_numpy()[rows], windows)]
    table = events[_ROW_COLUMNS].take(rows)
    waits = _collective_waits(analysis, windows)
    layout = _Layout(analysis, table, waits)
    idle = _idle_slices(analysis, events)
    blocks = [
        _row_events(table, layout),
        *(_gap_events(gaps, idle[gaps.device], layout, windows) for gaps in analysis.gaps),
        *_util_counters(analysis, events, layout, windows, util_bin_ns, warnings),
        _step_events(chosen),
        _bottleneck_events(analysis, findings, chosen, warnings),
        _path_events(analysis, chosen),
        _wait_events(waits, layout),
    ]
    header = '{"displayTimeUnit":"ns","otherData":' + _json({"generator": f"traceinsight {__version__}"})
    return [header + ',"traceEvents":[\n' + layout.metadata(), *blocks, "\n]}\n"], warnings


# --------------------------------------------------------------------------- what is exported


def _exported_rows(events: pd.DataFrame) -> np.ndarray:
    """Rows of device work, device Steps lines, and host launches, input waits, syncs (and the blocking calls the
    gap causes count as syncs) and step markers; on a run without device work (CPU only: the host is the device)
    the host's framework ops too."""
    on_device = events["device"].cat.codes.to_numpy() >= 0
    device = on_device & kind_mask(events, *DEVICE_WORK_KINDS, "step")
    work = on_device & kind_mask(events, *DEVICE_WORK_KINDS)
    host = kind_mask(events, *HOST_KINDS, *(() if work.any() else ("cpu_op",)))
    host &= ~on_device
    host |= blocking_mask(events)  # aten::item, blocking copies: syncs, whatever their kind
    return np.flatnonzero(device | host)


def _choose_steps(
    analysis: Analysis,
    events: pd.DataFrame,
    rows: np.ndarray,
    steps: tuple[int, int] | None,
    max_steps: int,
    max_events: int,
    warnings: list[str],
) -> tuple[list[Step], Intervals | None]:
    """The steps written and the windows (their union) the events must overlap; None: everything."""
    items = analysis.steps.items
    gap_starts = np.concatenate([g.starts_ns for g in analysis.gaps] or [np.zeros(0, np.int64)])
    starts = np.sort(np.concatenate([events["ts_ns"].to_numpy()[rows], gap_starts]))
    count = len(starts)
    if steps is not None:
        first, last = steps
        chosen = [s for s in items if first <= s.id <= last]
        if not chosen:
            ids = f"ids {min(s.id for s in items)}..{max(s.id for s in items)}" if items else "none"
            raise ValueError(f"--steps {first}:{last}: no step has an id in {first}..{last} (the run's steps: {ids})")
        # A range partly past the run's steps is cut to them, and says so: the timeline holds fewer than asked.
        lowest, highest = min(s.id for s in items), max(s.id for s in items)
        if first < lowest or last > highest:
            kept = sorted(s.id for s in chosen)
            warnings.append(
                f"annotated trace: --steps {first}:{last} reaches past the run's steps (ids {lowest}..{highest}): "
                f"kept steps {kept[0]}..{kept[-1]}"
            )
        inside = _events_in(starts, chosen)
        if inside.sum() > max_events:
            warnings.append(
                f"annotated trace: steps {first}..{last} hold about {int(inside.sum()):,} events, over the "
                f"limit of {max_events:,}: the file may be slow to open"
            )
    elif count <= max_events:
        return items, None
    elif not items:
        warnings.append(f"annotated trace: {count:,} events, over the limit of {max_events:,}, and no steps to cut by")
        return items, None
    else:
        longest = sorted(items, key=lambda s: -s.dur_ns)
        fits = int(np.searchsorted(np.cumsum(_events_in(starts, longest)), max_events, side="right"))
        chosen = sorted(longest[: max(1, min(max_steps, fits))], key=lambda s: s.start_ns)
        warnings.append(
            f"annotated trace: {count:,} events, over the limit of {max_events:,}: kept the {len(chosen)} longest "
            f"of {len(items)} steps (ids {', '.join(str(s.id) for s in chosen)}); choose others with --steps A:B"
        )
    chosen_starts = np.array([s.start_ns for s in chosen], np.int64)
    return chosen, union(chosen_starts, chosen_starts + np.array([s.dur_ns for s in chosen], np.int64))


def _events_in(sorted_starts: np.ndarray, steps: list[Step]) -> np.ndarray:
    """How many of the events (their sorted starts) start inside each step."""
    starts = np.array([s.start_ns for s in steps], np.int64)
    ends = starts + np.array([s.dur_ns for s in steps], np.int64)
    return np.searchsorted(sorted_starts, ends) - np.searchsorted(sorted_starts, starts)


def _overlapping(ts: np.ndarray, ends: np.ndarray, windows: Intervals | None) -> np.ndarray:
    """Which [ts, end) overlap one of the disjoint sorted `windows` (an instant counts as 1 ns long)."""
    if windows is None:
        return np.ones(len(ts), bool)
    last = np.searchsorted(windows.starts, np.maximum(ends, ts + 1), side="left") - 1
    return (last >= 0) & (ts < windows.ends[np.clip(last, 0, None)])


# --------------------------------------------------------------------------- processes and threads


class _Layout:
    """pid of every device and input, tid of every line, and the ``M`` events that name them."""

    def __init__(self, analysis: Analysis, table: pd.DataFrame, waits: list[_Wait]) -> None:
        inputs = analysis.profile.inputs
        labels = input_labels(inputs) if len(inputs) > 1 else None
        self.categories = [str(c) for c in table["device"].cat.categories]
        device_codes = table["device"].cat.codes.to_numpy()
        on_device = device_codes >= 0
        used = [self.categories[c] for c in np.unique(device_codes[on_device]).tolist()]
        devices = list(dict.fromkeys([d.id for d in analysis.devices] + [g.device for g in analysis.gaps] + used))
        self.device_pid = {device: _FINDINGS_PID + 1 + i for i, device in enumerate(devices)}
        host_inputs = np.unique(table["input_id"].to_numpy()[~on_device]).tolist()
        self.host_pid = {i: _FINDINGS_PID + 1 + len(devices) + k for k, i in enumerate(host_inputs)}
        # A device's lines beyond its streams, on tids no stream has: its Steps line, then its idle gaps.
        streams = table["stream"].to_numpy()
        used_tids = pd.Series(_tid(streams[on_device])).groupby(device_codes[on_device]).unique()
        free = {self.categories[int(c)]: _free_tids(set(tids.tolist())) for c, tids in used_tids.items()}
        self.steps_tid = {d: free.get(d, (1, 2))[0] for d in devices}
        self.gaps_tid = {d: free.get(d, (1, 2))[1] for d in devices}
        self._names: list[tuple[str, int, int, str, int]] = [
            ("process", _FINDINGS_PID, 0, FINDINGS_PROCESS, 0),
            ("thread", _FINDINGS_PID, _STEPS_TID, STEPS_TRACK, 0),
            ("thread", _FINDINGS_PID, _BOTTLENECKS_TID, BOTTLENECKS_TRACK, 1),
            ("thread", _FINDINGS_PID, _PATH_TID, PATH_TRACK, 2),
        ]
        lanes = sorted({(w.input_id, w.lane) for w in waits})
        self.waits_tid = {lane: _WAITS_TID + k for k, lane in enumerate(lanes)}
        for (i, lane), tid in self.waits_tid.items():
            name = wait_track_name(None if labels is None else labels[i], lane)
            self._names.append(("thread", _FINDINGS_PID, tid, name, tid))
        for device, pid in self.device_pid.items():
            self._names.append(("process", pid, 0, _device_process(device), pid))
        for gaps in analysis.gaps:
            self._names.append(
                ("thread", self.device_pid[gaps.device], self.gaps_tid[gaps.device], gap_track_name(gaps.device), -2)
            )
        for i, pid in self.host_pid.items():
            self._names.append(("process", pid, 0, "/host:CPU" if labels is None else f"{labels[i]}/host:CPU", pid))
        self._lines(table, device_codes, streams)

    def _lines(self, table: pd.DataFrame, device_codes: np.ndarray, streams: np.ndarray) -> None:
        """Name every device line (a stream's work, a Steps line) and host thread the rows use."""
        step = kind_mask(table, "step")
        for on_steps in (False, True):
            mine = (device_codes >= 0) & (step == on_steps)
            for code, stream in _distinct_pairs(device_codes[mine], streams[mine]):
                device = self.categories[code]
                if on_steps:
                    self._names.append(("thread", self.device_pid[device], self.steps_tid[device], "Steps", -1))
                    continue
                name = "XLA Ops" if device.rsplit("/", 1)[-1].startswith("TPU") else f"Stream #{stream}"
                self._names.append(("thread", self.device_pid[device], int(_tid(stream)), name, stream))
        host = device_codes < 0
        for input_id, thread in _distinct_pairs(table["input_id"].to_numpy()[host], table["thread"].to_numpy()[host]):
            self._names.append(("thread", self.host_pid[input_id], int(_tid(thread)), f"thread {thread}", thread))

    def metadata(self) -> str:
        """The ``M`` events: process and thread names and sort order (the first event of the file: no comma)."""
        events = []
        for what, pid, tid, name, order in dict.fromkeys(self._names):
            events.append({"ph": "M", "name": f"{what}_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}})
            index = {"sort_index": order}
            events.append({"ph": "M", "name": f"{what}_sort_index", "pid": pid, "tid": tid, "ts": 0, "args": index})
        return _SEP.join(_json(e) for e in events)


def _tid(ids: Any) -> Any:
    """A stream or thread id as a tid viewers take: Perfetto reads tids as uint32 (and a negative one, such as
    an unknown thread's -1, as none), so ids are taken modulo 2**32 (-1 -> 4294967295)."""
    return np.asarray(ids, np.int64) & 0xFFFFFFFF


def _free_tids(used: set[int]) -> tuple[int, int]:
    """Two tids after those `used` by a device's streams (or the lowest free ones, after a stream at 2**32 - 1)."""
    top = max(used, default=0)
    if top + 2 <= 0xFFFFFFFF:
        return top + 1, top + 2
    free = (tid for tid in range(len(used) + 2) if tid not in used)
    return next(free), next(free)


def _device_process(device: str) -> str:
    """XProf's process name of a device: ``/device:GPU:0``, ``rank0/device:GPU:0`` with an input's prefix."""
    prefix, _, local = device.rpartition("/")
    return f"{prefix}/device:{local}"


# --------------------------------------------------------------------------- the rows


def _row_events(table: pd.DataFrame, layout: _Layout) -> str:
    """The exported rows as ``X`` events, each thread's in time order (longest first at one instant, so nested
    slices come parent first)."""
    n = len(table)
    if not n:
        return ""
    device_codes = table["device"].cat.codes.to_numpy()
    on_device = device_codes >= 0
    kind = table["kind"].cat.codes.to_numpy()
    step = kind == KINDS.index("step")
    device_pids = np.array([layout.device_pid.get(c, 0) for c in layout.categories] + [0], np.int64)
    host_pids = np.zeros(int(table["input_id"].max()) + 1, np.int64)
    for i, pid in layout.host_pid.items():
        host_pids[i] = pid
    pid = np.where(on_device, device_pids[device_codes], host_pids[table["input_id"].to_numpy()])
    steps_tids = np.array([layout.steps_tid.get(c, 0) for c in layout.categories] + [0], np.int64)
    device_tid = np.where(step, steps_tids[device_codes], _tid(table["stream"].to_numpy()))
    tid = np.where(on_device, device_tid, _tid(table["thread"].to_numpy()))
    ts = table["ts_ns"].to_numpy()
    dur = np.maximum(table["dur_ns"].to_numpy(), 0)
    order = np.lexsort((-dur, ts, tid, pid))
    table, pid, tid, ts, dur, kind = table.iloc[order], pid[order], tid[order], ts[order], dur[order], kind[order]
    args = ['{"kind":', _json_strings(KINDS)[kind], *_row_args(table, kind), "}"]
    return _complete_events(_few_ints_text(pid), _few_ints_text(tid), ts, dur, _names(table["name"].array), args)


def _row_args(table: pd.DataFrame, kind: np.ndarray) -> list[np.ndarray]:
    """Per row, the stats the Chrome reader reads back (empty where a row has none): ``correlation_id``,
    ``memcpy_details`` / ``Memset_details`` (host-side memory and size, XProf's spelling), ``step_num``."""
    n = len(table)
    correlation = table["correlation"].to_numpy()
    linked = correlation >= 0
    corr = _optional(n, linked, ',"correlation_id":', _int_text(correlation[linked]))
    nbytes = table["bytes"].to_numpy()
    sized = nbytes >= 0
    size = _optional(n, sized, "size:", _int_text(nbytes[sized]))
    memory = np.append(np.array([m if m != "unknown" else "" for m in MEMORY_KINDS], dtype=object), "")
    memory = memory[table["src_memory"].cat.codes.to_numpy()]
    d2h = table["copy_kind"].cat.codes.to_numpy() == COPY_KINDS.index("d2h")
    known = memory != ""
    side = _optional(n, known, np.where(d2h, "kind_dst:", "kind_src:")[known], memory[known])
    between = np.where(known & sized, " ", "")
    memcpy, memset = kind == KINDS.index("memcpy"), kind == KINDS.index("memset")
    copies = memcpy & (known | sized)
    details = np.full(n, "", dtype=object)
    details[copies] = ',"memcpy_details":"' + side[copies] + between[copies] + size[copies] + '"'
    sets = memset & sized
    details[sets] = ',"Memset_details":"' + size[sets] + '"'
    step_ids = table["step_id"].to_numpy()
    marked = (kind == KINDS.index("step")) & (step_ids >= 0)
    return [corr, details, _optional(n, marked, ',"step_num":', _int_text(step_ids[marked]))]


def _optional(n: int, where: np.ndarray, prefix: str | np.ndarray, values: np.ndarray) -> np.ndarray:
    """`prefix` + `values` at the rows `where` is true (`values` are theirs only), "" elsewhere."""
    out = np.full(n, "", dtype=object)
    out[where] = prefix + values
    return out


# --------------------------------------------------------------------------- what traceinsight adds


def _idle_slices(analysis: Analysis, events: pd.DataFrame) -> dict[str, dict[str, Intervals]]:
    """Per device, its idle time by ledger part (`ledger.idle_layers`): the same instants the report's idle parts
    count, so a slice's name is the word the page uses for that time."""
    layers = {}
    for gaps in analysis.gaps:
        usage = next(u for u in analysis.devices if u.id == gaps.device)
        busy = [u.busy for u in analysis.devices if u.input_id == usage.input_id]
        input_wait = input_wait_intervals(events, usage.input_id, busy)
        layers[gaps.device] = idle_layers(input_wait, gap_intervals(gaps), analysis.waits.outside_of(usage.input_id))
    return layers


def _gap_events(gaps: DeviceGaps, layers: dict[str, Intervals], layout: _Layout, windows: Intervals | None) -> str:
    """One device's idle time on its gaps track: a slice per stretch of one ledger part, named by the part; the
    report's longest gaps say what the host did meanwhile on the slice they start with."""
    every_gap = union_of(*gap_intervals(gaps).values())  # the track holds the gaps (not the time around the work)
    parts = [(name, cut) for name, layer in layers.items() if len(cut := intersection(layer, every_gap))]
    if not parts:
        return ""
    starts = np.concatenate([layer.starts for _, layer in parts])
    durations = np.concatenate([layer.ends - layer.starts for _, layer in parts])
    names = np.concatenate([np.full(len(layer), i) for i, (_, layer) in enumerate(parts)])
    order = np.argsort(starts, kind="stable")
    starts, durations, names = starts[order], durations[order], names[order]
    keep = _overlapping(starts, starts + durations, windows)
    starts, durations, names = starts[keep], durations[keep], names[keep]
    if not len(starts):
        return ""
    activity = np.full(len(starts), "", dtype=object)
    for gap in gaps.longest:  # a few: the report's longest gaps, with what the host did meanwhile
        i = int(np.searchsorted(starts, gap.start_ns))
        if i < len(starts) and starts[i] == gap.start_ns and gap.host_activity:
            activity[i] = ',"host_activity":' + _json(gap.host_activity)
    names_json = _json_strings([name for name, _ in parts])[names]
    args = ['{"length_ns":', _int_text(durations), ',"part":', names_json, activity, "}"]
    pid, tid = str(layout.device_pid[gaps.device]), str(layout.gaps_tid[gaps.device])
    return _complete_events(pid, tid, starts, durations, names_json, args)


def _util_counters(
    analysis: Analysis,
    events: pd.DataFrame,
    layout: _Layout,
    windows: Intervals | None,
    bin_ns: int,
    warnings: list[str],
) -> list[str]:
    """Per device, a ``C`` event per fixed bin: the share of it some kernel runs (%), a sample only where the
    value changes, and 0 after the last bin of each stretch written."""
    kernels = events[kind_mask(events, "kernel") & (events["device"].cat.codes.to_numpy() >= 0)]
    codes = kernels["device"].cat.codes.to_numpy()
    categories = [str(c) for c in kernels["device"].cat.categories]
    starts = kernels["ts_ns"].to_numpy()
    ends = starts + kernels["dur_ns"].to_numpy()
    blocks = []
    for usage in analysis.devices:
        mine = codes == categories.index(usage.id) if usage.id in categories else np.zeros(len(codes), bool)
        busy = union(starts[mine], ends[mine])
        width = max(bin_ns, math.ceil(usage.span_ns / MAX_UTIL_BINS))
        if width > bin_ns:
            warnings.append(f"annotated trace: {UTIL_COUNTER} of {usage.id} in {width / 1e6:g} ms bins (span too long)")
        edges = usage.start_ns + width * np.arange(max(1, math.ceil(usage.span_ns / width)), dtype=np.int64)
        tops = np.minimum(edges + width, usage.end_ns)
        kept = np.flatnonzero(_overlapping(edges, tops, windows))
        if not len(kept):
            continue
        pct = np.round(100.0 * busy.covered_between(edges, tops) / np.maximum(tops - edges, 1), 1)[kept]
        run_start = np.append(True, kept[1:] != kept[:-1] + 1)
        changed = run_start | np.append(True, pct[1:] != pct[:-1])
        run_end = np.append(kept[1:] != kept[:-1] + 1, True)
        ts = np.concatenate([edges[kept][changed], tops[kept][run_end]])
        values = np.concatenate([pct[changed], np.zeros(int(run_end.sum()))])
        order = np.argsort(ts, kind="stable")
        pid = str(layout.device_pid[usage.id])
        parts = ['{"ph":"C","pid":', pid, ',"tid":0,"ts":', *_us_parts(ts[order]), ',"name":"', UTIL_COUNTER]
        parts += ['","args":{"%":', _float_text(values[order]), "}}"]
        blocks.append(_rows(parts, len(ts)))
    return blocks


def _step_events(steps: list[Step]) -> str:
    """The run's steps (those written), on the steps track."""
    args = [_json({"id": s.id, "dur_ns": s.dur_ns, "breakdown": s.breakdown}) for s in steps]
    return _slices(_STEPS_TID, steps, [f"step {s.id}" for s in steps], [s.dur_ns for s in steps], args)


def _bottleneck_events(analysis: Analysis, findings: Findings, steps: list[Step], warnings: list[str]) -> str:
    """Per step written, a slice per bottleneck that costs it time, costliest first: they nest."""
    model = analysis.step_model
    items = analysis.steps.items
    if model.count != len(items):
        warnings.append("annotated trace: the step model does not match the steps; no bottlenecks track")
        return ""
    position = {s.start_ns: i for i, s in enumerate(items)}
    rows = [position[s.start_ns] for s in steps]
    slices: list[tuple[Step, int, Bottleneck]] = []
    costs = findings.step_costs
    for bottleneck in findings.bottlenecks:
        if bottleneck.id not in costs:
            continue
        cost = np.clip(np.round(costs[bottleneck.id][rows]), 0, model.step_ns[rows]).astype(np.int64)
        slices += [(steps[k], int(cost[k]), bottleneck) for k in np.flatnonzero(cost > 0).tolist()]
    slices.sort(key=lambda x: (x[0].start_ns, -x[1], x[2].rank))
    args = [
        _json(
            {
                "id": b.id,
                "rank": b.rank,
                "severity": b.severity,
                "kind": b.kind,
                "title": b.title,
                "step": s.id,
                "saving_ns": cost,
            }
        )
        for s, cost, b in slices
    ]
    return _slices(_BOTTLENECKS_TID, [x[0] for x in slices], [x[2].id for x in slices], [x[1] for x in slices], args)


def _path_events(analysis: Analysis, steps: list[Step]) -> str:
    """The critical path of each step written (`Analysis.critical_path`), a slice per stretch on the critical path
    track, consecutive stretches of one op (same name, part and input, end to end) merged: they tile each step.
    Named after the op, call or kernel (else the part: idle time); args ``part``, ``group``, ``input`` (the input's
    label, ``rank1``), ``step``."""
    if not steps:
        return ""
    position = {s.start_ns: i for i, s in enumerate(analysis.steps.items)}
    segments = analysis.critical_path.segments
    segments = segments[np.isin(segments["step"].to_numpy(), [position[s.start_ns] for s in steps])]
    if segments.empty:
        return ""
    segments = segments.sort_values(["step", "start_ns"], kind="stable")
    step = segments["step"].to_numpy()
    start, end = segments["start_ns"].to_numpy(), segments["end_ns"].to_numpy()
    name, part = segments["name"].cat.codes.to_numpy(), segments["part"].cat.codes.to_numpy()
    input_id = segments["input_id"].to_numpy()
    same = [step, name, part, input_id]
    first = np.ones(len(step), bool)
    first[1:] = np.logical_or.reduce([a[1:] != a[:-1] for a in same]) | (start[1:] != end[:-1])
    heads = np.flatnonzero(first)
    tails = np.append(heads[1:], len(step)) - 1
    heads_part, heads_name = part[heads], name[heads]
    part_json = _json_strings(segments["part"].cat.categories)
    group_json = _json_strings(segments["group"].cat.categories)[segments["group"].cat.codes.to_numpy()[heads]]
    labels = input_labels(analysis.profile.inputs)
    inputs = np.unique(input_id)
    label_json = _json_strings([labels[i] if i < len(labels) else f"input{i}" for i in inputs.tolist()])
    step_ids = np.array([s.id for s in analysis.steps.items], np.int64)[step[heads]]
    name_json = np.append(_json_strings(segments["name"].cat.categories), "")[heads_name]
    name_json = np.where(heads_name >= 0, name_json, part_json[heads_part])
    args = ['{"part":', part_json[heads_part], ',"group":', group_json, ',"input":']
    args += [label_json[np.searchsorted(inputs, input_id[heads])], ',"step":', _int_text(step_ids), "}"]
    ts = start[heads]
    return _complete_events(str(_FINDINGS_PID), str(_PATH_TID), ts, end[tails] - ts, name_json, args)


class _Wait(msgspec.Struct, frozen=True):
    """One collective wait as written: on lane `lane` of its input's waits tracks."""

    input_id: int
    lane: int
    rank: int
    ts_ns: int
    dur_ns: int
    collective: str
    key: str


def _collective_waits(analysis: Analysis, windows: Intervals | None) -> list[_Wait]:
    """The collective waits that overlap the windows, per input in time order, each on the first of its input's
    lanes free at its start: where a rank idles for later ranks, beside the steps and gaps that cost."""
    found = [(i, x) for i in analysis.collectives.instances for x in i.arrivals if x.wait_ns > 0]
    ts = np.array([x.arrival_ns for _, x in found], np.int64)
    kept = np.flatnonzero(_overlapping(ts, ts + np.array([x.wait_ns for _, x in found], np.int64), windows))
    found = sorted((found[k] for k in kept.tolist()), key=lambda w: (w[1].input_id, w[1].arrival_ns, -w[1].wait_ns))
    waits = []
    ends: dict[int, list[int]] = {}  # per input, where each lane's last wait ends
    for instance, x in found:
        lanes = ends.setdefault(x.input_id, [])
        lane = next((k for k, end in enumerate(lanes) if end <= x.arrival_ns), len(lanes))
        if lane == len(lanes):
            lanes.append(0)
        lanes[lane] = x.arrival_ns + x.wait_ns
        waits.append(_Wait(x.input_id, lane, x.rank, x.arrival_ns, x.wait_ns, instance.collective, instance.key))
    return waits


def _wait_events(waits: list[_Wait], layout: _Layout) -> str:
    """The collective waits, a slice each on its lane's track, named after the collective."""
    if not waits:
        return ""
    tids = np.array([layout.waits_tid[(w.input_id, w.lane)] for w in waits], np.int64)
    ts = np.array([w.ts_ns for w in waits], np.int64)
    dur = np.array([w.dur_ns for w in waits], np.int64)
    names = np.array([_json(w.collective) for w in waits], dtype=object)
    args = np.array([_json({"rank": w.rank, "wait_ns": w.dur_ns, "key": w.key}) for w in waits], dtype=object)
    return _complete_events(str(_FINDINGS_PID), _few_ints_text(tids), ts, dur, names, [args])


def _slices(tid: int, steps: list[Step], names: list[str], durations: list[int], args: list[str]) -> str:
    """Slices on a track of the traceinsight process, each starting at its step's start."""
    if not steps:
        return ""
    ts = np.array([s.start_ns for s in steps], np.int64)
    name_json = np.array([_json(n) for n in names], dtype=object)
    return _complete_events(
        str(_FINDINGS_PID), str(tid), ts, np.array(durations, np.int64), name_json, [np.array(args, dtype=object)]
    )


# --------------------------------------------------------------------------- text


def _complete_events(
    pid: str | np.ndarray, tid: str | np.ndarray, ts: np.ndarray, dur: np.ndarray, name: np.ndarray, args: list[Any]
) -> str:
    """``X`` events, one a line; `args` are the pieces of each args object."""
    parts = ['{"ph":"X","pid":', pid, ',"tid":', tid, ',"ts":', *_us_parts(ts), ',"dur":', *_us_parts(dur, few=True)]
    return _rows([*parts, ',"name":', name, ',"args":', *args, "}"], len(ts))


def _rows(parts: list[Any], n: int) -> str:
    """n events made of `parts` (a string for all, or an array of one per event), each after a separator."""
    if not n:
        return ""
    table = np.empty((n, len(parts) + 1), dtype=object)
    table[:, 0] = _SEP
    for j, part in enumerate(parts, 1):
        table[:, j] = part
    return "".join(table.ravel().tolist())


def _us_parts(ns: np.ndarray, few: bool = False) -> list[np.ndarray]:
    """Exact µs text of int64 ns in two parts, ``1623143089861123`` and ``.456`` (no float on the way); `few`:
    the values repeat a lot (durations), so each distinct one is converted once."""
    ns = np.asarray(ns, np.int64)
    size = np.abs(ns)
    whole = (_few_ints_text if few else _int_text)(size // 1000)
    negative = ns < 0
    if negative.any():
        whole[negative] = "-" + whole[negative]
    return [whole, _FRACTIONS[size % 1000]]


def _int_text(values: np.ndarray) -> np.ndarray:
    return np.array(list(map(str, np.asarray(values).tolist())), dtype=object)


def _few_ints_text(values: np.ndarray) -> np.ndarray:
    """`_int_text` of values with few distinct ones (pids, tids, durations): each converted once."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return _int_text(distinct)[inverse.reshape(-1)]


def _distinct_pairs(first: np.ndarray, second: np.ndarray) -> list[tuple[int, int]]:
    """The distinct (first, second) pairs, sorted."""
    pairs = pd.DataFrame({"a": np.asarray(first, np.int64), "b": np.asarray(second, np.int64)}).drop_duplicates()
    return sorted(zip(pairs["a"].tolist(), pairs["b"].tolist(), strict=True))


def _float_text(values: np.ndarray) -> np.ndarray:
    return np.array(list(map(repr, np.asarray(values, np.float64).tolist())), dtype=object)


def _names(names: pd.Categorical) -> np.ndarray:
    """JSON strings of the names (each distinct name escaped once); "" where a row has none."""
    return _json_strings([str(c) for c in names.categories] + [""])[np.asarray(names.codes)]


def _json_strings(values: Any) -> np.ndarray:
    return np.array([_json(str(v)) for v in values], dtype=object)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # a lone surrogate (a name the profiler did not encode): escaped as \udXXX
        return json.dumps(value, separators=(",", ":"))


def _stage_chunks(path: Path, chunks: list[str], protected: tuple[Path, ...]) -> Staged:
    """Write the pieces to a temporary file beside `path` (gzip when its name ends in ``.gz``), to be renamed
    into place with the other outputs (`output.stage`); devices and pipes are written in place."""
    compress = path.name.lower().endswith(".gz")

    def write(f: BinaryIO) -> None:
        with _open_gzip(f) if compress else nullcontext(f) as out:
            for chunk in chunks:
                out.write(chunk.encode())

    return stage(Path(path), write, protected)


def _open_gzip(f: BinaryIO) -> io.BufferedIOBase:
    try:
        from isal import igzip  # about ten times as fast as zlib's default level, a little larger

        return cast(io.BufferedIOBase, igzip.IGzipFile(fileobj=f, mode="wb", compresslevel=2))
    except ImportError:
        return gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6)
