"""The kernel-name table against real names marked by hand (kernel_names.csv), focused cases, and the
one real NVIDIA XSpace trace."""

import csv
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import shared_trace
from traceinsight.analysis.tensor_cores import PRECISIONS, classify_kernel_names
from traceinsight.rules import NAME_RULES, PRECISION_RULES

HAND_MARKED = Path(__file__).with_name("kernel_names.csv")
XPROF_GPU = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
CONVERSION = re.compile(r"TensorConversionOp|_typeConvert|convert|cast|_to_copy|bfloat16_copy", re.IGNORECASE)


def _hand_marked() -> pd.DataFrame:
    with HAND_MARKED.open(newline="") as f:
        return pd.DataFrame(list(csv.DictReader(f)))


def _one(name: str) -> pd.Series:
    return classify_kernel_names(pd.Series([name])).iloc[0]


def test_every_hand_marked_name_is_classified_as_marked():
    marked = _hand_marked()
    assert len(marked) >= 150 and marked["name"].nunique() >= 150
    got = classify_kernel_names(marked["name"])
    wrong = []
    for i in marked.index:
        want = (marked.at[i, "eligible"] == "1", marked.at[i, "tensor_core"] == "1", marked.at[i, "precision"] or None)
        have = (bool(got.at[i, "eligible"]), bool(got.at[i, "tensor_core"]), got.at[i, "precision"])
        if want != have:
            rule = int(got.at[i, "rule"])
            why = NAME_RULES[rule].why if rule >= 0 else "no rule"
            wrong.append(
                f"{marked.at[i, 'trace']}: {marked.at[i, 'name'][:160]!r}\n    marked {want}, got {have} ({why})"
            )
    assert not wrong, f"{len(wrong)} of {len(marked)} hand-marked rows disagree:\n" + "\n".join(wrong)


def test_hand_marked_table_is_well_formed():
    marked = _hand_marked()
    assert list(marked.columns) == ["trace", "name", "eligible", "tensor_core", "precision", "why"]
    assert set(marked["eligible"]) <= {"0", "1"} and set(marked["tensor_core"]) <= {"0", "1"}
    assert set(marked["precision"]) <= {"", *PRECISIONS}
    assert not ((marked["tensor_core"] == "1") & (marked["eligible"] == "0")).any()
    assert not ((marked["precision"] != "") & (marked["eligible"] == "0")).any()
    assert not marked.duplicated(["trace", "name"]).any()


@pytest.mark.parametrize(
    "name",
    [
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*,"
        " cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float,"
        " float)",
        "void cudnn::bn_bw_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_bw_1C11_args<float>)",
        "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::TensorAssignOp<Eigen::TensorMap<Eigen::"
        "Tensor<Eigen::half, 1, 1, long>, 16, Eigen::MakePointer>, Eigen::TensorConversionOp<Eigen::half, Eigen::"
        "TensorMap<Eigen::Tensor<float const, 1, 1, long>, 16, Eigen::MakePointer> const> const> const, Eigen::"
        "GpuDevice>, long>",
        "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)",
        "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>(...)",
        "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type vllm::fused_add_rms_"
        "norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>"
        "(__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*, unsigned char*, long const*, long, long)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array"
        "<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
        "void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>, ...)",
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, ...>",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "triton_poi_fused_addmm_relu_1",
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::"
        "WinogradDataParams<float, float>)",
    ],
)
def test_look_alikes_are_not_eligible(name):
    row = _one(name)
    assert not row["eligible"] and not row["tensor_core"] and row["precision"] is None


@pytest.mark.parametrize(
    "name, tensor_core, precision",
    [
        (
            "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
            "schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f",
            True,
            "fp4",
        ),
        ("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_schedS_sm100a", True, "fp8"),
        ("triton_tem_fused_mm_0", False, None),
        ("triton_tem_fused_addmm_relu_1", False, None),
        ("triton_tem_fused__to_copy_addmm_2", False, None),
        ("triton_tem_fused_bmm_3", False, None),
        ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", True, "bf16"),
        ("volta_sgemm_128x64_nn", False, "fp32"),
        ("volta_h884gemm_64x64_ldg8_nn", True, "fp16"),
        ("volta_s884gemm_fp16_128x128_ldg8_f2f_nn", True, "fp16"),
        ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", True, "fp16"),
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", True, "bf16"),
        (
            "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel",
            True,
            "tf32",
        ),
        ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", False, "fp32"),
        (
            "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
            "(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
            False,
            "fp32",
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>"
            "(cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4::Params)",
            True,
            "tf32",
        ),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
            "__5x_cublas",
            True,
            "bf16",
        ),
        (
            "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
            "false, cutlass::half_t> >(pytorch_flash::Flash_fwd_params)",
            True,
            "fp16",
        ),
        ("Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0_APM1", True, "bf16"),
        ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_GRVW8", True, "fp16"),
        (
            "void cutlass::device_kernel<cutlass::conv::kernel::ConvUniversal<cutlass::conv::collective::CollectiveConv"
            "<cutlass::conv::MainloopSm90TmaGmmaWarpSpecializedImplicitGemm<3>, cute::SM90_TMA_LOAD_IM2COL, "
            "cutlass::half_t, cutlass::half_t, float> > >",
            True,
            "fp16",
        ),
    ],
)
def test_matrix_work_is_eligible(name, tensor_core, precision):
    row = _one(name)
    assert row["eligible"]
    assert row["tensor_core"] == tensor_core
    assert row["precision"] == precision


def test_tf32_kernels_are_tensor_core_tf32():
    names = [
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_stage5_warpsize2x2x1_g1_"
        "tensor16x8x8_execute_kernel_cudnn_infer",
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4>"
        "(cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4::Params)",
        "ampere_tf32_s1688gemm_tf32_128x128_ldg4_stages_32x3_nn",
    ]
    got = classify_kernel_names(pd.Series(names))
    assert got["tensor_core"].all() and got["eligible"].all()
    assert (got["precision"] == "tf32").all()


def test_cutlass_simt_sgemm_is_eligible_but_not_on_tensor_cores():
    row = _one(
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_"
        "nn_align1::Params)"
    )
    assert row["eligible"] and not row["tensor_core"]


def test_categories_and_codes():
    names = pd.Series(
        ["volta_sgemm_128x64_nn", None, "triton_tem_fused_mm_0", "volta_sgemm_128x64_nn", "elementwise_kernel"],
        dtype="category",
        index=[10, 11, 12, 13, 14],
    )
    got = classify_kernel_names(names)
    assert list(got.index) == [10, 11, 12, 13, 14]
    assert got["eligible"].tolist() == [True, False, True, True, False]
    assert got["precision"].tolist() == ["fp32", None, None, "fp32", None]
    assert got.at[11, "rule"] == -1
    per_category = classify_kernel_names(names.cat.categories)
    assert len(per_category) == len(names.cat.categories)
    assert per_category["eligible"].to_numpy()[names.cat.codes.to_numpy()[[0, 2]]].all()


def test_empty_and_all_missing():
    assert classify_kernel_names(pd.Series([], dtype="category")).empty
    got = classify_kernel_names(pd.Series([None, None], dtype=object))
    assert not got["eligible"].any() and got["precision"].isna().all()


def test_rule_tables_are_declared_properly():
    assert all(rule.why for rule in NAME_RULES) and all(rule.why for rule in PRECISION_RULES)
    assert all(not r.tensor_core or r.eligible for r in NAME_RULES)
    assert {r.precision for r in PRECISION_RULES} <= set(PRECISIONS)
    # After the Triton prefixes, every exclusion comes before any rule that reads a matmul word.
    eligible = [r.eligible for r in NAME_RULES if not r.pattern.startswith("^triton_")]
    assert eligible == sorted(eligible)


def test_xprof_gpu_trace_counts_no_conversion_as_matrix_work():
    from traceinsight.readers import read_trace

    events = read_trace(shared_trace(XPROF_GPU)).events
    kernels = events[(events["kind"] == "kernel").to_numpy()]
    assert len(kernels)
    names = kernels["name"].cat.remove_unused_categories()
    got = classify_kernel_names(names)
    eligible_names = set(names[got["eligible"].to_numpy()].astype(str))
    assert not [n for n in eligible_names if CONVERSION.search(n)], "a cast counted as Tensor Core work"
    assert any("TensorConversionOp" in n for n in names.cat.categories)  # the trace does have casts
    dur = kernels["dur_ns"].to_numpy(dtype=np.int64)
    eligible_ns = dur[got["eligible"].to_numpy()].sum()
    off_tensor_cores_ns = dur[(got["eligible"] & ~got["tensor_core"]).to_numpy()].sum()
    assert eligible_ns == 0 or off_tensor_cores_ns < 0.1 * eligible_ns


def test_the_names_remembered_stay_bounded_and_answers_do_not_change(monkeypatch):
    """A long-lived process (the TensorBoard tab's) classifies every run's kernel names: the process-wide memo is
    emptied when full, and a name classified after that gets the answer it got before."""
    from traceinsight.analysis import tensor_cores

    names = ["volta_sgemm_128x64_nn", "ampere_fp16_s16816gemm_fp16_128x128", "elementwise_kernel", "nccl_AllReduce"]
    first = classify_kernel_names(pd.Series(names[:2])).reset_index(drop=True)
    monkeypatch.setattr(tensor_cores, "_CLASSIFIED_MAX", 3)
    monkeypatch.setattr(tensor_cores, "_CLASSIFIED", dict(tensor_cores._CLASSIFIED))
    later = classify_kernel_names(pd.Series(names[2:] + names[:2])).reset_index(drop=True)
    assert len(tensor_cores._CLASSIFIED) <= 4  # emptied, then the four names of the call
    pd.testing.assert_frame_equal(later.iloc[2:].reset_index(drop=True), first)
    classify_kernel_names(pd.Series(["another_kernel"]))
    assert len(tensor_cores._CLASSIFIED) == 1
