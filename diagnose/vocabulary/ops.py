"""CPU op names: which ops are matmuls, convolutions, attention, reductions, row-wise and memory ops.

torch.profiler names each ATen op it records (`aten::addmm`, `aten::_scaled_dot_product_cudnn_attention`);
these sets say which kind of work an op does, so work estimates (diagnose/metrics/work.py), the
memory patterns (diagnose/memory/patterns.py), the rules and --verify's plan read one answer.

SDPA (`aten::scaled_dot_product_attention`) records its backend as a nested op:
`aten::_scaled_dot_product_flash_attention`, `…_efficient_attention`, `…_cudnn_attention`, or
`…_attention_math` when it fell back to materialising the scores.
"""

from __future__ import annotations

import functools
import re

GEMM_OPS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::addbmm",
    "aten::matmul",
    "aten::linear",
    "aten::_scaled_mm",
    "aten::_int_mm",
    "aten::mv",
    "aten::addmv",
    "aten::_addmm_activation",
}
CONV_OPS = {
    "aten::convolution",
    "aten::_convolution",
    "aten::cudnn_convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::cudnn_convolution_transpose",
    "aten::miopen_convolution",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d",
    "aten::conv_transpose3d",
    "aten::convolution_backward",
    "aten::_convolution_backward",
}
# PyTorch <= 1.12 ran the two gradients of a convolution as separate ops: (self_size, grad_output,
# weight) and (weight_size, grad_output, self); trace/legacy.py fills in the size list old kineto
# left empty
CONV_GRAD_OPS = {
    "aten::cudnn_convolution_backward_input": "input",
    "aten::cudnn_convolution_backward_weight": "weight",
    "aten::miopen_convolution_backward_input": "input",
    "aten::miopen_convolution_backward_weight": "weight",
}
_ATTENTION = re.compile(r"attention", re.IGNORECASE)
REDUCE_OPS = {
    "aten::sum",
    "aten::mean",
    "aten::amax",
    "aten::amin",
    "aten::max",
    "aten::min",
    "aten::argmax",
    "aten::argmin",
    "aten::norm",
    "aten::linalg_vector_norm",
    "aten::var",
    "aten::std",
    "aten::var_mean",
    "aten::std_mean",
    "aten::prod",
    "aten::logsumexp",
    "aten::any",
    "aten::all",
    "aten::count_nonzero",
    "aten::nansum",
    "aten::_foreach_norm",
}
ROWWISE_OPS = {
    "aten::softmax",
    "aten::_softmax",
    "aten::log_softmax",
    "aten::_log_softmax",
    "aten::native_layer_norm",
    "aten::layer_norm",
    "aten::rms_norm",
    "aten::_fused_rms_norm",
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_no_training",
    "aten::native_group_norm",
    "aten::group_norm",
    "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data",
    "aten::native_layer_norm_backward",
    "aten::cumsum",
    "aten::cumprod",
}
MEMORY_OPS = {
    "aten::cat",
    "aten::stack",
    "aten::index_select",
    "aten::embedding",
    "aten::gather",
    "aten::scatter",
    "aten::scatter_add",
    "aten::scatter_add_",
    "aten::index_copy_",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::index",
    "aten::embedding_dense_backward",
    "aten::index_add_",
    "aten::masked_select",
    "aten::nonzero",
    "aten::sort",
    "aten::topk",
}
GATHER_OPS = {"aten::index_select", "aten::embedding"}
INPLACE_INDEX_OPS = {
    "aten::index_copy_",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::index_add_",
    "aten::scatter_",
    "aten::scatter_add_",
    "aten::masked_scatter_",
    "aten::index_fill_",
}
_BOOL_OUT = re.compile(r"^aten::(?:eq|ne|lt|le|gt|ge|logical_\w+|isnan|isinf|isfinite)_?$")

SDPA_TOP = "aten::scaled_dot_product_attention"
SDPA_MATH = "aten::_scaled_dot_product_attention_math"
_SDPA_BACKEND = re.compile(r"^aten::_scaled_dot_product_\w*attention\w*$")
_SDPA_PREFIXES = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product")
SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")  # as they appear in the backend op's name
# the cuDNN convolution backward of PyTorch <= 1.12 and the argument (self 0, weight 2) whose size
# list each of its two child ops left unrecorded
CONV_BACKWARD_PARENT = "aten::cudnn_convolution_backward"
# any op with a batch norm or a convolution in its name, in any case (`aten::cudnn_batch_norm`,
# `aten::convolution`, `aten::_convolution`), for `.search(name)`; `conv` also matches `convert`
BATCH_NORM_OP = re.compile(r"batch_norm", re.IGNORECASE)
CONV_OP = re.compile(r"conv", re.IGNORECASE)
CONV_BACKWARD_SIZES = {"aten::cudnn_convolution_backward_input": 0, "aten::cudnn_convolution_backward_weight": 2}


@functools.lru_cache(maxsize=8192)
def is_attention_op(name) -> bool:
    """An op that computes attention (SDPA and its backends, fused attention ops): 'attention' in its name."""
    return isinstance(name, str) and bool(_ATTENTION.search(name))


@functools.lru_cache(maxsize=8192)
def returns_bool(name) -> bool:
    """A comparison or test op (`aten::eq`, `aten::isnan`, `aten::logical_and`): its output is bool."""
    return isinstance(name, str) and bool(_BOOL_OUT.match(name))


@functools.lru_cache(maxsize=8192)
def is_sdpa_op(name) -> bool:
    """`aten::scaled_dot_product_attention` or one of its backend ops (`aten::_scaled_dot_product_…`)."""
    return isinstance(name, str) and name.startswith(_SDPA_PREFIXES)


@functools.lru_cache(maxsize=8192)
def is_sdpa_backend_op(name) -> bool:
    """One of SDPA's backend ops (`aten::_scaled_dot_product_flash_attention`, …), not the top-level op."""
    return isinstance(name, str) and name != SDPA_TOP and bool(_SDPA_BACKEND.match(name))


def sdpa_backend(name: str) -> str:
    """Which SDPA backend a backend op's name says ran: math, flash, efficient, cudnn; "unknown" with
    no name; else the op's own name less `aten::`."""
    for key in SDPA_BACKENDS:
        if key in name:
            return key
    return "unknown" if not name else name.removeprefix("aten::")
