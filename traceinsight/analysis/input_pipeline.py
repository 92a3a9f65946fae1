"""How long the training loop waited for input, and which pipeline stage is slow.

The wait is the `input_wait` part of the step breakdown (tf.data GetNext /
DataLoader ``__next__`` time not hidden under device work), as a fraction of
total step time. Verdict words and thresholds are XProf's, so users who know its
input-pipeline page read ours the same way: >= 20 % "high", >= 5 % "moderate",
else "potential" when unexplained idle time is >= 3 %, else "none". A trace with
no input-pipeline events at all (no tf.data iterator, no DataLoader wait) cannot
say: its verdict is "unknown" and its wait and fraction null. The `input_bound`
bottleneck reads this same wait (the step breakdown's exposed input wait).

For tf.data, each ``Iterator::<path>`` stage gets its self time (its time minus
that of its direct child stages, at least 0), which points at the stage to
parallelise, cache or prefetch.
"""

from __future__ import annotations

import msgspec
import pandas as pd

from traceinsight.analysis.steps import Steps
from traceinsight.events import rows_of_input
from traceinsight.result import Stage
from traceinsight.rules import HIGH_INPUT_FRACTION, MODERATE_INPUT_FRACTION, POTENTIAL_OTHER_FRACTION

TOP_STAGES = 8


class InputPipeline(msgspec.Struct, frozen=True):
    wait_ns: int | None
    fraction: float | None
    idle_fraction: float | None
    verdict: str  # "high" | "moderate" | "potential" | "none" | "unknown"
    source: str | None  # "tf.data" | "DataLoader" | "DataPipe" | None
    wait_count: int
    stages: list[Stage]


def verdict_for(fraction: float | None, idle_fraction: float | None) -> str:
    """XProf's classification of an input-wait fraction."""
    if fraction is None:
        return "unknown"
    if fraction >= HIGH_INPUT_FRACTION:
        return "high"
    if fraction >= MODERATE_INPUT_FRACTION:
        return "moderate"
    if idle_fraction is not None and idle_fraction >= POTENTIAL_OTHER_FRACTION:
        return "potential"
    return "none"


def _tf_data_stages(events: pd.DataFrame) -> list[Stage]:
    """Self time of each tf.data iterator stage (named ``Iterator::Root::...``)."""
    names = events["name"]
    is_stage = pd.Series(names.cat.categories).str.startswith("Iterator::").to_numpy()
    if not is_stage.any():
        return []
    stage_rows = events[names.isin(names.cat.categories[is_stage]).to_numpy()]
    agg = stage_rows.groupby("name", observed=True)["dur_ns"].agg(["size", "sum"])
    agg.index = agg.index.astype(str)
    parent = pd.Series(agg.index.str.rsplit("::", n=1).str[0], index=agg.index)
    child_time = agg["sum"].groupby(parent).sum()
    # Asynchronous stages (Prefetch, parallel map) run their children on other threads, so children can
    # add up to more than the parent: self time is then 0, not negative.
    agg["self"] = (agg["sum"] - child_time.reindex(agg.index).fillna(0).astype("int64")).clip(lower=0)
    agg = agg.sort_values("self", ascending=False).head(TOP_STAGES)
    return [Stage(name, int(r["size"]), int(r["sum"]), int(r["self"])) for name, r in agg.iterrows()]


def _wait_source(waits: pd.DataFrame) -> str | None:
    if waits.empty:
        return None
    names = waits["name"].astype(str)
    if names.str.startswith("enumerate(DataLoader)").any():
        return "DataLoader"
    if names.str.startswith("enumerate(DataPipe)").any():
        return "DataPipe"
    return "tf.data"


def _wait_stages(waits: pd.DataFrame) -> list[Stage]:
    agg = waits.groupby("name", observed=True)["dur_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    return [Stage(str(name), int(r["size"]), int(r["sum"]), int(r["sum"])) for name, r in agg.iterrows()]


def input_pipeline(events: pd.DataFrame, steps: Steps) -> InputPipeline:
    """Input wait of the step input, with XProf's verdict and the slowest stages."""
    mine = rows_of_input(events, steps.input_id, ["dur_ns", "kind", "name"])
    waits = mine[(mine["kind"] == "input_wait").to_numpy()]
    total = steps.total_ns
    parts = steps.breakdown_total() if steps.items else None
    wait_ns = parts["input_wait"] if parts else 0
    fraction = wait_ns / total if parts and total > 0 else None
    idle_fraction = parts["idle"] / total if parts and total > 0 else None
    source = _wait_source(waits)
    stages = _tf_data_stages(mine) or _wait_stages(waits)
    if waits.empty and not stages:
        return InputPipeline(None, None, idle_fraction, "unknown", None, 0, [])
    return InputPipeline(
        wait_ns=wait_ns,
        fraction=fraction,
        idle_fraction=idle_fraction,
        verdict=verdict_for(fraction, idle_fraction),
        source=source,
        wait_count=len(waits),
        stages=stages,
    )
