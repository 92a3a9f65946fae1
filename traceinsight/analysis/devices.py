"""Per-device busy and idle time: the figure every other analysis leans on.

Busy is the length of the union of kernel, memcpy and memset intervals over all
streams of a device (HTA's and XProf's definition); sync events and host work are
not device work. Idle is the rest of the device's span (first to last activity).
GPU-Util is what `nvidia-smi` shows: the share of the span in which at least one
kernel runs (copies and memsets do not count), so users can compare the two.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.graphs import replay_nodes
from traceinsight.events import DEVICE_WORK_KINDS, kind_mask, take_rows
from traceinsight.intervals import Intervals, union

# What device_usage, idle_gaps, kernel_stats and copy_stats read of the device rows.
_DEVICE_WORK_COLUMNS = (
    "ts_ns",
    "dur_ns",
    "kind",
    "device",
    "stream",
    "name",
    "correlation",
    "bytes",
    "copy_kind",
    "src_memory",
    "blocks_per_sm",
    "occupancy_pct",
    "op",
    "input_id",
)


class DeviceUsage(msgspec.Struct, frozen=True):
    id: str
    input_id: int
    start_ns: int
    end_ns: int
    busy_ns: int
    busy: Intervals
    kernel_busy_ns: int  # length of the union of kernel intervals alone

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    @property
    def idle_fraction(self) -> float:
        return self.idle_ns / self.span_ns if self.span_ns > 0 else 0.0

    @property
    def gpu_util(self) -> float:
        return self.kernel_busy_ns / self.span_ns if self.span_ns > 0 else 0.0


def device_work(events: pd.DataFrame) -> pd.DataFrame:
    """Rows that make a device busy, sorted by start (stable), with the columns the device analyses read and
    `replay`: each row's place in a CUDA / HIP graph replay (`graphs.replay_nodes`).

    Taken in one copy, and only those columns: on a big trace this is the largest
    selection the analyses make.
    """
    rows = np.flatnonzero(kind_mask(events, *DEVICE_WORK_KINDS) & events["device"].notna().to_numpy())
    rows = rows[np.argsort(events["ts_ns"].to_numpy()[rows], kind="stable")]
    work = take_rows(events, rows, _DEVICE_WORK_COLUMNS)
    work["replay"] = replay_nodes(events, work)
    return work


def device_usage(events: pd.DataFrame, work: pd.DataFrame | None = None) -> list[DeviceUsage]:
    """Busy/idle per device that has any activity, in device-id order (`work`: `device_work(events)`, if known)."""
    work = device_work(events) if work is None else work
    usages = []
    for device, rows in work.groupby("device", observed=True, sort=True):
        starts = rows["ts_ns"].to_numpy()
        ends = starts + rows["dur_ns"].to_numpy()
        busy = union(starts, ends)
        kernel = kind_mask(rows, "kernel")
        usages.append(
            DeviceUsage(
                id=str(device),
                input_id=int(rows["input_id"].iloc[0]),
                start_ns=int(starts.min()),
                end_ns=int(ends.max()),
                busy_ns=busy.total,
                busy=busy,
                kernel_busy_ns=union(starts[kernel], ends[kernel]).total,
            )
        )
    return usages
