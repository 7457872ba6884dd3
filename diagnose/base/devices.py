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

Every GPU gets a spec, in this order (`lookup`):

1. **By name**: the named entries below (`KNOWN`), from the vendors' datasheets. AMD GPUs often
   report a generic name ("AMD Radeon Graphics"), so their compute-unit count and memory size pick
   the part. One MI250/MI250X package is two GPUs to PyTorch; the figures are per GCD.
2. **By properties** (`estimate`): a GPU no name matches (a B300, an A800, vLLM's traces, whose
   deviceProperties name is empty) is known by its architecture (NVIDIA compute capability; AMD
   gcnArchName, or compute capability 9.0/9.4/9.5 with a warp of 64) and SM (CU) count. Its peaks
   are SM count × the architecture's dense FLOP per clock per SM (`ARCHES`) × the boost clock the
   capture recorded, else the architecture's typical clock. Its bandwidth comes from the recorded
   memory clock and bus width (NVIDIA; a capture made by diagnose records them), else from the
   memory size of the architecture's HBM parts (an sm_90 GPU with 140 GiB is an H200: 4.8 TB/s).
   The `source` says the figures are estimates and how each was made. An estimate is an upper
   bound for parts that run slower per SM than their architecture's datacenter part: GeForce cards
   (halved below, as their datasheets show for FP32-accumulated tensor math), the L40 and the
   export-limited H20 (named, so not estimated).
3. A GPU whose architecture has no rates here, or whose trace records no SM count, gets None,
   and the rules that need peaks are skipped with the number that was missing (`describe_unknown`).
   A spec whose bandwidth could not be inferred (a GDDR card known only by its properties: its
   bandwidth depends on a bus width and memory clock a kineto trace does not record) has NaN
   bandwidth and `bandwidth_missing` saying why; the rules that need bandwidth (the "device-
   bandwidth" need in diagnose/rulebook/engine.py) are skipped with that sentence, the rest run.

Sources (dense, no sparsity; read 2026-12 from the vendors' published datasheets and whitepapers):
NVIDIA V100, A100, A10, A30, H100 (SXM, PCIe, NVL), H200, H800, H20, L4, L40S and B200 datasheets
(B200: the HGX B200 sheet's eight-GPU totals ÷ 8), the Turing, Ampere GA102 and Ada Lovelace
whitepapers (RTX 2080 Ti, RTX 3090 and RTX 4090: half-rate FP32-accumulated tensor math on
GeForce), the RTX Blackwell whitepaper (RTX 5090); AMD Instinct MI210, MI250X, MI300A, MI300X,
MI325X and MI355X datasheets (AMD lists FP32 "vector" with packed math; the fp32 figures here are
the unpacked vector rate, half of that, as for the MI250 and MI300X entries).
"""

from __future__ import annotations

import dataclasses
import math
import re

LADDER = ("fp32", "tf32", "bf16", "fp8", "fp4")
MEASURED_BW_RATIO = 4.3 / 4.8  # H200: device-to-device copy vs datasheet HBM
MEASURED_MMA_RATIO = 790 / 989.4  # H200: bf16 8192³ matmul vs datasheet dense bf16
GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """Datasheet and achievable ceilings of one GPU (per device as PyTorch sees it).

    `hbm_tbps` and `achievable_tbps` are NaN when the bandwidth is unknown; `bandwidth_missing`
    then says why. `estimated` is True for a spec built from the device's properties (`estimate`)."""

    name: str
    hbm_tbps: float
    peak_tflops: dict  # rung -> datasheet dense TFLOP/s (fp32 = CUDA cores / vector units)
    achievable_tbps: float
    achievable_tflops: dict  # rung -> TFLOP/s a good kernel reaches
    source: str  # where the achievable figures come from
    tensor_core_rungs: tuple = ()
    measured: tuple = ()  # which achievable figures were measured on this GPU ("hbm", "bf16", ...)
    estimated: bool = False
    bandwidth_missing: str = ""

    @property
    def has_bandwidth(self) -> bool:
        """True when the memory bandwidth is known (datasheet, inferred or measured)."""
        return math.isfinite(self.hbm_tbps) and math.isfinite(self.achievable_tbps)

    def peak(self, rung: str | None) -> float | None:
        """Datasheet TFLOP/s for a precision rung (fp16 shares bf16's where not listed), or None."""
        return _get(self.peak_tflops, rung)

    def achievable(self, rung: str | None) -> float | None:
        """Achievable TFLOP/s for a precision rung, or None."""
        return _get(self.achievable_tflops, rung)

    def ridge(self, rung: str | None) -> float | None:
        """FLOP per byte where achievable compute and achievable bandwidth take the same time
        (None without that rung or without a known bandwidth)."""
        tflops = self.achievable(rung)
        return tflops / self.achievable_tbps if tflops and self.has_bandwidth else None

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


def _ratio_text() -> str:
    return (
        f"× the ratios measured on an H200 ({MEASURED_BW_RATIO:.2f} of HBM, "
        f"{MEASURED_MMA_RATIO:.2f} of matrix peak): not measured on this GPU"
    )


def _spec(name, hbm, peaks, tc, measured=None, source=None, estimated=False, missing="") -> DeviceSpec:
    measured = measured or {}
    achievable = {r: measured.get(r, round(v * MEASURED_MMA_RATIO, 1)) for r, v in peaks.items()}
    bw = measured.get("hbm", round(hbm * MEASURED_BW_RATIO, 3))
    src = source or f"datasheet {_ratio_text()}"
    return DeviceSpec(
        name, hbm, dict(peaks), bw, achievable, src, tuple(tc), estimated=estimated, bandwidth_missing=missing
    )


_HOPPER_TC = ("tf32", "bf16", "fp16", "fp8", "int8")
_HOPPER = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp8": 1978.9, "int8": 1978.9}
H200 = _spec(
    "NVIDIA H200",
    4.8,
    _HOPPER,
    _HOPPER_TC,
    measured={"hbm": 4.3, "bf16": 790.0, "fp8": 1490.0, "tf32": 423.0, "fp32": 51.2},
    source=(
        "measured on the lent H200: device-to-device copy 4.3 TB/s (read + write), "
        "bf16 8192³ matmul ≈ 790 TFLOP/s; FP8, TF32 and FP32 from the bundled matmul "
        "captures (1,490 / 423 / 51 TFLOP/s)"
    ),
)
H100_SXM = _spec("NVIDIA H100 SXM", 3.35, _HOPPER, _HOPPER_TC)
_HOPPER_PCIE = {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp8": 1513.0, "int8": 1513.0}
H100_PCIE = _spec("NVIDIA H100 PCIe", 2.0, _HOPPER_PCIE, _HOPPER_TC)
H100_NVL = _spec(
    "NVIDIA H100 NVL",
    3.9,
    {"fp32": 60.0, "tf32": 418.0, "bf16": 835.0, "fp8": 1670.0, "int8": 1670.0},
    _HOPPER_TC,
)
# The export parts: H800 keeps the H100's matrix rates (its FP64 and NVLink are cut), the H20 has
# a quarter of them at 78 SMs, so an estimate from its SM count would be four times too high.
H800 = _spec("NVIDIA H800", 3.35, _HOPPER, _HOPPER_TC)
H800_PCIE = _spec("NVIDIA H800 PCIe", 2.0, _HOPPER_PCIE, _HOPPER_TC)
H20 = _spec("NVIDIA H20", 4.0, {"fp32": 44.0, "tf32": 74.0, "bf16": 148.0, "fp8": 296.0, "int8": 296.0}, _HOPPER_TC)
B200 = _spec(
    "NVIDIA B200",
    8.0,
    {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp8": 4500.0, "fp4": 9000.0, "int8": 4500.0},
    ("tf32", "bf16", "fp16", "fp8", "fp4", "int8"),
)
_AMPERE = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "int8": 624.0}
_AMPERE_TC = ("tf32", "bf16", "fp16", "int8")
A100_40 = _spec("NVIDIA A100 40GB", 1.555, _AMPERE, _AMPERE_TC)
A100_80_SXM = _spec("NVIDIA A100 80GB SXM", 2.039, _AMPERE, _AMPERE_TC)
A100_80_PCIE = _spec("NVIDIA A100 80GB PCIe", 1.935, _AMPERE, _AMPERE_TC)
A10 = _spec("NVIDIA A10", 0.6, {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "int8": 250.0}, _AMPERE_TC)
_ADA_TC = ("tf32", "bf16", "fp16", "fp8", "int8")
L40S = _spec("NVIDIA L40S", 0.864, {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp8": 733.0, "int8": 733.0}, _ADA_TC)
L4 = _spec("NVIDIA L4", 0.3, {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp8": 242.5, "int8": 242.5}, _ADA_TC)
# GeForce: tensor math with FP32 accumulation (what PyTorch's matmuls use) at half rate.
RTX_4090 = _spec(
    "NVIDIA GeForce RTX 4090",
    1.008,
    {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp8": 330.3, "int8": 660.6},
    _ADA_TC,
)
# Volta: fp16 tensor cores only (no bf16, no TF32).
V100_SXM = _spec("NVIDIA V100 SXM2", 0.9, {"fp32": 15.7, "fp16": 125.0}, ("fp16",))
V100_PCIE = _spec("NVIDIA V100 PCIe", 0.9, {"fp32": 14.0, "fp16": 112.0}, ("fp16",))
# AMD, per GCD as PyTorch sees it. fp32 here is the vector rate; MFMA fp32 is twice that.
MI250_GCD = _spec(
    "AMD MI250 / MI210 (one GCD)", 1.6, {"fp32": 22.6, "bf16": 181.0, "int8": 181.0}, ("bf16", "fp16", "int8")
)
MI250X_GCD = _spec("AMD MI250X (one GCD)", 1.6, {"fp32": 23.9, "bf16": 191.5, "int8": 191.5}, ("bf16", "fp16", "int8"))
_CDNA3 = {"fp32": 81.7, "tf32": 653.7, "bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}
MI300X = _spec("AMD MI300X", 5.3, _CDNA3, _HOPPER_TC)
MI325X = _spec("AMD MI325X", 6.0, _CDNA3, _HOPPER_TC)
MI300A = _spec(
    "AMD MI300A",
    5.3,
    {"fp32": 61.3, "tf32": 490.3, "bf16": 980.6, "fp8": 1961.2, "int8": 1961.2},
    _HOPPER_TC,
)

KNOWN = (
    H200,
    H100_SXM,
    H100_PCIE,
    H100_NVL,
    H800,
    H800_PCIE,
    H20,
    B200,
    A100_40,
    A100_80_SXM,
    A100_80_PCIE,
    A10,
    L40S,
    L4,
    RTX_4090,
    V100_SXM,
    V100_PCIE,
    MI250_GCD,
    MI250X_GCD,
    MI300X,
    MI325X,
    MI300A,
)


@dataclasses.dataclass(frozen=True)
class MemoryRule:
    """An HBM part of an architecture, told by its memory size (GiB as the device reports it)."""

    lo_gib: float
    hi_gib: float
    tbps: float
    part: str  # "the H200's (141 GB HBM3e)"
    min_units: int = 0  # at least this many SMs/CUs (H100 SXM 132 against PCIe 114)


@dataclasses.dataclass(frozen=True)
class Arch:
    """Dense matrix rates of one GPU architecture per SM (NVIDIA) or CU (AMD) and clock.

    `flop_per_clock`: rung -> dense FLOP per clock per SM, from the reference part's datasheet
    (peak ÷ SMs ÷ clock); `clock_ghz` is the clock its tensor figures are quoted at."""

    key: str  # "sm_90", "gfx942"
    family: str
    flop_per_clock: dict
    clock_ghz: float
    reference: str  # the part the rates and clock are read from
    tensor_core_rungs: tuple
    memory: tuple = ()  # MemoryRule, for HBM parts
    memory_kind: str = "HBM"
    amd: bool = False

    @property
    def unit(self) -> str:
        """What one compute unit is called: SM or CU."""
        return "CU" if self.amd else "SM"


ARCHES = {
    a.key: a
    for a in (
        Arch(
            "sm_70",
            "Volta",
            {"fp32": 128, "fp16": 1024},
            1.53,
            "V100 SXM2: 125 TFLOP/s fp16 = 80 SMs × 1,024 × 1.53 GHz",
            ("fp16",),
            (
                MemoryRule(15.0, 16.5, 0.9, "the V100's (16 GB HBM2)"),
                MemoryRule(31.0, 32.5, 0.9, "the V100's (32 GB HBM2; the V100S has 1.13)"),
            ),
        ),
        Arch(
            "sm_75",
            "Turing",
            {"fp32": 128, "fp16": 1024, "int8": 2048},
            1.59,
            "T4: 65 TFLOP/s fp16 = 40 SMs × 1,024 × 1.59 GHz",
            ("fp16", "int8"),
            memory_kind="GDDR6",
        ),
        Arch(
            "sm_80",
            "Ampere",
            {"fp32": 128, "tf32": 1024, "bf16": 2048, "int8": 4096},
            1.41,
            "A100: 312 TFLOP/s bf16 = 108 SMs × 2,048 × 1.41 GHz",
            _AMPERE_TC,
            (
                MemoryRule(22.5, 24.5, 0.933, "the A30's (24 GB HBM2)"),
                MemoryRule(38.0, 41.0, 1.555, "the A100 40GB's (HBM2)"),
                MemoryRule(77.0, 81.0, 1.935, "the A100 80GB PCIe's (HBM2e; the SXM part has 2.04)"),
            ),
        ),
        Arch(
            "sm_86",
            "Ampere (GA10x)",
            {"fp32": 256, "tf32": 512, "bf16": 1024, "int8": 2048},
            1.695,
            "A10: 125 TFLOP/s bf16 = 72 SMs × 1,024 × 1.695 GHz",
            _AMPERE_TC,
            memory_kind="GDDR6",
        ),
        Arch(
            "sm_89",
            "Ada Lovelace",
            {"fp32": 256, "tf32": 512, "bf16": 1024, "fp8": 2048, "int8": 2048},
            2.52,
            "L40S: 362 TFLOP/s bf16 ≈ 142 SMs × 1,024 × 2.52 GHz, its datasheet boost clock",
            _ADA_TC,
            memory_kind="GDDR6",
        ),
        Arch(
            "sm_90",
            "Hopper",
            {"fp32": 256, "tf32": 2048, "bf16": 4096, "fp8": 8192, "int8": 8192},
            1.83,
            "H100 SXM: 989.4 TFLOP/s bf16 = 132 SMs × 4,096 × 1.83 GHz; its FP32 66.9 is at 1.98 GHz",
            _HOPPER_TC,
            (
                MemoryRule(75.0, 82.0, 3.35, "the H100 SXM's (80 GB HBM3)", min_units=132),
                MemoryRule(75.0, 82.0, 2.0, "the H100 PCIe's (80 GB HBM2e)"),
                MemoryRule(90.0, 94.5, 3.9, "the H100 NVL's (94 GB HBM3)"),
                MemoryRule(94.5, 98.0, 4.0, "the H20's and GH200 96GB's (96 GB HBM3)"),
                MemoryRule(136.0, 142.0, 4.8, "the H200's (141 GB HBM3e)"),
                MemoryRule(142.0, 150.0, 4.9, "the GH200 144GB's (HBM3e)"),
            ),
        ),
        Arch(
            "sm_100",
            "Blackwell",
            {"fp32": 256, "tf32": 4096, "bf16": 8192, "fp8": 16384, "fp4": 32768, "int8": 16384},
            1.86,
            "B200: 2,250 TFLOP/s bf16 ≈ 148 SMs × 8,192 × 1.86 GHz",
            ("tf32", "bf16", "fp16", "fp8", "fp4", "int8"),
            (
                MemoryRule(170.0, 200.0, 8.0, "the B200's (180–192 GB HBM3e)"),
                MemoryRule(260.0, 300.0, 8.0, "the B300's (288 GB HBM3e)"),
            ),
        ),
        Arch(
            "sm_120",
            "Blackwell (GB20x)",
            {"fp32": 256, "tf32": 512, "bf16": 1024, "fp8": 2048, "fp4": 4096, "int8": 2048},
            2.41,
            "RTX 5090: 104.8 TFLOP/s fp32 = 170 SMs × 256 × 2.41 GHz; tensor rates per SM as Ada's, FP4 twice FP8",
            ("tf32", "bf16", "fp16", "fp8", "fp4", "int8"),
            memory_kind="GDDR7",
        ),
        Arch(
            "gfx90a",
            "CDNA2",
            {"fp32": 128, "bf16": 1024, "int8": 1024},
            1.7,
            "MI250X: 191.5 TFLOP/s bf16 per GCD = 110 CUs × 1,024 × 1.7 GHz",
            ("bf16", "fp16", "int8"),
            (MemoryRule(60.0, 68.0, 1.6, "one MI250/MI250X GCD's or the MI210's (64 GB HBM2e)"),),
            amd=True,
        ),
        Arch(
            "gfx942",
            "CDNA3",
            {"fp32": 128, "tf32": 1024, "bf16": 2048, "fp8": 4096, "int8": 4096},
            2.1,
            "MI300X: 1,307.4 TFLOP/s bf16 = 304 CUs × 2,048 × 2.1 GHz",
            _HOPPER_TC,
            (
                MemoryRule(100.0, 132.0, 5.3, "the MI300A's (128 GB HBM3)"),
                MemoryRule(185.0, 200.0, 5.3, "the MI300X's (192 GB HBM3)"),
                MemoryRule(250.0, 262.0, 6.0, "the MI325X's (256 GB HBM3e)"),
            ),
            amd=True,
        ),
        Arch(
            "gfx950",
            "CDNA4",
            {"fp32": 128, "bf16": 4096, "fp8": 8192, "fp4": 16384, "int8": 8192},
            2.4,
            "MI355X: 2,516.6 TFLOP/s bf16 = 256 CUs × 4,096 × 2.4 GHz; the MI350X runs at 2.2",
            ("bf16", "fp16", "fp8", "fp4", "int8"),
            (MemoryRule(280.0, 300.0, 8.0, "the MI350X's and MI355X's (288 GB HBM3e)"),),
            amd=True,
        ),
    )
}
_NVIDIA_CC = {
    "7.0": "sm_70",
    "7.2": "sm_70",
    "7.5": "sm_75",
    "8.0": "sm_80",
    "8.6": "sm_86",
    "8.9": "sm_89",
    "9.0": "sm_90",
    "10.0": "sm_100",
    "10.3": "sm_100",
    "12.0": "sm_120",
    "12.1": "sm_120",
}
_AMD_CC = {"9.4": "gfx942", "9.5": "gfx950"}  # ROCm reports gfx9xy as major 9, minor x
GEFORCE_HALVED = ("tf32", "bf16", "fp16", "fp8", "fp4")  # FP32-accumulated tensor math at half rate
CLOCK_GHZ_RANGE = (0.3, 4.0)  # a recorded clock outside this is not a boost clock
BANDWIDTH_TBPS_RANGE = (0.01, 30.0)


def lookup(device: dict | None) -> DeviceSpec | None:
    """The spec for a trace's device (Trace.device: name, memory_bytes, sm_count, compute_capability,
    gcn_arch, warp_size, clocks), by name, else estimated from its properties, or None."""
    if not device:
        return None
    return by_name(device) or estimate(device)[0]


def by_name(device: dict) -> DeviceSpec | None:
    """The named entry that matches the device's name (AMD: or its CU count and memory), or None."""
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
    if re.search(r"(?<![A-Z])H800", upper):
        return H800_PCIE if "PCIE" in upper else H800
    if re.search(r"(?<![A-Z0-9])H20(?![0-9])", upper):
        return H20
    if re.search(r"(?<![A-Z])B200", upper):
        return B200
    if "A100" in upper:
        big = "80GB" in upper or memory > 60 * GIB
        if not big:
            return A100_40
        return A100_80_PCIE if "PCIE" in upper else A100_80_SXM
    if re.search(r"(?<![A-Z0-9])A10(?![0-9A-Z])", upper):
        return A10
    if "L40S" in upper:
        return L40S
    if re.search(r"(?<![A-Z0-9])L4(?![0-9A-Z])", upper):
        return L4
    if re.search(r"RTX 4090(?!\s*D\b)", upper):
        return RTX_4090
    if "V100" in upper:
        return V100_PCIE if "PCIE" in upper else V100_SXM
    for part, spec in (("MI300X", MI300X), ("MI325X", MI325X), ("MI300A", MI300A), ("MI250X", MI250X_GCD)):
        if part in upper:
            return spec
    if "MI250" in upper or "MI210" in upper:
        return MI250_GCD
    if "AMD" in upper or "RADEON" in upper or "INSTINCT" in upper:
        gib = memory / GIB
        if units == 104 and 60 < gib < 68:
            return MI250_GCD
        if units == 110 and 60 < gib < 68:
            return MI250X_GCD
        if units == 304 and 185 < gib < 200:
            return MI300X
        if units == 304 and 250 < gib < 262:
            return MI325X
    return None


def is_amd(device: dict) -> bool:
    """True for an AMD GPU: a gcnArchName, a warp of 64 threads, or an AMD name."""
    name = str(device.get("name") or "").upper()
    return bool(
        device.get("gcn_arch")
        or device.get("warp_size") == 64
        or re.search(r"AMD|RADEON|INSTINCT|(?<![A-Z])MI\d{3}", name)
    )


def architecture(device: dict) -> tuple[Arch | None, str]:
    """(the device's architecture, "") or (None, which property was missing or not tabulated)."""
    cc = device.get("compute_capability")
    gcn = re.match(r"gfx[0-9a-f]+", str(device.get("gcn_arch") or ""))
    if is_amd(device):
        key = gcn.group(0) if gcn else _AMD_CC.get(str(cc))
        if key is None and str(cc) == "9.0" and 60 * GIB < (device.get("memory_bytes") or 0) < 68 * GIB:
            key = "gfx90a"  # 9.0 is gfx906, gfx908 or gfx90a; only gfx90a parts have 64 GB
        if key in ARCHES:
            return ARCHES[key], ""
        if key:
            return None, f"no per-CU rates for {key} (known: {_known(amd=True)})"
        if cc:
            return None, (
                f"no per-CU rates for an AMD GPU of compute capability {cc} without a gcnArchName "
                f"(known: {_known(amd=True)})"
            )
        return None, "its trace records neither a gcnArchName nor a compute capability"
    if not cc:
        return None, "its trace records no compute capability"
    key = _NVIDIA_CC.get(str(cc))
    if key is None:
        return None, f"no per-SM rates for compute capability {cc} (known: {_known(amd=False)})"
    return ARCHES[key], ""


def _known(amd: bool) -> str:
    return ", ".join(k for k, a in ARCHES.items() if a.amd == amd)


def estimate(device: dict) -> tuple[DeviceSpec | None, str]:
    """(a spec built from the device's properties, "") or (None, the number that was missing)."""
    arch, why = architecture(device)
    if arch is None:
        return None, why
    units = device.get("sm_count")
    if not isinstance(units, int) or isinstance(units, bool) or units <= 0:
        return None, f"its trace records no {arch.unit} count, so {arch.key} per-{arch.unit} rates give no peak"
    clock, clock_text = _clock(device, arch)
    rates = dict(arch.flop_per_clock)
    name = str(device.get("name") or "").strip()
    geforce = "GEFORCE" in name.upper() and arch.memory_kind != "HBM"
    if geforce:
        rates = {r: v / 2 if r in GEFORCE_HALVED else v for r, v in rates.items()}
    peaks = {r: round(units * v * clock / 1000, 1) for r, v in rates.items()}
    hbm, bw_text, missing = _bandwidth(device, arch, units)
    label = (
        f"{arch.key} ({arch.family})"
        if arch.amd
        else f"compute capability {device.get('compute_capability')} ({arch.family})"
    )
    bf16 = f"{peaks['bf16']:,.0f} TFLOP/s bf16" if "bf16" in peaks else f"{peaks['fp16']:,.0f} TFLOP/s fp16"
    source = (
        f"estimated from {units} {arch.unit}s of {label} at {clock_text}: {bf16} "
        f"({arch.reference}){'; GeForce: FP32-accumulated tensor rates halved' if geforce else ''}; "
        f"bandwidth {bw_text}; achievable {_ratio_text()}"
    )
    shown = name or f"unnamed {arch.family} GPU ({units} {arch.unit}s)"
    return _spec(shown, hbm, peaks, arch.tensor_core_rungs, source=source, estimated=True, missing=missing), ""


def _clock(device: dict, arch: Arch) -> tuple[float, str]:
    khz = device.get("clock_khz")
    if isinstance(khz, (int, float)) and not isinstance(khz, bool):
        ghz = khz / 1e6
        if CLOCK_GHZ_RANGE[0] <= ghz <= CLOCK_GHZ_RANGE[1]:
            return ghz, f"its recorded boost clock of {ghz:.2f} GHz"
    return arch.clock_ghz, f"a typical clock of {arch.clock_ghz:g} GHz"


def _bandwidth(device: dict, arch: Arch, units: int) -> tuple[float, str, str]:
    """(TB/s or NaN, how it was found, why it is missing or "")."""
    mem_khz, bus = device.get("memory_clock_khz"), device.get("memory_bus_bits")
    if not arch.amd and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (mem_khz, bus)):
        assert isinstance(mem_khz, int) and isinstance(bus, int)
        tbps = round(mem_khz * 1e3 * 2 * bus / 8 / 1e12, 3)  # double data rate × bus width in bytes
        if BANDWIDTH_TBPS_RANGE[0] <= tbps <= BANDWIDTH_TBPS_RANGE[1]:
            return (
                tbps,
                f"{tbps:g} TB/s from the recorded memory clock ({mem_khz / 1e3:,.0f} MHz) and bus ({bus:,} bits)",
                "",
            )
    memory = device.get("memory_bytes")
    gib = memory / GIB if isinstance(memory, (int, float)) and memory > 0 else None
    for rule in arch.memory:
        if gib is not None and rule.lo_gib <= gib < rule.hi_gib and units >= rule.min_units:
            return rule.tbps, f"assumed {rule.tbps:g} TB/s, {rule.part}, from its {gib:.1f} GiB", ""
    size = f"{gib:.1f} GiB" if gib is not None else "an unrecorded memory size"
    if arch.memory_kind == "HBM":
        why = f"no HBM bandwidth for {arch.key} with {size}: no {arch.family} part of that memory size is tabulated"
    else:
        why = (
            f"no memory bandwidth for {arch.key} with {size}: a {arch.memory_kind} card's bandwidth depends on "
            "its bus width and memory clock, which the trace does not record (a capture by diagnose does)"
        )
    return math.nan, f"unknown ({why})", why


def describe_unknown(device: dict | None) -> str:
    """Why no spec was found, for a Skip reason: the name not matched and the property that was missing."""
    name = (device or {}).get("name") or "unnamed GPU"
    _, why = estimate(device or {})
    return f"no peak figures for the GPU '{name}': not a named GPU, and {why}; add it to diagnose/base/devices.py"
