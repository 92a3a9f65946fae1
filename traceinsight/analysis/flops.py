"""FLOPs and bytes of framework ops, from the shapes the trace records (`Profile.ops`, events.py).

One formula per op family, written once here; TraceLens' ``PerfModel/perf_model.py`` (AMD-AGI/TraceLens
171dd747) is the reference, and its reports on real traces are what the tests compare against:

* GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``, ``_scaled_mm``): ``2·B·M·N·K``, plus
  ``B·M·N`` for the bias add of ``addmm`` / ``baddbmm`` / a biased ``linear`` / ``_scaled_mm`` (TraceLens
  ``GEMM.flops_func``). Bytes: A, B, the bias as recorded and the output once each; an FP8 GEMM's output is
  taken as 2 bytes an element (TraceLens ``aten_scaled_mm.bytes``: its dtype is not recorded).
* Convolution forward: ``2 · numel(output) · numel(weight[1:])`` (``weight[1]`` is already ``C_in / groups``),
  plus ``numel(output)`` for a bias; a transposed one ``2 · numel(input) · numel(weight[1:])`` (TraceLens
  ``CONV.flops_func``, after ``torch/utils/flop_counter.py``). The output's spatial size comes from stride,
  padding and dilation in ``Concrete Inputs``; a trace without them (PyTorch < 2.1) gives it in the ops that
  follow on the thread, one of which takes the output as its first input (batch norm, activation, bias add):
  the first of the next `_NEXT_OPS` whose first input has the output's rank, batch and channels gives it, and
  without one the op is not counted.
* Convolution backward: each gradient asked for (``output_mask``) is one convolution of the forward's size,
  ``2 · numel(grad_output) · numel(weight[1:])`` (``numel(input)`` for a transposed one: every forward
  multiply-add is one backward multiply-add), the bias gradient ``numel(grad_output)``. Input, grad_output and
  weight shapes are all recorded, so no stride is needed. Without ``output_mask`` (old traces) the input and
  weight gradients are assumed, as for every layer but a network's first.
* Attention (SDPA and its flash / efficient / cuDNN kernels' ops): ``2 · B · H_q · L_q · L_kv · (d_qk + d_v)``
  (two GEMMs, ``QKᵀ`` and ``PV``; softmax left out, ``d`` times smaller), halved when causal (TraceLens
  ``SDPA.flops_func``, after flash-attention's ``benchmarks/benchmark_flash_attention.py``). Backward: 2x
  forward, 2.5x for flash kernels, which recompute ``QKᵀ`` (TraceLens ``SDPA.flops_bwd_func``). Causal with
  ``L_q != L_kv`` (where the mask's alignment matters) and variable-length batches are not counted. Bytes: Q,
  K, V read and O written (backward: those and dO read, dQ, dK, dV written).

Where the trace has its own count (Kineto ``flops``, ``with_flops=True``) it is used instead. Where a shape is
missing or is not what the op takes, the op is not counted (NaN, and a reason): never guessed.

Nested ops: ``aten::linear`` runs ``aten::addmm``, ``aten::conv2d`` runs ``aten::convolution`` ->
``aten::_convolution`` -> ``aten::cudnn_convolution``, one piece of work each. Of ops with a count, only
those without a counted op nested in them on their thread keep it: the innermost. Its kernels are the ones its
runtime calls launched (op_kernels.py), so FLOPs and kernel time pair without walking up the tree, and its
shapes are the ones the kernels got (``linear``'s 3-D input already flattened for ``addmm``). An op whose
nested ops have no formula (``_scaled_dot_product_attention_math`` runs ``bmm`` s; an unknown backend's
kernel op) keeps its own count.

Work is done once per distinct (name, shapes) signature: a big trace repeats a few thousand of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceinsight.ordering import tuple_codes
from traceinsight.rules import KINETO_DTYPES

OP_CLASSES = ("matmul", "conv", "attention", "other")

# Kineto ``Input type`` -> compute dtype, and bytes an element.
_FP8_OUT_BYTES = 2
_NEXT_OPS = 4  # ops after a convolution searched for its output (`_conv_output`)

NO_FORMULA = "no formula for this op"
NO_SHAPES = "shapes not recorded"
BAD_SHAPES = "shapes are not what the op takes"
NO_PARAMS = "stride/padding not recorded"
CAUSAL_UNEQUAL = "causal with unequal query and key lengths"
VARLEN = "variable-length batch"
NESTED = "counted in a nested op"


class NotCounted(Exception):
    """Why an op's cost cannot be computed from what the trace records."""


class _Cost(msgspec.Struct, frozen=True):
    flops: float
    bytes: float
    dtype: str | None


Formula = Callable[[Any, Any, Any, Any], _Cost]  # (input dims, input types, concrete inputs, next ops' dims)

# --------------------------------------------------------------------------- reading one op's args


def _shape(dims: Any, i: int, rank: int | Sequence[int] | None = None) -> list[int]:
    """Input `i`'s shape: ints >= 0, of `rank` (or one of them) when given."""
    if not isinstance(dims, list) or i >= len(dims) or not isinstance(dims[i], list):
        raise NotCounted(NO_SHAPES)
    shape = dims[i]
    if not all(type(d) is int and d >= 0 for d in shape):
        raise NotCounted(BAD_SHAPES)
    if rank is not None and len(shape) not in ((rank,) if isinstance(rank, int) else rank):
        raise NotCounted(BAD_SHAPES if shape else NO_SHAPES)
    return shape


def _has(dims: Any, i: int) -> bool:
    """Whether input `i` is a tensor with a shape (an optional bias, mask)."""
    return isinstance(dims, list) and i < len(dims) and isinstance(dims[i], list) and len(dims[i]) > 0


def _concrete(concrete: Any, i: int | None) -> str:
    """``Concrete Inputs`` entry `i` ('' when absent)."""
    if i is not None and isinstance(concrete, list) and i < len(concrete) and isinstance(concrete[i], str):
        return concrete[i]
    return ""


def _ints(text: str, n: int) -> list[int] | None:
    """An int list arg (``[2, 2]``, ``2``) for `n` spatial dims; None when absent or not ints."""
    if not text or re.search(r"[^\d\s,\[\]()-]", text):
        return None
    values = [int(v) for v in re.findall(r"-?\d+", text)]
    if not values:
        return None
    return values * n if len(values) == 1 else values if len(values) == n else None


def _flag(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.strip().lower())


def _dtype(types: Any, i: int) -> tuple[str | None, float]:
    """Compute dtype of input `i` and its bytes an element (NaN unknown)."""
    name = types[i] if isinstance(types, list) and i < len(types) and isinstance(types[i], str) else ""
    return KINETO_DTYPES.get(name, (None, math.nan))


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


# --------------------------------------------------------------------------- GEMM


def _gemm(a: int, b: int, bias: int | None = None, batched: bool = False, scaled: bool = False) -> Formula:
    """(M,K)x(K,N) (`batched`: (B,M,K)x(B,K,N)) of inputs `a`, `b`; `bias`: the added input's position."""

    def cost(dims: Any, types: Any, concrete: Any, hint: Any) -> _Cost:
        rank = 3 if batched else 2
        x, w = _shape(dims, a, rank), _shape(dims, b, rank)
        if x[-1] != w[-2] or (batched and x[0] != w[0]):
            raise NotCounted(BAD_SHAPES)
        has_bias = bias is not None and _has(dims, bias)
        bias_numel = _numel(dims[bias]) if bias is not None and has_bias else 0
        return _matmul_cost(types, a, x[0] if batched else 1, x[-2], w[-1], x[-1], has_bias, bias_numel, scaled)

    return cost


def _matmul_cost(
    types: Any, a: int, batch: int, m: int, n: int, k: int, bias: bool, bias_numel: int, scaled: bool = False
) -> _Cost:
    dtype, size = _dtype(types, a)
    out_size = _FP8_OUT_BYTES if scaled or dtype == "fp8" else size
    flops = batch * (2 * m * n * k + (m * n if bias else 0))
    nbytes = batch * (m * k + k * n) * size + batch * m * n * out_size + bias_numel * size
    return _Cost(float(flops), float(nbytes), dtype)


def _matmul(dims: Any, types: Any, concrete: Any, hint: Any) -> _Cost:
    """``torch.matmul``: 1-D operands gain a dim, batch dims broadcast."""
    x, w = _shape(dims, 0, range(1, 9)), _shape(dims, 1, range(1, 9))
    x2 = [1, *x] if len(x) == 1 else x
    w2 = [*w, 1] if len(w) == 1 else w
    if x2[-1] != w2[-2]:
        raise NotCounted(BAD_SHAPES)
    try:
        batch = _numel(np.broadcast_shapes(tuple(x2[:-2]), tuple(w2[:-2])))
    except ValueError:
        raise NotCounted(BAD_SHAPES) from None
    return _matmul_cost(types, 0, batch, x2[-2], w2[-1], x2[-1], False, 0)


def _linear(dims: Any, types: Any, concrete: Any, hint: Any) -> _Cost:
    """``input (..., K) · weight (N, K)ᵀ + bias``."""
    x, w = _shape(dims, 0, range(1, 9)), _shape(dims, 1, 2)
    if x[-1] != w[1]:
        raise NotCounted(BAD_SHAPES)
    bias = _has(dims, 2)
    return _matmul_cost(types, 0, 1, _numel(x[:-1]), w[0], w[1], bias, _numel(dims[2]) if bias else 0)


# --------------------------------------------------------------------------- convolution


class _ConvArgs(msgspec.Struct, frozen=True):
    """Where a convolution op's args are (None: it has none)."""

    bias: int | None
    stride: int | None
    padding: int | None
    dilation: int | None
    transposed: int | bool = False  # position of the flag, or whether the op always is one


def _conv(args: _ConvArgs) -> Formula:
    def cost(dims: Any, types: Any, concrete: Any, hint: Any) -> _Cost:
        x = _shape(dims, 0, (3, 4, 5))
        w = _shape(dims, 1, len(x))
        if isinstance(args.transposed, bool):
            transposed = args.transposed
        else:  # not recorded (old traces): a plain convolution, as nearly all are
            transposed = bool(_flag(_concrete(concrete, args.transposed)))
        has_bias = args.bias is not None and _has(dims, args.bias)
        dtype, size = _dtype(types, 0)
        if transposed:
            if w[0] != x[1]:
                raise NotCounted(BAD_SHAPES)
            out_numel = math.nan  # its size needs output_padding: bytes unknown
            flops = 2 * _numel(x) * _numel(w[1:])
        else:
            if w[1] == 0 or x[1] % w[1]:
                raise NotCounted(BAD_SHAPES)
            out_numel = _numel(_conv_output(x, w, args, concrete, hint))
            flops = 2 * out_numel * _numel(w[1:]) + (out_numel if has_bias else 0)
        nbytes = (_numel(x) + _numel(w) + (w[0] if has_bias else 0) + out_numel) * size
        return _Cost(float(flops), float(nbytes), _tf32(dtype, concrete))

    return cost


def _conv_output(x: list[int], w: list[int], args: _ConvArgs, concrete: Any, hint: Any) -> list[int]:
    """The output shape: from stride, padding and dilation, else from a next op's first input (`hint`: the
    input shapes of the next ops on the thread)."""
    n = len(x) - 2
    stride = _ints(_concrete(concrete, args.stride), n)
    dilation = _ints(_concrete(concrete, args.dilation), n)
    padding_text = _concrete(concrete, args.padding).strip("'\" ")
    if stride and dilation and padding_text == "same":
        return [x[0], w[0], *x[2:]]
    padding = [0] * n if padding_text == "valid" else _ints(padding_text, n)
    if stride and padding and dilation:
        spatial = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(n)]
        if min(spatial) < 1 or min(stride) < 1:
            raise NotCounted(BAD_SHAPES)
        return [x[0], w[0], *spatial]
    for dims in hint if hint is not None else ():
        first = dims[0] if isinstance(dims, list) and dims else None
        if (
            isinstance(first, list)
            and len(first) == len(x)
            and all(type(d) is int and d > 0 for d in first)
            and first[:2] == [x[0], w[0]]
            and all(first[2 + i] <= x[2 + i] + w[2 + i] for i in range(n))
        ):
            return list(first)
    raise NotCounted(NO_PARAMS)


def _tf32(dtype: str | None, concrete: Any) -> str | None:
    """fp32 convolutions run as TF32 where the op says cuDNN may (``allow_tf32``, its last arg)."""
    if dtype == "fp32" and isinstance(concrete, list) and concrete and _flag(_concrete(concrete, len(concrete) - 1)):
        return "tf32"
    return dtype


def _conv_backward(x_at: int, grad_at: int, w_at: int, transposed_at: int | None, mask_at: int) -> Formula:
    def cost(dims: Any, types: Any, concrete: Any, hint: Any) -> _Cost:
        x = _shape(dims, x_at, (3, 4, 5))
        grad, w = _shape(dims, grad_at, len(x)), _shape(dims, w_at, len(x))
        if grad[0] != x[0]:
            raise NotCounted(BAD_SHAPES)
        transposed = bool(_flag(_concrete(concrete, transposed_at)))
        mask = re.findall(r"true|false", _concrete(concrete, mask_at).lower())
        wanted = [m == "true" for m in mask] if len(mask) == 3 else [True, True, False]
        grads = int(wanted[0]) + int(wanted[1])
        macs = _numel(x if transposed else grad) * _numel(w[1:])
        flops = 2 * macs * grads + (_numel(grad) if wanted[2] else 0)
        dtype, size = _dtype(types, x_at)
        moved = _numel(grad) + _numel(x) + _numel(w)  # each gradient reads two of them and writes the third
        nbytes = (moved * grads + ((_numel(grad) + grad[1]) if wanted[2] else 0)) * size
        head = concrete[:mask_at] if isinstance(concrete, list) else None  # allow_tf32 is before the mask
        return _Cost(float(flops), float(nbytes), _tf32(dtype, head))

    return cost


# --------------------------------------------------------------------------- attention


class _AttentionArgs(msgspec.Struct, frozen=True):
    q: int  # position of the query (key and value follow)
    causal: int  # position of is_causal (or of the mask type, with `mask_type`)
    bshd: bool = False  # (batch, seq, heads, dim) layout (the kernels' own ops), else (batch, heads, seq, dim)
    varlen: int | None = None  # position of cu_seqlens_q (a variable-length batch when given)
    mask_type: bool = False  # causal is an int mask type (0: none)
    backward: float = 0.0  # backward: FLOPs as a multiple of the forward's


def _attention(args: _AttentionArgs) -> Formula:
    def cost(dims: Any, types: Any, concrete: Any, hint: Any) -> _Cost:
        if args.varlen is not None and _has(dims, args.varlen):
            raise NotCounted(VARLEN)
        rank: int | range = 4 if args.bshd else range(3, 9)
        q, k, v = (_shape(dims, args.q + i, rank) for i in range(3))
        if args.bshd:  # to (batch, heads, seq, dim)
            q, k, v = ([s[0], s[2], s[1], s[3]] for s in (q, k, v))
        l_q, d_qk, l_kv, d_v = q[-2], q[-1], k[-2], v[-1]
        if k[-1] != d_qk or v[-2] != l_kv or q[:-3] != k[:-3] or k[-3] == 0 or q[-3] % k[-3]:
            raise NotCounted(BAD_SHAPES)
        flag = _concrete(concrete, args.causal).strip()
        causal = flag not in ("", "0") if args.mask_type else bool(_flag(flag))
        if causal and l_q != l_kv:
            raise NotCounted(CAUSAL_UNEQUAL)
        flops = 2 * _numel(q[:-2]) * l_q * l_kv * (d_qk + d_v) / (2 if causal else 1)
        dtype, size = _dtype(types, args.q)
        moved = _numel(q) + _numel(k) + _numel(v) + _numel(q[:-1]) * d_v  # Q, K, V, O
        if args.backward:  # and their gradients
            return _Cost(flops * args.backward, float(2 * moved * size), dtype)
        return _Cost(float(flops), float(moved * size), dtype)

    return cost


# --------------------------------------------------------------------------- the formula table

_FORMULAS: dict[str, tuple[str, Formula]] = {
    "aten::mm": ("matmul", _gemm(0, 1)),
    "aten::addmm": ("matmul", _gemm(1, 2, bias=0)),
    "aten::bmm": ("matmul", _gemm(0, 1, batched=True)),
    "aten::baddbmm": ("matmul", _gemm(1, 2, bias=0, batched=True)),
    "aten::_scaled_mm": ("matmul", _gemm(0, 1, bias=4, scaled=True)),
    "aten::matmul": ("matmul", _matmul),
    "aten::linear": ("matmul", _linear),
    # forward convolutions: positions of bias, stride, padding, dilation, transposed
    "aten::convolution": ("conv", _conv(_ConvArgs(2, 3, 4, 5, 6))),
    "aten::_convolution": ("conv", _conv(_ConvArgs(2, 3, 4, 5, 6))),
    "aten::conv1d": ("conv", _conv(_ConvArgs(2, 3, 4, 5))),
    "aten::conv2d": ("conv", _conv(_ConvArgs(2, 3, 4, 5))),
    "aten::conv3d": ("conv", _conv(_ConvArgs(2, 3, 4, 5))),
    "aten::conv_transpose1d": ("conv", _conv(_ConvArgs(2, 3, 4, 7, True))),
    "aten::conv_transpose2d": ("conv", _conv(_ConvArgs(2, 3, 4, 7, True))),
    "aten::conv_transpose3d": ("conv", _conv(_ConvArgs(2, 3, 4, 7, True))),
    "aten::cudnn_convolution": ("conv", _conv(_ConvArgs(None, 3, 2, 4))),
    "aten::cudnn_convolution_transpose": ("conv", _conv(_ConvArgs(None, 4, 2, 5, True))),
    "aten::miopen_convolution": ("conv", _conv(_ConvArgs(2, 4, 3, 5))),
    "aten::mkldnn_convolution": ("conv", _conv(_ConvArgs(2, 4, 3, 5))),
    # backward convolutions: positions of input, grad_output, weight, transposed, output_mask. The
    # *_backward_input / *_backward_weight ops of old traces are parts of these (the second does not record
    # the weight's shape), so they have no formula of their own.
    "aten::convolution_backward": ("conv", _conv_backward(1, 0, 2, 7, 10)),
    "aten::cudnn_convolution_backward": ("conv", _conv_backward(0, 1, 2, None, 10)),
    "aten::miopen_convolution_backward": ("conv", _conv_backward(0, 1, 2, None, 9)),
    # attention
    "aten::scaled_dot_product_attention": ("attention", _attention(_AttentionArgs(0, 5))),
    "aten::_scaled_dot_product_flash_attention": ("attention", _attention(_AttentionArgs(0, 4))),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("attention", _attention(_AttentionArgs(0, 4))),
    "aten::_scaled_dot_product_efficient_attention": ("attention", _attention(_AttentionArgs(0, 6))),
    "aten::_scaled_dot_product_cudnn_attention": ("attention", _attention(_AttentionArgs(0, 6))),
    "aten::_flash_attention_forward": ("attention", _attention(_AttentionArgs(0, 8, bshd=True, varlen=3))),
    "aten::_efficient_attention_forward": (
        "attention",
        _attention(_AttentionArgs(0, 9, bshd=True, varlen=4, mask_type=True)),
    ),
    "aten::_scaled_dot_product_flash_attention_backward": (
        "attention",
        _attention(_AttentionArgs(1, 11, backward=2.5)),
    ),
    "aten::_scaled_dot_product_efficient_attention_backward": (
        "attention",
        _attention(_AttentionArgs(1, 11, backward=2.0)),
    ),
    "aten::_scaled_dot_product_cudnn_attention_backward": (
        "attention",
        _attention(_AttentionArgs(1, 14, backward=2.0)),
    ),
    "aten::_flash_attention_backward": (
        "attention",
        _attention(_AttentionArgs(1, 11, bshd=True, varlen=6, backward=2.5)),
    ),
    "aten::_efficient_attention_backward": (
        "attention",
        _attention(_AttentionArgs(1, 14, bshd=True, varlen=6, mask_type=True, backward=2.0)),
    ),
}
# Forward convolutions, whose output size may have to come from the next op (`_conv_output`).
_CONV_FORWARD = frozenset(name for name, (cls, _) in _FORMULAS.items() if cls == "conv" and "backward" not in name)


def op_class(name: str) -> str:
    """matmul, conv, attention or other."""
    formula = _FORMULAS.get(name)
    return formula[0] if formula else "other"


def op_cost(
    name: str, input_dims: Any, input_types: Any = None, concrete_inputs: Any = None, next_dims: Any = None
) -> tuple[float, float, str | None, str | None]:
    """(flops, bytes, dtype, why not counted) of one op from its recorded args; NaN and a reason when the
    args do not tell. `next_dims`: the input shapes of the next ops on the thread (`_conv_output`)."""
    formula = _FORMULAS.get(name)
    dtype = _dtype(input_types, 0)[0]
    if formula is None:
        return math.nan, math.nan, dtype, NO_FORMULA
    try:
        cost = formula[1](input_dims, input_types, concrete_inputs, next_dims)
    except NotCounted as reason:
        return math.nan, math.nan, dtype, str(reason)
    except (TypeError, ValueError, IndexError, OverflowError):  # odd values the checks did not foresee
        return math.nan, math.nan, dtype, BAD_SHAPES
    return cost.flops, cost.bytes, cost.dtype, None


# --------------------------------------------------------------------------- the whole table


def op_costs(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op of an op table (events.make_op_table), index kept: ``flops``, ``bytes`` (NaN: not counted or
    unknown), ``dtype`` (compute dtype), ``op_class`` (`OP_CLASSES`), ``not_counted`` (why, else NaN).

    ``flops`` is finite exactly where ``not_counted`` is NaN, so ``flops.sum()`` counts each piece of work
    once (module docstring: the innermost counted op keeps the count).
    """
    n = len(ops)
    codes = ops["name"].cat.codes.to_numpy().astype(np.int64)
    categories = list(ops["name"].cat.categories)
    dims, types, concrete = (ops[col].to_numpy() for col in ("input_dims", "input_types", "concrete_inputs"))
    next_dims = _next_dims(ops, codes)
    # One formula call per distinct signature: rows of one share their arg objects (the reader decodes each
    # distinct text once), so object ids tell signatures apart.
    objects = (dims, types, concrete) if next_dims is None else (dims, types, concrete, *next_dims.T)
    inverse, first = tuple_codes(codes, *(np.fromiter(map(id, col), np.int64, n) for col in objects))
    results = [
        op_cost(
            categories[code] if code >= 0 else "",
            dims[i],
            types[i],
            concrete[i],
            None if next_dims is None else list(next_dims[i]),
        )
        for i, code in zip(first.tolist(), codes[first].tolist(), strict=True)
    ]
    flops = np.array([r[0] for r in results], np.float64)[inverse]
    nbytes = np.array([r[1] for r in results], np.float64)[inverse]
    dtype = pd.Categorical([r[2] for r in results])
    reasons = pd.Categorical([r[3] for r in results], categories=_reasons(r[3] for r in results))

    own = ops["flops"].to_numpy(np.float64)
    traced = np.isfinite(own)
    flops = np.where(traced, own, flops)
    reason_codes = np.where(traced, -1, reasons.codes[inverse])
    reason_codes[_outer_counted(ops, np.isfinite(flops))] = list(reasons.categories).index(NESTED)
    flops[reason_codes >= 0] = np.nan
    nbytes[~np.isfinite(flops)] = np.nan
    classes = np.array([OP_CLASSES.index(op_class(name)) for name in categories] + [len(OP_CLASSES) - 1], np.int8)
    return pd.DataFrame(
        {
            "flops": flops,
            "bytes": nbytes,
            "dtype": pd.Categorical.from_codes(dtype.codes[inverse], dtype.categories),
            "op_class": pd.Categorical.from_codes(classes[codes], OP_CLASSES),
            "not_counted": pd.Categorical.from_codes(reason_codes, reasons.categories).remove_unused_categories(),
        },
        index=ops.index,
    )


def _reasons(found: Any) -> list[str]:
    """The reasons met, and `NESTED`."""
    return sorted({r for r in found if r is not None} | {NESTED})


def thread_order(ops: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray:
    """Positions of host ops (`rows`, default every op with a thread) ordered by input, thread, start, longer
    first, then External id (an enclosing op's is the smaller: equal µs stamps of old traces)."""
    if rows is None:
        rows = np.flatnonzero(ops["thread"].to_numpy() >= 0)
    start = ops["ts_ns"].to_numpy()[rows]
    end = start + ops["dur_ns"].to_numpy()[rows]
    keys = (ops["external_id"].to_numpy()[rows], -end, start, ops["thread"].to_numpy()[rows])
    return rows[np.lexsort((*keys, ops["input_id"].to_numpy()[rows]))]


def _next_dims(ops: pd.DataFrame, codes: np.ndarray) -> np.ndarray | None:
    """For forward convolutions without their stride and padding: the input shapes of the `_NEXT_OPS` ops on
    their thread after they end (`_conv_output` reads the output size there), None for every other op; None
    when there is no such convolution."""
    convs = [i for i, name in enumerate(ops["name"].cat.categories) if name in _CONV_FORWARD]
    wanted = np.isin(codes, convs) & ops["concrete_inputs"].isna().to_numpy() & (ops["thread"].to_numpy() >= 0)
    if not wanted.any():
        return None
    hint = np.full((len(ops), _NEXT_OPS), None, dtype=object)
    order = thread_order(ops)
    thread, input_id = ops["thread"].to_numpy(), ops["input_id"].to_numpy()
    starts = ops["ts_ns"].to_numpy()
    ends = starts + ops["dur_ns"].to_numpy()
    dims = ops["input_dims"].to_numpy()
    for place in np.unique(np.stack([input_id[wanted], thread[wanted]], axis=1), axis=0).tolist():
        mine = order[(input_id[order] == place[0]) & (thread[order] == place[1])]
        rows = np.flatnonzero(wanted & (input_id == place[0]) & (thread == place[1]))
        at = np.searchsorted(starts[mine], ends[rows])  # the first op starting at or after the end
        for step in range(_NEXT_OPS):
            found = at + step < len(mine)
            hint[rows[found], step] = dims[mine[at[found] + step]]
    return hint


def _outer_counted(ops: pd.DataFrame, counted: np.ndarray) -> np.ndarray:
    """Counted host ops with a counted op nested in them on their thread (which keeps the count)."""
    outer = np.zeros(len(ops), bool)
    order = thread_order(ops, np.flatnonzero(counted & (ops["thread"].to_numpy() >= 0)))
    if len(order) < 2:
        return outer
    start = ops["ts_ns"].to_numpy()[order]
    end = start + ops["dur_ns"].to_numpy()[order]
    thread, input_id = ops["thread"].to_numpy()[order], ops["input_id"].to_numpy()[order]
    same = (thread[1:] == thread[:-1]) & (input_id[1:] == input_id[:-1])
    # Ops on a thread nest or follow each other: the next one in this order is inside this one, or after it.
    inside = same & ((start[1:] < end[:-1]) | (start[1:] == start[:-1])) & (end[1:] <= end[:-1])
    outer[order[:-1][inside]] = True
    return outer
