"""What each device kernel computes (matmul, conv, attention, ...): the classes a FLOP, MFU and roofline breakdown
reports kernel time by, told from kernel names by `rules.KERNEL_CLASS_RULES` (first match wins) and from the kind
of copy rows."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from traceinsight.events import DEVICE_WORK_KINDS, DistinctNames, kind_mask
from traceinsight.rules import KERNEL_CLASS_RULES, KERNEL_CLASSES, first_match

# Every class, in the order reports list them.
_CODE = {name: code for code, name in enumerate(KERNEL_CLASSES)}


# The rules' patterns, each `rules.folded` (searched in the lower-cased name).
_PATTERNS = tuple((pattern, False) for _, pattern in KERNEL_CLASS_RULES)


@lru_cache(maxsize=1 << 16)
def class_of_name(name: str) -> str:
    """The class of one kernel name: the first rule it matches, else `other`. Remembered: a report asks the same
    names several times (kernel stats, compute efficiency, the critical path), and kernel names are long."""
    rule = first_match(name, _PATTERNS)
    return KERNEL_CLASS_RULES[rule][0] if rule >= 0 else "other"


def kernel_classes(events: pd.DataFrame) -> pd.Categorical:
    """Per row of an event table, the class of its device work (`KERNEL_CLASSES`); missing for rows that are no
    device work (host events). Memcpy / memset rows are `copy` by their kind; kernels are classed by name, each
    distinct name once, so a million rows cost one pass over their name codes."""
    codes = np.full(len(events), -1, np.int8)
    work = kind_mask(events, *DEVICE_WORK_KINDS) & events["device"].notna().to_numpy()
    copies = work & kind_mask(events, "memcpy", "memset")
    kernels = work & ~copies
    codes[copies] = _CODE["copy"]
    if kernels.any():
        names = DistinctNames(events, kernels)
        by_code = np.full(names.count + 1, _CODE["other"], np.int8)  # the last slot: code -1, a kernel without name
        by_code[names.used] = [_CODE[class_of_name(name)] for name in names.names]
        codes[kernels] = by_code[names.codes[kernels]]
    return pd.Categorical.from_codes(codes, categories=KERNEL_CLASSES)
