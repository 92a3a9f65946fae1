"""The words of the event table's categorical columns (events.py documents them), without pandas: the early
read's process (readers/early.py) codes its rows with them before pandas is imported anywhere."""

from __future__ import annotations

KINDS = (
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "runtime",
    "cpu_op",
    "annotation",
    "step",
    "input_wait",
    "python",
    "other",
)
DEVICE_WORK_KINDS = ("kernel", "memcpy", "memset")
COPY_KINDS = ("h2d", "d2h", "d2d", "p2p", "other")
MEMORY_KINDS = ("pageable", "pinned", "device", "unknown")
