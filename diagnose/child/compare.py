"""Are the fixed step's tensors the baseline's? Compared in the baseline's dtype, or at the precision
the fix computes in.

Each tensor is compared with torch.testing.assert_close and the tolerances of `TOLERANCES` for the
baseline's dtype. fp32 allows the reordered reductions of a compiled kernel (relative error ~1e-6)
but not 10-bit-mantissa matmuls (TF32, ~1e-3) nor bf16 (~4e-3). Integer and bool tensors (token ids)
must match exactly.

A fix that trades precision for speed (TF32 matmuls, bf16 autocast), or one that changes which
reduced-precision kernels run (channels-last convolutions, which cuDNN computes in TF32 on both
sides), names its `precision`. A floating tensor finer than that precision which misses its dtype's
tolerance is then judged at the precision: it is within it when it passes the precision's
elementwise tolerance (`PRECISION_TOLERANCES`) or when its normwise relative error ‖fixed −
baseline‖₂ ÷ ‖baseline‖₂ is at most `PRECISION_RELATIVE` (four units of roundoff). The normwise test
is what a reduced-precision product needs: its rounding error scales with the magnitude of the terms
summed, not of the result, so output elements near zero miss any elementwise relative tolerance
while the tensor as a whole is within rounding (a 2048-deep bf16 product of random fp32 matrices:
normwise error 0.29 %, 0.74 of bf16's unit roundoff, measured on a CPU; on the H200 the elementwise
bf16 tolerance alone rejected it). Within, the verdict is "within precision" with the largest
relative error ("within bf16 rounding: max relative error 0.29 %"); beyond, "changes results".

A fix that quantizes the weights (w4a16: 4-bit integers; fp8: e4m3 weights and activations,
diagnose/child/quantize.py) changes results by design, in every dtype, bf16 included: its
`precision` is `int4` or `fp8` and it passes the weights' own measured quantization error
(`weight_error`, the largest ‖W_q − W‖_F ÷ ‖W‖_F of the step's weights). A floating tensor of any
dtype that misses its dtype's tolerance is then within the fix's rounding when its normwise
relative error is at most `quantize.error_bound` (twice that error; quantize.py derives it); no
elementwise test, which quantized products miss everywhere. Within, the verdict is "within
precision" ("within 4-bit weight rounding: normwise relative error 5.4 % (bound 20 %: 2 × the
weights' 10 % quantization error)"); beyond, "changes results".

Some steps differ from themselves: a convolution's backward sums with atomics, cuDNN picks among
algorithms, so two runs of the same baseline from the same seed disagree. When a fix changes
results, `--verify` runs the baseline a second time and passes each tensor's normwise difference
between the two (`noise`); a tensor
whose difference from the baseline is at most `NOISE_FACTOR` times that is "within run-to-run
variation": the fix changed it no more than running the baseline again does.
"""

from __future__ import annotations

from diagnose.child.quantize import bound_text, error_bound, label as quantized_label
from diagnose.vocabulary.dtypes import precision as dtype_precision, precision_label
from diagnose.vocabulary.units import percent

# a dtype's precision (diagnose/vocabulary/dtypes.py) -> (rtol, atol); anything not listed
# (integers, bool) must match exactly
TOLERANCES = {
    "fp64": (1e-7, 1e-7),
    "fp32": (1e-4, 1e-5),
    "fp16": (1e-2, 1e-3),
    "bf16": (5e-2, 1e-2),
}

# precision a fix computes in -> (rtol, atol) for tensors of a finer dtype. bf16 and fp16 are their
# dtype's own tolerances; TF32 (10-bit mantissa like fp16, unit roundoff 4.9e-4) is PyTorch's own
# tolerance for TF32 convolution tests (5e-3) doubled for the few training updates compared.
PRECISION_TOLERANCES = {
    "tf32": (1e-2, 5e-3),
    "fp16": TOLERANCES["fp16"],
    "bf16": TOLERANCES["bf16"],
}
# precision -> the largest normwise relative error within its rounding: 4 units of roundoff
# (bf16 keeps 8 significant bits, TF32 and fp16 11).
PRECISION_RELATIVE = {"tf32": 4 * 2.0**-11, "fp16": 4 * 2.0**-11, "bf16": 4 * 2.0**-8}
FINER = ("fp32", "fp64")  # precisions that a reduced-precision fix computes below

MATCH, WITHIN, CHANGES, NOT_COMPARED = "match", "within precision", "changes results", "not compared"
VARIATION = "within run-to-run variation"
NOISE_FACTOR = 2.0  # a fix's error up to twice the baseline's own run-to-run difference


def tolerance(dtype_name: str) -> tuple[float, float]:
    """(rtol, atol) for a tensor of the baseline's dtype; (0, 0) for exact types."""
    return TOLERANCES.get(dtype_precision(dtype_name) or "", (0.0, 0.0))


def _failure(torch, name: str, a, e, dtype: str, rtol: float, atol: float) -> str | None:
    try:
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return f"{name} ({dtype}, rtol {rtol:g}, atol {atol:g}): " + "; ".join(lines[:3])
    return None


def _difference(expected, actual) -> tuple[float | None, float | None]:
    """(‖actual − expected‖₂ ÷ ‖expected‖₂, max |actual − expected|) of two floating tensors of one
    shape; the ratio is 0 for two zero tensors and None when only the expected one is zero; (None,
    None) for anything else."""
    if not (expected.is_floating_point() and expected.shape == actual.shape and expected.numel()):
        return None, None
    delta = (actual.double() - expected.double()).nan_to_num(0.0)
    largest = float(delta.abs().max())
    scale = float(expected.double().nan_to_num(0.0).norm())
    if scale > 0:
        return float(delta.norm()) / scale, largest
    return (0.0 if largest == 0 else None), largest


def relative_error(expected, actual) -> float | None:
    """‖actual − expected‖₂ ÷ ‖expected‖₂ of two floating tensors (0 for two zero tensors, None when only
    the expected one is zero or they are not floating tensors of one shape)."""
    return _difference(expected, actual)[0]


def relative_differences(first: dict, second: dict) -> dict:
    """Each floating tensor's normwise relative difference between two snapshots of the same step."""
    out = {}
    for name, e in first.items():
        a = second.get(name)
        if a is not None:
            rel = relative_error(e, a.to(e.dtype))
            if rel is not None:
                out[name] = rel
    return out


def compare(
    torch,
    expected: dict,
    actual: dict,
    precision: str | None = None,
    noise: dict | None = None,
    weight_error: float | None = None,
) -> dict:
    """The numerics verdict: "match", "within precision" (only with a `precision`), "within run-to-run
    variation" (only with the baseline's own `noise`), "changes results" or "not compared" (nothing to
    compare), with the largest absolute and relative differences. With a `weight_error` (a fix that
    quantizes weights, `precision` int4 or fp8) every floating tensor is judged normwise against
    `error_bound(precision, weight_error)`."""
    names = [n for n in expected if n in actual]
    if not names:
        return {
            "verdict": NOT_COMPARED,
            "detail": "the step returns no tensor and its closure holds none",
            "tensors": 0,
        }
    rung = dtype_precision(precision) or ""  # "bfloat16" as --verify names it -> bf16
    loose = PRECISION_TOLERANCES.get(rung)
    quantized = error_bound(precision or "", weight_error) if weight_error is not None else None
    worst, rel, failures, beyond, varied = None, None, [], [], []
    for name in names:
        e, a = expected[name], actual[name]
        dtype = str(e.dtype).removeprefix("torch.")
        if e.shape != a.shape:
            failures.append(f"{name}: shape {tuple(a.shape)} instead of {tuple(e.shape)}")
            beyond.append(failures[-1])
            continue
        a = a.to(e.dtype)
        tensor_rel, largest = _difference(e, a)
        if largest is not None:
            worst = max(worst or 0.0, largest)
        if tensor_rel is not None:
            rel = max(rel or 0.0, tensor_rel)
        failed = _failure(torch, name, a, e, dtype, *tolerance(dtype))
        if failed:
            failures.append(failed)
            if quantized is not None and e.is_floating_point():
                within = tensor_rel is not None and tensor_rel <= quantized
                again = (
                    None
                    if within
                    else f"{failed}; normwise relative error "
                    f"{tensor_rel if tensor_rel is not None else float('nan'):.3g} > {quantized:.3g}"
                )
            elif loose and dtype_precision(dtype) in FINER:
                bound = PRECISION_RELATIVE[rung]
                normwise_ok = tensor_rel is not None and tensor_rel <= bound
                again = None if normwise_ok else _failure(torch, name, a, e, dtype, *loose)
                if again:
                    again += f"; normwise relative error {tensor_rel if tensor_rel is not None else float('nan'):.3g} > {bound:.3g}"
            else:
                again = failed
            if again and noise and tensor_rel is not None and tensor_rel <= NOISE_FACTOR * noise.get(name, 0.0):
                varied.append(name)
            elif again:
                beyond.append(again)
    verdict = CHANGES if beyond else VARIATION if varied else WITHIN if failures else MATCH
    result = {
        "verdict": verdict,
        "tensors": len(names),
        "max_abs_diff": worst,
        "max_rel_error": rel,
        "failures": (beyond or failures)[:5],
        "failed": len(beyond) if precision else len(failures),
        "tolerances": {k: list(v) for k, v in TOLERANCES.items()},
    }
    if precision:
        result["precision"] = precision
        result["precision_tolerance"] = list(loose) if loose else None
        result["precision_relative"] = PRECISION_RELATIVE.get(rung) if quantized is None else quantized
        result["beyond_dtype"] = len(failures)
    if noise is not None:
        result["run_to_run"] = {
            "tensors_that_vary": sum(1 for v in noise.values() if v > 0),
            "max_rel_difference": max(noise.values(), default=0.0),
            "within_it": len(varied),
        }
    if verdict == VARIATION:
        result["detail"] = (
            f"within run-to-run variation: {len(varied)} of {len(names)} tensors differ from the baseline no "
            f"more than {NOISE_FACTOR:g}× as much as two runs of the baseline differ (max relative error "
            f"{percent((rel or 0.0), 2)}; nondeterministic kernels)"
        )
    if verdict == WITHIN and quantized is not None:
        result["detail"] = (
            f"within {quantized_label(precision or '')} rounding: normwise relative error {percent((rel or 0.0), 2)} "
            f"(bound {percent(quantized, 1)}: {bound_text(precision or '', weight_error or 0.0)}; "
            f"{len(failures)} of {len(names)} tensors beyond the baseline dtype's tolerance)"
        )
    elif verdict == WITHIN:
        result["detail"] = (
            f"within {precision_label(precision)} rounding: max relative error "
            f"{percent((rel or 0.0), 2)} ({len(failures)} of {len(names)} tensors beyond the "
            "baseline dtype's tolerance)"
        )
    return result
