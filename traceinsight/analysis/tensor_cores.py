"""Which GPU kernels do matrix work, and which of them already run on Tensor Cores, judged by name.

No trace records whether a kernel used Tensor Cores (or AMD matrix cores), so XProf and the PyTorch
profiler plugin both judge it from kernel names. Their substring lists are old (no TF32, Hopper,
Blackwell, CUTLASS, nvjet, AMD) and the "could use Tensor Cores" side is worse: a bare ``gemm``,
``conv``, ``cudnn`` or ``flash`` also takes in FBGEMM embedding lookups, Eigen ``TensorConversionOp``
casts, cuDNN batch norm and vLLM's ``reshape_and_cache_flash_kernel``. Here one ordered table of
rules (``rules.NAME_RULES``, then ``rules.PRECISION_RULES``) settles each name: the first rule whose
pattern matches wins, so the kernels that only *look* like matrix work are ruled out before any
matmul word is read. This module applies the tables, once per distinct name.

Three answers per name:

* ``eligible``: the kernel's own work is the multiply-accumulate of a GEMM, a convolution or a
  GEMM-based attention, i.e. work Tensor Cores could run. Kernels that only serve such work are not:
  GEMV and K = 1 GEMMs (memory-bound, no reuse for Tensor Cores to exploit), split-K reductions,
  epilogues, im2col, layout transposes, offset precomputation, and the data / filter / output
  transforms of non-fused Winograd (its GEMM is a separate kernel). Every Tensor Core kernel is
  eligible.
* ``tensor_core``: the name shows Tensor Core (NVIDIA) or MFMA matrix-core (AMD) use, or a precision
  that only they compute in (`rules.TENSOR_CORE_PRECISIONS`: FP8, FP6, FP4, TF32, INT8 MMA). Where the
  name cannot show it (a Triton template, whose dtype is not in the name), it is not claimed.
* ``tensor_core_known``: whether the answer is known either way: Tensor Cores shown, or no matrix work,
  or matrix work the name shows runs on CUDA cores (SIMT) or in FP32. An eligible kernel of untold
  precision is unknown, never "no": it must not count as FP32 work.
* ``precision``: the narrowest operand type the name gives ("fp32", "tf32", "fp16", "bf16", "fp8",
  "fp6", "fp4", "int8"), or None when the name does not tell. Only eligible kernels get one: it is the
  precision of matrix work, and e.g. a cast kernel's types say nothing about that.

Triton kernels come first: Inductor names them after the aten ops they fuse, so the bias-add
epilogue of a decomposed addmm is ``triton_poi_fused_addmm_...`` and a template GEMM fused with a
cast is ``triton_tem_fused__to_copy_mm_...``; their kind prefix decides, not the op names.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.rules import NAME_RULES, PRECISION_RULES, TENSOR_CORE_PRECISIONS, first_match

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8")


# Each rule's pattern, and whether it searches the name as written (else the lower-cased name: `rules.folded`).
_NAME_PATTERNS = tuple((rule.compiled(), rule.case_sensitive) for rule in NAME_RULES)
_PRECISION_PATTERNS = tuple((rule.compiled(), rule.case_sensitive) for rule in PRECISION_RULES)


def _first_match(names: list[str], patterns: tuple[tuple[re.Pattern[str], bool], ...]) -> np.ndarray:
    """Index of the first pattern each name matches (-1: none). Distinct names, each searched until a pattern
    matches: pandas' `str.contains` cost 60 µs a call before any search, and a table has 40 patterns."""
    return np.array([first_match(name, patterns) for name in names], np.int64)


# The answers for the names classified so far in this process, (eligible, tensor_core, known, precision, rule):
# a report asks for the same kernel names four times (kernel stats, compute efficiency twice, settings). Emptied
# once it holds `_CLASSIFIED_MAX` names, so a long-lived process (the TensorBoard tab's) does not grow with every
# run it reads.
_CLASSIFIED: dict[str, tuple[bool, bool, bool, str | None, int]] = {}
_CLASSIFIED_MAX = 200_000


def _classify_distinct(names: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The table's answers for distinct names, positional: (eligible, tensor_core, known, precision, rule); the
    names not seen before in this process are classified (`_classify_new`) and remembered."""
    new = [name for name in names if name not in _CLASSIFIED]
    if new and len(_CLASSIFIED) + len(new) > _CLASSIFIED_MAX:
        _CLASSIFIED.clear()
        new = list(names)
    if new:
        _CLASSIFIED.update(zip(new, zip(*_classify_new(new), strict=True), strict=True))
    answers = [_CLASSIFIED[name] for name in names]
    eligible, tensor_core, known, precision, rule = (
        np.array([a[i] for a in answers], dtype=dtype) for i, dtype in enumerate((bool, bool, bool, object, np.int64))
    )
    return eligible, tensor_core, known, precision, rule


def _classify_new(names: list[str]) -> tuple[list[bool], list[bool], list[bool], list[str | None], list[int]]:
    """The table's answers for distinct names, each by the first rule that matches it."""
    rule = _first_match(names, _NAME_PATTERNS)
    eligible = np.array([r.eligible for r in NAME_RULES] + [False])[rule]  # rule -1 (none) -> the appended False
    tensor_core = np.array([r.tensor_core for r in NAME_RULES] + [False])[rule]
    simt = np.array([r.simt for r in NAME_RULES] + [False])[rule]
    precision = np.full(len(names), None, dtype=object)
    if eligible.any():
        precision_rule = _first_match(
            [n for n, e in zip(names, eligible.tolist(), strict=True) if e], _PRECISION_PATTERNS
        )
        precision[eligible] = np.array([r.precision for r in PRECISION_RULES] + [None], dtype=object)[precision_rule]
    tensor_core |= eligible & ~simt & np.isin(precision.astype(str), TENSOR_CORE_PRECISIONS)
    known = tensor_core | ~eligible | simt | (precision == "fp32")
    return eligible.tolist(), tensor_core.tolist(), known.tolist(), precision.tolist(), rule.tolist()


def classify_kernel_names(names: pd.Series | pd.Index) -> pd.DataFrame:
    """Classify kernel names by the first matching rule of `NAME_RULES` (and `PRECISION_RULES`).

    Returns one row per input name, on the input's index, with boolean columns ``eligible``,
    ``tensor_core`` and ``tensor_core_known``, ``precision`` (a string of `PRECISIONS` or None) and
    ``rule`` (the position of the deciding rule in `NAME_RULES`, -1 when none matched: then not eligible).
    The regexes run once per distinct name: a categorical Series is classified through its categories and its codes (a
    missing value gets no rule); anything else is factorised first. Pass ``names.cat.categories``
    to get the answers per category.
    """
    index = names.index if isinstance(names, pd.Series) else pd.RangeIndex(len(names))
    if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype):
        codes = names.cat.codes.to_numpy()
        uniques = pd.Series(names.cat.categories.astype(str), dtype=object)
    else:
        codes, unique_values = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=True)
        uniques = pd.Series(unique_values, dtype=object).astype(str)
    eligible, tensor_core, known, precision, rule = _classify_distinct(uniques.reset_index(drop=True))
    # A missing name (code -1) takes the appended "no rule" row.
    take = np.where(codes < 0, len(uniques), codes)
    return pd.DataFrame(
        {
            "eligible": np.append(eligible, False)[take],
            "tensor_core": np.append(tensor_core, False)[take],
            "tensor_core_known": np.append(known, True)[take],
            # object, not pandas' str dtype, so that "not told" stays None rather than NaN
            "precision": pd.Series(np.append(precision, [None])[take], index=index, dtype=object),
            "rule": np.append(rule, -1).astype(np.int64)[take],
        },
        index=index,
    )
