"""Roofline points of the hot ops, and the device's ceilings, for the report (`Details.roofline`: ncu/sections.py).

Each point is one op (op name, shapes and kernel) summed over the measured steps: x is its
arithmetic intensity (FLOPs ÷ bytes), y its achieved throughput (FLOPs ÷ kernel time, the
profiled kernel time). FLOPs always come from the recorded shapes (metrics/work.py); the bytes
are Nsight Compute's measured DRAM bytes where they were attached (a *measured* point), else
the shape-based estimate. Ops without FLOPs or bytes (copies, unknown shapes) have no place on
the chart. Ceilings come from diagnose/base/devices.py: the datasheet HBM bandwidth and compute peaks
(solid) and the achievable ones (dashed).
"""

from __future__ import annotations

from itertools import repeat

import numpy as np
import pandas as pd

from diagnose.base.typed import typed
from diagnose.metrics.views import group_codes
from diagnose.metrics.work import best_bytes
from diagnose.ncu.sections import Roofline
from diagnose.vocabulary.dtypes import NARROW_PRECISIONS, precision, rung_name
from diagnose.vocabulary.kernels import MATRIX_KINDS

MAX_POINTS = 14


def _rung_label(rung: str, spec) -> str:
    """A ceiling's label; FP32 runs on CUDA cores on NVIDIA GPUs, on vector units elsewhere (AMD)."""
    if rung == "fp32" and not str(getattr(spec, "name", "")).startswith("NVIDIA"):
        return "FP32 vector units"
    return rung_name(rung)


def roofline(metrics, limit: int = MAX_POINTS) -> Roofline | None:
    """The roofline points of the ops with the most kernel time and the device's ceilings; None when none fit."""
    spec = metrics.device_spec
    ops = metrics.op_work
    if spec is None or not len(ops):
        return None
    frame = ops.assign(moved=best_bytes(ops), is_measured=ops["dram_bytes"].notna())
    frame = frame[(frame["flops"] > 0) & (frame["moved"] > 0) & (frame["kernel_us"] > 0)]
    if not len(frame):
        return None
    n = max(len(metrics.steps.windows), 1)
    total_us = float(ops["kernel_us"].sum()) or 1.0
    frame = frame[np.fromiter(map(isinstance, frame["kernel"].tolist(), repeat(str)), bool, len(frame))]
    frame = frame.assign(rung=_rungs(frame))
    points = []
    for _, g in frame.groupby(_point_keys(frame), sort=False):
        us = float(g["kernel_us"].sum())
        first = g.iloc[0]
        measured = bool(g["is_measured"].all())
        points.append(
            {
                "kernel": str(first["kernel"]),
                "op": first["op_name"],
                "shapes": first["shapes"],
                "intensity": float(g["flops"].sum() / g["moved"].sum()),
                "tflops": float(g["flops"].sum() / us / 1e6),
                "measured": measured,
                "bound": first["bound"] if measured and isinstance(first["bound"], str) else None,
                "us_per_step": round(us / n, 3),
                "share": round(us / total_us, 4),
                "rung": first["rung"],
                "dram_pct": _pct(g, "dram_pct") if measured else None,
                "sm_pct": _pct(g, "sm_pct") if measured else None,
            }
        )
    points = sorted(points, key=lambda p: p["us_per_step"], reverse=True)[:limit]
    rungs = list(dict.fromkeys(p["rung"] for p in points if spec.peak(p["rung"])))
    ceilings = {
        "device": spec.name,
        "hbm_tbps": spec.hbm_tbps if spec.has_bandwidth else None,
        "achievable_tbps": spec.achievable_tbps if spec.has_bandwidth else None,
        "compute": [
            {
                "rung": r,
                "label": _rung_label(r, spec),
                "peak_tflops": spec.peak(r),
                "achievable_tflops": spec.achievable(r),
            }
            for r in rungs[:3]
        ],
        "source": spec.source,
    }
    return typed(
        {"points": points, "ceilings": ceilings, "measured_points": sum(p["measured"] for p in points)}, Roofline
    )


def _point_keys(frame: pd.DataFrame) -> np.ndarray:
    """One integer per distinct (op, its shapes, kernel) text, numbered in order of first appearance;
    a missing op or shape counts as the text str() writes for it."""
    if not len(frame):
        return np.zeros(0, dtype=np.int64)
    texts = [
        np.array([v if isinstance(v, str) else str(v) for v in frame[column].tolist()], dtype=object)
        for column in ("op_name", "shapes", "kernel")
    ]
    return group_codes(texts)


def _rungs(frame: pd.DataFrame) -> list[str]:
    """Each row's _rung, worked out once per distinct (kind, dtype, tensor-core use)."""
    memo: dict = {}
    keys = [
        (kind, dtype if isinstance(dtype, str) else None, tensor_core is True, tensor_core is False)
        for kind, dtype, tensor_core in zip(
            frame["kind"].to_numpy(object).tolist(),
            frame["dtype"].to_numpy(object).tolist(),
            frame["tensor_core"].tolist(),
        )
    ]
    for key in set(keys):
        kind, dtype, uses, avoids = key
        memo[key] = _rung(kind, dtype, True if uses else False if avoids else None)
    return [memo[key] for key in keys]


def _rung(kind, dtype, tensor_core) -> str:
    """The ceiling an op is held to: its matrix precision on tensor cores, else FP32 on CUDA cores."""
    if kind not in MATRIX_KINDS:
        return "fp32"
    rung = precision(dtype) or "fp32"
    if rung == "fp32" and tensor_core is True:
        return "tf32"
    if rung in NARROW_PRECISIONS and tensor_core is False:
        return "fp32"
    return rung


def _pct(g: pd.DataFrame, column: str) -> float | None:
    w = g["measured_us"]
    if not g[column].notna().all() or not w.sum():
        return None
    return round(float((g[column] * w).sum() / w.sum()), 1)
