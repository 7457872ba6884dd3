"""One answer to "is this communication": real kernel and op names from the fixtures and peer traces."""

from __future__ import annotations


import pandas as pd
import pytest

from diagnose.vocabulary.collectives import collective_kind, is_collective_kernel, is_collective_op
from diagnose.metrics.comm import is_comm
from diagnose.vocabulary.kernels import kernel_family, kernel_kind


KERNELS = [
    # name (as in a real trace), collective kind or None
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllReduce"),  # ddp_* (H200)
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),  # fsdp_* (H200)
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "ReduceScatter"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "AllReduce"),  # HTA (A100)
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "Broadcast"),  # HTA
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv"),
    ("mscclKernel_Sum_float_LL128(ncclDevComm*, mscclAlgo*, mscclWork*)", None),  # MSCCL: comm, kind unsaid
    ("rcclGenericKernel<1, false>(ncclDevComm*)", None),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**, unsigned long)", "AllReduce"),
]
NOT_COMM = [
    "triton_poi_fused_all_reduce_0",  # Inductor copy around a functional collective
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(...)",
    "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
    "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI16x16x16x1_SN_1LDSB0",
    "nvjet_hsh_256x128_64x4_1x2_h_bz_coopB_NNT",
]


@pytest.mark.parametrize("name, kind", KERNELS)
def test_collective_kernels_are_communication_everywhere(name, kind):
    assert is_collective_kernel(name)
    assert collective_kind(name) == kind
    assert kernel_kind(name) == "comm"
    assert bool(is_comm(pd.Series([name]))[0])
    assert kernel_family(name).startswith("nccl ")


@pytest.mark.parametrize("name", NOT_COMM)
def test_other_kernels_are_communication_nowhere(name):
    assert not is_collective_kernel(name)
    assert kernel_kind(name) != "comm"
    assert not is_comm(pd.Series([name]))[0]
    assert not kernel_family(name).startswith("nccl ")


def test_amd_gemms_are_one_family_with_the_others():
    assert kernel_family("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI16x16x16x1_SN_1LDSB0") == "gemm"
    assert kernel_family("nvjet_hsh_256x128_64x4_1x2_h_bz_coopB_NNT") == "gemm"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("nccl:all_reduce", True),
        ("c10d::allreduce_", True),
        ("nccl:_all_gather_base", True),
        ("nccl:_reduce_scatter_base", True),
        ("record_param_comms", True),
        ("nccl:broadcast", True),
        ("fsdp::all_gather_copy_in", False),
        ("aten::mm", False),
        ("triton_poi_fused_all_reduce_0", False),
    ],
)
def test_collective_ops(name, expected):
    assert is_collective_op(name) is expected
