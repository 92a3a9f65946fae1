"""Who waits for whom: collectives matched across ranks, each rank's wait, and the straggler that causes it.

In data-parallel training a rank that reaches a collective early idles inside it until the last rank arrives; the
cause lies on the late rank, in a phase of its step. Per collective instance (one all-reduce, matched across ranks
by process group and sequence number where Kineto records them, else by order per rank, collective, message size
and step; calls with none of these args, gloo without ``record_shapes``, by order alone, left unmatched where the
ranks' counts in a step differ or the paired calls do not overlap in time) and per rank:

* **arrival**: when the rank starts the collective (an NCCL / RCCL kernel's start on the device; a backend's host
  range, ``gloo:all_reduce`` on its worker thread, on the host);
* **wait** = the latest arrival across ranks - this rank's arrival; **late** = this rank's arrival - the earliest;
* **transfer** = the shortest duration across ranks (TraceLens' NcclAnalyser ``comm_latency`` does the same):
  the rank that arrives last barely waits, so its duration is the transfer's;
* **bus bandwidth** = algbw * factor(n), algbw = S / transfer, with nccl-tests' factors (doc/PERFORMANCE.md:
  all-reduce 2(n-1)/n, reduce-scatter, all-gather and all-to-all (n-1)/n; S is the full message: all-gather's
  output, reduce-scatter's input), beside the NVLink peak a direction where the device is known.

Per rank: the time it waits (the union of its waits: buckets of one step wait at once), the transfers, how late it
arrives, and its step by phase (the user's ``record_function`` ranges on the step thread, else the framework's:
`rules.FRAMEWORK_PHASES`), its waits taken out. The straggler is the rank that arrives last most often, when the
others wait for it long enough to matter (`rules.STRAGGLER_*`); it is named with the phase where it spends most more
than the median of the other ranks a step.

A trace of one rank cannot see the others: there, an instance's duration beyond the shortest instance of the same
collective and size is "waiting (other ranks not in the trace)", that shortest duration bounds the transfer, and no
straggler is named. Clocks of different hosts are taken as they are (one host's ranks share one).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.hardware import device_peaks
from traceinsight.events import DistinctNames, Profile, input_labels, kind_mask
from traceinsight.intervals import EMPTY, Intervals, union
from traceinsight.rules import (
    BUS_BANDWIDTH_FACTORS,
    COLLECTIVE_DTYPE_BYTES,
    COLLECTIVE_EXCLUDED,
    COLLECTIVE_HOST_PATTERN,
    COLLECTIVE_KERNEL_PATTERN,
    COLLECTIVE_KINDS,
    COLLECTIVE_OVERLAP_SLACK_NS,
    FRAMEWORK_PHASES,
    STRAGGLER_MIN_LAST_SHARE,
    STRAGGLER_MIN_LATE_NS,
    STRAGGLER_MIN_STEP_SHARE,
    STRAGGLER_PHASE_MIN_SHARE,
)

# NVLink bandwidth a direction, GB/s, of the parts `hardware.device_peaks` names (NVIDIA data sheets: V100 SXM2
# 300 GB/s, A100 SXM4 600 GB/s, H100 / H200 SXM 900 GB/s, H100 NVL bridge 600 GB/s, H200 NVL 900 GB/s, all
# bidirectional). nccl-tests' busbw is measured against this figure. PCIe parts are left out: their GPUs may talk
# over PCIe or an NVLink bridge, which the trace does not say.
NVLINK_GBPS = {
    "V100 SXM2": 150.0,
    "A100 SXM4 40GB": 300.0,
    "A100 SXM4 80GB": 300.0,
    "H100 SXM": 450.0,
    "H100 NVL": 300.0,
    "H200 SXM": 450.0,
    "H200 NVL": 450.0,
}
SINGLE_RANK_NOTE = "waiting (other ranks not in the trace)"
_LETTERS = re.compile(r"[^a-z]")
_PHASE_KINDS = ("annotation", "cpu_op", "input_wait")


class Arrival(msgspec.Struct, frozen=True):
    """One rank at one collective instance (ns)."""

    rank: int
    input_id: int
    arrival_ns: int  # when it started the collective
    dur_ns: int  # its own duration: its wait plus the transfer
    wait_ns: int  # latest arrival - its own (single-rank: its duration - the shortest of its kind)
    late_ns: int  # its arrival - the earliest (0 in a single-rank trace)


class CollectiveInstance(msgspec.Struct, frozen=True):
    """One collective, matched across the ranks that take part in it."""

    key: str  # how it was matched ("group 0 seq 12", "all_reduce 4.2 MB, step 8, #0")
    collective: str  # `rules.COLLECTIVE_KINDS` name ("all_reduce"), else the event's name
    group: str | None  # process group name; None unknown
    step_id: int | None  # the ProfilerStep it falls in (the first rank's)
    bytes: int | None  # the full message (all-gather: its output); None unknown
    group_size: int  # ranks in the group (Kineto's `Group size`, else the ranks it was matched on)
    transfer_ns: int  # the shortest duration across ranks (single-rank: of the same collective and size)
    algbw_gbps: float | None  # bytes / transfer
    busbw_gbps: float | None  # algbw * nccl-tests' factor; None where the collective has none
    link_peak_gbps: float | None  # the device's NVLink a direction, where known
    last_rank: int | None  # the rank that arrived last; None in a single-rank trace
    arrivals: list[Arrival]


class RankCollectives(msgspec.Struct, frozen=True):
    """One rank's collectives over the capture (ns), and its step by phase."""

    rank: int
    input_id: int
    label: str
    instances: int
    wait_ns: int  # the union of its waits (several in flight at once count once)
    transfer_ns: int  # summed over its instances
    late_ns: int  # the union of [earliest arrival, its arrival) over its instances
    last_count: int  # instances at which it arrived last (and not together with every other rank)
    steps: int  # its marker steps (0 without)
    wait_per_step_ns: int | None
    late_per_step_ns: int | None
    step_ns: int | None  # its mean step
    phases: dict[str, int]  # mean ns a step per phase, its collective waits taken out


class Straggler(msgspec.Struct, frozen=True):
    """The rank the others wait for, and where its step loses the time."""

    rank: int
    input_id: int
    label: str
    last_share: float  # of the matched instances with any spread, the share at which it arrived last
    late_per_step_ns: int  # how late it arrives (its `late_ns`), a step (per instance without steps)
    phase: str | None  # where it spends most more than the median of the other ranks
    phase_excess_ns: int | None
    phases: list[tuple[str, int]]  # every phase with at least STRAGGLER_PHASE_MIN_SHARE of its lateness, largest first
    message: str


class Collectives(msgspec.Struct, frozen=True):
    """The run's collectives, each rank's share of them, and the straggler."""

    scope: str  # "matched" (two ranks or more in the trace) | "single_rank" | "none"
    side: str  # "device" (NCCL / RCCL kernels) | "host" (a backend's host ranges, gloo) | "" (none)
    instances: list[CollectiveInstance]
    ranks: list[RankCollectives]
    straggler: Straggler | None
    phase_source: str  # "record_function ranges" | "framework ranges" | "none"
    unmatched: int  # rows left out: found on fewer ranks than their group's (the capture windows' edges), or below
    note: str
    counts_differ: int = 0  # of them, argless rows whose (collective, step) the ranks call a different number of times
    not_overlapping: int = 0  # of them, argless rows whose order match does not overlap in time (a mis-order)


def collective_kind(name: str) -> str | None:
    """The `rules.COLLECTIVE_KINDS` name a collective's name or ``Collective name`` arg holds, else None."""
    letters = _LETTERS.sub("", name.lower())
    return next((kind for kind, word in COLLECTIVE_KINDS if word in letters), None)


# `collective_rows`' columns.
_ROW_COLUMNS = (
    "input_id",
    "rank",
    "ts_ns",
    "dur_ns",
    "device",
    "side",
    "collective",
    "group",
    "group_size",
    "seq",
    "bytes",
    "step_id",
)


def collective_rows(profile: Profile) -> pd.DataFrame:
    """Every rank's timed collectives, one row each: per input its NCCL / RCCL kernels where it has any, else its
    backend's host ranges (`rules.COLLECTIVE_*`), with the args of `Profile.collectives` joined on.

    Columns: input_id, rank, ts_ns, dur_ns, device, side, collective, group, seq, group_size, bytes, step_id.
    """
    events = profile.events
    host = events["device"].isna().to_numpy()
    names = DistinctNames(events)
    kept = ~names.rows(COLLECTIVE_EXCLUDED)  # barriers and waits: synchronisation, no payload
    kernels = names.rows(COLLECTIVE_KERNEL_PATTERN) & kind_mask(events, "kernel") & ~host & kept
    ranges = names.rows(COLLECTIVE_HOST_PATTERN) & host & kept
    input_id = events["input_id"].to_numpy()
    with_kernels = np.unique(input_id[kernels])
    picked = kernels | (ranges & ~np.isin(input_id, with_kernels))
    if not picked.any():  # no collective: no args to join on (the joins alone took 4 ms of every report)
        return pd.DataFrame(columns=_ROW_COLUMNS)
    cols = ["input_id", "rank", "ts_ns", "dur_ns", "device", "name"]
    rows = pd.DataFrame({c: events[c].to_numpy()[picked] for c in cols})
    rows["name"] = rows["name"].astype(str)
    rows["device"] = rows["device"].astype(object)
    rows["side"] = np.where(np.isin(rows["input_id"], with_kernels), "device", "host")
    rows["rank"] = np.where(rows["rank"] >= 0, rows["rank"], rows["input_id"])
    rows = _with_args(rows, profile.collectives)
    rows["step_id"] = _step_ids(events, rows)
    return rows.sort_values(["input_id", "ts_ns"], kind="stable").reset_index(drop=True)


def _with_args(rows: pd.DataFrame, args: pd.DataFrame) -> pd.DataFrame:
    """`rows` with the collectives' args joined on (input, start, name), the kind named and the message in bytes."""
    table = args[["input_id", "ts_ns", "name", "collective", "group", "group_size", "seq", "in_nelems", "out_nelems"]]
    table = table.assign(
        name=table["name"].astype(str),
        collective=table["collective"].astype(object),
        group=table["group"].astype(object),
        dtype_bytes=args["dtype"].astype(object).map(lambda d: COLLECTIVE_DTYPE_BYTES.get(str(d).lower(), -1)),
    ).drop_duplicates(["input_id", "ts_ns", "name"])
    rows = rows.merge(table, on=["input_id", "ts_ns", "name"], how="left")
    named = rows["collective"].where(rows["collective"].notna(), rows["name"]).astype(str)
    kinds = {text: collective_kind(text) or text for text in named.unique()}
    rows["collective"] = named.map(kinds)
    for col in ("group_size", "seq", "in_nelems", "out_nelems", "dtype_bytes"):
        rows[col] = rows[col].fillna(-1).astype(np.int64)
    elements = np.where(
        rows["collective"].to_numpy() == "all_gather",
        np.where(rows["out_nelems"] > 0, rows["out_nelems"], rows["in_nelems"] * rows["group_size"]),
        rows["in_nelems"],
    )
    known = (elements > 0) & (rows["dtype_bytes"].to_numpy() > 0)
    rows["bytes"] = np.where(known, elements * rows["dtype_bytes"].to_numpy(), -1)
    rows["group"] = rows["group"].where(rows["group"].notna(), None)
    return rows.drop(columns=["in_nelems", "out_nelems", "dtype_bytes", "name"])


def _step_ids(events: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """The host step marker each row starts in, on its own input; -1 outside steps (or without markers)."""
    steps = events[kind_mask(events, "step") & events["device"].isna().to_numpy()]
    ids = np.full(len(rows), -1, np.int64)
    for input_id, marks in steps.groupby("input_id", observed=True):
        marks = marks.drop_duplicates("step_id").sort_values("ts_ns")
        mine = np.flatnonzero(rows["input_id"].to_numpy() == input_id)
        ts = rows["ts_ns"].to_numpy()[mine]
        at = np.searchsorted(marks["ts_ns"].to_numpy(), ts, side="right") - 1
        ends = (marks["ts_ns"] + marks["dur_ns"]).to_numpy()
        inside = (at >= 0) & (ts < ends[np.maximum(at, 0)])
        ids[mine[inside]] = marks["step_id"].to_numpy()[at[inside]]
    return ids


def collectives(profile: Profile) -> Collectives:
    """The run's collectives matched across its ranks (`collective_rows`), or, with one rank, split against the
    shortest of their kind; per rank its totals and step phases; the straggler."""
    rows = collective_rows(profile)
    if rows.empty:
        return Collectives("none", "", [], [], None, "none", 0, "no collectives in the trace")
    side = "device" if (rows["side"] == "device").any() else "host"
    if rows["rank"].nunique() < 2:
        return _single_rank(profile, rows, side)
    matched, left = _match(rows)
    instances = _instances(profile, matched)
    waits = _wait_unions(matched)
    phases, source = _phases(profile, waits if side == "host" else {})
    ranks = _rank_totals(profile, matched, waits, phases)
    straggler = _straggler(matched, ranks)
    notes = [] if straggler else ["no straggler: no rank arrives last often enough, or late enough to matter"]
    if left.counts_differ:
        notes.append(
            f"{left.counts_differ} calls without sequence number, group or size left unmatched: the ranks call "
            "their collective a different number of times in the step, so order cannot pair them"
        )
    if left.not_overlapping:
        notes.append(
            f"{left.not_overlapping} calls paired by order left unmatched: the paired calls do not overlap in time, "
            "so they are not one collective"
        )
    return Collectives(
        "matched",
        side,
        instances,
        ranks,
        straggler,
        source,
        left.unmatched,
        "; ".join(notes),
        left.counts_differ,
        left.not_overlapping,
    )


def _label(profile: Profile, input_id: int) -> str:
    """The input's label (`events.input_labels`); `input<N>` for a profile built without its inputs listed."""
    labels = input_labels(profile.inputs)
    return labels[input_id] if input_id < len(labels) else f"input{input_id}"


def waits_in(c: Collectives, input_id: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """An input's waiting inside collectives within each [start, end) window (ns): the union of its waits, so the
    buckets of one step waiting at once count once. What a straggler costs that input's steps."""
    return _covered(c, input_id, starts, ends, lambda x: (x.arrival_ns, x.arrival_ns + x.wait_ns))


def transfers_in(c: Collectives, input_id: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """An input's collective time after its waits (the transfer) within each window (ns), as a union."""
    return _covered(c, input_id, starts, ends, lambda x: (x.arrival_ns + x.wait_ns, x.arrival_ns + x.dur_ns))


def _covered(
    c: Collectives, input_id: int, starts: np.ndarray, ends: np.ndarray, interval: Callable[[Arrival], tuple[int, int]]
) -> np.ndarray:
    """The union of `interval` of each of an input's arrivals within each window (ns)."""
    mine = [interval(x) for i in c.instances for x in i.arrivals if x.input_id == input_id]
    if not mine:
        return np.zeros(len(starts), np.int64)
    begin, end = (np.array(v, np.int64) for v in zip(*mine, strict=True))
    return union(begin, end).covered_between(np.asarray(starts, np.int64), np.asarray(ends, np.int64))


class _Left(msgspec.Struct, frozen=True):
    """Rows `_match` left out, by reason."""

    unmatched: int  # every row left out
    counts_differ: int  # argless rows of a (collective, step) whose count differs between ranks
    not_overlapping: int  # argless rows of an order match whose calls do not overlap in time


def _match(rows: pd.DataFrame) -> tuple[pd.DataFrame, _Left]:
    """Rows of the instances every rank of their group took part in, `instance` numbering them; and the rows left
    out. By (group, seq) where every row has its sequence number, else by (group, collective, bytes, step, order
    within those per rank). Rows with no seq, group or size are matched by order alone, checked
    (`rules.COLLECTIVES_COUNTS_DIFFER`, `rules.COLLECTIVES_NOT_OVERLAPPING`)."""
    rows = rows.copy()
    group = rows["group"].fillna("?").astype(str)
    step = pd.Series(-1, index=rows.index)
    if (rows["seq"] >= 0).all():
        rows["key"] = "group " + group + " seq " + rows["seq"].astype(str)
    else:
        steps = rows.loc[rows["step_id"] >= 0].groupby("rank")["step_id"].agg(set)
        shared = set.intersection(*steps) if len(steps) == rows["rank"].nunique() else set()
        step = rows["step_id"] if shared else step
        by = [rows["rank"], group, rows["collective"], rows["bytes"], step]
        order = rows.groupby(by, sort=False).cumcount()
        size = np.where(rows["bytes"] >= 0, (rows["bytes"] / 1e6).round(2).astype(str) + " MB", "size unknown")
        where = np.where(step >= 0, ", step " + step.astype(str), "")
        rows["key"] = rows["collective"] + " " + size + where + ", #" + order.astype(str) + " (group " + group + ")"
    present = rows.groupby(group)["rank"].transform("nunique")
    ranks = rows.groupby("key")["rank"].transform("nunique")
    complete = (ranks == present) & (ranks >= 2) & ~rows.duplicated(["key", "rank"], keep=False)
    argless = ((rows["seq"] < 0) & rows["group"].isna() & (rows["bytes"] < 0)).to_numpy()
    differ = _counts_differ(rows, step, argless)
    complete &= ~differ
    apart = argless & complete.to_numpy() & ~_overlapping(rows, complete.to_numpy())
    complete &= ~apart
    kept = rows[complete.to_numpy()].copy()
    kept["instance"] = kept.groupby("key", sort=False).ngroup()
    first = kept.groupby("instance")["ts_ns"].transform("min")
    last = kept.groupby("instance")["ts_ns"].transform("max")
    kept["wait_ns"] = last - kept["ts_ns"]
    kept["late_ns"] = kept["ts_ns"] - first
    kept["transfer_ns"] = kept.groupby("instance")["dur_ns"].transform("min")
    kept["spread_ns"] = last - first
    left = _Left(int((~complete).sum()), int(differ.sum()), int(apart.sum()))
    return kept.sort_values(["instance", "rank"]), left


def _counts_differ(rows: pd.DataFrame, step: pd.Series, argless: np.ndarray) -> np.ndarray:
    """The argless rows of a (collective, step) that the ranks holding it call a different number of times: order
    cannot pair them. A rank without the pair at all is a capture window's edge, left out as found on fewer ranks."""
    mine = rows[argless]
    by = [mine["collective"], step[argless]]
    calls = mine.groupby([mine["rank"], *by], sort=False)["rank"].transform("size")
    result = np.zeros(len(rows), bool)
    result[argless] = (calls.groupby(by, sort=False).transform("nunique") > 1).to_numpy()
    return result


def _overlapping(rows: pd.DataFrame, complete: np.ndarray) -> np.ndarray:
    """Whether each complete row's instance overlaps on every rank (its latest start before its earliest end, with
    `rules.COLLECTIVE_OVERLAP_SLACK_NS`); False for the other rows."""
    mine = rows[complete]
    latest_start = mine.groupby("key")["ts_ns"].transform("max")
    earliest_end = (mine["ts_ns"] + mine["dur_ns"]).groupby(mine["key"]).transform("min")
    result = np.zeros(len(rows), bool)
    result[complete] = (latest_start <= earliest_end + COLLECTIVE_OVERLAP_SLACK_NS).to_numpy()
    return result


def bandwidths(collective: str, nbytes: int, transfer_ns: int, n: int) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s (nccl-tests' definitions); None where the message or time is unknown."""
    if nbytes <= 0 or transfer_ns <= 0:
        return None, None
    algbw = nbytes / transfer_ns  # bytes/ns = GB/s
    factor = BUS_BANDWIDTH_FACTORS.get(collective)
    return algbw, (algbw * factor(n) if factor is not None and n >= 2 else None)


def _link_peak(profile: Profile, device: object) -> float | None:
    """The device's NVLink bandwidth a direction, where the hardware table knows the part."""
    info = profile.devices.get(str(device)) if isinstance(device, str) else None
    peaks = device_peaks(info) if info is not None else None
    return NVLINK_GBPS.get(peaks.name) if peaks is not None else None


def _instances(profile: Profile, matched: pd.DataFrame) -> list[CollectiveInstance]:
    """One `CollectiveInstance` per matched instance."""
    result = []
    for _, rows in matched.groupby("instance", sort=True):
        head = rows.iloc[0]
        group_size = int(head["group_size"]) if head["group_size"] > 0 else len(rows)
        transfer = int(head["transfer_ns"])
        algbw, busbw = bandwidths(head["collective"], int(head["bytes"]), transfer, group_size)
        arrivals = [
            Arrival(int(r.rank), int(r.input_id), int(r.ts_ns), int(r.dur_ns), int(r.wait_ns), int(r.late_ns))
            for r in rows.itertuples()
        ]
        result.append(
            CollectiveInstance(
                key=str(head["key"]),
                collective=str(head["collective"]),
                group=head["group"],
                step_id=int(head["step_id"]) if head["step_id"] >= 0 else None,
                bytes=int(head["bytes"]) if head["bytes"] >= 0 else None,
                group_size=group_size,
                transfer_ns=transfer,
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                link_peak_gbps=_link_peak(profile, head["device"]),
                last_rank=int(rows["rank"].to_numpy()[np.argmax(rows["ts_ns"].to_numpy())]),
                arrivals=arrivals,
            )
        )
    return result


def _wait_unions(matched: pd.DataFrame) -> dict[int, Intervals]:
    """Per input, the union of its waits: [arrival, latest arrival) of each instance."""
    return {
        int(input_id): union(rows["ts_ns"].to_numpy(), (rows["ts_ns"] + rows["wait_ns"]).to_numpy())
        for input_id, rows in matched.groupby("input_id")
    }


def _step_marks(events: pd.DataFrame, input_id: int) -> pd.DataFrame:
    """An input's host step markers, one row a step, in time order."""
    mine = (events["input_id"].to_numpy() == input_id) & kind_mask(events, "step") & events["device"].isna().to_numpy()
    return events[mine].drop_duplicates("step_id").sort_values("ts_ns")


def _phase_names(names: pd.Series, kinds: pd.Series) -> tuple[np.ndarray, bool]:
    """Each outermost range's phase: the framework's (`rules.FRAMEWORK_PHASES`) by name, else a user range's own
    name, else "other"; and whether any user range was among them."""
    distinct = pd.Series(names.unique())
    framework = distinct.map(lambda n: next((p for p, pattern in FRAMEWORK_PHASES if pattern.search(n)), None))
    lookup = dict(zip(distinct, framework, strict=True))
    phase = names.map(lookup)
    user = phase.isna().to_numpy() & (kinds.to_numpy() == "annotation")
    phase = phase.where(phase.notna(), names.where(user, "other"))
    return phase.to_numpy(dtype=object), bool(user.any())


def _phase_ranges(events: pd.DataFrame, input_id: int) -> tuple[np.ndarray, pd.DataFrame]:
    """An input's step markers, and the rows of its phase ranges: the outermost ranges on the markers' thread
    within its steps (positions in `events`, in time order)."""
    marks = _step_marks(events, input_id)
    if marks.empty:
        return np.zeros(0, np.int64), marks
    thread = marks["thread"].iloc[0]
    starts, ends = marks["ts_ns"].to_numpy(), (marks["ts_ns"] + marks["dur_ns"]).to_numpy()
    mine = np.flatnonzero(
        (events["input_id"].to_numpy() == input_id)
        & (events["thread"].to_numpy() == thread)
        & kind_mask(events, *_PHASE_KINDS)
        & events["device"].isna().to_numpy()
        & (events["ts_ns"].to_numpy() >= starts[0])
        & (events["ts_ns"].to_numpy() < ends[-1])
    )
    r_start, r_dur = events["ts_ns"].to_numpy()[mine], events["dur_ns"].to_numpy()[mine]
    order = np.lexsort((-r_dur, r_start))
    mine, r_start, r_end = mine[order], r_start[order], (r_start + r_dur)[order]
    outermost = np.ones(len(mine), bool)
    outermost[1:] = r_start[1:] >= np.maximum.accumulate(r_end)[:-1]
    return mine[outermost], marks


def rows_collectives_read(events: pd.DataFrame, inputs: int) -> np.ndarray:
    """The rows `collectives` reads (collectives, step markers, phase ranges): what an input analysed apart keeps
    of its event table, so that a run read in processes (`merge_analyses`) matches its ranks as one read whole."""
    names = DistinctNames(events)
    host = events["device"].isna().to_numpy()
    keep = (names.rows(COLLECTIVE_KERNEL_PATTERN) & kind_mask(events, "kernel") & ~host) | (
        names.rows(COLLECTIVE_HOST_PATTERN) & host
    )
    keep |= kind_mask(events, "step") & host
    for input_id in range(max(inputs, 1)):
        keep[_phase_ranges(events, input_id)[0]] = True
    return keep


def _phases(profile: Profile, waits: dict[int, Intervals]) -> tuple[dict[int, dict[str, int]], str]:
    """Per input, the mean ns a step of each phase: the outermost ranges on the step markers' thread within its
    steps, less the collective waits (`waits`, host collectives only) they hold."""
    events = profile.events
    result: dict[int, dict[str, int]] = {}
    any_user = any_framework = False
    for input_id in range(len(profile.inputs)):
        rows, marks = _phase_ranges(events, input_id)
        if marks.empty:
            continue
        ranges = events.iloc[rows]
        r_start = ranges["ts_ns"].to_numpy()
        r_end = r_start + ranges["dur_ns"].to_numpy()
        phase, user = _phase_names(ranges["name"].astype(str), ranges["kind"].astype(str))
        any_user |= user
        any_framework |= not user and len(phase) > 0
        wait = waits.get(input_id, EMPTY)
        own = (r_end - r_start) - (wait.covered_between(r_start, r_end) if len(wait) else 0)
        totals = pd.Series(own).groupby(phase).sum()
        result[input_id] = {str(p): int(v) // len(marks) for p, v in totals.items()}
    source = "record_function ranges" if any_user else "framework ranges" if any_framework else "none"
    return result, source


def _rank_totals(
    profile: Profile, matched: pd.DataFrame, waits: dict[int, Intervals], phases: dict[int, dict[str, int]]
) -> list[RankCollectives]:
    """Per input with collectives: its instances, wait union, transfers, lateness and step phases."""
    labels = input_labels(profile.inputs)
    spread = matched["spread_ns"].to_numpy() > 0
    last = spread & (matched["late_ns"].to_numpy() == matched["spread_ns"].to_numpy())
    matched = matched.assign(last=last)
    result = []
    for input_id, rows in matched.groupby("input_id"):
        marks = _step_marks(profile.events, int(input_id))
        steps = len(marks)
        wait = waits[int(input_id)].total
        arrival = rows["ts_ns"].to_numpy()
        late = union(arrival - rows["late_ns"].to_numpy(), arrival).total
        result.append(
            RankCollectives(
                rank=int(rows["rank"].iloc[0]),
                input_id=int(input_id),
                label=labels[int(input_id)],
                instances=len(rows),
                wait_ns=int(wait),
                transfer_ns=int(rows["transfer_ns"].sum()),
                late_ns=int(late),
                last_count=int(rows["last"].sum()),
                steps=steps,
                wait_per_step_ns=int(wait) // steps if steps else None,
                late_per_step_ns=int(late) // steps if steps else None,
                step_ns=int(marks["dur_ns"].mean()) if steps else None,
                phases=phases.get(int(input_id), {}),
            )
        )
    return result


def _straggler(matched: pd.DataFrame, ranks: list[RankCollectives]) -> Straggler | None:
    """The rank that arrives last most often, when it does so at `STRAGGLER_MIN_LAST_SHARE` of the instances with
    any spread and the others wait for it long enough (`STRAGGLER_MIN_STEP_SHARE` of the median step,
    `STRAGGLER_MIN_LATE_NS`); named with the phases where it spends most more than the median of the others."""
    spread = int(matched.drop_duplicates("instance")["spread_ns"].gt(0).sum())
    if not spread:
        return None
    candidate = max(ranks, key=lambda r: r.last_count)
    share = candidate.last_count / spread
    per_step = candidate.late_per_step_ns
    if per_step is None:
        per_step = candidate.late_ns // max(candidate.instances, 1)
        floor = STRAGGLER_MIN_LATE_NS
    else:
        steps = [r.step_ns for r in ranks if r.step_ns]
        floor = max(STRAGGLER_MIN_LATE_NS, int(STRAGGLER_MIN_STEP_SHARE * float(np.median(steps))) if steps else 0)
    if share < STRAGGLER_MIN_LAST_SHARE or per_step < floor:
        return None
    others = [r.phases for r in ranks if r is not candidate and r.phases]
    excess = {
        phase: ns - int(np.median([o.get(phase, 0) for o in others]))
        for phase, ns in candidate.phases.items()
        if others
    }
    named = sorted(
        ((p, ns) for p, ns in excess.items() if ns >= STRAGGLER_PHASE_MIN_SHARE * per_step),
        key=lambda item: -item[1],
    )
    phase, phase_ns = named[0] if named else (None, None)
    message = (
        f"{candidate.label} arrives last at {candidate.last_count} of {spread} collectives, "
        f"{per_step / 1e6:.1f} ms {'a step' if candidate.late_per_step_ns is not None else 'each'} after the first rank"
    )
    if phase is not None and phase_ns is not None:
        message += f"; it spends {phase_ns / 1e6:.1f} ms more a step in `{phase}` than the median rank"
    return Straggler(
        candidate.rank, candidate.input_id, candidate.label, share, per_step, phase, phase_ns, named, message
    )


def _single_rank(profile: Profile, rows: pd.DataFrame, side: str) -> Collectives:
    """One rank: each instance's transfer is bounded by the shortest instance of the same collective and size
    (and group); the rest of its duration is waiting for ranks not in the trace."""
    rows = rows.copy()
    size = np.where(rows["bytes"] >= 0, rows["bytes"].astype(str), "?")
    rows["key"] = rows["collective"] + " " + size + " " + rows["group"].fillna("?").astype(str)
    rows["transfer_ns"] = rows.groupby("key")["dur_ns"].transform("min")
    rows["wait_ns"] = rows["dur_ns"] - rows["transfer_ns"]
    instances = []
    for r in rows.itertuples():
        group_size = int(r.group_size) if r.group_size > 0 else 0
        algbw, busbw = bandwidths(str(r.collective), int(r.bytes), int(r.transfer_ns), group_size)
        instances.append(
            CollectiveInstance(
                key=f"{r.collective} {r.bytes if r.bytes >= 0 else 'size unknown'} B, #{r.Index}",
                collective=str(r.collective),
                group=r.group,
                step_id=int(r.step_id) if r.step_id >= 0 else None,
                bytes=int(r.bytes) if r.bytes >= 0 else None,
                group_size=group_size,
                transfer_ns=int(r.transfer_ns),
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                link_peak_gbps=_link_peak(profile, r.device),
                last_rank=None,
                arrivals=[Arrival(int(r.rank), int(r.input_id), int(r.ts_ns), int(r.dur_ns), int(r.wait_ns), 0)],
            )
        )
    input_id = int(rows["input_id"].iloc[0])
    waits = {input_id: union(rows["ts_ns"].to_numpy(), (rows["ts_ns"] + rows["wait_ns"]).to_numpy())}
    phases, source = _phases(profile, waits if side == "host" else {})
    marks = _step_marks(profile.events, input_id)
    steps, wait = len(marks), waits[input_id].total
    rank = RankCollectives(
        rank=int(rows["rank"].iloc[0]),
        input_id=input_id,
        label=_label(profile, input_id),
        instances=len(rows),
        wait_ns=int(wait),
        transfer_ns=int(rows["transfer_ns"].sum()),
        late_ns=0,
        last_count=0,
        steps=steps,
        wait_per_step_ns=int(wait) // steps if steps else None,
        late_per_step_ns=None,
        step_ns=int(marks["dur_ns"].mean()) if steps else None,
        phases=phases.get(input_id, {}),
    )
    note = (
        f"one rank in the trace: a collective's time beyond the shortest of the same collective and size is "
        f"{SINGLE_RANK_NOTE}; no straggler can be named"
    )
    return Collectives("single_rank", side, instances, [rank], None, source, 0, note)
