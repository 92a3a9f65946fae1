"""CUDA / HIP graph replays: the kernels one graph launch runs.

The nodes of a replay share the correlation id of its ``cudaGraphLaunch`` / ``hipGraphLaunch`` call (Kineto
links each node to that launch). Counted one by one they look like hundreds of launches, each shorter than its
launch call and queued milliseconds before it ran; they are one launch. So the device work table marks each
row's place in a replay (`replay_nodes`: the `replay` column of `devices.device_work`), launch statistics take a
replay through its first node (`kernels.py`), gaps between nodes of one replay get the cause ``graph_internal``
(`gaps.py`), and the launch rules leave replayed kernel time out (`findings.py`).

Per replay (`graph_replays`): its nodes, the host's cost per node (the launch call over the nodes it runs), the
first node's delay after the launch returns, the span from first node start to last node end, and the share of
that span the device is busy.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

from traceinsight.events import kind_mask, names_matching
from traceinsight.result import Replay
from traceinsight.rules import GRAPH_LAUNCH

# The `replay` column of the device work table.
NOT_REPLAYED, FIRST_NODE, LATER_NODE = 0, 1, 2
# Replays listed one by one in the report (the figures cover all of them).
LISTED_REPLAYS = 20


class GraphReplay(Replay, frozen=True):
    """A replay as the analyses use it: its figures derived at full precision."""

    @property
    def host_ns_per_node(self) -> float:
        return self.launch_ns / self.nodes if self.nodes else 0.0

    @property
    def busy_share(self) -> float:
        return self.busy_ns / self.span_ns if self.span_ns > 0 else 1.0


class GraphReplays(msgspec.Struct, frozen=True):
    count: int
    nodes: int
    kernel_ns: int  # summed duration of the kernels replayed from graphs
    all_kernel_ns: int  # summed duration of every kernel of the run
    items: list[GraphReplay]  # every replay, in time order

    @property
    def kernel_share(self) -> float | None:
        """Share of all kernel time replayed from graphs (None without kernels)."""
        return round(self.kernel_ns / self.all_kernel_ns, 4) if self.all_kernel_ns else None

    @property
    def listed(self) -> list[GraphReplay]:
        return self.items[:LISTED_REPLAYS]


def graph_launches(events: pd.DataFrame) -> pd.DataFrame:
    """Host graph-launch calls (runtime rows named like `rules.GRAPH_LAUNCH` with a correlation id): input,
    correlation, start and duration, one row per (input, correlation)."""
    host = events["device"].isna().to_numpy() & kind_mask(events, "runtime") & (events["correlation"].to_numpy() >= 0)
    launch = names_matching(events, GRAPH_LAUNCH.pattern, host)
    rows = pd.DataFrame(
        {
            "input_id": events["input_id"].to_numpy()[launch],
            "correlation": events["correlation"].to_numpy()[launch],
            "ts_ns": events["ts_ns"].to_numpy()[launch],
            "dur_ns": events["dur_ns"].to_numpy()[launch],
        }
    )
    return rows.drop_duplicates(["input_id", "correlation"])


def replay_nodes(events: pd.DataFrame, work: pd.DataFrame) -> np.ndarray:
    """Per row of `work` (device work in time order), `NOT_REPLAYED`, `FIRST_NODE` or `LATER_NODE` of a graph
    replay: a row whose correlation id is a graph launch's of the same input."""
    codes = np.zeros(len(work), np.int8)
    launches = graph_launches(events)
    if launches.empty or work.empty:
        return codes
    keys = pd.MultiIndex.from_arrays([work["input_id"].to_numpy(), work["correlation"].to_numpy()])
    launched = pd.MultiIndex.from_arrays([launches["input_id"].to_numpy(), launches["correlation"].to_numpy()])
    replayed = keys.isin(launched)
    later = keys[replayed].duplicated()  # work is in time order: the first row of a replay is its first node
    codes[np.flatnonzero(replayed)] = np.where(later, LATER_NODE, FIRST_NODE)
    return codes


def graph_replays(events: pd.DataFrame, work: pd.DataFrame) -> GraphReplays:
    """Every replay of the run with its figures (see the module docstring); `work`: `devices.device_work`."""
    replayed = work["replay"].to_numpy() != NOT_REPLAYED
    kernel = kind_mask(work, "kernel")
    dur = work["dur_ns"].to_numpy()
    if not replayed.any():
        return GraphReplays(0, 0, 0, int(dur[kernel].sum()), [])
    nodes = work[replayed]
    starts = nodes["ts_ns"].to_numpy()
    ends = starts + nodes["dur_ns"].to_numpy()
    gid, keys = pd.MultiIndex.from_arrays([nodes["input_id"].to_numpy(), nodes["correlation"].to_numpy()]).factorize()
    first = np.unique(gid, return_index=True)[1]  # each replay's first row (rows in time order)
    # Union of each replay's nodes: rows in start order within a replay, each adds what lies past the ends before it.
    order = np.lexsort((starts, gid))
    g, s, e = gid[order], starts[order], ends[order]
    reached = pd.Series(e).groupby(g).cummax().to_numpy()  # int64 throughout: epoch ns exceed a double
    same = np.r_[False, g[1:] == g[:-1]]
    reach = np.where(same, np.r_[s[:1], reached[:-1]], s)
    added = np.clip(e - np.maximum(s, reach), 0, None)
    per = (
        pd.DataFrame({"g": g, "s": s, "e": e, "added": added})
        .groupby("g")
        .agg(nodes=("s", "size"), first=("s", "min"), last=("e", "max"), busy=("added", "sum"))
    )
    launch = graph_launches(events).set_index(["input_id", "correlation"]).reindex(keys)
    launch_end = (launch["ts_ns"] + launch["dur_ns"]).to_numpy()
    items = [
        GraphReplay(
            device=str(device),
            launch_start_ns=int(ts),
            launch_ns=int(launch_dur),
            nodes=int(n),
            first_node_delay_ns=int(max(begin - end, 0)),
            span_ns=int(last - begin),
            busy_ns=int(busy),
        )
        for device, ts, launch_dur, end, n, begin, last, busy in zip(
            nodes["device"].to_numpy()[first],
            launch["ts_ns"].to_numpy(),
            launch["dur_ns"].to_numpy(),
            launch_end,
            per["nodes"].to_numpy(),
            per["first"].to_numpy(),
            per["last"].to_numpy(),
            per["busy"].to_numpy(),
            strict=True,
        )  # one item per replay, not per event
    ]
    items.sort(key=lambda r: r.launch_start_ns)
    return GraphReplays(
        count=len(items),
        nodes=int(replayed.sum()),
        kernel_ns=int(dur[kernel & replayed].sum()),
        all_kernel_ns=int(dur[kernel].sum()),
        items=items,
    )
