"""The Nsight Compute measurements for findings.json and report.html, typed (ncu/sections.py).

`ncu_details` describes the join (what matched, what did not) and lists the measured kernels of
one step with their class; `enrich_top_kernels` adds measured SM % / DRAM % / tensor % and the
class to the top-kernels table; `join_warnings` says when the measurements barely fit the trace.
"""

from __future__ import annotations

import math

import msgspec
import pandas as pd

from diagnose.base.typed import typed
from diagnose.metrics.sections import TopKernel
from diagnose.ncu import classify
from diagnose.ncu.sections import Ncu
from diagnose.vocabulary.units import percent

MAX_ROWS = 40
LOW_COVERAGE = 0.5


def measured_kernels(metrics) -> pd.DataFrame:
    """The step kernels that got a measurement, with their measured columns (empty without any)."""
    join = metrics.ncu
    if join is None or not len(join.measured):
        return pd.DataFrame()
    return metrics.kernels_in_steps[["name", "step", "dur"]].join(join.measured, how="inner")


def ncu_details(metrics, table, seconds: float | None = None) -> Ncu | None:
    """Details.ncu: source, join summary, classification thresholds and the measured kernels of one step; None
    without a join."""
    join = metrics.ncu
    if join is None:
        return None
    kernels = measured_kernels(metrics)
    rows = []
    if len(kernels):
        first = kernels[kernels["step"] == kernels["step"].min()]
        for r in first.sort_values("measured_us", ascending=False).head(MAX_ROWS).itertuples():
            rows.append(
                {
                    "kernel": r.name,
                    "measured_us": _num(r.measured_us, 2),
                    "profiled_us": _num(r.dur, 2),
                    "sm_pct": _num(r.sm_pct),
                    "memory_pct": _num(r.mem_pct),
                    "dram_pct": _num(r.dram_pct),
                    "tensor_pct": _num(r.tensor_pct),
                    "occupancy_pct": _num(r.occupancy_pct),
                    "dram_mb": _num(r.dram_bytes / 1e6, 2),
                    "bound": r.bound,
                    "why": r.bound_why,
                }
            )
    out = {
        "source": table.source if table is not None else "",
        "summary": join.summary(),
        "matched": join.matched,
        "ncu_rows": join.ncu_rows,
        "step_kernels": join.step_kernels,
        "coverage": round(join.coverage, 4),
        "steps_joined": join.steps,
        "range": join.step_range,
        "unmatched_ncu": join.unmatched_ncu[:10],
        "unmeasured": join.unmeasured,
        "unmeasured_count": join.unmeasured_count,
        "thresholds": dict(classify.THRESHOLDS),
        "kernels": rows,
    }
    if seconds is not None:
        out["seconds"] = round(seconds, 1)
    return typed(out, Ncu)


def join_warnings(metrics, label: str) -> list[str]:
    """Sentences when the measurements did not fit the trace: nothing matched, or too little of a step."""
    join = metrics.ncu
    if join is None:
        return []
    if join.ncu_rows and not join.matched:
        return [
            f"{label}: none of the {join.ncu_rows} measured kernels matched the trace's kernels (another "
            "workload, or other kernels chosen?); the measurements are not used"
        ]
    if join.matched and join.coverage < LOW_COVERAGE:
        return [
            f"{label}: the measured kernels cover only {percent(join.coverage)} of a step's kernel time "
            f"({join.unmeasured_count} of {join.step_kernels} kernels unmeasured); the rest stays estimated"
        ]
    return []


def enrich_top_kernels(top: list[TopKernel], metrics) -> list[TopKernel]:
    """The top kernels, made anew with measured `sm_pct`, `dram_pct`, `tensor_pct` and `bound` where present (a
    kernel Nsight Compute did not measure keeps them unset)."""
    kernels = measured_kernels(metrics)
    if not len(kernels) or not top:
        return top
    weight = kernels["measured_us"]
    grouped = kernels.assign(w=weight).groupby("name", sort=False)
    out = []
    for record in top:
        name = record.name
        if name not in grouped.groups:
            out.append(record)
            continue
        g = grouped.get_group(name)
        w = g["w"]
        extra = {
            col: _num(float((g[src] * w).sum() / w.sum())) if g[src].notna().all() and w.sum() else None
            for col, src in (("sm_pct", "sm_pct"), ("dram_pct", "dram_pct"), ("tensor_pct", "tensor_pct"))
        }
        extra["bound"] = g.groupby("bound")["w"].sum().idxmax() if g["bound"].notna().any() else None
        out.append(msgspec.structs.replace(record, **extra))
    return out


def _num(value, digits: int = 1):
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return None
    return round(float(value), digits)
