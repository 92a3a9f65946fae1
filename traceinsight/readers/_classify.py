"""Name rules shared by the JSON readers, so a copy or a sync means the same in every format.

Kineto names copies ``Memcpy HtoD (Pageable -> Device)``; XSpace and XProf's JSON
export name them ``MemcpyH2D`` and put the memory kinds in ``memcpy_details``. The
XProf rules (stream activity, host events, framework) follow xspace.py's, so the
Chrome export of a profile reads like its XSpace. Rules run once per distinct name
(`per_category`) or are cached per distinct stat string, never per event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:  # the early read's process (early.py) classifies names without pandas
    import pandas as pd

from traceinsight.rules import (
    COPY_KIND_PATTERNS,
    NON_KERNEL_ACTIVITY,
    SYNC_API_PATTERN,
    TF_OP_PATTERN,
    XLA_ASYNC_COPY,
    XLA_HOST_MEMORY_SPACE,
)

T = TypeVar("T")

# Kineto: "Memcpy HtoD (Pageable -> Device)"; ROCm writes "(Host -> Device)".
_KINETO_MEMORY = re.compile(  # words and the spaces between them, possessively: linear in a hostile name
    r"\(\s*+([A-Za-z](?:[A-Za-z]| ++(?=[A-Za-z]))*+)\s*+->\s*+([A-Za-z](?:[A-Za-z]| ++(?=[A-Za-z]))*+)\s*+\)"
)
# XSpace / XProf: "kind_src:pageable kind_dst:device size:4096 dest:0 async:1".
_DETAILS_SRC = re.compile(r"(?:^|\s)kind_src:(\w+)")
_DETAILS_DST = re.compile(r"(?:^|\s)kind_dst:(\w+)")
# Numbers are matched strictly (ASCII digits, at most 18 so they fit int64), so a damaged
# stat string never makes int() or float() raise: it simply does not match.
_DETAILS_BYTES = re.compile(r"(?:^|\s)(?:size|num_bytes):([0-9]{1,18})(?![0-9])")
_DETAILS_OCCUPANCY = re.compile(  # possessive: a digit after the number fails `(?!\S)` whatever the split
    r"(?:^|\s)occ_pct:([+-]?(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?[0-9]++)?+)(?!\S)"
)
_STEP_NUMBER = re.compile(r"[0-9]{1,18}")
_MEMORY_WORDS = {
    "pageable": "pageable",
    "pinned": "pinned",
    "device": "device",
    "device static": "device",
    "device_static": "device",
}


def per_category(values: pd.Categorical, rule: Callable[[str], T], missing: T, dtype: Any = object) -> np.ndarray:
    """Apply `rule` once per distinct value and spread the results over the rows.

    Rows whose value is missing (code -1) get `missing`: the extra last element.
    """
    results = np.array([rule(str(c)) for c in values.categories] + [missing], dtype=dtype)
    return results[np.asarray(values.codes)]


def is_sync_api(name: str) -> bool:
    """True for host API calls that wait for the device (cudaDeviceSynchronize, ...)."""
    return SYNC_API_PATTERN.match(name) is not None


def copy_kind(name: str) -> str:
    """Direction of a copy from its event name: h2d, d2h, d2d, p2p, or other."""
    for kind, pattern in COPY_KIND_PATTERNS:
        if pattern.search(name):
            return kind
    return "other"


def xla_copy_kind(name: str) -> str | None:
    """Direction of an XLA asynchronous copy from its HLO text (`rules.XLA_ASYNC_COPY`), None for any other op:
    d2h when its destination (the first shape of its result) is in host memory, h2d when another of its shapes is,
    else d2d."""
    if not XLA_ASYNC_COPY.match(name):
        return None
    result = name.split(" = ", 1)[1] if " = " in name else ""
    destination = result.lstrip("(").split("}", 1)[0]
    if XLA_HOST_MEMORY_SPACE in destination:
        return "d2h"
    return "h2d" if XLA_HOST_MEMORY_SPACE in result else "d2d"


def _memory_word(word: str | None) -> str:
    return _MEMORY_WORDS.get(word.strip().lower(), "unknown") if word else "unknown"


def _host_side(kind: str, src: str | None, dst: str | None) -> str:
    """The memory that decides copy speed: the host side of h2d/d2h, else the source."""
    return _memory_word(dst if kind == "d2h" else src)


def kineto_copy_memory(name: str) -> str:
    """Memory kind of a Kineto copy from ``(<src> -> <dst>)`` in its name.

    For h2d this is the source and for d2h the destination, i.e. the host side
    either way, so "pageable" always means an unpinned host buffer. ROCm's
    ``(Host -> Device)`` does not say which host memory: "unknown".
    """
    match = _KINETO_MEMORY.search(name)
    if match is None:
        return "unknown"
    return _host_side(copy_kind(name), match.group(1), match.group(2))


@cache
def details_copy_memory(name: str, details: str) -> str:
    """Memory kind of an XSpace-style copy from ``kind_src:``/``kind_dst:`` (same rule as Kineto)."""
    src = _DETAILS_SRC.search(details)
    dst = _DETAILS_DST.search(details)
    return _host_side(copy_kind(name), src and src.group(1), dst and dst.group(1))


@cache
def details_bytes(details: str) -> int:
    """Bytes from ``memcpy_details``/``Memset_details`` (``size:N`` or ``num_bytes:N``), -1 if absent."""
    match = _DETAILS_BYTES.search(details)
    return int(match.group(1)) if match else -1


@cache
def details_occupancy(details: str) -> float:
    """``occ_pct`` of ``kernel_details``; NaN when absent or 0 (ROCm writes 0 for "not computed").

    Other impossible values (inf, 250) come through: readers count and drop them (`_repair.valid_occupancy`).
    """
    match = _DETAILS_OCCUPANCY.search(details)
    value = float(match.group(1)) if match else np.nan
    return value if value > 0 else np.nan


def step_number(name: str) -> int:
    """Step id of an XProf ``Steps`` line event (its name is the number), -1 if the name is no step number."""
    return int(name) if _STEP_NUMBER.fullmatch(name) else -1


def device_activity_kind(name: str) -> str:
    """Kind of an event on an XProf ``Stream #`` line (or a TF1 timeline's stream): copies, memsets, kernels, or
    other."""
    if name.startswith(("Memcpy", "MEMCPY")):  # TF1 timelines write MEMCPYHtoD
        return "memcpy"
    if name.startswith("Memset"):
        return "memset"
    return "other" if name in NON_KERNEL_ACTIVITY else "kernel"


def xprof_host_kind(name: str) -> str:
    """Kind of an XProf host event from its name alone: python, cpu_op (a TF op) or other."""
    if name.startswith("$"):
        return "python"
    return "cpu_op" if TF_OP_PATTERN.match(name) else "other"


def xprof_framework(host_threads: Iterable[str], host_names: Iterable[str], has_cpu_ops: bool) -> str:
    """JAX if the PjRt/JAX client left its marks on the host threads, TensorFlow if its executor did."""
    threads = list(host_threads)
    names = set(host_names)
    # JAX's jit dispatch (`PjitFunction(f)`) first: a JAX step annotated "train" would read as TF's step marker.
    if any(t.startswith("py_xla_execute") for t in threads) or any(n.startswith("PjitFunction(") for n in names):
        return "jax"
    tf_markers = {"EagerExecute", "EagerLocalExecute", "train", "ExecutorState::Process"}
    if has_cpu_ops or tf_markers.intersection(names) or any(t.startswith("tf_Compute") for t in threads):
        return "tensorflow"
    return "jax" if any("pjrt" in t.lower() for t in threads) else "unknown"
