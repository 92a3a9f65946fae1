"""What the parts of an XSpace file are, told from their names (xspace.py has the mapping): device planes,
the role of each line, the stats the tables read, and the rules an event's name decides (its kind, its copy
kind, a step's number), each evaluated once per distinct name of a file. The name rules themselves live in
`_classify`, shared with the Kineto and XProf-JSON readers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from traceinsight.events import COPY_KINDS, KINDS, MEMORY_KINDS
from traceinsight.readers._classify import copy_kind as _copy_kind
from traceinsight.readers._classify import (
    details_copy_memory,
    device_activity_kind,
    is_sync_api,
    step_number,
    xla_copy_kind,
    xprof_host_kind,
)
from traceinsight.rules import STEP_MARKER_PATTERN

# Line roles: what the events of a line become.
STREAM, DEVICE_STEPS, DEVICE_KERNEL, DEVICE_ANNOTATION, DEVICE_OTHER, HOST = range(6)
_TPU_LINE_ROLES = {"XLA Ops": DEVICE_KERNEL, "XLA Modules": DEVICE_ANNOTATION, "Steps": DEVICE_STEPS}
_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU):(\d+)$")

_GRID = re.compile(r"(?:^|\s)grid:([0-9]{1,10}),([0-9]{1,10}),([0-9]{1,10})(?![0-9])")

# The stats the table needs; all others stay in the file.
INT_STATS = ("correlation_id", "step_num")
FLOAT_STATS = ("theoretical_occupancy_pct",)
# Read on device streams only; ``level 0`` is the outermost annotation: TF's ``<op name>:<op type>``.
STR_STATS = ("memcpy_details", "Memset_details", "kernel_details", "level 0")
# The stats the memory table needs (of the allocator events: xspace_memory.py).
MEMORY_INT_STATS = (
    "bytes_allocated",
    "bytes_reserved",
    "bytes_available",
    "allocation_bytes",
    "addr",
    "index_on_host",
    "device_ordinal",
)
MEMORY_FLOAT_STATS = ("fragmentation",)
MEMORY_STR_STATS = ("allocator_name", "tf_op")
# The stats the op table needs (of device kernels: xspace_ops.py): the compiler's costs, the device's own time.
OP_FLOAT_STATS = ("flops", "bytes_accessed", "model_flops")
OP_INT_STATS = ("device_duration_ps",)
READ_STATS = frozenset(
    (
        *INT_STATS,
        *FLOAT_STATS,
        *STR_STATS,
        *MEMORY_INT_STATS,
        *MEMORY_FLOAT_STATS,
        *MEMORY_STR_STATS,
        *OP_FLOAT_STATS,
        *OP_INT_STATS,
    )
)


# --------------------------------------------------------------------------- planes and lines


def device_id(plane_name: str) -> tuple[str, str] | None:
    """("GPU", "GPU:3") for ``/device:GPU:3``; None for any other plane."""
    match = _DEVICE_PLANE.match(plane_name)
    return (match[1], f"{match[1]}:{match[2]}") if match else None


def line_role(device_type: str | None, line_name: str) -> int | None:
    """What the events of a line are; None for lines that are not read."""
    if device_type is None:
        return HOST
    if device_type == "GPU":
        if line_name.startswith("Stream #"):
            return STREAM
        return DEVICE_STEPS if line_name == "Steps" else None
    return _TPU_LINE_ROLES.get(line_name, DEVICE_OTHER)


class Plane(msgspec.Struct):
    """What the events of one plane share, and what was learnt of its metadata so far."""

    meta: Any  # the XPlane message without its lines
    device_type: str | None  # "GPU", "TPU"; None for a host plane
    device_code: int  # index into the file's device labels; -1 for a host plane
    sm_count: float  # of its device; NaN if unknown
    stat_ids: dict[str, list[int]]  # the stat metadata ids of each stat name read
    wanted_ids: np.ndarray  # all of them
    # event metadata id -> its name code, whether it has no entry, its metadata if that carries stats
    metadata: dict[int, tuple[int, bool, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, meta: Any, device_type: str | None, device_code: int, sm_count: float) -> Plane:
        """The plane `meta`, its stat metadata looked up once for the names read."""
        stat_ids: dict[str, list[int]] = {}
        for key, stat in meta.stat_metadata.items():
            if stat.name in READ_STATS:
                stat_ids.setdefault(stat.name, []).append(key)
        wanted_ids = np.array([md for ids in stat_ids.values() for md in ids], np.int64)
        return cls(meta, device_type, device_code, sm_count, stat_ids, wanted_ids)


# --------------------------------------------------------------------------- names


class _NameRule:
    """A rule on event names, evaluated once per distinct name of a file (its name codes)."""

    def __init__(self, rule: Callable[[str], Any], dtype: Any) -> None:
        self.rule = rule
        self.dtype = dtype
        self.known: dict[int, Any] = {}

    def __call__(self, codes: np.ndarray, names: list[str]) -> np.ndarray:
        """The rule's value for each name code in `codes`."""
        used = np.flatnonzero(np.bincount(codes, minlength=1)).tolist()
        values = np.zeros(max(used, default=0) + 1, self.dtype)
        for code in used:
            if code not in self.known:
                self.known[code] = self.rule(names[code])
            values[code] = self.known[code]
        return values[codes]


class NameRules(msgspec.Struct):
    """The rules the rows' kinds follow, each remembering its value per name code of one file."""

    activity_kind: _NameRule = field(default_factory=lambda: _NameRule(_activity_kind, np.int8))
    copy_kind: _NameRule = field(default_factory=lambda: _NameRule(_copy_kind_code, np.int8))
    step_number: _NameRule = field(default_factory=lambda: _NameRule(step_number, np.int64))
    host_kind: _NameRule = field(default_factory=lambda: _NameRule(_host_kind, np.int8))
    step_marker: _NameRule = field(default_factory=lambda: _NameRule(_is_step_marker, bool))
    sync_api: _NameRule = field(default_factory=lambda: _NameRule(is_sync_api, bool))
    xla_copy: _NameRule = field(default_factory=lambda: _NameRule(_xla_copy_code, np.int8))


def _activity_kind(name: str) -> int:
    return KINDS.index(device_activity_kind(name))


def _copy_kind_code(name: str) -> int:
    return COPY_KINDS.index(_copy_kind(name))


def _xla_copy_code(name: str) -> int:
    """Index in COPY_KINDS of an XLA asynchronous copy's direction, -1 for any other op."""
    kind = xla_copy_kind(name)
    return -1 if kind is None else COPY_KINDS.index(kind)


def _host_kind(name: str) -> int:
    return KINDS.index(xprof_host_kind(name))


def _is_step_marker(name: str) -> bool:
    return bool(STEP_MARKER_PATTERN.match(name))


def op_type(annotation: str) -> str:
    """``MatMul`` of TF's ``dense/MatMul:MatMul``; an annotation without a type is kept whole."""
    return annotation.rsplit(":", 1)[-1] or annotation


def memory_code(name: str, details: str) -> int:
    """Index in MEMORY_KINDS of the host-side memory of copy `name` with ``memcpy_details`` `details`."""
    return MEMORY_KINDS.index(details_copy_memory(name, details))


def blocks(details: str) -> float:
    """Thread blocks launched, from ``grid:x,y,z`` of ``kernel_details`` (NaN if absent)."""
    grid = _GRID.search(details)
    return float(int(grid[1]) * int(grid[2]) * int(grid[3])) if grid else np.nan
