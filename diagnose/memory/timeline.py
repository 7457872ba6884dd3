"""Allocated and reserved memory over time, from the allocator events of the trace.

torch.profiler(profile_memory=True) records one event per allocation and free, each carrying the
allocator's totals after it: `total_allocated` (bytes held by tensors) and `total_reserved` (bytes
the caching allocator holds from the driver). Between two events the level is that of the first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MAX_POINTS = 600


def memory_timeline(events: pd.DataFrame, windows: list | None = None, max_points: int = MAX_POINTS) -> dict | None:
    """Points [t_us, allocated, reserved] for a chart (at most `max_points`, peaks and troughs kept),
    the step ranges on the same clock, and the peaks; None without allocator events."""
    if events is None or not len(events):
        return None
    points = _thin(events, max_points)
    return {
        "source": "allocator events in the trace (profile_memory=True)",
        "time_unit": "µs",
        "unit": "bytes",
        "events": int(len(events)),
        "points": [
            [round(float(t), 3), float(a), float(r)]
            for t, a, r in points[["ts", "total_allocated", "total_reserved"]].itertuples(index=False)
        ],
        "peak_allocated": float(events["total_allocated"].max()),
        "peak_reserved": float(events["total_reserved"].max()),
        "steps": [
            {"label": f"step {w.index}", "start": round(w.cpu_start, 3), "end": round(w.cpu_end, 3)}
            for w in windows or []
        ],
    }


def _thin(events: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Every event when few; else, per time bucket, its lowest and highest allocated level."""
    if len(events) <= max_points:
        return events
    buckets = max(max_points // 2, 1)
    ts = events["ts"].to_numpy(float)
    edges = np.linspace(ts.min(), ts.max(), buckets + 1)
    bucket = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, buckets - 1)
    grouped = events.assign(_b=bucket).groupby("_b")["total_allocated"]
    keep = pd.Index(grouped.idxmax()).union(pd.Index(grouped.idxmin()))
    return events.loc[keep].sort_values("ts", kind="stable")


def levels_in_steps(events: pd.DataFrame, windows: list | None) -> dict | None:
    """The allocated floor and peak over the measured steps (on the host clock, where allocations are
    recorded), and the level before the first of them; the whole trace without step ranges."""
    if events is None or not len(events):
        return None
    inside = events
    if windows:
        mask = _in_any(events["ts"].to_numpy(float), windows)
        if mask.any():
            inside = events[mask]
    before = events[events["ts"] < inside["ts"].iloc[0]]
    entering = float(before["total_allocated"].iloc[-1]) if len(before) else float(inside["total_allocated"].iloc[0])
    return {
        "floor": float(min(inside["total_allocated"].min(), entering)),
        "peak": float(inside["total_allocated"].max()),
        "reserved_peak": float(inside["total_reserved"].max()),
    }


def _in_any(ts: np.ndarray, windows: list) -> np.ndarray:
    """For each time, whether some window's CPU range [cpu_start, cpu_end] (ends included) holds it:
    the windows that start by then reach furthest to at least it."""
    starts = np.array([w.cpu_start for w in windows], dtype=float)
    order = np.argsort(starts, kind="stable")
    reach = np.maximum.accumulate(np.array([w.cpu_end for w in windows], dtype=float)[order])
    last = np.searchsorted(starts[order], ts, side="right") - 1
    return (last >= 0) & (reach[np.maximum(last, 0)] >= ts)
