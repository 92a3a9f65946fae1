"""The ledger: every nanosecond of each step, on each device, in exactly one part.

Every per-step figure of a report is a view of this table: GPU-Util, idle, the
step table, the gaps' causes, the stalls a finding removes. Parts are taken in
order, each getting what the earlier ones left of its own time, so they sum to the
step window by construction and no instant is counted twice:

busy (the device runs something):
``compute``      a kernel that is not a collective runs;
``collective``   only collective kernels run (split into ``collective_wait`` and
                 ``collective_transfer`` once the ranks are matched: `with_collective_waits`);
``copy_h2d`` / ``copy_d2h`` / ``copy_d2d`` / ``copy_other``  only a copy or memset runs, by direction
                 (``copy_other``: peer-to-peer, memsets and copies of unknown direction);

idle (nothing runs on the device), by what the host was doing:
``input_wait``   the host waited for input data and made no runtime call (the step
                 breakdown's input wait: XProf's input-bound numerator);
``graph_internal``  between nodes of one graph replay;
``wait_outside_trace``  a blocking call waited for device work the trace does not hold (`waits.py`);
``blocking_wait``  any other blocking call or sync (gap cause ``sync``);
``host_launch``  the op ending the gap was launched late (gap cause ``host_launch``), or the host
                 ran runtime calls inside a gap it otherwise spent waiting for input;
``unexplained``  the rest: gaps whose next op was queued in time, and idle time before
                 the device's first or after its last work.
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec.structs import replace

from traceinsight.intervals import Intervals, difference, intersection, union_of

BUSY_PARTS = ("compute", "collective", "copy_h2d", "copy_d2h", "copy_d2d", "copy_other")
IDLE_PARTS = (
    "input_wait",
    "graph_internal",
    "wait_outside_trace",
    "blocking_wait",
    "host_launch",
    "unexplained",
)
PARTS = BUSY_PARTS + IDLE_PARTS
COLLECTIVE_PARTS = ("collective_wait", "collective_transfer")
COPY_PARTS = ("copy_h2d", "copy_d2h", "copy_d2d", "copy_other")
# The parts a report shows: the collective part split into waiting and transfer.
SHOWN_BUSY_PARTS = ("compute", *COLLECTIVE_PARTS, "copy_h2d", "copy_d2h", "copy_d2d", "copy_other")
SHOWN_PARTS = SHOWN_BUSY_PARTS + IDLE_PARTS
# The parts in which a kernel runs: GPU-Util's numerator (before and after the collective part is split).
KERNEL_PARTS = ("compute", "collective", *COLLECTIVE_PARTS)


class DeviceLedger(msgspec.Struct, frozen=True):
    """One device's parts, each an array of ns per step (the steps of the run's step input)."""

    device: str
    parts: dict[str, np.ndarray]
    step_ns: np.ndarray  # the steps of its input

    def share(self, parts: tuple[str, ...]) -> float | None:
        """Share of its steps' time in `parts` (None without steps)."""
        total = float(self.step_ns.sum())
        return float(sum(self.parts[p].sum() for p in parts if p in self.parts)) / total if total > 0 else None


class Ledger(msgspec.Struct, frozen=True):
    """The ledger of the run's steps: one `DeviceLedger` per device of the step input that ran work."""

    step_ns: np.ndarray
    devices: list[DeviceLedger]

    @property
    def parts(self) -> tuple[str, ...]:
        return SHOWN_PARTS if self.devices and "collective_wait" in self.devices[0].parts else PARTS

    def mean(self, part: str) -> np.ndarray:
        """The part per step, as the mean over the devices (data-parallel devices idle side by side)."""
        if not self.devices:
            return np.zeros(len(self.step_ns), np.float64)
        return np.mean([d.parts[part] for d in self.devices], axis=0).astype(np.float64)

    def share(self, parts: tuple[str, ...]) -> float | None:
        """Share of the step windows in `parts`, the mean over devices; None without devices or steps."""
        shares = [d.share(parts) for d in self.devices]
        known = [x for x in shares if x is not None]
        return float(np.mean(known)) if known and len(known) == len(shares) else None


def device_ledger(
    starts: np.ndarray,
    ends: np.ndarray,
    compute: Intervals,
    kernels: Intervals,
    copies: list[Intervals],
    busy: Intervals,
    input_wait: Intervals,
    gaps_by_cause: dict[str, Intervals],
    outside_waits: Intervals,
) -> dict[str, np.ndarray]:
    """One device's parts per step (see the module docstring). `compute`: its non-collective kernels; `kernels`:
    all its kernels; `copies`: its h2d, d2h and d2d copies; `busy`: all its work;
    `input_wait`: the host's input waits less its runtime calls; `gaps_by_cause`: its gaps by `gaps.CAUSES`;
    `outside_waits`: waits for work outside the trace."""
    parts: dict[str, np.ndarray] = {}
    covered = np.zeros(len(starts), np.int64)
    so_far: Intervals = Intervals(np.zeros(0, np.int64), np.zeros(0, np.int64))

    def take(name: str, layer: Intervals, holds_all_so_far: bool = False) -> None:
        """`holds_all_so_far`: the layer already contains every earlier one (all kernels hold the compute ones,
        all device work holds every kernel and copy), so it is the new union as it is."""
        nonlocal so_far, covered
        parts.setdefault(name, np.zeros(len(starts), np.int64))
        if len(layer) == 0:  # nothing new: no union to redo (most runs have no graph, sync or D2D layer)
            return
        so_far = layer if holds_all_so_far or not len(so_far) else union_of(so_far, layer)
        now = so_far.covered_between(starts, ends)
        parts[name] = parts[name] + now - covered
        covered = now

    take("compute", compute)
    take("collective", kernels, holds_all_so_far=True)
    for name, layer in zip(("copy_h2d", "copy_d2h", "copy_d2d"), copies, strict=True):
        take(name, layer)
    take("copy_other", busy, holds_all_so_far=True)  # device work of no known kind: a copy of unknown direction
    # The idle parts are disjoint from the busy time and from each other (`idle_layers`): each is its own coverage.
    for name, layer in idle_layers(input_wait, gaps_by_cause, outside_waits).items():
        parts[name] = layer.covered_between(starts, ends)
    # What is left: gaps whose next op was queued in time, and idle time before the device's first or after its last
    # work in the step.
    parts["unexplained"] = (ends - starts) - covered - sum(parts[p] for p in IDLE_PARTS[:-1])
    return {name: np.asarray(parts[name], np.int64) for name in PARTS}


def idle_layers(
    input_wait: Intervals, gaps_by_cause: dict[str, Intervals], outside_waits: Intervals
) -> dict[str, Intervals]:
    """A device's idle time by part, as disjoint intervals (what the timeline export names its idle slices by):
    the input wait first (`input_wait`: the host's, less its runtime calls and the input's device work), then each
    gap less it, by the gap's cause (`gaps.CAUSES`): syncs split by whether the work they wait for is in the trace,
    the rest of an input-wait gap counted as the host launching, gaps whose op was queued in time unexplained."""
    sync = difference(gaps_by_cause["sync"], input_wait)
    return {
        "input_wait": input_wait,
        "graph_internal": difference(gaps_by_cause["graph_internal"], input_wait),
        "wait_outside_trace": intersection(sync, outside_waits),
        "blocking_wait": difference(sync, outside_waits),
        # The rest of gaps judged input waits: the host ran runtime calls there (copies, launches), not waiting.
        "host_launch": difference(union_of(gaps_by_cause["host_launch"], gaps_by_cause["input_wait"]), input_wait),
        "unexplained": difference(gaps_by_cause["other"], input_wait),
    }


def with_collective_waits(ledger: Ledger, waits: np.ndarray) -> Ledger:
    """The ledger with each device's collective part split into waiting (the step input's waiting inside
    collectives per step, `collectives.waits_in`, at most the part) and transfer (the rest)."""
    if not ledger.devices or "collective" not in ledger.devices[0].parts:
        return ledger
    waits = np.asarray(waits, np.int64) if len(waits) == len(ledger.step_ns) else np.zeros(len(ledger.step_ns), int)
    devices = []
    for d in ledger.devices:
        parts = dict(d.parts)
        collective = parts.pop("collective")
        wait = np.minimum(waits, collective)
        parts["collective_wait"], parts["collective_transfer"] = wait, collective - wait
        devices.append(replace(d, parts={name: parts[name] for name in SHOWN_PARTS}))
    return replace(ledger, devices=devices)
