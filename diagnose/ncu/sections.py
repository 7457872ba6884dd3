"""The roofline and Nsight Compute sections of the report (`Details.roofline`, `Details.ncu`), typed:
ncu/roofline.py and ncu/details.py build them."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from diagnose.base.typed import Number, Row


class RooflinePoint(msgspec.Struct, frozen=True):
    """One op on the roofline (ncu/roofline.py): arithmetic intensity, achieved TFLOP/s, measured or estimated."""

    kernel: str
    op: str | None
    shapes: str | None
    intensity: Number
    tflops: Number
    measured: bool
    bound: str | None
    us_per_step: Number
    share: Number
    rung: str | None
    dram_pct: Number | None = None
    sm_pct: Number | None = None


class ComputeCeiling(msgspec.Struct, frozen=True):
    """One compute roof: its precision rung, the datasheet peak and what is achievable."""

    rung: str
    label: str
    peak_tflops: Number | None
    achievable_tflops: Number | None


class Ceilings(msgspec.Struct, frozen=True):
    """The device's roofs: memory bandwidth (None when unknown) and one compute roof per rung shown."""

    device: str
    hbm_tbps: Number | None
    achievable_tbps: Number | None
    compute: list[ComputeCeiling]
    source: str


class Roofline(msgspec.Struct, frozen=True):
    """Roofline points of the ops with the most kernel time, and the device's ceilings (ncu/roofline.py)."""

    points: list[RooflinePoint]
    ceilings: Ceilings
    measured_points: int


class NcuKernel(Row, frozen=True):
    """One kernel of a step as Nsight Compute measured it (ncu/details.py)."""

    kernel: str
    measured_us: Number | None
    profiled_us: Number | None
    sm_pct: Number | None
    memory_pct: Number | None
    dram_pct: Number | None
    tensor_pct: Number | None
    occupancy_pct: Number | None
    dram_mb: Number | None
    bound: str | None
    why: str | None


class NcuThresholds(msgspec.Struct, frozen=True):
    """The numbers that class a measured kernel (ncu/classify.py THRESHOLDS), as the run used them; None in a
    findings.json written before a threshold existed."""

    LATENCY_PCT: Number | None = None
    LEAD_PCT: Number | None = None
    SATURATED_PCT: Number | None = None
    TENSOR_PCT: Number | None = None
    LOW_OCCUPANCY_PCT: Number | None = None
    TINY_US: Number | None = None
    MANY_LAUNCHES: Number | None = None


class Ncu(msgspec.Struct, frozen=True):
    """The Nsight Compute join (ncu/details.py): what matched, what did not, and the measured kernels."""

    source: str
    summary: str
    matched: int
    ncu_rows: int
    step_kernels: int
    coverage: Number
    steps_joined: int
    range: str  # the steps joined, in words
    unmatched_ncu: list[str]
    unmeasured: list[str]
    unmeasured_count: int
    thresholds: NcuThresholds
    kernels: list[NcuKernel]
    seconds: Number | UnsetType = UNSET  # how long the ncu pass took, when this run made it
