"""Kernel classes: real kernel names of CUDA, ROCm and XLA stacks get the class their names say (expected classes
written by reading the names), the event-table function classes rows by kind and name, and on the Qwen H100 trace
the class shares of kernel time agree with TraceLens's per-category kernel time."""

import csv

import numpy as np
import pandas as pd
import pytest

from tests.analysis.builders import kernel, table
from tests.conftest import REPO, shared_trace
from traceinsight.analysis.kernel_classes import class_of_name, kernel_classes
from traceinsight.discover import choose_run
from traceinsight.events import kind_mask
from traceinsight.load import load_run
from traceinsight.rules import KERNEL_CLASSES, folded

# Class, then the kernel name as the trace gives it (cut after 104 characters where longer), by trace.
CASES = """
# kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz: V100, cuDNN and cuBLAS (ResNet-50 training)
conv          void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, flo
conv          void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int, int, flo
matmul        volta_sgemm_64x64_nt
conv          volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1
elementwise   void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float, cudnnT
elementwise   void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*
elementwise   void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float const*, in
conv          void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDa
matmul        void splitKreduce_kernel<float, float, float, float>(cublasSplitKParams<float>, float const*, float cons
other         void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int, fl
elementwise   void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, int, int,
# tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz: H100, Qwen1.5 inference
matmul        sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_ker
attention     void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, fals
other         void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueTyp
elementwise   void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, flo
elementwise   void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel(at::Ten
# tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz: H100, OWLv2 inference
elementwise   void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, at::
matmul        void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_tn_align1>(cutlass_75_tensorop_bf1
conv          void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8>
elementwise   void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c
matmul        void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, fals
elementwise   void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&
# inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz: MI300X, SGLang decode
matmul        Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_
attention     void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataTyp
attention     void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, false>(__hip_
elementwise   _ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib
elementwise   _ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_P
other         void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCachePara
elementwise   void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFlo
other         create_flashinfer_kv_indices_triton
# inference/vllm_decode_full/graph_execution.json.gz: MI300X, vLLM GPT-OSS decode
matmul        _matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu
attention     kernel_unified_attention_3d
attention     reduce_segments
elementwise   _ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProbl
elementwise   triton_poi_fused__to_copy_1
other         void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0>(_
other         _finalize_matmul_scatter_bf16
other         _topk_forward
# hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz: MI250, ROCm 6.2 toy training
matmul        Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_E
elementwise   void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at:
elementwise   void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::Ten
# tracelens/b200/eager_trace.json.gz: B200, vLLM MoE eager
matmul        bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_sched
communication void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long,
attention     fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext
matmul        nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT
communication ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)
elementwise   void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, __nv_b
other         void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cut
# tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb: MI300X, JAX 3-D convolution (XSpace)
elementwise   input_transpose_fusion.kd
matmul        Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_A
conv          Im3d2Col.kd
copy          __amd_rocclr_copyBuffer.kd
# hta/trace_diff/control/control.json.gz: A100, recommendation model training (FBGEMM, NCCL)
communication ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)
other         void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>(at::GenericPacked
other         void fbgemm_gpu::permute_indices_weights_kernel<false, int, decltype(nullptr)>(int, int, int, int const*
other         void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long
"""
# XLA ops on a TPU (tpu_inference_2.xplane.pb): the whole HLO text is the name, so these are given whole.
TPU_CASES = [
    (
        "copy",
        "%copy-done.2 = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} copy-done((f32[5,1024,1024,256]{3,2,1,0:T(8,128)}, "
        "f32[5,1024,1024,256]{3,2,1,0:T(8,128)S(5)}, u32[]{:S(2)}) %copy-start.2)",
    ),
    (
        "elementwise",
        "%broadcast_add_fusion.1 = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} "
        "fusion(f32[5,1024,1024,256]{3,2,1,0:T(8,128)} %copy-done.2), kind=kLoop, calls=%fused_computation.1",
    ),
    (
        "communication",
        "%all-reduce = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} all-reduce(f32[5,1024,1024,256]{3,2,1,0:T(8,128)} "
        "%bitcast), channel_id=1, replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, "
        "to_apply=%region_0.3.clone",
    ),
]


def _cases() -> list[tuple[str, str]]:
    rows = [line.split(maxsplit=1) for line in CASES.strip().splitlines() if not line.startswith("#")]
    return [(expected, name) for expected, name in rows] + TPU_CASES


@pytest.mark.parametrize(("expected", "name"), _cases())
def test_real_kernel_names(expected: str, name: str) -> None:
    assert expected in KERNEL_CLASSES
    assert class_of_name(name) == expected


def test_matrix_work_of_the_tensor_core_table_is_matmul_conv_or_attention() -> None:
    """Every name `kernel_names.csv` calls matrix work (eligible for Tensor Cores) is a matmul, a conv or attention
    here too; the converse does not hold on purpose (GEMV, split-K reductions and conv helpers are no MMA, but
    their time is a matmul's or a conv's)."""
    with open(REPO / "tests" / "analysis" / "kernel_names.csv", newline="") as f:
        eligible = [row["name"] for row in csv.DictReader(f) if row["eligible"] == "1"]
    assert len(eligible) > 100
    assert {n: class_of_name(n) for n in eligible if class_of_name(n) not in ("matmul", "conv", "attention")} == {}


def test_rows_by_kind_and_name() -> None:
    events = table(
        [
            kernel(0, 5, name="volta_sgemm_64x64_nt"),
            kernel(5, 1, name="ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            {**kernel(6, 1, name="Memcpy HtoD (Pageable -> Device)"), "kind": "memcpy"},
            {**kernel(7, 1, name="Memset (Device)"), "kind": "memset"},
            {"kind": "cpu_op", "ts": 0, "dur": 9, "name": "aten::mm"},  # host: no class
            kernel(8, 1, name="some_kernel_nobody_knows"),
            kernel(9, 1, name="volta_sgemm_64x64_nt", device="GPU:1"),
        ]
    )
    classes = kernel_classes(events)
    assert isinstance(classes, pd.Categorical) and tuple(classes.categories) == KERNEL_CLASSES
    got = [None if pd.isna(c) else c for c in classes]
    assert got == ["matmul", "communication", "copy", "copy", None, "other", "matmul"]


def test_no_device_work() -> None:
    events = table([{"kind": "cpu_op", "ts": 0, "dur": 9, "name": "aten::mm"}])
    assert kernel_classes(events).isna().all()


def _tracelens_category_shares(path: str) -> dict[str, float]:
    with open(path, newline="") as f:
        return {row["op category"]: float(row["Percentage (%)"]) for row in csv.DictReader(f)}


def test_qwen_h100_shares_match_tracelens() -> None:
    """TraceLens puts 28.2 % of Qwen's kernel time in GEMMs, 54.4 % elementwise, 2.3 % reduce and 15.0 % other
    (flash attention, cat, index_select); our matmul, elementwise (which holds reductions) and attention + other
    shares agree within a point and a half."""
    trace = shared_trace("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    theirs = _tracelens_category_shares(
        str(trace.parent / "Qwen_Qwen1.5-0.5B-Chat__1016005_perf_report_csvs" / "ops_summary_by_category.csv")
    )
    events = load_run(choose_run(trace).run, trace, 1).events
    kernels = kind_mask(events, "kernel") & events["device"].notna().to_numpy()
    classes = np.asarray(kernel_classes(events)[kernels])
    dur = events["dur_ns"].to_numpy()[kernels]
    share = {c: 100 * dur[classes == c].sum() / dur.sum() for c in KERNEL_CLASSES}
    assert share["matmul"] == pytest.approx(theirs["GEMM"], abs=1.0)
    assert share["elementwise"] == pytest.approx(theirs["elementwise"] + theirs["reduce"], abs=1.5)
    assert share["attention"] + share["other"] == pytest.approx(theirs["other"], abs=1.5)
    assert share["attention"] > 5 and share["conv"] == share["communication"] == 0


def test_classes_ignore_the_names_case():
    """The rules are searched in the lower-cased name (`rules.folded`): upper-casing a name changes nothing."""
    names = [line[14:] for line in CASES.splitlines() if line and not line.startswith("#")]
    assert [class_of_name(n.upper()) for n in names] == [class_of_name(n) for n in names]
    assert class_of_name("VOLTA_SGEMM_64X64_NT") == "matmul"


def test_an_upper_case_escape_is_not_folded():
    """Lower-cased, ``\\W`` would become ``\\w``: such a pattern is refused, not silently changed."""
    with pytest.raises(ValueError, match="upper-case escape"):
        folded(r"gemm\W")
    assert folded(r"\\W").search("a\\w")  # an escaped backslash, then a letter: folds as any letter
