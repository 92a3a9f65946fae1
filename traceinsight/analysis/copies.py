"""Memory copies and memsets per device: how much, how fast, from what memory, how exposed.

Exposed time is copy time not overlapped by any kernel on the same device: the
part of a copy the GPU actually waited for. Pageable host memory forces the
driver to stage copies and makes async copies synchronous (Nsight's
cuda_memcpy_async rule), so pageable copies are counted separately.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

from traceinsight.analysis.devices import DeviceUsage, device_work
from traceinsight.events import COPY_KINDS, kind_mask
from traceinsight.intervals import Intervals, exposed, union

REPORTED_COPY_KINDS = ("h2d", "d2h", "d2d", "p2p")


class CopyStats(msgspec.Struct, frozen=True):
    count: int
    total_ns: int
    bytes: int | None
    unknown_bytes_count: int
    pageable_count: int
    pageable_ns: int
    exposed_ns: int
    known_bytes_ns: int  # time of the copies whose size is known (bandwidth's denominator)

    @property
    def bandwidth_gbps(self) -> float | None:
        """Achieved bandwidth in GB/s (1e9 bytes), over copies whose size is known."""
        if self.bytes is None or self.known_bytes_ns <= 0:
            return None
        return self.bytes / self.known_bytes_ns


class DeviceCopies(msgspec.Struct, frozen=True):
    device: str
    copies: dict[str, CopyStats]
    memset_count: int
    memset_ns: int


def copy_stats(events: pd.DataFrame, usages: list[DeviceUsage], work: pd.DataFrame | None = None) -> list[DeviceCopies]:
    """Copy and memset figures for each device in `usages` (`work`: `device_work(events)`, if known)."""
    work = device_work(events) if work is None else work
    results = []
    for usage in usages:
        rows = work[(work["device"] == usage.id).to_numpy()]
        ts = rows["ts_ns"].to_numpy()
        end = ts + rows["dur_ns"].to_numpy()
        kernel = kind_mask(rows, "kernel")
        kernels = union(ts[kernel], end[kernel])
        memcpy = kind_mask(rows, "memcpy")
        copy_kind = rows["copy_kind"].cat.codes.to_numpy()  # codes index COPY_KINDS (make_event_table fixes them)
        copies = {}
        for ck in REPORTED_COPY_KINDS:
            mask = memcpy & (copy_kind == COPY_KINDS.index(ck))
            copies[ck] = _copy_stats(rows[mask], union(ts[mask], end[mask]), kernels)
        memset = kind_mask(rows, "memset")
        results.append(DeviceCopies(usage.id, copies, int(memset.sum()), int(rows["dur_ns"].to_numpy()[memset].sum())))
    return results


def _copy_stats(rows: pd.DataFrame, copy_union: Intervals, kernels: Intervals) -> CopyStats:
    dur = rows["dur_ns"].to_numpy()
    size = rows["bytes"].to_numpy()
    known = size >= 0
    pageable = (rows["src_memory"] == "pageable").to_numpy()
    return CopyStats(
        count=len(rows),
        total_ns=int(dur.sum()),
        # No copies: 0 bytes is known. Copies whose sizes the trace lacks: unknown (null), never a made-up 0.
        bytes=int(size[known].sum()) if known.any() or len(rows) == 0 else None,
        unknown_bytes_count=int((~known).sum()),
        pageable_count=int(pageable.sum()),
        pageable_ns=int(dur[pageable].sum()),
        exposed_ns=exposed(copy_union, kernels),
        known_bytes_ns=int(dur[known].sum()),
    )


def copy_totals(results: list[DeviceCopies], kind: str) -> CopyStats:
    """One copy kind summed over devices."""
    parts = [r.copies[kind] for r in results]
    known = [p.bytes for p in parts if p.bytes is not None]
    return CopyStats(
        count=sum(p.count for p in parts),
        total_ns=sum(p.total_ns for p in parts),
        bytes=int(np.sum(known)) if known or not parts else None,
        unknown_bytes_count=sum(p.unknown_bytes_count for p in parts),
        pageable_count=sum(p.pageable_count for p in parts),
        pageable_ns=sum(p.pageable_ns for p in parts),
        exposed_ns=sum(p.exposed_ns for p in parts),
        known_bytes_ns=sum(p.known_bytes_ns for p in parts),
    )
