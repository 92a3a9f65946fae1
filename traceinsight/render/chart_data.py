"""What the charts draw of an analysis, as plain data: numbers, strings, numpy arrays and `Intervals`.

The charts (`svg_charts.py`) read a `ChartRun` made here from the `Analysis`, not the analysis itself: the few
figures of the event table they draw (each device's busy intervals, the steps' spans), taken while it is held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from traceinsight.intervals import Intervals

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis
    from traceinsight.analysis.steps import Steps


class StepSpan(msgspec.Struct, frozen=True):
    id: int
    start_ns: int
    dur_ns: int


class StepSpans(msgspec.Struct, frozen=True):
    """One input's (or the run's) steps where the charts mark them, and what they were taken from."""

    marker: str
    items: list[StepSpan]


class DeviceBusy(msgspec.Struct, frozen=True):
    """A device's band on the timeline."""

    id: str
    input_id: int
    busy: Intervals  # when it was busy
    busy_ns: int
    span_ns: int
    gpu_util: float | None  # kernels running, over its input's steps (the ledger's); None without steps


class ChartRun(msgspec.Struct, frozen=True):
    window_start_ns: int | None
    window_end_ns: int | None
    devices: list[DeviceBusy]
    steps: StepSpans  # the run's
    input_steps: list[StepSpans]  # each input's own
    memory_inputs: dict[str, int]  # per device with memory events: the input whose steps split its memory


def _spans(steps: Steps) -> StepSpans:
    return StepSpans(steps.marker, [StepSpan(s.id, s.start_ns, s.dur_ns) for s in steps.items])


def chart_run(analysis: Analysis) -> ChartRun:
    """What the charts read of `analysis` (in the command's process, which has pandas: the ledger's module is
    imported here, not by the painting process)."""
    from traceinsight.analysis.ledger import KERNEL_PARTS

    ledgers = {d.device: d for d in analysis.device_ledgers}
    return ChartRun(
        analysis.window_start_ns,
        analysis.window_end_ns,
        [
            DeviceBusy(
                u.id,
                u.input_id,
                u.busy,
                u.busy_ns,
                u.span_ns,
                ledgers[u.id].share(KERNEL_PARTS) if u.id in ledgers else None,
            )
            for u in analysis.devices
        ],
        _spans(analysis.steps),
        [_spans(steps) for steps in analysis.input_steps],
        {m.device: m.input_id for m in reversed(analysis.memory)},  # the first of a device's, as it is drawn
    )
