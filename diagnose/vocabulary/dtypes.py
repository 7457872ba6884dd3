"""Data types: a dtype's name -> its precision -> its bytes per element -> the peak-table key.

A dtype reaches diagnose spelt two ways: torch.profiler records C++ names in `Input type`
(`float`, `c10::BFloat16`, `c10::Float8_e4m3fn`, `long int`), and the capture side writes torch's
own (`float32`, `bfloat16`, `float8_e4m3fn`, as `str(torch.bfloat16)` less its `torch.` prefix).
Both spellings of one dtype give the same answers here.

The *precision* of a floating or 8-bit dtype is its key in the peak tables (diagnose/base/devices.py,
diagnose/base/measured_peaks.py): `fp64`, `fp32`, `fp16`, `bf16`, `fp8`, `int8`; None for the other
integer, boolean and complex types, whose matmuls no peak describes, and for the scale and
packed formats (`Float8_e8m0fnu`, `Float4_e2m1fn_x2`). TF32 is no dtype: it is how fp32 data
runs on tensor cores, a precision a fix computes in (`tf32`).
"""

from __future__ import annotations

import functools
from typing import overload

# (spellings: the C++ name first, then torch's), precision (peak key), bytes per element
_TABLE: tuple[tuple[tuple[str, ...], str | None, int], ...] = (
    (("float", "float32"), "fp32", 4),
    (("double", "float64"), "fp64", 8),
    (("c10::Half", "float16", "half"), "fp16", 2),
    (("c10::BFloat16", "bfloat16"), "bf16", 2),
    (("c10::Float8_e4m3fn", "float8_e4m3fn"), "fp8", 1),
    (("c10::Float8_e5m2", "float8_e5m2"), "fp8", 1),
    (("c10::Float8_e4m3fnuz", "float8_e4m3fnuz"), "fp8", 1),
    (("c10::Float8_e5m2fnuz", "float8_e5m2fnuz"), "fp8", 1),
    (("c10::Float8_e8m0fnu", "float8_e8m0fnu"), None, 1),
    (("c10::Float4_e2m1fn_x2", "float4_e2m1fn_x2"), None, 1),
    (("long int", "long", "int64_t", "int64"), None, 8),
    (("int", "int32"), None, 4),
    (("unsigned int", "uint32"), None, 4),
    (("short", "short int", "int16"), None, 2),
    (("signed char", "int8"), "int8", 1),
    (("unsigned char", "uint8"), "int8", 1),
    (("bool",), None, 1),
    (("c10::qint8", "qint8"), "int8", 1),
    (("c10::quint8", "quint8"), "int8", 1),
    (("c10::qint32", "qint32"), None, 4),
    (("c10::complex<float>", "complex64"), None, 8),
    (("c10::complex<double>", "complex128"), None, 16),
    (("c10::complex<c10::Half>", "complex32"), None, 4),
)
_BY_NAME = {name: (precision, size) for names, precision, size in _TABLE for name in names}
_PRECISION_BYTES = {rung: size for _, rung, size in _TABLE if rung}  # every dtype of a rung has one size
_PRECISION_BYTES["tf32"] = _PRECISION_BYTES["fp32"]  # TF32 computes on fp32 data

BF16 = "c10::BFloat16"  # as torch.profiler records it
FLOAT_PRECISIONS = ("fp64", "fp32", "fp16", "bf16")  # the floating types arithmetic promotes between
PRECISIONS = ("tf32", "fp64", "fp32", "fp16", "bf16", "fp8", "int8")
FP32_PRECISIONS = ("fp32", "tf32")  # fp32 data, on CUDA cores or as TF32 on tensor cores
HALF_PRECISIONS = ("bf16", "fp16")  # the 16-bit floating types
# below fp32: tensor (matrix) cores run these at their own rate, CUDA cores at most at the fp32 rate
NARROW_PRECISIONS = ("bf16", "fp16", "fp8", "int8")
# a precision rung for people, with the units that run its matrix math at that rate
RUNG_NAMES = {
    "fp32": "FP32 (CUDA cores)",
    "tf32": "TF32 tensor cores",
    "bf16": "bf16 tensor cores",
    "fp16": "fp16 tensor cores",
    "fp8": "FP8 tensor cores",
    "int8": "INT8 tensor cores",
    "fp64": "FP64",
}
_LABELS = {"tf32": "TF32", "fp64": "fp64", "fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}


def _key(name) -> str | None:
    if not isinstance(name, str):
        return None
    return name.removeprefix("torch.")


@functools.lru_cache(maxsize=1024)
def is_dtype(name) -> bool:
    """Whether `name` is a dtype this table knows, in either spelling (module docstring)."""
    return _key(name) in _BY_NAME


@overload
def dtype_bytes(name, default: int) -> int: ...
@overload
def dtype_bytes(name, default: None = None) -> int | None: ...
def dtype_bytes(name, default: int | None = None) -> int | None:
    """Bytes per element of a dtype (`c10::BFloat16` or `bfloat16`: 2), `default` when unknown."""
    size = _size(name)
    return default if size is None else size


@functools.lru_cache(maxsize=1024)
def _size(name) -> int | None:
    entry = _BY_NAME.get(_key(name) or "")
    return entry[1] if entry else None


def rung_name(rung) -> str:
    """A precision rung for people, with the units that run it: "TF32 tensor cores", "FP32 (CUDA cores)";
    any other rung as it is."""
    return RUNG_NAMES.get(rung, rung)


def precision_bytes(rung) -> int | None:
    """Bytes per element of data at a precision rung (fp32 and tf32: 4, bf16: 2, fp8: 1), None for a rung
    no dtype of the table has (fp4's packed format)."""
    return _PRECISION_BYTES.get(rung)


@functools.lru_cache(maxsize=1024)
def precision(name) -> str | None:
    """The precision (peak-table key) of a dtype: fp32, fp64, fp16, bf16, fp8, int8; None otherwise.

    `tf32` and the precisions themselves map to themselves, so a fix's compute precision as
    --verify records it (`tf32`, `bfloat16`, `float16`) has one too."""
    key = _key(name)
    if key in PRECISIONS:
        return key
    entry = _BY_NAME.get(key or "")
    return entry[0] if entry else None


@functools.lru_cache(maxsize=1024)
def float_bits(name) -> int | None:
    """Bits per element of a floating dtype (fp64 … fp8), None for any other dtype."""
    rung = precision(name)
    size = dtype_bytes(name)
    if size is None or rung not in (*FLOAT_PRECISIONS, "fp8"):
        return None
    return int(8 * size)


def is_promoting_float(name) -> bool:
    """A floating dtype that arithmetic promotes between (fp64, fp32, fp16, bf16; not fp8)."""
    return precision(name) in FLOAT_PRECISIONS and is_dtype(name)


def precision_label(name) -> str:
    """How a floating precision or dtype is written for people: "bf16", "fp16", "TF32", "fp32", "fp64";
    any other name as it is (an fp8 dtype keeps its format: `c10::Float8_e4m3fn`)."""
    return _LABELS.get(precision(name) or "", str(name))
