"""Hand freed heap memory back to the operating system.

glibc's malloc keeps the pages of freed small blocks for reuse, so after a big
trace's millions of short-lived objects (decoded events, chunk columns) are gone
their pages still count in the process's RSS, and later large arrays are mapped
anew on top. ``malloc_trim`` returns them; Dask's workers trim for the same
reason. Elsewhere (macOS, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Return the heap's free pages to the OS, where the C library can (glibc)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
