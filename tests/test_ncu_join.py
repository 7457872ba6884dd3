"""Joining Nsight Compute rows to the trace's kernels and classifying them, on the real H200 pairs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from diagnose.metrics import Metrics
from diagnose.ncu import classify
from diagnose.ncu.csv import NcuTable, read_ncu
from diagnose.ncu.join import base_name, join, name_score

from conftest import ROOT, load_capture

NCU = ROOT / "fixtures" / "ncu"
PAIRS = {"swiglu_eager": 10, "matmul_bf16": 1, "matmul_fp32": 1, "gemv_decode_1tok": 56, "decode_eager": 78}


def joined(name: str, table: NcuTable | None = None):
    """(JoinResult, step kernels) of a fixture capture and its CSV (or `table`)."""
    metrics = Metrics(load_capture(name))
    kernels = metrics.kernels_in_steps
    return join(table or read_ncu(NCU / f"{name}.ncu.csv.gz"), kernels, 132), kernels


@pytest.mark.parametrize("name,rows", PAIRS.items())
def test_real_pairs_match_completely(name, rows):
    result, kernels = joined(name)
    assert result.ncu_rows == rows and result.matched == rows and result.step_kernels == rows
    assert result.unmatched_ncu == [] and result.unmeasured_count == 0 and result.coverage == 1.0
    steps = kernels["step"].nunique()
    assert result.steps == steps and len(result.measured) == rows * steps
    pairs = kernels.loc[result.measured.index, "name"]
    assert all(base_name(a) == base_name(b) for a, b in zip(result.measured["ncu_kernel"], pairs))


def test_decode_pairs_follow_launch_order():
    result, kernels = joined("decode_eager")
    first = kernels[kernels["step"] == 0].sort_values("correlation")
    measured = result.measured.loc[first.index]
    assert measured["ncu_id"].tolist() == list(range(78))


def test_a_subset_of_rows_still_lands_on_the_right_kernels():
    full, kernels = joined("decode_eager")
    table = read_ncu(NCU / "decode_eager.ncu.csv.gz")
    table.kernels = table.kernels[table.kernels["id"] % 3 != 1].reset_index(drop=True)
    part, _ = joined("decode_eager", table)
    assert part.matched == len(table.kernels) == 52 and part.unmatched_ncu == []
    assert part.unmeasured_count == 26 and 0 < part.coverage < 1
    for index, row in part.measured.iterrows():
        assert full.measured.loc[index, "ncu_id"] == row["ncu_id"]


def test_foreign_rows_are_reported_not_forced():
    table = read_ncu(NCU / "swiglu_eager.ncu.csv.gz")
    extra = table.kernels.iloc[[0]].assign(kernel="void my_custom_kernel<float>(float*)", id=99.0)
    table.kernels = pd.concat([table.kernels, extra], ignore_index=True)
    result, _ = joined("swiglu_eager", table)
    assert result.matched == 10 and result.unmatched_ncu == ["void my_custom_kernel<float>(float*)"]
    assert "1 rows unmatched" in result.summary()


def test_rows_of_other_ranges_are_ignored():
    table = read_ncu(NCU / "matmul_bf16.ncu.csv.gz")
    later = table.kernels.assign(range=table.kernels["range"].str.replace("step 0", "step 1"), id=1.0)
    table.kernels = pd.concat([later, table.kernels], ignore_index=True)
    result, _ = joined("matmul_bf16", table)
    assert result.step_range == "diagnose:step 0" and result.ignored_rows == 1 and result.matched == 1


@pytest.mark.parametrize(
    "kineto,ncu",
    [
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::silu_kernel("
            "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::"
            "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, ...)",
            "void vectorized_elementwise_kernel<8, unnamed>::silu_kernel(TensorIteratorBase &)::[lambda() (instance 1)]"
            "::operator ()() const::[lambda() (instance 6)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)], "
            "std::array<char *, 2>>(int, T2, T3)",
        ),
        (
            "void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::Half, long, unsigned int, 2, 2, -2>("
            "at::cuda::detail::TensorInfo<c10::Half, unsigned int>, ...)",
            "void at::<unnamed>::indexSelectSmallIndex<c10::Half, long, unsigned int, 2, 2, (int)-2>(...)",
        ),
        (
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false>(...)",
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, 0>(...)",
        ),
        ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT", "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT"),
    ],
)
def test_name_forms_agree(kineto, ncu):
    assert base_name(kineto) == base_name(ncu)
    assert name_score(ncu, kineto) >= 1.0


def test_different_kernels_never_pair():
    assert name_score("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT", "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_splitK_TNT") == 0
    assert base_name("void at::native::reduce_kernel<512, 1>(...)") == "reduce_kernel"


def classes(name: str) -> pd.DataFrame:
    result, kernels = joined(name)
    first = kernels[kernels["step"] == kernels["step"].min()]
    return first[["name"]].join(result.measured, how="inner")


def test_swiglu_vectorised_elementwise_kernels_are_memory_bound():
    c = classes("swiglu_eager")
    vectorised = c[c["name"].str.contains("vectorized_elementwise_kernel|reduce_kernel") & (c["measured_us"] > 10)]
    assert len(vectorised) == 5
    assert (vectorised["bound"] == "memory-bound").all()
    tiny = c[c["measured_us"] < 10]
    assert (tiny["bound"] == "latency-bound").all() and tiny["bound_why"].str.contains("small grid").all()


def test_matmul_bf16_is_compute_bound_on_tensor_cores():
    row = classes("matmul_bf16").iloc[0]
    assert row["bound"] == "compute-bound"
    assert row["sm_pct"] == pytest.approx(93.3, abs=0.1) and row["tensor_pct"] == pytest.approx(96.9, abs=0.1)
    assert "tensor pipe" in row["bound_why"] and "saturated" in row["bound_why"]


def test_matmul_fp32_is_compute_bound_without_tensor_cores():
    row = classes("matmul_fp32").iloc[0]
    assert row["bound"] == "compute-bound" and row["tensor_pct"] == 0


def test_decode_eager_tiny_kernels_are_latency_bound():
    c = classes("decode_eager")
    assert (c["bound"] == "latency-bound").all()
    assert c["bound_why"].str.contains("small grid").all()
    assert c["bound_why"].str.contains("tiny launch").sum() >= 40


def test_gemv_weight_matmuls_are_memory_bound():
    c = classes("gemv_decode_1tok")
    gemv = c[c["name"].str.startswith("nvjet")]
    assert len(gemv) == 24 and (gemv["bound"] == "memory-bound").all()


@pytest.mark.parametrize(
    "sm,mem,tensor,expected",
    [
        (59.9, 59.9, math.nan, "latency-bound"),
        (70, 50, math.nan, "compute-bound"),
        (50, 70, math.nan, "memory-bound"),
        (75, 74, 60, "compute-bound"),
        (75, 74, 0, "memory-bound"),
        (85, 95, 97, "compute-bound"),
        (70, 95, 97, "memory-bound"),
        (65, 58, math.nan, "compute-bound"),
        (math.nan, 50, math.nan, "unknown"),
    ],
)
def test_thresholds(sm, mem, tensor, expected):
    assert classify.classify_kernel(sm, mem, tensor_pct=tensor)[0] == expected


def test_latency_reasons():
    _, why = classify.classify_kernel(1, 2, blocks=1, sm_count=132, occupancy_pct=5, duration_us=2, launches_in_step=80)
    assert "small grid (1 block for 132 SMs" in why and "low occupancy" in why and "tiny launch" in why
    _, why = classify.classify_kernel(50, 40, blocks=10000, sm_count=132, occupancy_pct=90, duration_us=100)
    assert "stalled" in why
