"""Analyses: pure functions from the event table to result records.

`analyze` runs them in order (devices first; everything else reads its busy
unions) and bundles the results; findings and renderers only read an `Analysis`.
`merge_analyses` gives the same `Analysis` for a run of several inputs from each
input's own, so inputs can be analyzed where they are read.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property, partial

import msgspec
import numpy as np
import pandas as pd
from msgspec import field
from msgspec.structs import replace

from traceinsight.analysis.capture import UNKNOWN, Capture, classify_capture
from traceinsight.analysis.collectives import Collectives, collectives, waits_in
from traceinsight.analysis.compute import Compute, compute_efficiency
from traceinsight.analysis.copies import DeviceCopies, copy_stats
from traceinsight.analysis.critical_path import NO_WALKS, CriticalPath, InputWalks, input_walks, stitch
from traceinsight.analysis.device_memory import DeviceMemory, profile_memory
from traceinsight.analysis.devices import DeviceUsage, device_usage, device_work
from traceinsight.analysis.gaps import DeviceGaps, gap_intervals, idle_gaps
from traceinsight.analysis.graphs import GraphReplays, graph_replays
from traceinsight.analysis.host_ops import HostOps, UnlaunchedWork, host_op_rows, host_ops, ops_within, unlaunched_work
from traceinsight.analysis.input_pipeline import InputPipeline, input_pipeline
from traceinsight.analysis.kernel_sequences import KernelSequences, kernel_sequences
from traceinsight.analysis.kernels import KernelStats, flagged_kernels, kernel_stats
from traceinsight.analysis.ledger import DeviceLedger, Ledger, with_collective_waits
from traceinsight.analysis.queue_depth import NO_QUEUES, QueueDepth, blocked_launch_rows, launched_work, queue_depth
from traceinsight.analysis.settings import Seen, settings_seen
from traceinsight.analysis.step_model import StepModel, input_ledger, step_model
from traceinsight.analysis.steps import Steps, device_line_label, find_steps
from traceinsight.analysis.waits import LISTED_WAITS, Waits, blocking_waits
from traceinsight.errors import is_truncation_warning
from traceinsight.events import Profile, input_labels, kind_mask, names_matching, rows_of_input, take_rows
from traceinsight.intervals import intersection, union, union_of
from traceinsight.parallel import beside
from traceinsight.result import HostOp
from traceinsight.rules import (
    ANALYSIS_BESIDE_MIN_EVENTS,
    CRITICAL_PATH_MAX_EVENTS,
    DEFAULT_SMALL_KERNEL_NS,
    DEVICE_EVENTS_MISSING_SHARE,
    DEVICE_WORK_CALL,
    KERNEL_LAUNCH,
    STEADY_MIN_STEPS,
    WAIT_MIN_NS,
)


class Analysis(msgspec.Struct, frozen=True, dict=True):
    profile: Profile  # its events: the steady part only, when the capture's warm-up is left out (`capture`)
    window_start_ns: int | None
    window_end_ns: int | None
    devices: list[DeviceUsage]
    gaps: list[DeviceGaps]
    kernels: list[KernelStats]
    copies: list[DeviceCopies]
    steps: Steps
    input_pipeline: InputPipeline
    input_steps: list[Steps]  # each input's own steps, as `find_steps` finds them for it alone
    step_model: StepModel  # the run's steps, what they are made of (projections are computed on it)
    host_ops: HostOps  # the step input's framework ops: top by self time, the input pipeline's own
    settings: Seen  # what the step input already does (prefetch, workers, graph mode, precision...)
    memory: list[DeviceMemory]  # device memory per device that has memory events, each over its input's steps
    capture: Capture  # what kind of capture the trace is, and whether its warm-up was left out
    graphs: GraphReplays  # CUDA / HIP graph replays
    waits: Waits  # blocking calls that waited far longer than their own device work
    compute: Compute  # what the busy time achieves: FLOPs, kernel classes on the roofline, MFU (the step input's)
    collectives: Collectives  # collectives matched across ranks: who waits for whom, and the straggler
    # The ledgers of the devices of inputs other than the step input, each over its own input's steps.
    other_ledgers: list[DeviceLedger] = field(default_factory=list)
    # Kernel launches beyond the device work the trace holds, or (with no device work at all) the GPUs it lists:
    # device events cut off (a truncated file, a CUPTI buffer that overflowed), so the run is not CPU-only.
    device_events_cut: int = 0
    # Launches outstanding per stream over each input's steps (the evidence of a drained queue).
    queue_depth: QueueDepth = NO_QUEUES
    # Small-kernel sequences every step of the run repeats (fusion / CUDA graph candidates).
    kernel_sequences: KernelSequences | None = None
    # Each input's critical-path pieces (from its steps' ends and its collectives' starts), joined by `critical_path`.
    walks: list[InputWalks] = field(default_factory=list)

    @property
    def device_not_recorded(self) -> bool:
        """No device rows, no host call that used one, and no framework's ops (`rules.DEVICE_NOT_RECORDED`): host
        spans alone, a server's requests or a home-grown tracer's, which do not say whether an accelerator ran."""
        return (
            not self.devices
            and not self.device_events_cut
            and self.profile.framework == "unknown"
            and not self.profile.events.empty
        )

    @property
    def window_ns(self) -> int:
        if self.window_start_ns is None or self.window_end_ns is None:
            return 0
        return self.window_end_ns - self.window_start_ns

    @cached_property
    def collective_waits(self) -> np.ndarray:
        """The step input's waiting inside collectives in each of the run's steps (ns, the union of its waits): for a
        straggler, or for ranks not in the trace. Found once: the ledger, the findings and the report read it."""
        return waits_in(self.collectives, self.steps.input_id, *self.steps.bounds())

    @cached_property
    def unlaunched_work(self) -> UnlaunchedWork:
        """The step input's ops that gave the device nothing to do, over its steps: what a run whose device events
        are missing can still be judged by (findings' `host_bound`). Found only when asked."""
        return unlaunched_work(self.profile.events, self.steps.input_id, *self.steps.bounds())

    @cached_property
    def ops_in_launch_waits(self) -> list[HostOp]:
        """The step input's host ops by their own time while its devices waited for the host's next launch (their
        ``host_launch`` idle time inside the steps): the ops host_bound names. Found only when asked."""
        mine = {u.id for u in self.devices if u.input_id == self.steps.input_id}
        waits = union_of(*(gap_intervals(g)["host_launch"] for g in self.gaps if g.device in mine))
        return ops_within(self.profile.events, self.steps.input_id, intersection(waits, union(*self.steps.bounds())))

    @cached_property
    def ledger(self) -> Ledger:
        """The step model's ledger with the collective part split into the step input's waiting inside collectives
        (`collective_waits`) and transfer: every per-step figure is read from it."""
        return with_collective_waits(self.step_model.ledger, self.collective_waits)

    @cached_property
    def critical_path(self) -> CriticalPath:
        """The run's steps' critical paths: the step input's pieces, joined across ranks where they meet a
        collective another rank arrived at last."""
        return stitch(self.walks, self.steps, self.collectives)

    @property
    def device_ledgers(self) -> list[DeviceLedger]:
        """Every device's ledger over its own input's steps (the run's step input's first)."""
        return [*self.ledger.devices, *self.other_ledgers]

    def without_events(self) -> Analysis:
        """The same results over an empty event table: what renderers need, without most of a big trace's memory."""
        return replace(self, profile=replace(self.profile, events=self.profile.events.iloc[:0]))


def analyze(
    profile: Profile, small_kernel_ns: int = DEFAULT_SMALL_KERNEL_NS, alone: bool | None = None, jobs: int = 1
) -> Analysis:
    """Every analysis over one profile: over its steady part alone when one-time costs fill the window and steps
    follow them (`capture.classify_capture`). `alone`: the profile is the run's only rank (by default, when it has
    one input; False for one input of several analysed apart, whose critical-path pieces are joined later).
    `jobs`: the processes it may use. With two or more, a profile of `ANALYSIS_BESIDE_MIN_EVENTS` to
    `CRITICAL_PATH_MAX_EVENTS` events has its critical path walked and its compute efficiency found by a process
    of its own as it gets to them (`parallel.beside`), while the other analyses run here."""
    profile, captures, work = _steady_part(profile)
    events = profile.events
    work = device_work(events) if work is None else work  # what each device analysis starts from, found once
    usages = device_usage(events, work)
    steps = find_steps(events)
    input_steps = _input_steps(events, len(profile.inputs), steps)
    found = collectives(profile)
    alone = len(profile.inputs) <= 1 if alone is None else alone
    launched = launched_work(events)
    # The two longest analyses, whose share varies by trace (the walks of a capture pass, the compute of a
    # training step): a process beside takes them in turn, and this one takes whichever it reaches first.
    longest: list[Callable[[], object]] = [
        partial(_walks, events, input_steps, launched, found, alone),
        partial(_compute, profile, usages, steps),
    ]
    split = jobs > 1 and ANALYSIS_BESIDE_MIN_EVENTS <= len(events) <= CRITICAL_PATH_MAX_EVENTS
    with beside(longest, split) as value:
        kernels = flagged_kernels(work)
        gaps = idle_gaps(events, usages, work)
        host = host_op_rows(events, steps.input_id)
        has_events = not events.empty
        waits = blocking_waits(events, usages, work, len(profile.inputs))
        return Analysis(
            profile=profile,
            window_start_ns=int(events["ts_ns"].min()) if has_events else None,
            window_end_ns=int((events["ts_ns"] + events["dur_ns"]).max()) if has_events else None,
            devices=usages,
            gaps=gaps,
            kernels=kernel_stats(events, usages, small_kernel_ns, kernels),
            copies=copy_stats(events, usages, work),
            steps=steps,
            input_pipeline=input_pipeline(events, steps),
            input_steps=input_steps,
            step_model=step_model(
                events, usages, gaps, steps, small_kernel_ns, work, kernels, host, waits.outside_of(steps.input_id)
            ),
            host_ops=host_ops(events, steps.input_id, host),
            settings=settings_seen(rows_of_input(events, steps.input_id), profile.framework),
            memory=_memory(profile, input_steps),
            capture=captures[steps.input_id] if captures else UNKNOWN,
            graphs=graph_replays(events, work),
            waits=waits,
            collectives=found,
            device_events_cut=_device_events_cut(profile, work),
            queue_depth=queue_depth(launched, input_steps),
            kernel_sequences=kernel_sequences(events, kernels, launched, steps, small_kernel_ns),
            other_ledgers=[
                d
                for other in input_steps
                if other.input_id != steps.input_id
                for d in with_collective_waits(
                    input_ledger(events, usages, gaps, other, work, kernels, waits.outside_of(other.input_id)),
                    np.zeros(0),
                ).devices
            ],
            # Last (arguments are evaluated in order): computed meanwhile, where a process of its own took them.
            walks=value(0),
            compute=value(1),
        )


def _walks(
    events: pd.DataFrame, input_steps: list[Steps], launched: pd.DataFrame, found: Collectives, alone: bool
) -> list[InputWalks]:
    """Each input's critical-path pieces (none for an input of more than `CRITICAL_PATH_MAX_EVENTS` events, in one
    process or in a worker alike). A run's only rank walks through its collectives (their waits for the ranks the
    trace does not hold split off); several ranks' pieces stop there, to be joined (`stitch`)."""
    ids = events["input_id"].to_numpy()
    sizes = np.bincount(ids, minlength=len(input_steps))
    if events.empty or not (sizes <= CRITICAL_PATH_MAX_EVENTS).any():
        return [replace(NO_WALKS, not_walked=int(n)) for n in sizes]
    waits = {a.arrival_ns: a.wait_ns for i in found.instances for a in i.arrivals} if alone else None
    blocked = blocked_launch_rows(launched, len(events))
    return [
        input_walks(rows_of_input(events, i), s, blocked[ids == i], waits)
        if sizes[i] <= CRITICAL_PATH_MAX_EVENTS
        else replace(NO_WALKS, not_walked=int(sizes[i]))
        for i, s in enumerate(input_steps)
    ]


def _device_events_cut(profile: Profile, work: pd.DataFrame) -> int:
    """How many device events the host's calls say are missing (0: none). With device work, the kernel launches
    beyond the device rows, when they are `DEVICE_EVENTS_MISSING_SHARE` of the launches or more (a launch at the
    window's end may lose its kernel). With none, the host's calls that gave the device work or waited for it
    (`rules.DEVICE_WORK_CALL`: the GPU was used but not recorded, or its events were cut), else, in a file cut short,
    the GPUs it lists."""
    events = profile.events
    if events.empty:
        return 0
    host = events["device"].isna().to_numpy()
    if not work.empty:
        launches = int(names_matching(events, KERNEL_LAUNCH.pattern, host).sum())
        missing = launches - len(work)
        return missing if missing >= DEVICE_EVENTS_MISSING_SHARE * launches and missing > 0 else 0
    calls = host & kind_mask(events, "runtime", "sync")
    waited = calls & kind_mask(events, "sync") & (events["dur_ns"].to_numpy() >= WAIT_MIN_NS)
    used = int((names_matching(events, DEVICE_WORK_CALL, calls) | waited).sum())
    truncated = any(is_truncation_warning(w) for w in profile.warnings)
    return used or (len(profile.devices) if truncated else 0)


def _compute(profile: Profile, usages: list[DeviceUsage], steps: Steps, capture: Profile | None = None) -> Compute:
    """Compute efficiency over the step input alone (its devices, its ops), as the step model is: the same figures
    whether a run's inputs are analyzed together or apart (`merge_analyses`)."""
    if len(profile.inputs) <= 1:
        return compute_efficiency(profile, usages, steps, capture)
    mine = profile.ops["input_id"].to_numpy() == steps.input_id
    alone = replace(profile, events=rows_of_input(profile.events, steps.input_id), ops=profile.ops[mine])
    return compute_efficiency(alone, [u for u in usages if u.input_id == steps.input_id], steps, capture)


def with_graph_capture(analysis: Analysis, capture: Profile) -> Analysis:
    """The analysis of a graph replay with its compute efficiency redone through the capture pass beside it (the
    ops that launched each node, `op_kernels.replay_owners`); the analysis must still hold its event table."""
    return replace(analysis, compute=_compute(analysis.profile, analysis.devices, analysis.steps, capture))


def _steady_part(profile: Profile) -> tuple[Profile, list[Capture], pd.DataFrame | None]:
    """Each input's capture kind, and the profile without the one-time costs of the inputs whose warm-up is
    followed by `STEADY_MIN_STEPS` steps (those steps are analyzed alone). Each input on its own, as
    `merge_analyses` gets it from inputs analyzed apart. Also the device work table when it is still the
    profile's (nothing left out), so it is found once."""
    events = profile.events
    work = device_work(events)
    ids = events["input_id"].to_numpy()
    starts = events["ts_ns"].to_numpy()
    work_ids = work["input_id"].to_numpy()
    keep = np.ones(len(events), bool)
    captures = []
    for input_id in range(max(len(profile.inputs), 1)):
        mine = rows_of_input(events, input_id)
        capture = classify_capture(mine, work if len(mine) == len(events) else work[work_ids == input_id])
        if capture.steady_from_ns is not None:
            steady = mine[(mine["ts_ns"] >= capture.steady_from_ns).to_numpy()]
            steps_after = find_steps(steady).count if len(steady) else 0
            if steps_after >= STEADY_MIN_STEPS:
                keep &= (ids != input_id) | (starts >= capture.steady_from_ns)
                capture = replace(capture, steady_steps=steps_after)
        captures.append(capture)
    if keep.all():
        return profile, captures, work
    return replace(profile, events=take_rows(events, keep)), captures, None


def _memory(profile: Profile, input_steps: list[Steps]) -> list[DeviceMemory]:
    """Each input's device memory over that input's own steps (as `merge_analyses` gets it from each input)."""
    table = profile.memory
    if table.empty:
        return []
    if len(input_steps) < 2:
        return profile_memory(profile, input_steps[0].items if input_steps else ())
    ids = table["input_id"].to_numpy()
    return [
        m
        for i, steps in enumerate(input_steps)
        for m in profile_memory(replace(profile, memory=table[ids == i]), steps.items)
    ]


def _input_steps(events: pd.DataFrame, inputs: int, steps: Steps) -> list[Steps]:
    """Each input's steps (the cross-rank view compares them); the run's own for the input they come from."""
    if inputs < 2:
        return [steps]
    return [steps if steps.input_id == i else find_steps(rows_of_input(events, i)) for i in range(inputs)]


def merge_analyses(profile: Profile, parts: list[Analysis]) -> Analysis:
    """The analysis of a run of several inputs from each input's own (`analyze` of a one-input profile,
    done where the input was read), equal to `analyze` of the merged table.

    Devices, gaps, kernels and copies are per device (in input order, ids prefixed
    as `merge_reads` does), gap causes per input. The run's steps are those of the
    first input with host step markers, else of the device Steps line first by
    name, else those inferred for the first input with events, as `find_steps`
    chooses. `profile` is the merged run's; its event table holds what each input kept of its own for the
    cross-rank view (`collectives.rows_collectives_read`), or nothing.
    """
    if len(parts) == 1:
        return replace(parts[0], profile=profile)
    labels = input_labels(profile.inputs)

    def device(i: int, local: str) -> str:
        return f"{labels[i]}/{local}"

    steps = [_steps_of_input(part.steps, i, labels[i]) for i, part in enumerate(parts)]
    run_input = _run_steps_input(steps)
    starts = [p.window_start_ns for p in parts if p.window_start_ns is not None]
    ends = [p.window_end_ns for p in parts if p.window_end_ns is not None]
    return Analysis(
        profile=profile,
        window_start_ns=min(starts) if starts else None,
        window_end_ns=max(ends) if ends else None,
        devices=[replace(u, id=device(i, u.id), input_id=i) for i, p in enumerate(parts) for u in p.devices],
        gaps=[
            replace(
                g,
                device=device(i, g.device),
                longest=[replace(x, device=device(i, x.device)) for x in g.longest],
            )
            for i, p in enumerate(parts)
            for g in p.gaps
        ],
        kernels=[replace(k, device=device(i, k.device)) for i, p in enumerate(parts) for k in p.kernels],
        copies=[replace(c, device=device(i, c.device)) for i, p in enumerate(parts) for c in p.copies],
        steps=steps[run_input],
        input_pipeline=parts[run_input].input_pipeline,
        input_steps=steps,
        step_model=_prefixed_ledger(parts[run_input].step_model, lambda d: device(run_input, d)),
        memory=[replace(m, device=device(i, m.device), input_id=i) for i, p in enumerate(parts) for m in p.memory],
        host_ops=parts[run_input].host_ops,
        settings=parts[run_input].settings,
        capture=parts[run_input].capture,
        graphs=_merged_replays(
            [
                replace(p.graphs, items=[replace(r, device=device(i, r.device)) for r in p.graphs.items])
                for i, p in enumerate(parts)
            ]
        ),
        waits=_merged_waits(parts),
        compute=parts[run_input].compute,
        collectives=collectives(profile),  # its events: what each input kept for it (`rows_collectives_read`)
        device_events_cut=sum(p.device_events_cut for p in parts),
        queue_depth=QueueDepth(
            [replace(q, device=device(i, q.device)) for i, p in enumerate(parts) for q in p.queue_depth.streams],
            [replace(q, device=device(i, q.device)) for i, p in enumerate(parts) for q in p.queue_depth.devices],
        ),
        kernel_sequences=_prefixed_sequences(parts[run_input].kernel_sequences, lambda d: device(run_input, d)),
        walks=[p.walks[0] if p.walks else NO_WALKS for p in parts],  # one an input, in the run's order
        other_ledgers=[
            replace(d, device=device(i, d.device))
            for i, p in enumerate(parts)
            if i != run_input
            for d in with_collective_waits(p.step_model.ledger, np.zeros(0)).devices
        ],
    )


def _prefixed_ledger(model: StepModel, device: Callable[[str], str]) -> StepModel:
    """The step model with its ledger's devices named as the merged run names them."""
    ledger = model.ledger
    return replace(
        model,
        ledger=replace(ledger, devices=[replace(d, device=device(d.device)) for d in ledger.devices]),
    )


def _prefixed_sequences(found: KernelSequences | None, device: Callable[[str], str]) -> KernelSequences | None:
    """The step input's sequences with their devices named as the merged run names them."""
    if found is None:
        return None
    return replace(found, items=[replace(q, device=device(q.device)) for q in found.items])


def _merged_replays(parts: list[GraphReplays]) -> GraphReplays:
    """The replays of every input of a run (device ids already prefixed)."""
    items = sorted((r for p in parts for r in p.items), key=lambda r: r.launch_start_ns)
    return GraphReplays(
        count=len(items),
        nodes=sum(p.nodes for p in parts),
        kernel_ns=sum(p.kernel_ns for p in parts),
        all_kernel_ns=sum(p.all_kernel_ns for p in parts),
        items=items,
    )


def _merged_waits(parts: list[Analysis]) -> Waits:
    """The waits of every input of a run, each input's under its index in the run."""
    every = sorted(
        (replace(w, input_id=i) for i, p in enumerate(parts) for w in p.waits.items),
        key=lambda w: -w.dur_ns,
    )
    return Waits(
        count=sum(p.waits.count for p in parts),
        total_ns=sum(p.waits.total_ns for p in parts),
        outside_count=sum(p.waits.outside_count for p in parts),
        outside_ns=sum(p.waits.outside_ns for p in parts),
        items=every[:LISTED_WAITS],
        outside={i: p.waits.outside_of(0) for i, p in enumerate(parts) if p.waits.outside_count},
    )


def _steps_of_input(steps: Steps, input_id: int, label: str) -> Steps:
    """One input's own steps as the run sees them: its index, and device ids prefixed."""
    per_device = {f"{label}/{d}": mean for d, mean in steps.per_device.items()}
    if steps.device is None:
        return replace(steps, input_id=input_id, per_device=per_device)
    device = f"{label}/{steps.device}"
    return replace(steps, input_id=input_id, device=device, marker=device_line_label(device), per_device=per_device)


def _run_steps_input(steps: list[Steps]) -> int:
    """Which input's steps are the run's (`find_steps`' order of preference)."""
    host = [i for i, s in enumerate(steps) if s.source == "marker" and s.device is None]
    if host:
        return host[0]
    lines = [(s.device, i) for i, s in enumerate(steps) if s.device is not None]
    if lines:
        return min(lines)[1]
    return next((i for i, s in enumerate(steps) if s.source != "none"), 0)
