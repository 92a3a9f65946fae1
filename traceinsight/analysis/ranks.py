"""The cross-rank view: how the inputs of a distributed run (ranks, hosts) compare.

In data-parallel training every rank waits for the slowest at each collective,
so one slow rank costs every other rank's devices idle time. Per input this
gives its devices' idle fraction (span-weighted) and its own steps (from its
own markers, as `find_steps` finds them for one input); across inputs, the
spread of the mean step time and the slowest rank (the largest mean step).
When some inputs have step markers, only those are compared.
With fewer than two inputs there is nothing to compare (`rank_view` is None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from traceinsight.analysis.ledger import IDLE_PARTS, DeviceLedger
from traceinsight.analysis.steps import Steps

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis


class RankStats(msgspec.Struct, frozen=True):
    """One input of the run."""

    input_id: int
    label: str  # "rank 3", else the host name, else the file name
    rank: int | None
    host: str | None
    path: str
    device_count: int
    span_ns: int  # summed over the input's devices
    busy_ns: int
    idle_fraction: float | None  # its devices' ledger idle share over its own steps; None without device activity
    steps: Steps

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns


class RankView(msgspec.Struct, frozen=True):
    """Every input, and how far apart their mean step times are."""

    ranks: list[RankStats]
    step_mean_min_ns: int | None  # fastest compared input's mean step
    step_mean_max_ns: int | None
    slowest: RankStats | None  # largest mean step; None when no input has steps or all are equal

    @property
    def step_mean_spread_ns(self) -> int | None:
        if self.step_mean_min_ns is None or self.step_mean_max_ns is None:
            return None
        return self.step_mean_max_ns - self.step_mean_min_ns

    @property
    def step_mean_spread_fraction(self) -> float | None:
        """How much longer the slowest input's mean step is than the fastest's, relative to the fastest."""
        spread = self.step_mean_spread_ns
        if spread is None or not self.step_mean_min_ns:
            return None
        return spread / self.step_mean_min_ns


def _idle_share(ledgers: list[DeviceLedger]) -> float | None:
    """The idle share of an input's devices over their steps (the ledger's: the word's one definition)."""
    total = sum(float(d.step_ns.sum()) for d in ledgers)
    if total <= 0:
        return None
    return sum(float(d.parts[p].sum()) for d in ledgers for p in IDLE_PARTS) / total


def rank_view(analysis: Analysis) -> RankView | None:
    """The cross-rank view of a run with several inputs, else None."""
    profile = analysis.profile
    if len(profile.inputs) < 2:
        return None
    ranks = []
    ledgers = {d.device: d for d in analysis.device_ledgers}
    for input_id, info in enumerate(profile.inputs):
        usages = [u for u in analysis.devices if u.input_id == input_id]
        mine = [ledgers[u.id] for u in usages if u.id in ledgers]
        steps = analysis.input_steps[input_id]
        ranks.append(
            RankStats(
                input_id=input_id,
                label=f"rank {info.rank}" if info.rank is not None else info.host or info.path,
                rank=info.rank,
                host=info.host,
                path=info.path,
                device_count=len(usages),
                span_ns=sum(u.span_ns for u in usages),
                busy_ns=sum(u.busy_ns for u in usages),
                idle_fraction=_idle_share(mine),
                steps=steps,
            )
        )
    # Marker steps are only compared with marker steps: a whole window is no step.
    compared = [r for r in ranks if r.steps.source == "marker"] or ranks
    means = [(r.steps.mean_ns, r) for r in compared if r.steps.mean_ns is not None]
    if not means:
        return RankView(ranks, None, None, None)
    low = min(mean for mean, _ in means)
    high, slowest = max(means, key=lambda pair: pair[0])  # the first of equals
    return RankView(ranks, low, high, slowest if high > low else None)
