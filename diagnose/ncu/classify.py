"""Speed-of-light classes of measured kernels: memory-bound, compute-bound or latency-bound.

Nsight Compute's own bottleneck rule compares two throughputs, each a share of its unit's peak:
SM (`sm__throughput`, the busiest SM pipeline or issue slot) and memory
(`gpu__compute_memory_throughput`, the busiest of DRAM, L2 and L1). This module follows it:

1. **latency-bound** when both are below `LATENCY_PCT` (60 %): neither the SMs nor memory are
   busy, so the kernel waits: on too few blocks (`small grid`: fewer blocks than SMs, under one
   wave), on too few resident warps to hide latency (`low occupancy`: achieved occupancy below
   `LOW_OCCUPANCY_PCT`, 25 %), or it is one short launch among many (`tiny launch`: under
   `TINY_US`, 5 µs, about what launching it costs, in a step of at least `MANY_LAUNCHES`, 20).
   Otherwise it stalls on dependent memory accesses or synchronisation (ncu's warp-state
   section says which).
2. **compute-bound** when SM throughput is at least 60 % and leads memory by more than
   `LEAD_PCT` (10 points), ncu's margin for "compute-heavy".
3. **memory-bound** when memory throughput is at least 60 % and SM throughput does not lead it
   by more than 10 points. When both are within 10 points of each other (ncu: "balanced"), the
   tensor pipe decides: a kernel whose tensor pipe is at least `TENSOR_PCT` (50 %) active is
   matrix math and counts as compute-bound; any other (an elementwise kernel whose SM share is
   load/store issue, e.g. SiLU at SM 73 %, DRAM 75 % on the H200) is memory-bound.

A class whose deciding throughput is at least `SATURATED_PCT` (80 %) is marked saturated: that
unit is near its peak and only less work (fewer bytes, fewer or cheaper FLOPs) makes it faster.
"""

from __future__ import annotations

import math

import pandas as pd

LATENCY_PCT = 60.0
LEAD_PCT = 10.0
SATURATED_PCT = 80.0
TENSOR_PCT = 50.0
LOW_OCCUPANCY_PCT = 25.0
TINY_US = 5.0
MANY_LAUNCHES = 20
THRESHOLDS = {
    "LATENCY_PCT": LATENCY_PCT,
    "LEAD_PCT": LEAD_PCT,
    "SATURATED_PCT": SATURATED_PCT,
    "TENSOR_PCT": TENSOR_PCT,
    "LOW_OCCUPANCY_PCT": LOW_OCCUPANCY_PCT,
    "TINY_US": TINY_US,
    "MANY_LAUNCHES": MANY_LAUNCHES,
}
CLASSES = ("memory-bound", "compute-bound", "latency-bound", "unknown")


def classify_kernel(
    sm_pct: float,
    mem_pct: float,
    *,
    tensor_pct: float = math.nan,
    blocks: float = math.nan,
    sm_count: float = math.nan,
    occupancy_pct: float = math.nan,
    duration_us: float = math.nan,
    launches_in_step: int = 0,
) -> tuple[str, str]:
    """(class, why) of one kernel from its measured SM and memory throughput (% of peak)."""
    if _nan(sm_pct) or _nan(mem_pct):
        return "unknown", "SM or memory throughput not measured"
    sol = f"SM {sm_pct:.0f} %, memory {mem_pct:.0f} %"
    if max(sm_pct, mem_pct) < LATENCY_PCT:
        return "latency-bound", f"{sol}, both < {LATENCY_PCT:.0f} %: " + _latency_reason(
            blocks, sm_count, occupancy_pct, duration_us, launches_in_step
        )
    lead = sm_pct - mem_pct
    if sm_pct >= LATENCY_PCT and lead > LEAD_PCT:
        return "compute-bound", f"{sol}: SM leads by {lead:.0f} > {LEAD_PCT:.0f} points" + _sat(sm_pct)
    if abs(lead) <= LEAD_PCT and not _nan(tensor_pct) and tensor_pct >= TENSOR_PCT:
        return "compute-bound", (
            f"{sol}, within {LEAD_PCT:.0f} points; tensor pipe {tensor_pct:.0f} % >= {TENSOR_PCT:.0f} %" + _sat(sm_pct)
        )
    if mem_pct >= LATENCY_PCT:
        lead_text = "memory leads" if lead < -LEAD_PCT else f"within {LEAD_PCT:.0f} points, tensor pipe idle"
        return "memory-bound", f"{sol}: {lead_text}" + _sat(mem_pct)
    return "compute-bound", f"{sol}: SM >= {LATENCY_PCT:.0f} %, memory < {LATENCY_PCT:.0f} %" + _sat(sm_pct)


def _latency_reason(blocks, sm_count, occupancy_pct, duration_us, launches_in_step) -> str:
    reasons = []
    if not _nan(blocks) and not _nan(sm_count) and sm_count and blocks < sm_count:
        plural = "s" if blocks != 1 else ""
        reasons.append(f"small grid ({blocks:,.0f} block{plural} for {sm_count:.0f} SMs, under one wave)")
    if not _nan(occupancy_pct) and occupancy_pct < LOW_OCCUPANCY_PCT:
        reasons.append(f"low occupancy ({occupancy_pct:.0f} % < {LOW_OCCUPANCY_PCT:.0f} % of warps active)")
    if not _nan(duration_us) and duration_us < TINY_US and launches_in_step >= MANY_LAUNCHES:
        reasons.append(f"tiny launch ({duration_us:.1f} µs < {TINY_US:.0f} µs, one of {launches_in_step} in the step)")
    return "; ".join(reasons) or "full waves, yet stalled (dependent memory accesses or synchronisation)"


def _sat(pct: float) -> str:
    return f"; saturated (>= {SATURATED_PCT:.0f} %)" if pct >= SATURATED_PCT else ""


def _nan(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value)


def classify_table(kernels: pd.DataFrame, sm_count: float | None = None, launches_in_step: int = 0) -> pd.DataFrame:
    """`bound` and `bound_why` columns for an NcuTable's kernels.

    A step's launch count is the larger of `launches_in_step` (what the trace saw) and the rows of
    the kernel's NVTX range (ncu may have measured only the hot kernels).
    """
    if not len(kernels):
        return pd.DataFrame({"bound": pd.Series(dtype=object), "bound_why": pd.Series(dtype=object)})
    per_range = kernels.groupby("range", sort=False)["id"].transform("size").clip(lower=launches_in_step)
    out = []
    for row, launches in zip(kernels.itertuples(), per_range):
        sms = row.sm_count if not _nan(row.sm_count) else (sm_count or math.nan)
        mem = row.mem_pct if not _nan(row.mem_pct) else row.dram_pct
        out.append(
            classify_kernel(
                row.sm_pct,
                mem,
                tensor_pct=row.tensor_pct,
                blocks=row.blocks,
                sm_count=sms,
                occupancy_pct=row.occupancy_pct,
                duration_us=row.duration_us,
                launches_in_step=int(launches),
            )
        )
    return pd.DataFrame(out, columns=["bound", "bound_why"], index=kernels.index)
