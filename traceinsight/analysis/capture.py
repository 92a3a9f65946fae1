"""What kind of capture a trace is, and the evidence that decided it.

A report is only right about a steady state. A CUDA-graph capture pass, a window full of compilation, or a
micro-benchmark of one op holds none, and advice for a training step would be wrong on them. The first rule that
holds decides (`rules.py`'s capture section holds every name and threshold):

``graph_capture``   kernels are recorded into a CUDA / HIP graph (``cudaStreamBeginCapture``,
                    ``cudaGraphInstantiate``, ``torch.cuda.graph``'s ``capture_begin``) and no steady state of
                    replays follows: no stall finding; profile the replay;
``warmup``          one-time costs (compilation, autotuning, context creation, an op's slow first call) cover
                    `WARMUP_MIN_SHARE` of the window; where steps follow them, those steps are analyzed alone
                    (`steady_from_ns`, applied by `analysis.analyze`);
``training``        backward ops or an optimizer update;
``inference``       a serving framework's own frames (vLLM, SGLang, TGI, TensorRT-LLM: `server`), or, with no
                    backward op and no optimizer update, an inference marker (`rules.INFERENCE_PATTERN`:
                    ``torch.no_grad`` / ``inference_mode`` entered, a ``generate`` loop); no backward op alone is
                    no evidence (a forward pass may be a training run's, cut short);
``microbenchmark``  the outermost host ops are a few framework ops repeated, with no model step around them (no
                    step marker, no input wait): their figures are reported, but no claim about a training step;
``unknown``         nothing above can be told.

(A micro-benchmark is told before plain inference, after training and serving.)

Whatever the kind, `workload` says what the run does, on positive evidence only, for the advice
(`advice.py` keys its tips by it): ``training`` (backward ops or an optimizer update), ``server`` (a serving
framework's frames), ``inference`` (an inference marker), else ``unknown``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pandas as pd
from msgspec import field

from traceinsight.analysis.graphs import NOT_REPLAYED
from traceinsight.events import DistinctNames, blocking_mask, kind_mask
from traceinsight.intervals import EMPTY, Intervals, union, union_of, union_of_rows
from traceinsight.result import OneTimeCost
from traceinsight.rules import (
    FIRST_CALL_MIN_NS,
    FIRST_CALL_RATIO,
    GRAPH_CAPTURE_PATTERN,
    INFERENCE_PATTERN,
    KERNEL_LAUNCH,
    MICROBENCHMARK_MAX_OPS,
    MICROBENCHMARK_MIN_CALLS,
    MODEL_FRAME_PATTERN,
    ONE_TIME_COSTS,
    ONE_TIME_MIN_NS,
    REPLAYS_AFTER_CAPTURE_SHARE,
    SERVERS,
    TF_OP_PATTERN,
    TORCH_OP,
    TRAINING_PATTERN,
    WARMUP_MIN_SHARE,
)

CAPTURE_KINDS = ("training", "inference", "graph_capture", "warmup", "microbenchmark", "unknown")
WORKLOADS = ("training", "inference", "server", "unknown")
# Kinds whose window holds no training or serving step to project a fix on.
NO_STEADY_STATE = ("graph_capture", "microbenchmark")
# Host kinds whose slow first call can be lazy initialisation: framework ops, runtime calls, data waits (syncs wait,
# steps are markers, and a Python frame or annotation may span a thread's life, ``threading.py: _bootstrap``).
_FIRST_CALL_KINDS = ("cpu_op", "runtime", "input_wait")


class Capture(msgspec.Struct, frozen=True):
    kind: str  # one of CAPTURE_KINDS
    evidence: list[str]  # the facts that decided it, for people
    server: str | None = None  # the serving framework whose frames the trace shows
    workload: str = "unknown"  # one of WORKLOADS, whatever the kind (a warm-up of a training run: training)
    one_time_ns: int = 0  # the union of all one-time costs
    one_time_share: float = 0.0  # of the window
    one_time: list[OneTimeCost] = field(default_factory=list)
    steady_from_ns: int | None = None  # where the analyzed steady state begins, after the one-time costs
    steady_steps: int = 0  # steps analyzed after the one-time costs (0: none follow)

    @property
    def projects(self) -> bool:
        """Whether the window holds a steady state a fix can be projected on."""
        return self.kind not in NO_STEADY_STATE and not (self.kind == "warmup" and not self.steady_steps)


UNKNOWN = Capture("unknown", ["no events"])


def classify_capture(events: pd.DataFrame, work: pd.DataFrame) -> Capture:
    """The kind of capture `events` is (see the module docstring); `work`: `devices.device_work(events)`."""
    if events.empty:
        return UNKNOWN
    rows = events
    starts = rows["ts_ns"].to_numpy()
    ends = starts + rows["dur_ns"].to_numpy()
    window = int(ends.max() - starts.min())
    host = rows["device"].isna().to_numpy()
    names = DistinctNames(rows, host)
    server = _server(names)
    training = DistinctNames(rows).rows(TRAINING_PATTERN)
    inference = names.rows(INFERENCE_PATTERN)
    workload = _workload(server, bool(training.any()), bool(inference.any()))
    capture = names.rows(GRAPH_CAPTURE_PATTERN)
    costs, unions = _one_time_costs(rows, host, names)
    if capture.any():
        cap_start, cap_end = int(starts[capture].min()), int(ends[capture].max())
        calls = _counted_names(rows, capture)
        if _replayed_after(work, cap_end) < REPLAYS_AFTER_CAPTURE_SHARE:
            kernels = int(kind_mask(work, "kernel").sum())
            return Capture(
                "graph_capture",
                [
                    f"{calls}: kernels are recorded into a CUDA / HIP graph here, not run as a steady state "
                    f"({kernels} kernels ran, outside the graph); no replay follows in the window"
                ],
                server=server,
                workload=workload,
            )
        costs.append(OneTimeCost("CUDA / HIP graph capture", calls, cap_end - cap_start))
        unions.append(Intervals(np.array([cap_start]), np.array([cap_end])))
    one_time = union_of(*unions) if unions else EMPTY
    share = one_time.total / window if window > 0 else 0.0
    found: dict[str, Any] = {
        "one_time_ns": one_time.total,
        "one_time_share": round(share, 4),
        "one_time": sorted(costs, key=lambda c: -c.ns),
        "server": server,
        "workload": workload,
    }
    if share >= WARMUP_MIN_SHARE:
        listed = "; ".join(f"{c.what} {c.ns / 1e6:,.1f} ms ({c.example})" for c in found["one_time"][:3])
        evidence = [f"one-time costs cover {100 * share:.1f} % of the window: {listed}"]
        return Capture("warmup", evidence, steady_from_ns=int(one_time.ends.max()), **found)
    if training.any():
        return Capture("training", [f"backward ops or an optimizer update: {_counted_names(rows, training)}"], **found)
    if server is not None:
        return Capture("inference", [f"{server}'s own frames, no backward op or optimizer update"], **found)
    ops = host & kind_mask(rows, "cpu_op")
    # A loop's step markers or data waits, or a module's frames: a model step.
    looped = kind_mask(rows, "step", "input_wait").any() or names.rows(MODEL_FRAME_PATTERN).any()
    repeated = None if looped else _microbenchmark_ops(rows, ops)
    if repeated is not None:
        return Capture(
            "microbenchmark",
            [f"the outermost ops are {repeated}, repeated with no model step, training or serving frames around them"],
            **found,
        )
    if inference.any():
        return Capture(
            "inference",
            [f"inference markers, no backward op or optimizer update: {_counted_names(rows, inference)}"],
            **found,
        )
    distinct = rows["name"][ops].nunique()
    if distinct > MICROBENCHMARK_MAX_OPS:
        why = (
            f"{distinct:,} distinct host ops; no backward op, optimizer update, serving frame or inference "
            "marker to tell training from inference"
        )
    elif ops.any():
        why = f"too few host ops to tell: {int(ops.sum()):,} calls of {distinct} distinct ops"
    else:
        why = "no framework op, backward op, optimizer update or serving frame to tell"
    return Capture("unknown", [why], **found)


def _workload(server: str | None, training: bool, inference: bool) -> str:
    """What the run does, on positive evidence only (see the module docstring)."""
    if training:
        return "training"
    if server is not None:
        return "server"
    return "inference" if inference else "unknown"


def _server(names: DistinctNames) -> str | None:
    """The serving framework whose own frames the host shows (the first of `rules.SERVERS` that matches)."""
    return next((server for server, pattern in SERVERS if names.rows(pattern).any()), None)


def _counted_names(rows: pd.DataFrame, mask: np.ndarray, top: int = 3) -> str:
    """'a x2, b x1': the most frequent names of the rows `mask`."""
    counts = rows["name"][mask].value_counts().head(top)
    return ", ".join(f"{name} x{count}" for name, count in counts.items() if count)


def _replayed_after(work: pd.DataFrame, end_ns: int) -> float:
    """Share of the kernel time that graph replays run after `end_ns`."""
    kernel = kind_mask(work, "kernel")
    dur = work["dur_ns"].to_numpy()
    total = dur[kernel].sum()
    if total <= 0:
        return 0.0
    after = kernel & (work["replay"].to_numpy() != NOT_REPLAYED) & (work["ts_ns"].to_numpy() >= end_ns)
    return float(dur[after].sum() / total)


def _one_time_costs(
    rows: pd.DataFrame, host: np.ndarray, names: DistinctNames
) -> tuple[list[OneTimeCost], list[Intervals]]:
    """Each kind of one-time cost the trace shows (`rules.ONE_TIME_COSTS`, slow first calls), with its union."""
    starts = rows["ts_ns"].to_numpy()
    dur = rows["dur_ns"].to_numpy()
    costs: list[OneTimeCost] = []
    unions: list[Intervals] = []

    def add(what: str, mask: np.ndarray) -> None:
        if not mask.any():
            return
        covered = union(starts[mask], starts[mask] + dur[mask])
        longest = int(np.flatnonzero(mask)[np.argmax(dur[mask])])
        costs.append(OneTimeCost(what, str(rows["name"].iloc[longest]), covered.total))
        unions.append(covered)

    long_enough = host & (dur >= ONE_TIME_MIN_NS)
    for what, pattern in ONE_TIME_COSTS:
        add(what, names.rows(pattern) & long_enough)
    named = union_of(*unions) if unions else EMPTY
    add("lazy initialisation in an op's first call", _slow_first_calls(rows, host, named))
    add(
        "lazy module loading in a kernel's first launch", _slow_launches(rows, names.rows(KERNEL_LAUNCH.pattern) & host)
    )
    return costs, unions


def _slow_launches(rows: pd.DataFrame, launches: np.ndarray) -> np.ndarray:
    """The kernel launch calls that took `FIRST_CALL_MIN_NS` and `FIRST_CALL_RATIO` times the median launch (CUDA's
    lazy module loading in a kernel's first launch: `rules.FIRST_CALL_MIN_NS`)."""
    if not launches.any():
        return launches
    dur = rows["dur_ns"].to_numpy()
    median = float(np.median(dur[launches]))
    return launches & (dur >= FIRST_CALL_MIN_NS) & (dur >= FIRST_CALL_RATIO * median)


def _slow_first_calls(rows: pd.DataFrame, host: np.ndarray, named: Intervals) -> np.ndarray:
    """The first call of each host op that took `FIRST_CALL_MIN_NS` and `FIRST_CALL_RATIO` times the median of its
    later calls (context creation inside the first allocation, set-up in the first convolution), unless most of it
    is a named one-time cost (`named`) or a blocking wait."""
    slow = np.zeros(len(rows), bool)
    candidates = host & kind_mask(rows, *_FIRST_CALL_KINDS)
    codes = rows["name"].cat.codes.to_numpy()
    suspects = np.unique(codes[candidates & (rows["dur_ns"].to_numpy() >= FIRST_CALL_MIN_NS)])
    suspects = suspects[suspects >= 0]
    if not len(suspects):
        return slow
    mine = np.flatnonzero(candidates & np.isin(codes, suspects))
    calls = pd.DataFrame(
        {"code": codes[mine], "ts": rows["ts_ns"].to_numpy()[mine], "dur": rows["dur_ns"].to_numpy()[mine]}
    )
    calls["row"] = mine
    calls = calls.sort_values(["code", "ts"], kind="stable")
    first = ~calls["code"].duplicated().to_numpy()
    later = calls[~first].groupby("code")["dur"].median()
    firsts = calls[first].set_index("code")
    median = later.reindex(firsts.index).to_numpy()
    hit = (
        ~np.isnan(median)
        & (firsts["dur"].to_numpy() >= FIRST_CALL_MIN_NS)
        & (firsts["dur"].to_numpy() >= FIRST_CALL_RATIO * median)
    )
    rows_hit = firsts["row"].to_numpy()[hit]
    # A first call spent blocked (a copy waiting for the device) is a wait (`waits.py`), not initialisation.
    start = rows["ts_ns"].to_numpy()[rows_hit]
    dur = rows["dur_ns"].to_numpy()[rows_hit]
    explained = union_of(named, union_of_rows(rows["ts_ns"].to_numpy(), rows["dur_ns"].to_numpy(), blocking_mask(rows)))
    slow[rows_hit[explained.covered_between(start, start + dur) < 0.5 * dur]] = True
    return slow


def _microbenchmark_ops(rows: pd.DataFrame, ops: np.ndarray) -> str | None:
    """'aten::layer_norm x200' when the outermost host ops (not inside another op of their thread) are at most
    `MICROBENCHMARK_MAX_OPS` distinct framework ops, each called `MICROBENCHMARK_MIN_CALLS` times or more."""
    if not ops.any():
        return None
    frame = pd.DataFrame(
        {
            "thread": rows["thread"].to_numpy()[ops],
            "ts": rows["ts_ns"].to_numpy()[ops],
            "end": rows["ts_ns"].to_numpy()[ops] + rows["dur_ns"].to_numpy()[ops],
            "name": rows["name"].to_numpy()[ops],
        }
    ).sort_values(["thread", "ts"], kind="stable")
    thread = frame["thread"].to_numpy()
    reached = frame.groupby("thread")["end"].cummax().to_numpy()
    same = np.r_[False, thread[1:] == thread[:-1]]
    outermost = ~same | (frame["ts"].to_numpy() >= np.r_[reached[:1], reached[:-1]])
    counts = frame["name"][outermost].astype(str).value_counts()
    framework = counts.index.to_series().str.contains(TORCH_OP.pattern) | counts.index.to_series().str.match(
        TF_OP_PATTERN
    )
    if len(counts) > MICROBENCHMARK_MAX_OPS or counts.min() < MICROBENCHMARK_MIN_CALLS or not framework.all():
        return None
    return ", ".join(f"{name} x{count}" for name, count in counts.items())
