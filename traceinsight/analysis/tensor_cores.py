"""Which GPU kernels do matrix work, and which of them already run on Tensor Cores, judged by name.

No trace records whether a kernel used Tensor Cores (or AMD matrix cores), so XProf and the PyTorch
profiler plugin both judge it from kernel names. Their substring lists are old (no TF32, Hopper,
Blackwell, CUTLASS, nvjet, AMD) and the "could use Tensor Cores" side is worse: a bare ``gemm``,
``conv``, ``cudnn`` or ``flash`` also takes in FBGEMM embedding lookups, Eigen ``TensorConversionOp``
casts, cuDNN batch norm and vLLM's ``reshape_and_cache_flash_kernel``. Here one ordered table of
rules settles each name: the first rule whose pattern matches wins, so the kernels that only *look*
like matrix work are ruled out before any matmul word is read.

Three answers per name:

* ``eligible``: the kernel's own work is the multiply-accumulate of a GEMM, a convolution or a
  GEMM-based attention, i.e. work Tensor Cores could run. Kernels that only serve such work are not:
  GEMV and K = 1 GEMMs (memory-bound, no reuse for Tensor Cores to exploit), split-K reductions,
  epilogues, im2col, layout transposes, offset precomputation, and the data / filter / output
  transforms of non-fused Winograd (its GEMM is a separate kernel). Every Tensor Core kernel is
  eligible.
* ``tensor_core``: the name shows Tensor Core (NVIDIA) or MFMA matrix-core (AMD) use. Where the name
  cannot show it (a Triton template, whose dtype is not in the name), it is not claimed.
* ``precision``: the narrowest operand type the name gives ("fp32", "tf32", "fp16", "bf16", "fp8",
  "fp4", "int8"), or None when the name does not tell. Only eligible kernels get one: it is the
  precision of matrix work, and e.g. a cast kernel's types say nothing about that.

Triton kernels come first: Inductor names them after the aten ops they fuse, so the bias-add
epilogue of a decomposed addmm is ``triton_poi_fused_addmm_...`` and a template GEMM fused with a
cast is ``triton_tem_fused__to_copy_mm_...``; their kind prefix decides, not the op names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4", "int8")


class _Pattern:
    """What both tables' rows share: a regex declared as a string, matched case-insensitively unless told."""

    pattern: str
    case_sensitive: bool

    def compiled(self) -> re.Pattern[str]:
        """The pattern compiled once, so the table stays plain declared strings."""
        return re.compile(self.pattern, 0 if self.case_sensitive else re.IGNORECASE)


@dataclass(frozen=True)
class NameRule(_Pattern):
    """One row of the table: names matching `pattern` (re.search) get these answers."""

    pattern: str
    eligible: bool
    tensor_core: bool
    why: str
    case_sensitive: bool = False


@dataclass(frozen=True)
class PrecisionRule(_Pattern):
    """One row of the precision table, read only for eligible names: the first match wins."""

    pattern: str
    precision: str
    why: str
    case_sensitive: bool = False


def _never(pattern: str, why: str, case_sensitive: bool = False) -> NameRule:
    """A rule for names that are no matrix work, so the table reads as what each row decides."""
    return NameRule(pattern, eligible=False, tensor_core=False, why=why, case_sensitive=case_sensitive)


def _tensor_core(pattern: str, why: str, case_sensitive: bool = False) -> NameRule:
    """A rule for matrix work whose name shows Tensor Core / matrix-core use."""
    return NameRule(pattern, eligible=True, tensor_core=True, why=why, case_sensitive=case_sensitive)


def _cuda_cores(pattern: str, why: str, case_sensitive: bool = False) -> NameRule:
    """A rule for matrix work whose name does not show Tensor Core use."""
    return NameRule(pattern, eligible=True, tensor_core=False, why=why, case_sensitive=case_sensitive)


# 16-, 8- and 4-bit and TF32 element types as they appear in CUTLASS and attention kernel names.
_NARROW_TYPE = r"(?:half_t|bfloat16_t|tfloat32_t|float_e4m3_t|float_e5m2_t|float_e2m1_t|_f16|bf16|tf32|e4m3|e5m2)"

NAME_RULES: tuple[NameRule, ...] = (
    # --- Triton: the kind prefix decides (see the module docstring) ---
    _cuda_cores(
        r"^triton_tem_",
        "Triton template kernel (mm, addmm, bmm, conv, flex attention); its dtype, hence Tensor Core use, "
        "is not in the name",
    ),
    _never(
        r"^triton_(?:poi|red|per|for)_", "Triton pointwise / reduction / foreach kernel, even when named after an addmm"
    ),
    _cuda_cores(r"^triton_\w*?_(?:mm|bmm|addmm|baddbmm|matmul)(?:_|$)", "other Triton kernels named after a matmul"),
    # --- never eligible: kernels whose names contain a matmul word or are easily mistaken for one ---
    _never(
        r"nccl|rccl|multimem|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|sendrecv",
        "communication (collectives, send/recv)",
    ),
    _never(
        r"cudnn::bn_|\bbn_(?:fw|bw)|batch_?norm|layer_?norm|rms_?norm|group_?norm|instance_?norm|GammaBetaBackward",
        "normalisation (cuDNN batch norm, layer / RMS / group norm)",
    ),
    _never(
        r"TensorConversionOp|_typeConvert|convert(?!er)|cast_kernel|cast_transpose|(?:^|::|\s)cast_|_to_copy"
        r"|bfloat16_copy|half_copy|quantiz|_quant_",
        "casts, conversions, (de)quantisation ('Conv' inside TensorConversionOp is no convolution)",
    ),
    _never(
        r"EigenMetaKernel|TensorCwise|scalar_\w+_op|elementwise_kernel",
        "elementwise (PyTorch TensorIterator, Eigen)",
    ),
    _never(
        r"reduce_kernel|splitKreduce|ReduceSplitK|reduce_1Block|reduce_wgrad|DeviceReduce|DeviceSegmentedReduce",
        "reductions, including the split-K reduction after a GEMM or a conv",
    ),
    _never(r"softmax_warp|cunn_SoftMax|SoftMax(?:Forward|Backward)|softmax_kernel", "softmax"),
    _never(
        r"fbgemm|embedding|EmbeddingBag|index_?select|permute_pooled_embs|bounds_check_indices|linearize_index",
        "embedding lookups and their index kernels ('gemm' inside fbgemm is no GEMM)",
    ),
    _never(
        r"reshape_and_cache|cache_kernel|copy_blocks|swap_blocks|_copy_page|memcpy|memset|copyBuffer|fillBuffer"
        r"|CatArray|copy_kernel|copy_device_to_device|recat_copy|copy-start|copy-done",
        "copies and KV-cache writes ('flash' inside reshape_and_cache_flash_kernel is no attention)",
    ),
    _never(
        r"nchwToNhwc|nhwcToNchw|transpose(?:_fusion|_kernel|Kernel)|(?:^|::|\s|%)(?:transpose|im\d?d?2col)",
        "layout transposes and im2col kernels around a conv or GEMM: copies (not CUTLASS's TMA IM2COL loads "
        "inside a conv kernel's name)",
    ),
    _never(
        r"cask_\w+::compute\w*Offsets|scalePackedTensor|winograd_nonfused::|generateWinogradTiles"
        r"|epilogue::impl::|gemmk1_kernel|\bgemv|\bdot_kernel|flash_bwd_dot_do_o|splitkv_combine",
        "conv / GEMM / attention helpers (offsets, scaling, Winograd transforms, epilogues, FlashAttention "
        "pre- and post-passes) and memory-bound BLAS (GEMV, K = 1 GEMM, dot): no MMA",
        case_sensitive=True,
    ),
    _never(r"moe::dev::(?:routing|finalize)", "MoE routing and un-permute: index work"),
    _never(r"depthwise", "depthwise convolution: a per-channel stencil, no GEMM"),
    # --- eligible, on CUDA cores although a Tensor Core pattern below might match ---
    _cuda_cores(r"cutlass\w*_simt_", "CUTLASS SIMT kernels run on CUDA cores whatever their element type"),
    _cuda_cores(r"fmha_cutlass[FB]_f32|AttentionKernel<float", "memory-efficient attention in fp32: CUDA cores"),
    # --- on Tensor Cores / matrix cores ---
    _tensor_core(
        r"16816|c1688|conv1x1|conv2d_c1_k1|dgrad_1x1_stride_2x2|direct_group|first_layer_wgrad_kernel|h1688|h884"
        r"|hmma|i16832|i8816|s884|s1688|xmma_gemm|xmma_implicit_gemm|xmma_sparse_conv|xmma_sparse_gemm"
        r"|xmma_warp_specialized_implicit_gemm",
        "XProf's Tensor Core list (kernel_stats_utils.cc)",
    ),
    _tensor_core(r"xmma|tf32|tfloat32", "xmma kernels and TF32 (which exists only on Tensor Cores)"),
    _tensor_core(
        r"(?<![a-z0-9])sm(?:90|100|101|103|110|120|121)[af]?_|wgmma|gmma|tcgen05|nvjet",
        "Hopper / Blackwell kernels (warpgroup MMA, tcgen05) and cuBLAS nvjet GEMMs",
    ),
    _tensor_core(r"tensorop|wmma", "CUTLASS tensorop / WMMA kernels"),
    _tensor_core(
        rf"^(?=.*cutlass)(?=.*(?:gemm|conv|fprop|dgrad|wgrad))(?=.*{_NARROW_TYPE})",
        "CUTLASS GEMM / conv on a 16-, 8- or 4-bit or TF32 type",
    ),
    _tensor_core(r"flash_fwd|flash_bwd|fmha", "FlashAttention / fused multi-head attention"),
    _tensor_core(
        rf"^(?=.*(?:AttentionKernel|attention_kernel_batched|AttentionBackwardKernel))(?=.*{_NARROW_TYPE})",
        "memory-efficient (xformers) attention on a 16-bit type",
    ),
    _tensor_core(r"mfma", "AMD MFMA matrix-core kernels"),
    _tensor_core(r"_MI\d+x\d+x\d+", "hipBLASLt / Tensile GEMM using MFMA instructions", case_sensitive=True),
    _tensor_core(
        r"^(?:bmm|gemm)_\w*(?:Mx|E\dm\d)|^(?:bmm|gemm)_\w+_sm1\d\d[af]?$",
        "TensorRT-LLM generated Blackwell GEMMs, e.g. MX-FP4 / MX-FP8 bmm_MxE4m3_...",
    ),
    _tensor_core(
        r"^[^<(]*gemm[^<(]*(?:_f16|_bf16|_fp16|bf16_|f16_)|^[^<(]*(?:_f16|_bf16|_fp16|bf16_|f16_)[^<(]*gemm",
        "cuBLAS / cuBLASLt GEMM whose own name (before template arguments) gives a 16-bit type",
    ),
    # --- eligible, on CUDA cores ---
    _cuda_cores(r"gemm", "GEMM without Tensor Core marks (sgemm, SIMT, cuDNN implicit / explicit GEMM conv)"),
    _cuda_cores(r"^Cijk_", "hipBLASLt / Tensile GEMM without MFMA", case_sensitive=True),
    _cuda_cores(r"[sdh]cudnn", "cuDNN SIMT convolution (scudnn = fp32)"),
    _cuda_cores(
        r"convolve|conv[23]d|3dconv|convolution|conv_?(?:fwd|bwd)|fprop|dgrad|wgrad|winograd",
        "convolution kernels (cuDNN direct / implicit GEMM / fused Winograd)",
    ),
    _cuda_cores(r"bmm|matmul", "batched GEMM / matmul kernels"),
    _cuda_cores(r"AttentionKernel|attention_kernel_batched|AttentionBackwardKernel", "memory-efficient attention"),
)

PRECISION_RULES: tuple[PrecisionRule, ...] = (
    PrecisionRule(r"e2m1|fp4|mxf4|nvf4", "fp4", "FP4 / MX-FP4 operand (E2m1); narrowest wins over an fp8 partner"),
    PrecisionRule(r"e4m3|e5m2|fp8|float8", "fp8", "FP8 operand"),
    PrecisionRule(r"(?<!u)int8|i8816|i16832|imma|i8i8|s8s8", "int8", "8-bit integer MMA"),
    PrecisionRule(r"tf32|tfloat32", "tf32", "TF32"),
    PrecisionRule(r"bf16|bfloat16|nvjet_(?:sm\d+_)?tst", "bf16", "bf16 (nvjet 'tst' = bf16 in / out, fp32 compute)"),
    PrecisionRule(r"Cijk_A[a-z]+_B[a-z]+_BB", "bf16", "Tensile type code BB (bf16)", case_sensitive=True),
    PrecisionRule(
        r"fp16|_f16|f16_|f16f16|half|h884|h1688|h16816|hmma|s884|nvjet_(?:sm\d+_)?hsh",
        "fp16",
        "fp16 (Volta s884 = fp16 inputs with fp32 accumulation)",
    ),
    PrecisionRule(r"Cijk_A[a-z]+_B[a-z]+_H[HSB]", "fp16", "Tensile type code H (fp16)", case_sensitive=True),
    PrecisionRule(r"s1688(?:gemm|fprop|dgrad|wgrad)", "tf32", "s1688 with fp32 data and no 16-bit type: TF32"),
    PrecisionRule(r"Cijk_A[a-z]+_B[a-z]+_SB?_", "fp32", "Tensile type code S (fp32), B = batched", case_sensitive=True),
    PrecisionRule(r"sgemm|scudnn|_simt_s|<float\b", "fp32", "single-precision SIMT kernels, float templates"),
)

_NAME_PATTERNS = tuple(rule.compiled() for rule in NAME_RULES)
_PRECISION_PATTERNS = tuple(rule.compiled() for rule in PRECISION_RULES)


def _first_match(names: pd.Series, patterns: tuple[re.Pattern[str], ...]) -> np.ndarray:
    """Index of the first pattern each name matches (-1: none), testing each pattern only on names still open."""
    first = np.full(len(names), -1, dtype=np.int64)
    for i, pattern in enumerate(patterns):
        open_ = first < 0
        if not open_.any():
            break
        hits = names[open_].str.contains(pattern, regex=True).to_numpy(dtype=bool)
        first[np.flatnonzero(open_)[hits]] = i
    return first


def _classify_distinct(names: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The table's answers for distinct names, positional: (eligible, tensor_core, precision, rule) arrays."""
    rule = _first_match(names, _NAME_PATTERNS)
    eligible = np.array([r.eligible for r in NAME_RULES] + [False])[rule]  # rule -1 (none) -> the appended False
    tensor_core = np.array([r.tensor_core for r in NAME_RULES] + [False])[rule]
    precision = np.full(len(names), None, dtype=object)
    if eligible.any():
        precision_rule = _first_match(names[eligible], _PRECISION_PATTERNS)
        precision[eligible] = np.array([r.precision for r in PRECISION_RULES] + [None], dtype=object)[precision_rule]
    return eligible, tensor_core, precision, rule


def classify_kernel_names(names: pd.Series | pd.Index) -> pd.DataFrame:
    """Classify kernel names by the first matching rule of `NAME_RULES` (and `PRECISION_RULES`).

    Returns one row per input name, on the input's index, with boolean columns ``eligible`` and
    ``tensor_core``, ``precision`` (a string of `PRECISIONS` or None) and ``rule`` (the position of
    the deciding rule in `NAME_RULES`, -1 when none matched: then not eligible). The regexes run once
    per distinct name: a categorical Series is classified through its categories and its codes (a
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
    eligible, tensor_core, precision, rule = _classify_distinct(uniques.reset_index(drop=True))
    # A missing name (code -1) takes the appended "no rule" row.
    take = np.where(codes < 0, len(uniques), codes)
    return pd.DataFrame(
        {
            "eligible": np.append(eligible, False)[take],
            "tensor_core": np.append(tensor_core, False)[take],
            # object, not pandas' str dtype, so that "not told" stays None rather than NaN
            "precision": pd.Series(np.append(precision, [None])[take], index=index, dtype=object),
            "rule": np.append(rule, -1).astype(np.int64)[take],
        },
        index=index,
    )
