"""Weight-only quantization applied from outside the step: `--verify`'s w4a16 and fp8 variants.

A `torch.overrides.TorchFunctionMode` (`WeightQuantizer`) is entered around the build of the fixed
step (the factory call: a step that captures a CUDA graph in its factory records the quantized
kernels in it) and around every call of it. It replaces each product by a weight, `F.linear(x, w,
b)`, `torch.matmul(x, B)` / `x @ B` and `torch.mm(x, B)`, whose weight fits the kernels by the
same product on a quantized copy of the weight, made the first time the weight is met and cached
by the weight tensor itself (weakly: a freed weight drops its copy). The tensors of the step's
closure are left as they were: the comparison with the baseline sees the same weights and the
outputs computed from their quantized copies.

- `int4` (w4a16): asymmetric 4-bit integers per group of `GROUP` (128) inputs with a 16-bit scale
  and zero per group, multiplied by tinygemm (`torch._weight_int4pack_mm`; on a CPU its
  `_for_cpu` twin), activations in the weight's 16-bit dtype. tinygemm takes 2-D weights (n, k)
  with k a multiple of `GROUP` and of 16 × `INNER_K_TILES`, n a multiple of 8 (16 on a CPU), and on
  a GPU bf16 activations only (a CPU also takes fp16 and fp32).
- `fp8`: the weight in e4m3 with one scale per tensor, the activations cast to e4m3 per call with
  their own per-tensor scale (computed on the device, so a CUDA graph replays it), multiplied by
  `torch._scaled_mm` (compute capability 8.9+ on a GPU); k and n multiples of 16.

What is a weight: the second operand of F.linear, and for matmul / mm an `nn.Parameter` or a
tensor object multiplied by in an earlier call too (a weight persists from call to call; an
activation is a new tensor each call, and quantizing it would be a different fix). `x @ w.T`
multiplies by `w`: a transposed view is traced back to the tensor it views. A product that needs
gradients (training) is left alone: the quantized kernels have no backward. Anything else that
does not fit stays as it is, and the variant's note says how many weights and bytes were
quantized and why others were not; none at all is NotApplicable (the fix needs a code change).

A weight is quantized outside any CUDA-graph capture only: one met for the first time while a
graph is being captured stays in 16 bits (it is counted, and a step left with nothing quantized
is NotApplicable: warm the step up before capturing it).

Numerics. Quantization changes results by design; how much is set by the weights' own rounding.
At quantization, each weight's normwise error ε_W = ‖W_q − W‖_F ÷ ‖W‖_F is measured (4-bit
group-128 on Gaussian weights: ≈ 10 %; e4m3: ≈ 2.5 %). For one product y = W x, the first-order
error is ΔW x, and for activations not aligned with the error's singular vectors E‖ΔW x‖² ÷
E‖W x‖² = ‖ΔW‖²_F ÷ ‖W‖²_F, so the product's normwise error is about ε_W (fp8 adds the activations'
e4m3 rounding, at most its unit roundoff 2⁻⁴, in quadrature). A step chains products; independent
errors add in quadrature, and a residual stream carries the unquantized input past each block.
The bound is `ERROR_FACTOR` (2) × the largest ε_W of the step's weights (for fp8, of ε_W ⊕ 2⁻⁴, the quadrature
sum): room for a chain of four full-weight products in quadrature. A step whose outputs differ
from the baseline's by more has amplified the rounding (outliers, ill conditioning, a long chain
without residuals) and "changes results" (diagnose/child/compare.py). Measured on a CPU (fp32)
on the SwiGLU decode of fixtures/workloads/gemv_decode.py, ε_W ≈ 10 % throughout: 8 layers of
d_model 256, d_ff 512: output error 1.1 %; two blocks of 2048 × 5504: 15.9 %; one 7B-width block (4096 ×
11008): 15.5 % (bound 20 %); two: 29 %; four: 74 %. That stack has no normalization and its block
is quadratic in its input (silu(W_g h) ⊙ W_u h) with gains above 1, so each block about doubles the
relative error it is handed: beyond two 7B-width blocks 4-bit rounding-to-nearest changes what it
computes, and --verify says so.

The function mode adds a Python call per torch function to an eagerly run step (≈ 1 µs each): it
counts in the fixed step's time, as a wrapper would; a graph replay runs none.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

from diagnose.child.rewrite import NotApplicable
from diagnose.vocabulary.units import percent

GROUP = 128  # inputs per 4-bit scale and zero
INNER_K_TILES = 8  # tinygemm's packing on a GPU: k a multiple of 16 × 8 = 128
CPU_N_MULTIPLE = 16  # the CPU kernel's packing
GPU_N_MULTIPLE = 8
FP8_MULTIPLE = 16  # torch._scaled_mm: k and n multiples of 16 (rows padded to it)
FP8_MAX = 448.0  # largest finite e4m3
FP8_UNIT_ROUNDOFF = 2.0**-4  # e4m3 keeps 4 significant bits
ERROR_FACTOR = 2.0
INT4, FP8 = "int4", "fp8"
KINDS = {"w4a16": INT4, "fp8": FP8}  # --verify variant -> what the weights become


@dataclasses.dataclass
class Quantized:
    """One weight's quantized copy: what its product needs, its error and its sizes."""

    kind: str
    n: int
    k: int
    weight: Any  # a torch.Tensor: packed int4 or the e4m3 tensor (n, k)
    extra: Any  # a torch.Tensor: int4: scales and zeros (k / GROUP, n, 2); fp8: the weight's scale
    error: float  # ‖W_q − W‖_F ÷ ‖W‖_F
    bytes_before: int
    bytes_after: int


def fits(torch, kind: str, w, x=None) -> str:
    """Why the 2-D weight `w` (n, k) cannot be quantized to `kind` for activations like `x` ("" if it can)."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        return "not a 2-D floating weight"
    n, k = w.shape
    sixteen = (torch.bfloat16, torch.float16)
    if x is not None and (x.dtype != w.dtype or x.device != w.device or x.shape[-1] != k):
        return "activations of another dtype, device or width"
    cuda = w.device.type == "cuda"
    if kind == INT4:
        if cuda and w.dtype != torch.bfloat16:
            return "tinygemm on a GPU takes bf16 weights and activations"
        if not cuda and w.dtype not in (*sixteen, torch.float32):
            return "a dtype the CPU int4 kernel does not take"
        if k % GROUP or k % (16 * INNER_K_TILES):
            return f"k = {k} is not a multiple of {max(GROUP, 16 * INNER_K_TILES)}"
        multiple = GPU_N_MULTIPLE if cuda else CPU_N_MULTIPLE
        if n % multiple:
            return f"n = {n} is not a multiple of {multiple}"
        return ""
    if w.dtype not in sixteen:
        return "FP8 matmuls replace 16-bit ones"
    if cuda and torch.cuda.get_device_capability(w.device) < (8, 9):
        return "no FP8 tensor cores (compute capability below 8.9)"
    if k % FP8_MULTIPLE or n % FP8_MULTIPLE:
        return f"k = {k} or n = {n} is not a multiple of {FP8_MULTIPLE}"
    return ""


def quantize(torch, kind: str, w) -> Quantized:
    """The quantized copy of the (n, k) weight `w` (which `fits`), with its normwise error."""
    with torch.no_grad():
        if kind == INT4:
            return _int4(torch, w.detach())
        return _fp8(torch, w.detach())


def _int4(torch, w) -> Quantized:
    n, k = w.shape
    wf = w.float()
    groups = wf.reshape(n, k // GROUP, GROUP)
    lo, hi = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    scale = (hi - lo).clamp(min=1e-6) / 15
    q = ((groups - lo) / scale).round().clamp(0, 15)
    zero = lo + 8 * scale  # tinygemm dequantises (q − 8) × scale + zero
    # the error of the copy the kernel multiplies by: scales and zeros rounded to the weight's dtype
    s16, z16 = scale.to(w.dtype).float(), zero.to(w.dtype).float()
    error = _relative(torch, ((q - 8) * s16 + z16).reshape(n, k), wf)
    q = q.to(torch.int32).reshape(n, k)
    if w.device.type == "cuda":
        packed = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), INNER_K_TILES)
    else:
        packed = torch._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES)
    scales_zeros = torch.stack([scale.squeeze(-1), zero.squeeze(-1)], dim=-1).transpose(0, 1).contiguous()
    after = n * k // 2 + scales_zeros.numel() * w.element_size()
    return Quantized(INT4, n, k, packed, scales_zeros.to(w.dtype), error, w.numel() * w.element_size(), after)


def _fp8(torch, w) -> Quantized:
    n, k = w.shape
    wf = w.float()
    w_scale = (wf.abs().amax() / FP8_MAX).clamp(min=1e-12).reshape(())
    w8 = (wf / w_scale).to(torch.float8_e4m3fn)
    error = _relative(torch, w8.float() * w_scale, wf)
    return Quantized(FP8, n, k, w8, w_scale, error, w.numel() * w.element_size(), n * k + 4)


def _relative(torch, approx, exact) -> float:
    scale = float(exact.double().norm())
    return float((approx.double() - exact.double()).norm()) / scale if scale > 0 else 0.0


def product(torch, x, q: Quantized):
    """x (..., k) @ W.T (..., n) through the quantized copy `q`."""
    rows = x.reshape(-1, q.k).contiguous()
    if q.kind == INT4:
        if rows.device.type == "cuda":
            out = torch._weight_int4pack_mm(rows, q.weight, GROUP, q.extra)
        else:
            out = torch._weight_int4pack_mm_for_cpu(rows, q.weight, GROUP, q.extra)
    else:
        m = rows.shape[0]
        pad = -m % FP8_MULTIPLE
        if pad:
            rows = torch.nn.functional.pad(rows, (0, 0, 0, pad))
        x_scale = (rows.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
        x8 = (rows.float() / x_scale).to(torch.float8_e4m3fn)
        out = torch._scaled_mm(x8, q.weight.t(), scale_a=x_scale, scale_b=q.extra, out_dtype=x.dtype)[:m]
    return out.reshape(*x.shape[:-1], q.n)


def error_bound(kind: str, weight_error: float) -> float:
    """The largest normwise relative error of the step's outputs within the weights' rounding (module docstring)."""
    if kind == FP8:
        return ERROR_FACTOR * math.hypot(weight_error, FP8_UNIT_ROUNDOFF)
    return ERROR_FACTOR * weight_error


def bound_text(kind: str, weight_error: float) -> str:
    """How the bound was set, for people: "2 × the weights' 10.0 % quantization error"."""
    weights = f"the weights' {percent(weight_error, 1)} quantization error"
    if kind == FP8:
        return f"{ERROR_FACTOR:g} × ({weights} ⊕ the activations' e4m3 unit roundoff {percent(FP8_UNIT_ROUNDOFF, 2)})"
    return f"{ERROR_FACTOR:g} × {weights}"


def label(kind: str) -> str:
    """How the rounding is written for people: "4-bit weight", "FP8"."""
    return "4-bit weight" if kind == INT4 else "FP8 weight and activation"


class Quantizer(Protocol):
    """What verify.py uses of a WeightQuantizer (a torch function mode, so its class is made once torch is
    imported, by `_define`)."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...

    def weight_error(self) -> float:
        """The largest normwise error of a quantized weight (0 with none)."""
        ...

    def note(self) -> str:
        """How many weights and bytes were quantized, and what was left in 16 bits and why."""
        ...

    def check(self) -> None:
        """NotApplicable when nothing was quantized."""
        ...


_MODE_CLASS: dict = {}


def weight_quantizer(torch, kind: str) -> Quantizer:
    """A new WeightQuantizer for `kind` ("int4" or "fp8")."""
    if "class" not in _MODE_CLASS:
        _MODE_CLASS["class"] = _define(torch)
    return _MODE_CLASS["class"](torch, kind)


def _define(torch):
    from torch.overrides import TorchFunctionMode
    from torch.utils.weak import WeakIdKeyDictionary

    linear = torch.nn.functional.linear
    matmuls = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm}

    class WeightQuantizer(TorchFunctionMode):
        """Runs the step's products by weights on quantized copies (module docstring)."""

        def __init__(self, torch, kind: str):
            super().__init__()
            self.torch, self.kind = torch, kind
            self.copies = WeakIdKeyDictionary()  # weight -> {transposed: Quantized}
            self.seen = WeakIdKeyDictionary()  # matmul operands met, not (yet) known as weights
            self.kept: list = []  # every copy, alive as long as the mode: a captured graph reads them
            self.left: dict[str, int] = {}  # why a weight stayed as it was -> how many times
            self.missed_in_capture = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is linear and len(args) >= 2:
                x, w = args[0], args[1]
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                q = self._copy(x, w, transposed=False, weight_now=True)
                if q is not None:
                    out = product(self.torch, x, q)
                    return out if bias is None else out + bias
            elif func in matmuls and len(args) >= 2 and not kwargs:
                x, b = args[0], args[1]
                if isinstance(b, self.torch.Tensor) and isinstance(x, self.torch.Tensor) and b.dim() == 2:
                    if func in (self.torch.mm, self.torch.Tensor.mm) and x.dim() != 2:
                        return func(*args, **kwargs)
                    base = _transposed_of(self.torch, b)
                    weight, transposed = (base, False) if base is not None else (b, True)
                    q = self._copy(x, weight, transposed, weight_now=isinstance(weight, self.torch.nn.Parameter))
                    if q is not None:
                        return product(self.torch, x, q)
            return func(*args, **kwargs)

        def _copy(self, x, w, transposed: bool, weight_now: bool):
            """The quantized copy of `w` (transposed: of w.T) for this product, or None to leave it."""
            torch = self.torch
            if not isinstance(w, torch.Tensor) or not isinstance(x, torch.Tensor):
                return None
            copies = self.copies.get(w)
            if copies is not None and transposed in copies:
                return copies[transposed]
            if torch.is_grad_enabled() and (w.requires_grad or x.requires_grad):
                return self._leave("needs gradients (the quantized kernels have no backward)")
            if not weight_now and w not in self.seen:
                self.seen[w] = True  # a weight if it is met again in a later product
                return None
            oriented = w.t() if transposed else w
            why = fits(torch, self.kind, oriented, x)
            if why:
                return self._leave(why)
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                self.missed_in_capture += 1
                return self._leave("first met inside a CUDA graph capture, where it cannot be quantized")
            q = quantize(torch, self.kind, oriented)
            self.copies.setdefault(w, {})[transposed] = q
            self.kept.append(q)
            return q

        def _leave(self, why: str):
            self.left[why] = self.left.get(why, 0) + 1
            return None

        def quantized(self) -> list:
            """Every quantized copy made."""
            return list(self.kept)

        def weight_error(self) -> float:
            """The largest normwise error of a quantized weight (0 with none)."""
            return max((q.error for q in self.quantized()), default=0.0)

        def note(self) -> str:
            """How many weights and bytes were quantized, and what was left in 16 bits and why."""
            made = self.quantized()
            before = sum(q.bytes_before for q in made)
            after = sum(q.bytes_after for q in made)
            text = (
                f"{len(made)} weight(s) quantized to {self.kind} ({before / 1e6:,.1f} MB → {after / 1e6:,.1f} MB; "
                f"normwise weight error up to {100 * self.weight_error():.2f} %)"
            )
            if self.left:
                text += "; products left as they were: " + ", ".join(f"{n} × {why}" for why, n in self.left.items())
            return text

        def check(self) -> None:
            """NotApplicable when nothing was quantized."""
            if self.quantized():
                return
            why = "; ".join(self.left) or "the step multiplies by no weight through F.linear, matmul or mm"
            raise NotApplicable(f"needs a code change: no weight of the step could be quantized to {self.kind} ({why})")

    return WeightQuantizer


def _transposed_of(torch, b):
    """The 2-D tensor that `b` is the transpose of (`w.T`, `w.t()`), or None."""
    base = b._base
    if base is None or base.dim() != 2 or b.storage_offset() != base.storage_offset() or b.is_contiguous():
        return None
    if tuple(b.shape) == tuple(base.shape)[::-1] and b.stride() == base.stride()[::-1]:
        return base
    return None
