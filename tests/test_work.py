"""FLOPs and bytes from shapes (diagnose/metrics/work.py), and op instances on real captures."""

from __future__ import annotations

import math

import pytest

from diagnose.metrics import Metrics
from diagnose.metrics.work import Tensor, op_work, tensors
from diagnose.vocabulary.dtypes import precision

from conftest import load_capture

BF16, F32, F8 = "c10::BFloat16", "float", "c10::Float8_e4m3fn"


def test_tensors_keep_positions_and_skip_scalars():
    args = tensors([[4, 8], [], [8]], [BF16, "Scalar", F32])
    assert args == [Tensor((4, 8), BF16), None, Tensor((8,), F32)]
    assert tensors(None, None) == []
    assert tensors([[[2, 2], [2]], []], ["TensorList", "Scalar"]) == [None, None]


def test_mm():
    w = op_work("aten::mm", [[8192, 8192], [8192, 8192]], [BF16, BF16])
    assert w.kind == "gemm" and (w.m, w.n, w.k, w.batch) == (8192, 8192, 8192, 1)
    assert w.flops == 2 * 8192**3
    assert w.bytes == 3 * 8192 * 8192 * 2


def test_addmm_counts_the_bias():
    w = op_work("aten::addmm", [[1536], [1, 512], [512, 1536], [], []], ["c10::Half"] * 3 + ["Scalar"] * 2)
    assert (w.m, w.n, w.k) == (1, 1536, 512)
    assert w.flops == 2 * 512 * 1536 + 1536
    assert w.bytes == (1536 + 512 + 512 * 1536 + 1536) * 2


def test_linear_weight_is_out_by_in():
    w = op_work("aten::linear", [[4, 7, 4096], [14336, 4096]], [BF16, BF16])
    assert (w.m, w.n, w.k) == (28, 14336, 4096)
    assert w.flops == 2 * 28 * 14336 * 4096


def test_bmm_and_matmul_broadcast():
    w = op_work("aten::bmm", [[16, 128, 64], [16, 64, 256]], [BF16, BF16])
    assert (w.batch, w.m, w.n, w.k) == (16, 128, 256, 64)
    w = op_work("aten::matmul", [[2, 8, 128, 64], [64, 32]], [F32, F32])
    assert (w.batch, w.m, w.n, w.k) == (1, 2 * 8 * 128, 32, 64)
    assert op_work("aten::mm", [[4, 5], [6, 7]], [F32, F32]).note.startswith("unrecognised")


def test_scaled_mm_fp8_writes_bf16():
    w = op_work(
        "aten::_scaled_mm",
        [[8192, 8192], [8192, 8192], [], [], [], [], [], []],
        [F8, F8, F32, F32, "", "", "Scalar", "Scalar"],
    )
    assert w.dtype == F8 and precision(w.dtype) == "fp8"
    assert w.flops == 2 * 8192**3
    assert w.bytes == 2 * 8192 * 8192 + 8192 * 8192 * 2


def test_conv_forward_and_backward():
    fwd = op_work(
        "aten::cudnn_convolution",
        [[128, 64, 96, 96], [64, 64, 3, 3], [], [], [], [], [], [], []],
        [F32, F32] + ["ScalarList"] * 7,
    )
    assert fwd.kind == "conv" and fwd.channels == (64, 64)
    assert fwd.flops == 2 * 128 * 64 * 96 * 96 * 64 * 9
    assert "upper bound" in fwd.note
    bwd = op_work(
        "aten::convolution_backward",
        [[128, 64, 48, 48], [128, 64, 96, 96], [64, 64, 3, 3]] + [[]] * 8,
        [F32] * 3 + ["ScalarList"] * 8,
    )
    assert bwd.flops == 2 * (2 * 128 * 64 * 48 * 48 * 64 * 9)  # output pixels from the gradient
    grouped = op_work("aten::convolution", [[8, 32, 10, 10], [32, 1, 3, 3]], [F32, F32])
    assert grouped.flops == 2 * 8 * 32 * 100 * 1 * 9  # depthwise: C/g = 1


def test_attention():
    w = op_work("aten::_cudnn_attention_forward", [[1, 8, 1, 64], [1, 8, 256, 64], [1, 8, 256, 64]], ["c10::Half"] * 3)
    assert w.kind == "attention"
    assert w.flops == 2 * 8 * 1 * 256 * (64 + 64)


def test_pointwise_broadcast_and_promotion():
    w = op_work("aten::mul", [[4096, 14336], [4096, 1]], [F32, F32], "elementwise")
    assert w.outputs == [Tensor((4096, 14336), F32)]
    assert w.bytes == (4096 * 14336 + 4096 + 4096 * 14336) * 4
    mixed = op_work("aten::mul", [[10, 10], [10]], [BF16, F32], "elementwise")
    assert mixed.outputs[0].dtype == F32
    cmp = op_work("aten::eq", [[10, 10], [10, 10]], [F32, F32], "elementwise")
    assert cmp.outputs[0].dtype == "bool"


def test_copy_inplace_and_reductions():
    copy = op_work("aten::copy_", [[4096, 14336], [4096, 14336], []], [F32, BF16, "Scalar"], "elementwise")
    assert copy.bytes == 4096 * 14336 * (4 + 2)
    assert copy.inputs == [Tensor((4096, 14336), BF16)] and copy.outputs == [Tensor((4096, 14336), F32)]
    add_ = op_work("aten::add_", [[128, 64], [1, 64], []], [F32, F32, "Scalar"], "elementwise")
    assert add_.bytes == (128 * 64 + 64 + 128 * 64) * 4
    mean = op_work("aten::mean", [[4096, 14336], [], [], []], [F32, "ScalarList", "Scalar", ""])
    assert mean.kind == "reduction" and mean.reduces and mean.bytes == 4096 * 14336 * 4
    norm = op_work(
        "aten::native_layer_norm",
        [[1, 1, 512], [], [512], [512], []],
        ["c10::Half", "ScalarList", "c10::Half", "c10::Half", "Scalar"],
    )
    assert norm.outputs == [Tensor((1, 1, 512), "c10::Half")]
    idx = op_work(
        "aten::index_copy_",
        [[1, 8, 256, 64], [], [1], [1, 8, 1, 64]],
        ["c10::Half", "Scalar", "long int", "c10::Half"],
        "memory",
    )
    assert idx.bytes == 2 * (8 + 8 * 64 * 2)  # the index and source read, as much written: not the whole cache


def test_triton_kernel_args():
    w = op_work(
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_silu_0",
        [[4096, 14336], [4096, 14336], [14336], [4096, 14336], [], []],
        [BF16] * 4 + ["Scalar"] * 2,
    )
    assert w.kind == "reduction"
    assert w.bytes == (3 * 4096 * 14336 + 14336) * 2
    mm = op_work("triton_tem_fused_mm_0", [[64, 128], [128, 32], [64, 32]], [BF16] * 3)
    assert mm.kind == "gemm" and mm.flops == 2 * 64 * 128 * 32


def test_unknown_ops():
    assert op_work(None, None, None) is None
    assert math.isnan(op_work("aten::mm", None, None).flops)
    assert op_work("aten::foo", [[]], ["Scalar"], "other").kind == "other"


@pytest.mark.parametrize(
    "capture,instances_per_step,us_per_step",
    [
        ("swiglu_eager", 10, 906.0),
        ("matmul_fp32", 1, 21491.4),  # 5 kernels overlap the 4 windows; 4 were launched inside them
        ("gemv_decode_1tok", 48, 776.8),
    ],
)
def test_op_instances_on_captures(capture, instances_per_step, us_per_step):
    m = Metrics(load_capture(capture))
    ops = m.op_work
    n = len(m.steps.windows)
    assert len(ops) == instances_per_step * n
    assert m.per_step(ops["kernel_us"].sum()) == pytest.approx(us_per_step, abs=0.1)
    assert ops["sm_pct"].isna().all() and ops["dram_pct"].isna().all()  # measured columns, empty until ncu


def test_op_instances_group_split_k_kernels():
    ops = Metrics(load_capture("gemv_decode_1tok")).op_work
    down = ops[ops["shapes"] == "[1×14336, 14336×4096] bf16"]
    assert (down["n_kernels"] == 2).all()  # the GEMV and its split-K reduction: one op, one work estimate
    assert (down["kernel"].str.startswith("nvjet")).all()
    assert down["bytes"].iloc[0] == pytest.approx((14336 + 14336 * 4096 + 4096) * 2)


def test_op_instances_without_ops_have_unknown_work():
    ops = Metrics(load_capture("decode_graphed")).op_work
    assert len(ops) and ops["op_name"].isna().all() and ops["flops"].isna().all()
    assert set(ops["source"]) == {"unknown"}


def test_gathers_count_the_rows_not_the_table():
    w = op_work("aten::index_select", [[4096, 512], [], [1]], ["c10::Half", "Scalar", "long int"], "memory")
    assert w.bytes == 8 + 2 * 512 * 2
    w = op_work("aten::embedding", [[32000, 4096], [2, 7]], [BF16, "long int"], "memory")
    assert w.outputs == [Tensor((14, 4096), BF16)]


def test_rules_weighing_kernel_work_are_quiet_when_the_steps_ran_no_kernel():
    from diagnose.ruleset.assemble import diagnose_trace
    from diagnose.rulebook.engine import NO_STEP_WORK

    trace = load_capture("host_loader_inline")
    trace.gpu = trace.gpu[trace.gpu["cat"] != "kernel"].reset_index(drop=True)  # copies and memsets only
    checked = {c.rule: c.detail for c in diagnose_trace(trace).checked}
    for rule in ("memory-bound", "compute-bound", "decode-latency"):
        assert checked[rule] == NO_STEP_WORK
