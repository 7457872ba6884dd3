"""Peak figures per GPU: HBM bandwidth and dense matrix throughput per precision.

Two numbers per ceiling:

- **datasheet**: the vendor's dense (no sparsity) peak. It places a kernel on the roofline
  ("808 TFLOP/s = 82 % of peak").
- **achievable**: what a very good kernel actually reaches. Estimates of "time after the fix"
  use it, because no real kernel runs at the datasheet peak. On the H200 these were MEASURED on
  an H200 machine (132 SMs, torch 2.11.0+cu130; the captures are in fixtures/captures): a device-to-device copy moves
  4.3 TB/s counting bytes read plus written, a bf16 8192³ matmul runs at ≈ 790 TFLOP/s, and the
  bundled matmul captures give 1,490 TFLOP/s for FP8 (`_scaled_mm` e4m3, 738 µs per 8192³
  product), 423 TFLOP/s for TF32 (2,600 µs) and 51 TFLOP/s for FP32 on CUDA cores (21,494 µs).
  For other GPUs, nobody here measured them: achievable = datasheet × the H200's measured ratios
  (0.90 for bandwidth, 0.80 for matrix throughput), and the `source` says so.

A device is looked up by the name the trace (or the capture) recorded; AMD GPUs often report a
generic name ("AMD Radeon Graphics"), so their compute-unit count and memory size pick the part.
One MI250/MI250X package is two GPUs to PyTorch; the figures are per GCD. Unknown GPU → None,
and the rules that need peaks are skipped with that reason.
"""

from __future__ import annotations

import dataclasses
import re

LADDER = ("fp32", "tf32", "bf16", "fp8", "fp4")
MEASURED_BW_RATIO = 4.3 / 4.8  # H200: device-to-device copy vs datasheet HBM
MEASURED_MMA_RATIO = 790 / 989.4  # H200: bf16 8192³ matmul vs datasheet dense bf16


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """Datasheet and achievable ceilings of one GPU (per device as PyTorch sees it)."""

    name: str
    hbm_tbps: float
    peak_tflops: dict  # rung -> datasheet dense TFLOP/s (fp32 = CUDA cores / vector units)
    achievable_tbps: float
    achievable_tflops: dict  # rung -> TFLOP/s a good kernel reaches
    source: str  # where the achievable figures come from
    tensor_core_rungs: tuple = ()
    measured: tuple = ()  # which achievable figures were measured on this GPU ("hbm", "bf16", ...)

    def peak(self, rung: str | None) -> float | None:
        """Datasheet TFLOP/s for a precision rung (fp16 shares bf16's where not listed), or None."""
        return _get(self.peak_tflops, rung)

    def achievable(self, rung: str | None) -> float | None:
        """Achievable TFLOP/s for a precision rung, or None."""
        return _get(self.achievable_tflops, rung)

    def ridge(self, rung: str | None) -> float | None:
        """FLOP per byte where achievable compute and achievable bandwidth take the same time."""
        tflops = self.achievable(rung)
        return tflops / self.achievable_tbps if tflops else None

    def next_rung(self, rung: str | None) -> str | None:
        """The next faster tensor-core precision this device has after `rung`, or None at the top."""
        rung = "bf16" if rung == "fp16" else rung
        if rung not in LADDER:
            return None
        for candidate in LADDER[LADDER.index(rung) + 1 :]:
            if candidate in self.tensor_core_rungs:
                return candidate
            if candidate == "bf16" and "fp16" in self.tensor_core_rungs:
                return "fp16"
        return None

    def half_rung(self) -> str | None:
        """The 16-bit tensor-core rung: bf16 where it exists, else fp16 (V100)."""
        if "bf16" in self.tensor_core_rungs:
            return "bf16"
        return "fp16" if "fp16" in self.tensor_core_rungs else None


def _get(table: dict, rung: str | None) -> float | None:
    if rung in table:
        return table[rung]
    return table.get("bf16") if rung == "fp16" else None


def _spec(name, hbm, peaks, tc, measured=None, source=None) -> DeviceSpec:
    measured = measured or {}
    achievable = {r: measured.get(r, round(v * MEASURED_MMA_RATIO, 1)) for r, v in peaks.items()}
    bw = measured.get("hbm", round(hbm * MEASURED_BW_RATIO, 3))
    src = source or (
        f"datasheet × the ratios measured on an H200 ({MEASURED_BW_RATIO:.2f} of HBM, "
        f"{MEASURED_MMA_RATIO:.2f} of matrix peak): not measured on this GPU"
    )
    return DeviceSpec(name, hbm, dict(peaks), bw, achievable, src, tuple(tc))


_HOPPER = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp8": 1978.9, "int8": 1978.9}
H200 = _spec(
    "NVIDIA H200",
    4.8,
    _HOPPER,
    ("tf32", "bf16", "fp16", "fp8", "int8"),
    measured={"hbm": 4.3, "bf16": 790.0, "fp8": 1490.0, "tf32": 423.0, "fp32": 51.2},
    source=(
        "measured on the lent H200: device-to-device copy 4.3 TB/s (read + write), "
        "bf16 8192³ matmul ≈ 790 TFLOP/s; FP8, TF32 and FP32 from the bundled matmul "
        "captures (1,490 / 423 / 51 TFLOP/s)"
    ),
)
H100_SXM = _spec("NVIDIA H100 SXM", 3.35, _HOPPER, ("tf32", "bf16", "fp16", "fp8", "int8"))
H100_PCIE = _spec(
    "NVIDIA H100 PCIe",
    2.0,
    {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp8": 1513.0, "int8": 1513.0},
    ("tf32", "bf16", "fp16", "fp8", "int8"),
)
H100_NVL = _spec(
    "NVIDIA H100 NVL",
    3.9,
    {"fp32": 60.0, "tf32": 418.0, "bf16": 835.0, "fp8": 1670.0, "int8": 1670.0},
    ("tf32", "bf16", "fp16", "fp8", "int8"),
)
_AMPERE = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "int8": 624.0}
A100_40 = _spec("NVIDIA A100 40GB", 1.555, _AMPERE, ("tf32", "bf16", "fp16", "int8"))
A100_80_SXM = _spec("NVIDIA A100 80GB SXM", 2.039, _AMPERE, ("tf32", "bf16", "fp16", "int8"))
A100_80_PCIE = _spec("NVIDIA A100 80GB PCIe", 1.935, _AMPERE, ("tf32", "bf16", "fp16", "int8"))
# Volta: fp16 tensor cores only (no bf16, no TF32).
V100_SXM = _spec("NVIDIA V100 SXM2", 0.9, {"fp32": 15.7, "fp16": 125.0}, ("fp16",))
V100_PCIE = _spec("NVIDIA V100 PCIe", 0.9, {"fp32": 14.0, "fp16": 112.0}, ("fp16",))
# AMD, per GCD as PyTorch sees it. fp32 here is the vector rate; MFMA fp32 is twice that.
MI250_GCD = _spec(
    "AMD MI250 / MI210 (one GCD)", 1.6, {"fp32": 22.6, "bf16": 181.0, "int8": 181.0}, ("bf16", "fp16", "int8")
)
MI250X_GCD = _spec("AMD MI250X (one GCD)", 1.6, {"fp32": 23.9, "bf16": 191.5, "int8": 191.5}, ("bf16", "fp16", "int8"))
MI300X = _spec(
    "AMD MI300X",
    5.3,
    {"fp32": 81.7, "tf32": 653.7, "bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9},
    ("tf32", "bf16", "fp16", "fp8", "int8"),
)

KNOWN = (
    H200,
    H100_SXM,
    H100_PCIE,
    H100_NVL,
    A100_40,
    A100_80_SXM,
    A100_80_PCIE,
    V100_SXM,
    V100_PCIE,
    MI250_GCD,
    MI250X_GCD,
    MI300X,
)
GIB = 1024**3


def lookup(device: dict | None) -> DeviceSpec | None:
    """The spec for a trace's device (Trace.device: name, memory_bytes, sm_count), or None."""
    if not device:
        return None
    name = str(device.get("name") or "")
    memory = device.get("memory_bytes") or 0
    units = device.get("sm_count") or 0
    upper = name.upper()
    if re.search(r"(?<![A-Z])H200", upper):
        return H200
    if re.search(r"(?<![A-Z])H100", upper):
        if "PCIE" in upper:
            return H100_PCIE
        return H100_NVL if "NVL" in upper else H100_SXM
    if "A100" in upper:
        big = "80GB" in upper or memory > 60 * GIB
        if not big:
            return A100_40
        return A100_80_PCIE if "PCIE" in upper else A100_80_SXM
    if "V100" in upper:
        return V100_PCIE if "PCIE" in upper else V100_SXM
    if "MI300X" in upper:
        return MI300X
    if "MI250X" in upper:
        return MI250X_GCD
    if "MI250" in upper or "MI210" in upper:
        return MI250_GCD
    if "AMD" in upper or "RADEON" in upper or "INSTINCT" in upper:
        if units == 104 and 60 * GIB < memory < 68 * GIB:
            return MI250_GCD
        if units == 110 and 60 * GIB < memory < 68 * GIB:
            return MI250X_GCD
        if units == 304:
            return MI300X
    return None


def describe_unknown(device: dict | None) -> str:
    """Why no spec was found, for a Skip reason."""
    name = (device or {}).get("name") or "unnamed GPU"
    known = ", ".join(d.name for d in KNOWN)
    return f"no peak figures for the GPU '{name}' (known: {known}); add it to diagnose/devices.py"
