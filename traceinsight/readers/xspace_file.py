"""What reading any of an XSpace file's lines needs to know of the whole file (`SpaceFile`): its layout, its
device planes and what they say of their devices (the properties CUPTI / ROCm / the TPU runtime record), its
``Task Environment`` (the profile's start and stop time), and its runs of lines (`Unit`), the work one process
does at a time.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec.structs import replace

from traceinsight.events import DeviceInfo
from traceinsight.readers.xspace_classify import Plane, device_id
from traceinsight.readers.xspace_stats import plane_stats
from traceinsight.readers.xspace_wire import SpaceLayout, line_runs


def _device_info(device: str, stats: dict[str, Any]) -> DeviceInfo:
    """What a device plane says about its device (GPU: CUPTI / ROCm properties, TPU: peak figures).

    A property of the wrong type (bytes for a name, a NaN clock, a negative SM count) is left unknown.
    """

    def number(key: str) -> float | None:
        value = stats.get(key)
        return value if isinstance(value, int | float) and math.isfinite(value) and value >= 0 else None

    def whole(key: str) -> int | None:
        value = number(key)
        return None if value is None else int(value)

    def text(key: str) -> str | None:
        value = stats.get(key)
        return value if isinstance(value, str) and value else None

    major = whole("compute_cap_major")
    bandwidth = number("memory_bandwidth")
    if bandwidth is None and (peak_gbps := number("peak_hbm_bw_gigabytes_per_second")) is not None:
        bandwidth = peak_gbps * 1e9
    return DeviceInfo(
        id=device,
        name=text("gpu_device_name") or text("device_type_string"),
        vendor=text("device_vendor"),
        compute_capability=f"{major}.{whole('compute_cap_minor') or 0}" if major is not None else None,
        sm_count=whole("core_count") or None,
        memory_bytes=whole("memory_size"),
        clock_khz=whole("clock_rate"),
        memory_bandwidth_bps=None if bandwidth is None else float(bandwidth),
    )


class Unit(msgspec.Struct, frozen=True):
    """A run of one plane's lines (`line_runs`), read in one piece: the work one process does at a time."""

    plane: int  # index in the layout
    lines: list[tuple[int, int]]  # (offset, size) of each line


class SpaceFile:
    """What reading any of a file's lines needs to know of the whole file: its layout, devices and clock."""

    def __init__(self, path: Path, layout: SpaceLayout) -> None:
        self.path = path
        self.layout = layout
        planes = [p.plane for p in layout.planes]
        self.device_of_plane = {i: device for i, p in enumerate(planes) if (device := device_id(p.name))}
        self.device_labels = sorted({label for _, label in self.device_of_plane.values()})
        self.devices = {
            label: _device_info(label, plane_stats(planes[i])) for i, (_, label) in self.device_of_plane.items()
        }
        self.task = next((plane_stats(p) for p in planes if p.name == "Task Environment"), {})
        self._planes: dict[int, Plane] = {}

    def units(self) -> list[Unit]:
        """The runs of lines of every plane that has rows (device planes, host planes), in file order."""
        return [
            Unit(index, run)
            for index, layout in enumerate(self.layout.planes)
            if index in self.device_of_plane or layout.plane.name.startswith("/host:")
            for run in line_runs(layout)
        ]

    def plane(self, index: int) -> Plane:
        """Plane `index` of the layout, its stat metadata looked up once per process for the names read (a big
        plane has thousands of entries, and many runs of lines); each unit gets metadata of its own to learn."""
        if index not in self._planes:
            meta = self.layout.planes[index].plane
            device = self.device_of_plane.get(index)
            if device is None:
                self._planes[index] = Plane.of(meta, None, -1, np.nan)
            else:
                sm_count = self.devices[device[1]].sm_count or np.nan
                self._planes[index] = Plane.of(meta, device[0], self.device_labels.index(device[1]), sm_count)
        return replace(self._planes[index], metadata={})
