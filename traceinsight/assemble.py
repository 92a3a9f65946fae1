"""Analysis + findings -> the result model (`traceinsight.result.RunReport`), once per run.

The only place where the analyses' figures become the report's: rounding for people, medians over the listed
items, the cross-rank view, warnings about too few steps. Every output reads the `RunReport` this builds, so the
figures of the HTML, Markdown, terminal, API and JSON are the same numbers.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

from traceinsight import __version__
from traceinsight.analysis import Analysis
from traceinsight.analysis.capture import Capture as CaptureAnalysis
from traceinsight.analysis.collectives import CollectiveInstance, RankCollectives, transfers_in
from traceinsight.analysis.copies import REPORTED_COPY_KINDS, CopyStats, copy_totals
from traceinsight.analysis.critical_path import PARTS as PATH_PARTS
from traceinsight.analysis.critical_path import CriticalPath
from traceinsight.analysis.device_memory import DeviceMemory
from traceinsight.analysis.gaps import DeviceGaps, Gap
from traceinsight.analysis.graphs import GraphReplays as GraphReplaysAnalysis
from traceinsight.analysis.kernel_sequences import KernelSequences as KernelSequencesAnalysis
from traceinsight.analysis.kernels import KernelStats
from traceinsight.analysis.ledger import IDLE_PARTS, KERNEL_PARTS
from traceinsight.analysis.queue_depth import QueueDepth as QueueDepthAnalysis
from traceinsight.analysis.queue_depth import StreamQueue as StreamQueueAnalysis
from traceinsight.analysis.ranks import RankStats, rank_view
from traceinsight.analysis.waits import Waits as WaitsAnalysis
from traceinsight.findings import Findings, evaluate
from traceinsight.intervals import Intervals
from traceinsight.render.meta import capture_date, trace_versions
from traceinsight.result import (
    Capture,
    CollectiveGroup,
    CollectivesSummary,
    Copies,
    CriticalPathSummary,
    Device,
    Gaps,
    GraphReplays,
    HostOps,
    Input,
    InputPipeline,
    Kernels,
    KernelSequence,
    KernelSequences,
    LaunchDelay,
    Ledger,
    LedgerDevice,
    ListedReplay,
    LongGap,
    Memory,
    Memset,
    Meta,
    PathItem,
    PathStep,
    QueueDepth,
    Rank,
    Ranks,
    RankSteps,
    RunReport,
    Step,
    Steps,
    StragglerRank,
    StreamQueue,
    Totals,
    Waits,
    Window,
)
from traceinsight.rules import (
    COLLECTIVES_COUNTS_DIFFER,
    COLLECTIVES_NOT_OVERLAPPING,
    CRITICAL_PATH_NOT_WALKED,
    DEVICE_EVENTS_CUT,
    DEVICE_NOT_RECORDED,
    MIN_STEADY_STEPS,
)

TOP_PATH_ITEMS = 15  # the ops, calls and kernels a report lists with their time on the critical path


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _step_mean(values: np.ndarray) -> int | None:
    return int(round(float(values.mean()))) if len(values) else None


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _outside_trace(gap: Gap, outside: Intervals) -> bool:
    """A sync gap a blocking wait for work the trace does not hold covers part of: the ledger holds that time as
    `wait_outside_trace`, so the page names the gap so too (its `cause` stays the gap analysis's, as `by_cause`)."""
    ends = np.array([gap.start_ns + gap.dur_ns])
    return gap.cause == "sync" and bool(outside.covered_between(np.array([gap.start_ns]), ends)[0] > 0)


def _gaps(g: DeviceGaps, outside: Intervals) -> Gaps:
    return Gaps(
        count=g.count,
        total_ns=g.total_ns,
        p50_ns=g.p50_ns,
        p90_ns=g.p90_ns,
        max_ns=g.max_ns,
        by_cause=g.by_cause,
        histogram=g.histogram,
        longest=[
            LongGap(
                start_ns=x.start_ns,
                dur_ns=x.dur_ns,
                cause=x.cause,
                host_activity=x.host_activity,
                outside_trace=_outside_trace(x, outside),
            )
            for x in g.longest
        ],
        resolution_ns=g.resolution_ns,
        below_resolution=g.below_resolution,
    )


def _kernels(k: KernelStats) -> Kernels:
    return Kernels(
        count=k.count,
        total_ns=k.total_ns,
        median_ns=k.median_ns,
        small_count=k.small_count,
        small_threshold_ns=k.small_threshold_ns,
        small_total_ns=k.small_total_ns,
        shorter_than_launch_count=k.shorter_than_launch_count,
        launched_count=k.launched_count,
        replayed_count=k.replayed_count,
        launch_delay=LaunchDelay(
            p50_ns=k.launch_delay_p50_ns, p90_ns=k.launch_delay_p90_ns, max_ns=k.launch_delay_max_ns
        ),
        tensor_core_ns=k.tensor_core_ns,
        tensor_core_eligible_ns=k.tensor_core_eligible_ns,
        communication_ns=k.communication_ns,
        communication_exposed_ns=k.communication_exposed_ns,
        occupancy_mean_pct=k.occupancy_mean_pct,
        histogram=k.histogram,
        top=k.top,
    )


def _copies(stats: CopyStats) -> Copies:
    return Copies(
        count=stats.count,
        total_ns=stats.total_ns,
        bytes=stats.bytes,
        pageable_count=stats.pageable_count,
        exposed_ns=stats.exposed_ns,
        bandwidth_gbps=_rounded(stats.bandwidth_gbps),
    )


def _memory(m: DeviceMemory | None) -> Memory | None:
    """`devices[].memory` (None without memory events), with the per-step split, the peak's ops and a downsampled
    series for the chart."""
    if m is None:
        return None
    return Memory(
        peak_allocated_bytes=m.peak_allocated_bytes,
        peak_in_use_bytes=m.peak_in_use_bytes,
        peak_reserved_bytes=m.peak_reserved_bytes,
        capacity_bytes=m.capacity_bytes,
        allocator_limit_bytes=m.allocator_limit_bytes,
        absolute=m.absolute,
        headroom_fraction=_rounded(m.headroom_fraction),
        fragmentation_max=_rounded(m.fragmentation_max),
        batch_headroom_factor=_rounded(m.batch_headroom_factor, 2),
        static_bytes=m.static_bytes,
        transient_bytes=m.transient_bytes,
        peak_ns=m.peak_ns,
        peak_step=m.peak_step,
        slack_bytes=m.slack_bytes,
        events=m.events,
        warnings=m.warnings,
        top_ops_at_peak=m.top_ops_at_peak,
        steps=m.steps,
        series=m.series,
    )


def _devices(a: Analysis) -> list[Device]:
    memory = {m.device: m for m in a.memory}
    ledgers = {d.device: d for d in a.device_ledgers}
    out = []
    for usage, gaps, kernels, copies in zip(a.devices, a.gaps, a.kernels, a.copies, strict=True):
        info = a.profile.devices.get(usage.id)
        out.append(
            Device(
                id=usage.id,
                name=info.name if info else None,
                span_ns=usage.span_ns,
                busy_ns=usage.busy_ns,
                idle_ns=usage.idle_ns,
                idle_fraction=_rounded(ledgers[usage.id].share(IDLE_PARTS)) if usage.id in ledgers else None,
                gpu_util=_rounded(ledgers[usage.id].share(KERNEL_PARTS)) if usage.id in ledgers else None,
                gaps=_gaps(gaps, a.waits.outside_of(usage.input_id)),
                kernels=_kernels(kernels),
                copies={kind: _copies(copies.copies[kind]) for kind in REPORTED_COPY_KINDS},
                memset=Memset(count=copies.memset_count, total_ns=copies.memset_ns),
                memory=_memory(memory.get(usage.id)),
            )
        )
    return out


def _totals(a: Analysis) -> Totals:
    h2d = copy_totals(a.copies, "h2d")
    d2h = copy_totals(a.copies, "d2h")
    # Over the steps (the ledger's); `step_*` repeat them for saved reports and `--fail-on` paths.
    util, idle = _rounded(a.ledger.share(KERNEL_PARTS)), _rounded(a.ledger.share(IDLE_PARTS))
    return Totals(
        device_count=len(a.devices),
        idle_fraction=idle,
        gpu_util=util,
        step_gpu_util=util,
        step_idle_fraction=idle,
        kernel_count=sum(k.count for k in a.kernels),
        small_kernel_count=sum(k.small_count for k in a.kernels),
        h2d_count=h2d.count,
        h2d_ns=h2d.total_ns,
        h2d_bytes=h2d.bytes,
        h2d_exposed_ns=h2d.exposed_ns,
        h2d_pageable_count=h2d.pageable_count,
        d2h_count=d2h.count,
        d2h_ns=d2h.total_ns,
        d2h_bytes=d2h.bytes,
    )


def _ledger(a: Analysis, per_step: dict[str, np.ndarray]) -> Ledger:
    """The report's ledger; `per_step`: its parts a step (`_per_step_parts`)."""
    ledger = a.ledger
    if not ledger.devices:
        return Ledger()
    parts = list(ledger.parts)
    return Ledger(
        parts=parts,
        idle_parts=list(IDLE_PARTS),
        step_ns=[int(x) for x in ledger.step_ns],
        per_step={part: per_step[part].tolist() for part in parts},
        devices=[
            LedgerDevice(
                id=d.device,
                parts={part: int(d.parts[part].sum()) for part in parts},
                gpu_util=_rounded(d.share(KERNEL_PARTS)),
                idle_fraction=_rounded(d.share(IDLE_PARTS)),
            )
            for d in a.device_ledgers
        ],
    )


def _per_step_parts(a: Analysis) -> dict[str, np.ndarray]:
    """Each ledger part's ns in each step, the mean over the step input's devices, as whole ns (empty without
    devices): what the step table and the report's ledger show."""
    return {part: np.rint(a.ledger.mean(part)).astype(np.int64) for part in a.ledger.parts} if a.ledger.devices else {}


def _steps(a: Analysis, per_step: dict[str, np.ndarray]) -> Steps:
    s = a.steps
    parts = _step_parts(a, per_step)
    return Steps(
        source=s.source,
        marker=s.marker,
        count=s.count,
        mean_ns=s.mean_ns,
        median_ns=s.median_ns,
        total_ns=s.total_ns,
        breakdown_total={part: sum(b[part] for b in parts) for part in (parts[0] if parts else ())},
        per_device_mean_ns=s.per_device,
        device_spread_ns=s.device_spread_ns,
        items=[
            Step(id=x.id, start_ns=x.start_ns, dur_ns=x.dur_ns, breakdown=b)
            for x, b in zip(s.items, parts, strict=True)
        ],
    )


def _step_parts(a: Analysis, per_step: dict[str, np.ndarray]) -> list[dict[str, int]]:
    """Where each step's time went: the ledger's parts (`per_step`), or on a host-only run the host's breakdown
    (`steps.breakdown`)."""
    if not per_step:
        return [x.breakdown for x in a.steps.items]
    return [{part: int(values[i]) for part, values in per_step.items()} for i in range(a.steps.count)]


def _input_pipeline(a: Analysis) -> InputPipeline:
    ip = a.input_pipeline
    return InputPipeline(
        wait_ns=ip.wait_ns,
        fraction=ip.fraction,
        verdict=ip.verdict,
        idle_fraction=ip.idle_fraction,
        source=ip.source,
        wait_count=ip.wait_count,
        stages=ip.stages,
        seen=a.settings.input,
        # The input pipeline's own slowest user function (host_ops.input_functions[0]), named for people.
        slowest_function=a.host_ops.input_functions[0] if a.host_ops.input_functions else None,
    )


def _capture(c: CaptureAnalysis) -> Capture:
    return Capture(
        kind=c.kind,
        evidence=c.evidence,
        server=c.server,
        workload=c.workload,
        one_time_ns=c.one_time_ns,
        one_time_share=c.one_time_share,
        one_time=c.one_time,
        steady_from_ns=c.steady_from_ns if c.steady_steps else None,
        steady_steps=c.steady_steps,
        projects=c.projects,
    )


def _graph_replays(g: GraphReplaysAnalysis) -> GraphReplays:
    """Totals, medians over every replay, and the first ones."""
    return GraphReplays(
        count=g.count,
        nodes=g.nodes,
        kernel_ns=g.kernel_ns,
        kernel_share=g.kernel_share,
        host_ns_per_node_p50=_rounded(_median([r.host_ns_per_node for r in g.items]), 1),
        first_node_delay_p50_ns=None if not g.items else int(_median([r.first_node_delay_ns for r in g.items]) or 0),
        busy_share_p50=_rounded(_median([r.busy_share for r in g.items])),
        items=[
            ListedReplay(
                **msgspec.structs.asdict(r),
                host_ns_per_node=round(r.host_ns_per_node, 1),
                busy_share=round(r.busy_share, 4),
            )
            for r in g.listed
        ],
    )


def _stream_queue(q: StreamQueueAnalysis) -> StreamQueue:
    return StreamQueue(
        device=q.device,
        stream=q.stream,
        launches=q.launches,
        mean_depth=round(q.mean_depth, 3),
        max_depth=q.max_depth,
        drained_share=round(q.drained_share, 4),
        full_share=round(q.full_share, 4),
        found_depth_p50=q.found_depth_p50,
        series_ts_ns=q.series_ts_ns.tolist(),
        series_depth=q.series_depth.tolist(),
    )


def _queue_depth(q: QueueDepthAnalysis) -> QueueDepth:
    return QueueDepth(
        limit=q.limit, devices=[_stream_queue(d) for d in q.devices], streams=[_stream_queue(s) for s in q.streams]
    )


def _kernel_sequences(k: KernelSequencesAnalysis | None) -> KernelSequences:
    if k is None:
        return KernelSequences()
    return KernelSequences(
        steps=k.steps,
        small_threshold_ns=k.small_threshold_ns,
        items=[KernelSequence(**{**msgspec.structs.asdict(s), "per_step": round(s.per_step, 3)}) for s in k.items],
    )


def _critical_path(path: CriticalPath) -> CriticalPathSummary:
    count = len(path.step_ns)
    if not count:
        return CriticalPathSummary()
    groups = path.group_ns()
    shares = path.shares()
    segments = path.segments
    lengths = segments["end_ns"].to_numpy() - segments["start_ns"].to_numpy()
    compute = (segments["part"] == "compute").to_numpy()
    by_class = segments[compute].assign(ns=lengths[compute]).groupby("kernel_class", observed=True)["ns"].sum() // count
    top = (
        segments.assign(ns=lengths)
        .groupby(["name", "part", "group", "input_id", "kernel_class"], observed=True, dropna=False)["ns"]
        .sum()
        .sort_values(ascending=False)
        .head(TOP_PATH_ITEMS)
    )
    return CriticalPathSummary(
        steps=[
            PathStep(
                id=step_id,
                step_ns=int(path.step_ns[k]),
                groups={g: int(ns[k]) for g, ns in groups.items() if ns[k]},
                crossings=int(path.crossings[k]),
            )
            for k, step_id in enumerate(path.step_ids)
        ],
        shares={g: round(v, 4) for g, v in shares.items() if v},
        dominant=max(shares, key=lambda g: shares[g]) if path.total_ns else None,
        per_step_ns={p: int(path.parts[p].sum()) // count for p in PATH_PARTS if path.parts[p].any()},
        compute_by_class_ns={str(c): int(ns) for c, ns in by_class.items() if ns},
        crossings=int(path.crossings.sum()),
        top=[
            PathItem(
                name="(nothing traced)" if pd.isna(name) else str(name),
                part=str(part),
                group=str(group),
                input=int(input_id),
                kernel_class=None if pd.isna(kernel_class) else str(kernel_class),
                ns_per_step=int(ns) // count,
            )
            for (name, part, group, input_id, kernel_class), ns in top.items()
        ],
    )


def _waits(w: WaitsAnalysis) -> Waits:
    return Waits(
        count=w.count,
        total_ns=w.total_ns,
        outside_trace_count=w.outside_count,
        outside_trace_ns=w.outside_ns,
        items=w.items,
    )


def _rank(r: RankStats, collective: RankCollectives | None) -> Rank:
    return Rank(
        input=r.input_id,
        label=r.label,
        path=r.path,
        rank=r.rank,
        host=r.host,
        device_count=r.device_count,
        span_ns=r.span_ns,
        busy_ns=r.busy_ns,
        idle_ns=r.idle_ns,
        idle_fraction=r.idle_fraction,
        steps=RankSteps(
            source=r.steps.source,
            count=r.steps.count,
            mean_ns=r.steps.mean_ns,
            median_ns=r.steps.median_ns,
            total_ns=r.steps.total_ns,
        ),
        wait_ns=None if collective is None else collective.wait_ns,
        transfer_ns=None if collective is None else collective.transfer_ns,
        late_ns=None if collective is None else collective.late_ns,
        wait_per_step_ns=None if collective is None else collective.wait_per_step_ns,
        transfer_per_step_ns=None
        if collective is None or not collective.steps
        else collective.transfer_ns // collective.steps,
        late_per_step_ns=None if collective is None else collective.late_per_step_ns,
        last_count=None if collective is None else collective.last_count,
        phases={} if collective is None else collective.phases,
    )


def _ranks(a: Analysis) -> Ranks | None:
    """The cross-rank view; None with a single input."""
    view = rank_view(a)
    if view is None:
        return None
    by_input = {r.input_id: r for r in a.collectives.ranks} if a.collectives.scope == "matched" else {}
    return Ranks(
        count=len(view.ranks),
        items=[_rank(r, by_input.get(r.input_id)) for r in view.ranks],
        step_mean_min_ns=view.step_mean_min_ns,
        step_mean_max_ns=view.step_mean_max_ns,
        step_mean_spread_ns=view.step_mean_spread_ns,
        step_mean_spread_fraction=view.step_mean_spread_fraction,
        slowest=None if view.slowest is None else _rank(view.slowest, by_input.get(view.slowest.input_id)),
    )


def _collectives(a: Analysis) -> CollectivesSummary:
    """The collectives of the run, grouped by kind and message size, with the straggler."""
    c = a.collectives
    groups: dict[tuple[str, int | None], list[CollectiveInstance]] = {}
    for instance in c.instances:
        groups.setdefault((instance.collective, instance.bytes), []).append(instance)
    starts, ends = a.steps.bounds()
    s = c.straggler
    return CollectivesSummary(
        scope=c.scope,
        side=c.side,
        note=c.note,
        phase_source=c.phase_source,
        count=len(c.instances),
        unmatched=c.unmatched,
        wait_ns=sum(x.wait_ns for i in c.instances for x in i.arrivals),
        transfer_ns=sum(i.transfer_ns * len(i.arrivals) for i in c.instances),
        wait_per_step_ns=_step_mean(a.collective_waits),
        transfer_per_step_ns=_step_mean(transfers_in(c, a.steps.input_id, starts, ends)),
        groups=[_group(kind, size, members) for (kind, size), members in groups.items()],
        straggler=None
        if s is None
        else StragglerRank(
            rank=s.rank,
            label=s.label,
            last_share=round(s.last_share, 4),
            late_per_step_ns=s.late_per_step_ns,
            phase=s.phase,
            phase_excess_ns=s.phase_excess_ns,
            phases=s.phases,
            message=s.message,
        ),
    )


def _group(kind: str, size: int | None, members: list[CollectiveInstance]) -> CollectiveGroup:
    shortest = min(members, key=lambda i: i.transfer_ns)
    return CollectiveGroup(
        collective=kind,
        bytes=size,
        count=len(members),
        transfer_ns=shortest.transfer_ns,
        dur_max_ns=max(x.dur_ns for i in members for x in i.arrivals),
        wait_ns=sum(x.wait_ns for i in members for x in i.arrivals),
        busbw_gbps=None if shortest.busbw_gbps is None else round(shortest.busbw_gbps, 3),
        link_peak_gbps=shortest.link_peak_gbps,
    )


def _warnings(a: Analysis) -> dict[str, int]:
    """What was skipped or repaired, counted by reason (collectives' calls left unmatched among them), and
    `few_steps` (how many) when fewer than `MIN_STEADY_STEPS` steps were captured: one step is no steady state."""
    warnings = dict(a.profile.warnings)
    if a.steps.source != "none" and a.steps.count < MIN_STEADY_STEPS:
        warnings["few_steps"] = a.steps.count
    if a.device_events_cut:
        warnings[DEVICE_EVENTS_CUT] = a.device_events_cut
    if a.device_not_recorded:
        warnings[DEVICE_NOT_RECORDED] = len(a.profile.events)
    if a.collectives.counts_differ:
        warnings[COLLECTIVES_COUNTS_DIFFER] = a.collectives.counts_differ
    if a.collectives.not_overlapping:
        warnings[COLLECTIVES_NOT_OVERLAPPING] = a.collectives.not_overlapping
    not_walked = sum(w.not_walked for w in a.walks)
    if not_walked:
        warnings[CRITICAL_PATH_NOT_WALKED] = not_walked
    return warnings


def _meta(a: Analysis) -> Meta:
    """What the traces say of where they came from; the report command adds the rest (`render/meta.py`)."""
    return Meta(
        capture_date=capture_date(a.window_start_ns),
        versions=trace_versions(a.profile.metadata, list(a.profile.devices.values())),
    )


def assemble(a: Analysis, findings: Findings) -> RunReport:
    """The run's report, from its analysis and the findings made on it (`findings.evaluate`)."""
    p = a.profile
    per_step = _per_step_parts(a)
    return RunReport(
        version=__version__,
        run=p.name,
        inputs=[Input(path=i.path, format=i.format, host=i.host, rank=i.rank, events=i.events) for i in p.inputs],
        framework=p.framework,
        window=Window(start_ns=a.window_start_ns, end_ns=a.window_end_ns),
        device_info=list(p.devices.values()),
        steps=_steps(a, per_step),
        devices=_devices(a),
        totals=_totals(a),
        ledger=_ledger(a, per_step),
        capture=_capture(a.capture),
        input_pipeline=_input_pipeline(a),
        graph_replays=_graph_replays(a.graphs),
        queue_depth=_queue_depth(a.queue_depth),
        kernel_sequences=_kernel_sequences(a.kernel_sequences),
        critical_path=_critical_path(a.critical_path),
        waits=_waits(a.waits),
        ranks=_ranks(a),
        compute=a.compute.summary,
        collectives=_collectives(a),
        projection=findings.headline,
        host_ops=HostOps(top=a.host_ops.top, input_functions=a.host_ops.input_functions),
        bottlenecks=findings.bottlenecks,
        warnings=_warnings(a),
        meta=_meta(a),
    )


def report_of(a: Analysis) -> RunReport:
    """The report of an analysis, its rules run here (for tools and tests that need no findings of their own)."""
    return assemble(a, evaluate(a))
