"""Short-kernel sequences that every step repeats: the candidates for fusion or a CUDA graph.

Per stream, the kernels under the small-kernel threshold that run one after another (graph replays aside) form
runs; every window of 2 to `MAX_SEQUENCE` kernels inside a run is hashed from its name codes (a rolling
polynomial hash, one numpy pass per length), and a name sequence is kept when it occurs in every step of the run
(and at least twice in all, so one step alone does not make every window a repeat). The top few by the launch
calls' host time are reported, each with the framework ops that issue it. HTA's counterpart is
`CudaKernelAnalysis.get_frequent_cuda_kernel_sequences` (one op's kernels, one given length).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.graphs import NOT_REPLAYED
from traceinsight.analysis.steps import Steps
from traceinsight.events import kind_mask

MAX_SEQUENCE = 32  # longest sequence looked for (a longer repeat shows as its 32-kernel pieces)
TOP_SEQUENCES = 5
_KEPT_PER_LENGTH = 256  # candidates kept per length before the overlap-free pick (bounds memory)
_HASH_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier; arithmetic wraps modulo 2**64


class KernelSequence(msgspec.Struct, frozen=True):
    names: list[str]
    device: str  # where it first occurs
    stream: int
    count: int  # occurrences over the steps
    per_step: float  # count / steps
    kernel_ns: int  # the kernels' time, all occurrences
    launch_ns: int  # their launch calls' host time, all occurrences (0 where the trace has no launch calls)
    op_stack: list[str]  # host ops around the first kernel's launch, outermost first (empty: unknown)


class KernelSequences(msgspec.Struct, frozen=True):
    steps: int
    small_threshold_ns: int
    items: list[KernelSequence]


def kernel_sequences(
    events: pd.DataFrame, kernels: pd.DataFrame, launched: pd.DataFrame, steps: Steps, small_ns: int
) -> KernelSequences:
    """The repeated small-kernel sequences of the run's step input (`kernels`: `flagged_kernels` rows, `launched`:
    `queue_depth.launched_work`)."""
    none = KernelSequences(steps.count, small_ns, [])
    mine = kernels[(kernels["input_id"].to_numpy() == steps.input_id) & (kernels["replay"].to_numpy() == NOT_REPLAYED)]
    if steps.count == 0 or mine.empty:
        return none
    calls = launched[launched["input_id"].to_numpy() == steps.input_id].drop_duplicates("correlation")
    call = pd.Index(calls["correlation"].to_numpy()).get_indexer(mine["correlation"].to_numpy())
    known = call >= 0
    launch_ts = np.where(known, np.r_[calls["launch_ts"].to_numpy(), 0][call], mine["ts_ns"].to_numpy())
    launch_dur = np.where(known, np.r_[calls["launch_dur"].to_numpy(), 0][call], 0)
    device = mine["device"].cat.codes.to_numpy()
    stream = mine["stream"].to_numpy()
    order = np.lexsort((mine["ts_ns"].to_numpy(), stream, device))
    starts, ends = steps.bounds()
    step_order = np.argsort(starts, kind="stable")
    # The step a kernel belongs to: the one its launch (else the kernel itself) starts in.
    at = np.searchsorted(starts[step_order], launch_ts[order], side="right") - 1
    inside = (at >= 0) & (launch_ts[order] < ends[step_order][np.clip(at, 0, None)])
    step = np.where(inside, at, -1)
    dur = mine["dur_ns"].to_numpy()[order]
    eligible = (dur < small_ns) & (step >= 0)
    same = np.r_[False, (device[order][1:] == device[order][:-1]) & (stream[order][1:] == stream[order][:-1])]
    same &= np.r_[False, step[1:] == step[:-1]] & np.r_[False, eligible[:-1]]
    run = np.cumsum(eligible & ~same)
    run_end = np.zeros(run[-1] + 1, np.int64)
    np.maximum.at(run_end, run[eligible], np.flatnonzero(eligible))
    remaining = np.where(eligible, run_end[run] - np.arange(len(run)) + 1, 0)
    codes = mine["name"].cat.codes.to_numpy().astype(np.int64)[order] + 1
    found = _repeated(codes, remaining, step, steps.count, np.cumsum(np.r_[0, launch_dur[order]]), dur)
    if found.empty:
        return none
    names = mine["name"].cat.categories
    launch_rows = np.where(known, np.r_[calls["launch_row"].to_numpy(), -1][call], -1)[order]
    threads = np.where(known, np.r_[calls["thread"].to_numpy(), -1][call], -1)[order]
    ops = _op_finder(events, steps.input_id)
    items = []
    for seq in found.itertuples():
        first = int(seq.first)
        items.append(
            KernelSequence(
                names=[str(names[c - 1]) for c in codes[first : first + seq.length]],
                device=str(mine["device"].cat.categories[device[order][first]]),
                stream=int(stream[order][first]),
                count=int(seq.count),
                per_step=float(seq.count / steps.count),
                kernel_ns=int(seq.kernel_ns),
                launch_ns=int(seq.launch_ns),
                op_stack=ops(int(launch_rows[first]), int(threads[first])),
            )
        )
    return KernelSequences(steps.count, small_ns, items)


def _repeated(
    codes: np.ndarray, remaining: np.ndarray, step: np.ndarray, step_count: int, launch_cum: np.ndarray, dur: np.ndarray
) -> pd.DataFrame:
    """The top sequences (length, first position, count, launch_ns, kernel_ns) that occur in every step, chosen by
    launch cost so that no two share kernels at their first occurrence (a long repeat's shifted windows and
    pieces are one sequence)."""
    n = len(codes)
    padded = np.r_[codes, np.zeros(MAX_SEQUENCE, np.int64)].astype(np.uint64)
    kernel_cum = np.cumsum(np.r_[0, dur])
    digest = padded[:n].copy()
    alive = np.ones(n, bool)  # a window can repeat in every step only if the one a kernel shorter does
    found = []
    for length in range(2, MAX_SEQUENCE + 1):
        with np.errstate(over="ignore"):
            digest = digest * _HASH_BASE + padded[length - 1 : length - 1 + n]
        valid = np.flatnonzero((remaining >= length) & alive)
        if not len(valid):
            break
        keys = digest[valid].view(np.int64)
        every_step = _in_every_step(
            keys,
            step[valid],
            valid,
            launch_cum[valid + length] - launch_cum[valid],
            kernel_cum[valid + length] - kernel_cum[valid],
            step_count,
        )
        if not len(every_step["key"]):
            break
        alive[:] = False
        alive[valid[np.isin(keys, every_step["key"])]] = True
        # The costliest by launch time, then count; ties in order of first occurrence (`nlargest` keeping the first).
        top = np.lexsort((every_step["first"], -every_step["count"], -every_step["launch_ns"]))[:_KEPT_PER_LENGTH]
        found.append({**{k: v[top] for k, v in every_step.items()}, "length": np.full(len(top), length)})
    if not found:
        return pd.DataFrame()
    columns = {k: np.concatenate([f[k] for f in found]) for k in found[0]}
    key = columns.pop("key")
    ranked = pd.DataFrame(columns, index=pd.Index(key, name="key")).sort_values(
        ["launch_ns", "kernel_ns", "length"], ascending=False, kind="stable"
    )
    taken = np.zeros(n, bool)
    chosen = []
    for seq in ranked.itertuples():  # a few hundred candidates at most per length; stops at TOP_SEQUENCES
        span = slice(int(seq.first), int(seq.first) + int(seq.length))
        if taken[span].any():
            continue
        taken[span] = True
        chosen.append(seq.Index)
        if len(chosen) == TOP_SEQUENCES:
            break
    return ranked.loc[chosen] if chosen else pd.DataFrame()


def _in_every_step(
    key: np.ndarray, step: np.ndarray, at: np.ndarray, launch_ns: np.ndarray, kernel_ns: np.ndarray, step_count: int
) -> dict[str, np.ndarray]:
    """The windows of one length grouped by their hash (`key`), the groups that occur in every step and twice or
    more: key, steps, count, first position, launch and kernel time summed, in the order of their first window (one
    sort, no per-group Python)."""
    order = np.lexsort((at, step, key))
    key, step, at = key[order], step[order], at[order]
    new_key = np.r_[True, key[1:] != key[:-1]]
    first = np.flatnonzero(new_key)
    new_step = new_key | np.r_[True, step[1:] != step[:-1]]
    grouped = {
        "key": key[first],
        "steps": np.add.reduceat(new_step.astype(np.int64), first),
        "count": np.diff(np.r_[first, len(key)]),
        "first": np.minimum.reduceat(at, first),
        "launch_ns": np.add.reduceat(launch_ns[order], first),
        "kernel_ns": np.add.reduceat(kernel_ns[order], first),
    }
    kept = (grouped["steps"] == step_count) & (grouped["count"] >= 2)
    by_first = np.argsort(grouped["first"][kept], kind="stable")
    return {k: v[kept][by_first] for k, v in grouped.items()}


def _op_finder(events: pd.DataFrame, input_id: int) -> Callable[[int, int], list[str]]:
    """A function from a launch call (its row and thread) to the names of the host ops that enclose it on its
    thread, outermost first."""
    host_ops = np.flatnonzero(
        kind_mask(events, "cpu_op") & events["device"].isna().to_numpy() & (events["input_id"].to_numpy() == input_id)
    )
    op_ts = events["ts_ns"].to_numpy()[host_ops]
    op_end = op_ts + events["dur_ns"].to_numpy()[host_ops]
    op_thread = events["thread"].to_numpy()[host_ops]
    op_names = events["name"].to_numpy()[host_ops]
    starts = events["ts_ns"].to_numpy()
    ends = starts + events["dur_ns"].to_numpy()

    def stack(launch_row: int, thread: int) -> list[str]:
        if launch_row < 0:
            return []
        around = np.flatnonzero((op_thread == thread) & (op_ts <= starts[launch_row]) & (op_end >= ends[launch_row]))
        around = around[np.lexsort((-(op_end[around] - op_ts[around]), op_ts[around]))]
        return [str(op_names[i]) for i in around]

    return stack
