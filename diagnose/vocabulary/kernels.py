"""Kernel names: what kind of work a kernel does, on which units, and which family it belongs to.

A kernel's name is the one thing every trace has, even when no CPU op or shape was recorded
(CUDA-graph replays, traces from other tools). The patterns below cover the libraries PyTorch
reaches on NVIDIA and AMD GPUs, as their names appear in real traces:

- cuBLAS / cuBLASLt: `nvjet_sm90_*` (Hopper+ JIT kernels, all tensor-core), `sm80_xmma_gemm_*`
  and `sm90_xmma_gemm_*` (tensor cores when the data types say tf32/bf16/f16/e4m3, or when a
  `warpgroup` / `tensor16x8x8` tile is named; `ffma` means the CUDA-core FMA path), the classic
  `{volta,turing,ampere}_{s,h,fp16,bf16}...gemm` family (`sgemm` = FP32 CUDA cores, `h884` /
  `s1688` / `16816` = MMA shapes on tensor cores), `gemv2T` / `gemvx` (matrix-vector, CUDA cores),
  `splitKreduce` (the reduction step of a split-K GEMM).
- CUTLASS: `cutlass_*_tensorop_*` / `OpClassTensorOp` (tensor cores) vs `*_simt_*` / `OpClassSimt`.
- cuDNN: `*scudnn*` (FP32 CUDA cores), `*_xmma_{fprop,dgrad,wgrad}_*` (by data type as above),
  `wgrad_alg0_engine`, `dgrad_engine`, winograd and FFT kernels (CUDA cores).
- Instructions named in kernels: `wgmma` / `gmma` (Hopper); `hmma`, `imma`, `wmma` (Volta+).
- Triton: Inductor's `triton_poi_*` (pointwise), `triton_red_*` / `triton_per_*` (reductions),
  `triton_tem_*` (templates such as matmuls); whether a Triton dot uses tensor cores depends on
  its data types, not its name, so it is left unknown here.
- AMD: Tensile `Cijk_*` GEMMs (`_MI16x16x1` names an MFMA instruction: matrix cores).
- PyTorch's own elementwise (`elementwise_kernel`), reduction (`reduce_kernel`), norm, softmax,
  indexing and concatenation kernels.

A kernel's *family* is what stays when the choices a library makes per call are stripped (what
`diagnose diff` matches two runs by): cuBLAS and CUTLASS GEMMs (nvjet, xmma, cutlass, gemv…) are
one family `gemm`, convolutions `conv`, fused attention `attention`, NCCL kernels one family per
collective (`nccl AllReduce`, RCCL and MSCCL alike), a Triton kernel its name less the trailing
index, and any other kernel its name less `void`, template arguments and the argument list. So
cuBLAS picking another tile, or bf16 instead of fp32, is one change of the `gemm` family, not one
kernel vanishing and another appearing.

Every answer is cached per distinct name; nothing here needs pandas.
"""

from __future__ import annotations

import functools
import re

from diagnose.vocabulary.collectives import collective_kind, is_collective_kernel

KINDS = ("gemm", "conv", "attention", "elementwise", "reduction", "memory", "comm", "other")
MEMORY_KINDS = ("elementwise", "reduction", "memory")
MATRIX_KINDS = ("gemm", "conv", "attention")
MATMUL_KINDS = ("gemm", "conv")  # matrix products priced by a precision's peak; attention is priced on its own
FAMILIES = ("attention", "conv", "gemm")  # kernel kinds that are one family each
COMM_FAMILY = "nccl "  # the prefix of a collective's family: `nccl AllReduce` (RCCL and MSCCL alike)

_I = re.IGNORECASE
_ATTENTION = re.compile(r"flash|fmha|sdpa|attention|attn_fwd|attn_bwd|cudnn::fusion::", _I)  # cuDNN's SDPA engine
_CONV = re.compile(
    r"fprop|dgrad|wgrad|implicit_?gemm|conv(?!ert)|scudnn|winograd|fft2d|"
    # cuDNN's own kernels and the offset and index tables its implicit-GEMM kernels read
    # (cask_cudnn::compute…Offsets, cudnn::cnn::kern_precompute_indices)
    r"cudnn_(?:infer|train)_|cask_cudnn|cudnn::cnn::kern_precompute",
    _I,
)
_GEMM = re.compile(
    r"(?<!fb)gemm(?!_gpu)|gemv|nvjet|^cijk_|splitkreduce|triton_tem_fused_(?:mm|addmm|bmm)|matmul|"
    r"_mm_kernel|hipblaslt|cublasLt::|epilogue::impl",
    _I,
)
_NOT_GEMM = re.compile(r"implicit_?gemm|ImplicitGemmConv", _I)
_REDUCTION = re.compile(
    r"layer_?norm|rms_?norm|softmax|batch_?norm|bn_fw|bn_bw|group_?norm|"
    r"RowwiseMoments|GammaBeta|norm_kernel|welford|argmax|argmin|cumsum|"
    r"scan_kernel|DeviceReduce|DeviceScan|nll_loss|ClassNLLCriterion|cross_entropy|_pool(?!ed)|pool_|"
    # clip_grad_norm_'s foreach norm (its second pass) and cumsum's innermost-dimension scan
    r"lpnorm_cleanup|tensor_kernel_scan",
    _I,
)
_MEMORY = re.compile(
    r"CatArrayBatchedCopy|indexSelect|index_select|gather|scatter|embedding|"
    r"index_copy|index_put|nchwToNhwc|nhwcToNchw|convertTensor_kernel|AddPaddingKernel|transpose|permute|copy_kernel|"
    r"multi_tensor_apply|DeviceRadixSort|DeviceSegmented|sort|memcpy|"
    # embedding backward (segment sums of the gradient rows) and cub's unique/compact
    r"compute_grad_weight|partials_per_segment|partial_segment|DeviceUniqueByKey|"
    r"DeviceCompact|DeviceSelect|DeviceScan|"
    # split / chunk-cat copies (FSDP, torch.split), index_add's indexFunc kernels, upsampling (a gather)
    r"split_with_sizes_copy|chunk_cat|recat_copy|indexFunc(?:Large|Small)Index|upsample_",
    _I,
)
# philox::unpack_cudnn: the one-thread kernel that hands cuDNN's dropout its RNG seed and offset
_ELEMENTWISE = re.compile(
    r"FillFunctor|fill_kernel|Functor|dropout|distribution_|triu_tril|philox::unpack|scalePackedTensor", _I
)

_TC_YES = re.compile(
    r"nvjet|wgmma|gmma|hmma|imma|wmma|qmma|tensorop|tensor_op|OpClassTensorOp|"
    r"tensor\d+x\d+x\d+|warpgroup|\d{3,5}gemm|\d{3,5}(?:fprop|dgrad|wgrad)|"
    r"_MI\d+x\d+x\d+|flash_(?:fwd|bwd)|fmha",
    _I,
)
_TC_DTYPE = re.compile(r"xmma.*(?:tf32|bf16|f16f16|fp16|e4m3|e5m2|int8|i8i8)", _I)
_TC_NO = re.compile(
    r"sgemm|dgemm|ffma|simt|OpClassSimt|scudnn|gemv|wgrad_alg\d|dgrad_engine|"
    r"winograd|fft2d|^cijk_(?!.*_MI\d)",
    _I,
)
_HELPER = re.compile(r"epilogue|splitkreduce|reduce_?split_?k|Offsets|init_device_workspace|scalePacked", _I)
_FUSED = re.compile(r"^triton_|^fused_|_fused_", _I)
# tested before the library patterns, in this order
_FIRST = (
    (re.compile(r"^triton_(?:red|per)_"), "reduction"),
    (re.compile(r"^triton_poi_"), "elementwise"),
    (re.compile(r"index_elementwise|scatter_gather"), "memory"),
    (re.compile(r"elementwise_kernel"), "elementwise"),
    (re.compile(r"cudnn.*ReduceSplitK", _I), "conv"),  # the split-K reduction of a cuDNN convolution
    (re.compile(r"splitKreduce|ReduceSplitK", _I), "gemm"),
    (re.compile(r"reduce_kernel"), "reduction"),
    # vLLM's KV-cache write (`reshape_and_cache_flash_kernel`) copies keys and values into the cache
    (re.compile(r"reshape_and_cache"), "memory"),
    (re.compile(r"rotary_emb", _I), "elementwise"),  # rotary position embedding: sin/cos products
    (_ATTENTION, "attention"),
)
# cuDNN's NCHW <-> NHWC transposes around a convolution run on NHWC kernels
_LAYOUT = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", _I)
_GEMV = re.compile(r"gemv", _I)
# a cuBLAS JIT kernel names its output tile after the precision code: nvjet_sm90_tst_128x8_64x12_… is 128 × 8
_NVJET_TILE = re.compile(r"^nvjet_sm\d+_[a-z0-9]+_(\d+)x(\d+)_", _I)
# bits per weight a low-precision matmul kernel's name says: int4 (W4A16, Marlin, tinygemm), then 8-bit
_WEIGHT_BITS = (
    (re.compile(r"int4|w4a16|_4bit|marlin|tinygemm|int4pack", _I), 4),
    (re.compile(r"e4m3|e5m2|fp8|int8|i8i8", _I), 8),
)
_TRAILING_INDEX = re.compile(r"_\d+$")


@functools.lru_cache(maxsize=8192)
def kernel_kind(name: str) -> str:
    """The kind of work a kernel does, from its name: one of KINDS."""
    if not isinstance(name, str):
        return "other"
    if is_collective_kernel(name):
        return "comm"
    for pattern, kind in _FIRST:
        if pattern.search(name):
            return kind
    if _GEMM.search(name) and not _NOT_GEMM.search(name):
        return "gemm"
    for pattern, kind in (
        (_CONV, "conv"),
        (_REDUCTION, "reduction"),
        (_MEMORY, "memory"),
        (_ELEMENTWISE, "elementwise"),
    ):
        if pattern.search(name):
            return kind
    return "other"


@functools.lru_cache(maxsize=8192)
def tensor_core(name: str) -> bool | None:
    """True when the name says the kernel runs on tensor (matrix) cores, False when it says it does
    not, None when the name does not tell (Triton dots, unknown libraries, non-matrix kernels)."""
    if not isinstance(name, str) or kernel_kind(name) not in ("gemm", "conv", "attention"):
        return None
    if _HELPER.search(name):
        return None  # helper kernels of a GEMM/conv (split-K reduction, offsets): no matrix math
    if _TC_NO.search(name):
        return False
    if _TC_YES.search(name) or _TC_DTYPE.search(name):
        return True
    return None


@functools.lru_cache(maxsize=8192)
def is_fused(name: str) -> bool:
    """True for kernels a compiler generated from several ops (Inductor/Triton `triton_*`, `*_fused_*`)."""
    return isinstance(name, str) and bool(_FUSED.search(name))


@functools.lru_cache(maxsize=8192)
def is_layout_conversion(name: str) -> bool:
    """True for cuDNN's NCHW <-> NHWC layout conversion kernels (`nchwToNhwcKernel`, `nhwcToNchwKernel`)."""
    return isinstance(name, str) and bool(_LAYOUT.search(name))


@functools.lru_cache(maxsize=8192)
def is_gemv(name: str) -> bool:
    """True for a matrix-vector kernel (cuBLAS `gemv2T_kernel_val`, `gemvx`): it streams its matrix."""
    return isinstance(name, str) and bool(_GEMV.search(name))


@functools.lru_cache(maxsize=8192)
def tile_rows(name: str) -> int | None:
    """The thin side of a cuBLAS JIT (`nvjet_*`) kernel's output tile (`nvjet_sm90_tst_128x8_…` → 8): cuBLAS
    picks an 8- or 16-wide tile when one side of the product has that few rows, as a decode step's matrix-vector
    products do; None for other kernels, whose names do not say."""
    found = _NVJET_TILE.search(name) if isinstance(name, str) else None
    return min(int(found.group(1)), int(found.group(2))) if found else None


@functools.lru_cache(maxsize=8192)
def weight_bits(name: str) -> int | None:
    """Bits per weight a matmul kernel's name says (4 for int4 kernels, 8 for fp8 / int8), None when it
    does not say (bf16 / fp16 / fp32 kernels name no weight format)."""
    if not isinstance(name, str):
        return None
    for pattern, bits in _WEIGHT_BITS:
        if pattern.search(name):
            return bits
    return None


@functools.lru_cache(maxsize=8192)
def kernel_family(name: str) -> str:
    """The family of a GPU op's name (see the module docstring)."""
    text = str(name or "").strip()
    if text.startswith(("Memcpy", "Memset")):
        return text.split("(")[0].strip()
    if is_collective_kernel(text):
        return f"{COMM_FAMILY}{collective_kind(text) or 'collective'}"
    if text.startswith("triton_"):
        return _TRAILING_INDEX.sub("", text)
    kind = kernel_kind(text)
    if kind in FAMILIES:
        return kind
    return _bare(text)


def _bare(text: str) -> str:
    """`void ns::kernel<T, 4>(args)` → `ns::kernel` (anonymous namespaces dropped)."""
    text = text.removeprefix("void ").replace("(anonymous namespace)::", "")
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or text[:80]
