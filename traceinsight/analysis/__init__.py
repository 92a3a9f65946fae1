"""Analyses: pure functions from the event table to result dataclasses.

`analyze` runs them in order (devices first; everything else reads its busy
unions) and bundles the results; findings and renderers only read an `Analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from traceinsight.analysis.copies import DeviceCopies, copy_stats
from traceinsight.analysis.devices import DeviceUsage, device_usage
from traceinsight.analysis.gaps import DeviceGaps, idle_gaps
from traceinsight.analysis.input_pipeline import InputPipeline, input_pipeline
from traceinsight.analysis.kernels import DEFAULT_SMALL_KERNEL_NS, KernelStats, kernel_stats
from traceinsight.analysis.steps import Steps, find_steps
from traceinsight.model import Profile


@dataclass(frozen=True)
class Analysis:
    profile: Profile
    window_start_ns: int | None
    window_end_ns: int | None
    devices: list[DeviceUsage]
    gaps: list[DeviceGaps]
    kernels: list[KernelStats]
    copies: list[DeviceCopies]
    steps: Steps
    input_pipeline: InputPipeline

    @property
    def window_ns(self) -> int:
        if self.window_start_ns is None or self.window_end_ns is None:
            return 0
        return self.window_end_ns - self.window_start_ns

    def without_events(self) -> Analysis:
        """The same results over an empty event table: what renderers need, without most of a big trace's memory."""
        return replace(self, profile=replace(self.profile, events=self.profile.events.iloc[:0]))


def analyze(profile: Profile, small_kernel_ns: int = DEFAULT_SMALL_KERNEL_NS) -> Analysis:
    """Every analysis over one profile."""
    events = profile.events
    usages = device_usage(events)
    steps = find_steps(events)
    has_events = not events.empty
    return Analysis(
        profile=profile,
        window_start_ns=int(events["ts_ns"].min()) if has_events else None,
        window_end_ns=int((events["ts_ns"] + events["dur_ns"]).max()) if has_events else None,
        devices=usages,
        gaps=idle_gaps(events, usages),
        kernels=kernel_stats(events, usages, small_kernel_ns),
        copies=copy_stats(events, usages),
        steps=steps,
        input_pipeline=input_pipeline(events, steps),
    )
