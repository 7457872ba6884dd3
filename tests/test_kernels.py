"""Kernel classification by name (diagnose/vocabulary/kernels.py) on names seen in real traces."""

from __future__ import annotations

import pandas as pd
import pytest

from diagnose.metrics.work import classify
from diagnose.vocabulary.kernels import is_fused, kernel_kind, tensor_core, tile_rows

CASES = [
    # name, kind, tensor cores
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "gemm", True),  # cuBLASLt bf16, H200
    ("nvjet_sm90_qqtst_144x128_128x6_1x2_h_bz_coopA_algo2_TNN", "gemm", True),  # FP8 _scaled_mm
    ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT", "gemm", True),  # bf16 GEMV
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_"
        "execute_kernel__5x_cublas",
        "gemm",
        False,
    ),  # fp32 without TF32
    (
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_"
        "kernel__5x_cublas",
        "gemm",
        True,
    ),  # TF32 on Hopper
    (
        "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1>("
        "cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1::Params)",
        "gemm",
        True,
    ),  # K = 8191 fallback
    (
        "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_"
        "align1::Params)",
        "gemm",
        False,
    ),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_tensorop_s1688gemm_"
        "64x64_16x6_nn_align4::Params)",
        "gemm",
        True,
    ),
    ("volta_sgemm_64x64_nt", "gemm", False),
    ("ampere_sgemm_32x32_sliced1x4_tn", "gemm", False),
    ("volta_h884gemm_64x64_ldg8_nn", "gemm", True),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn", "gemm", True),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_wgmma", "gemm", True),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false>", "gemm", False),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>", "gemm", None),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1", "gemm", True),  # AMD MFMA
    ("Cijk_Ailk_Bjlk_SB_MT64x64x8_SN_1LDSB0_APM1", "gemm", False),
    ("triton_tem_fused_mm_0", "gemm", None),
    (
        "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize256x64x8_stage3_warpsize2x2x1_g1_"
        "ffma_aligna4_alignc4_execute_kernel__5x_cudnn",
        "conv",
        False,
    ),
    (
        "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32_warpgroupsize1x1x1",
        "conv",
        True,
    ),
    (
        "sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
        "tensor16x8x8_execute_kernel_cudnn",
        "conv",
        True,
    ),
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "conv", False),
    ("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int)", "conv", False),
    (
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_16x4_nhwc_align4>",
        "conv",
        True,
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_cga1x1x1_kernel0_0",
        "attention",
        True,
    ),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention", True),
    (
        "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::silu_kernel(at::"
        "TensorIteratorBase&)::{lambda()#1}>",
        "elementwise",
        None,
    ),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_"
        "kernel_cuda(at::TensorIteratorBase&)>",
        "elementwise",
        None,
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>",
        "reduction",
        None,
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, false>",
        "reduction",
        None,
    ),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>", "reduction", None),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>", "memory", None),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::index_copy_kernel_impl>", "memory", None),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>", "memory", None),
    ("triton_poi_fused_add_cos_sin_0", "elementwise", None),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_silu_0", "reduction", None),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "comm", None),
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*)", "memory", None),
    ("at::cuda::(anonymous namespace)::spin_kernel(long)", "other", None),
]


@pytest.mark.parametrize("name,kind,tc", CASES, ids=[c[0][:48] for c in CASES])
def test_kernel_classification(name, kind, tc):
    assert kernel_kind(name) == kind
    assert tensor_core(name) is tc


def test_fused_kernels():
    assert is_fused("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_silu_0")
    assert is_fused("triton_poi_fused_add_cos_sin_0")
    assert not is_fused("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<float>>")
    assert not is_fused("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT")


def test_classify_column_keeps_index_and_order():
    names = pd.Series(
        ["volta_sgemm_64x64_nt", "triton_poi_fused_add_0", "volta_sgemm_64x64_nt", None], index=[10, 11, 12, 13]
    )
    out = classify(names)
    assert list(out.index) == [10, 11, 12, 13]
    assert list(out["kind"]) == ["gemm", "elementwise", "gemm", "other"]
    assert out["tensor_core"].iloc[0] == False  # noqa: E712
    assert out["tensor_core"].isna().iloc[1]
    assert list(out["fused"]) == [False, True, False, False]


def test_every_kernel_of_the_captures_is_classified():
    from conftest import CAPTURES, load_capture

    unknown = set()
    tops = [p for p in CAPTURES.iterdir() if p.is_dir()]
    folders = [q for p in tops for q in (sorted(p.iterdir()) if (p / "sweep.json").exists() else [p]) if q.is_dir()]
    for folder in sorted(str(p.relative_to(CAPTURES)) for p in folders):
        for name in load_capture(folder).kernels["name"].unique():
            if kernel_kind(name) == "other":
                unknown.add(name)
    assert not unknown, unknown


@pytest.mark.parametrize(
    "name,rows",
    [
        ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", 8),  # REAL: gemv_decode_1tok_graphed (H200)
        ("nvjet_sm90_hsh_16x64_64x16_4x1_v_bz_bias_TNN", 16),  # REAL: decode_graphed
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", 128),  # REAL: gemv_prefill_512
        ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_stage3_warpsize2x2x1_tensor16x8x16", None),
        ("gemv2T_kernel_val", None),
        (None, None),
    ],
)
def test_tile_rows_reads_the_thin_side_of_an_nvjet_tile(name, rows):
    assert tile_rows(name) == rows
