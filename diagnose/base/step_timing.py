"""Step times measured without the profiler: the one summary every reader of a capture uses.

The capture stores each timed step; the median, minimum and mean are derived here, so the report,
the step budget, the rank view and `diagnose diff` all quote the same figure (the true median: the
mean of the two middle steps when their count is even)."""

from __future__ import annotations

import statistics


def timing_summary(source: str, per_step_us: list[float]) -> dict:
    """meta.json `timing` for steps of `per_step_us` microseconds measured as `source` says."""
    if not per_step_us:
        return {"source": source, "unprofiled_step_us": []}
    us = [float(t) for t in per_step_us]
    return {
        "source": source,
        "unprofiled_step_us": [round(t, 3) for t in us],
        "median_us": round(statistics.median(us), 3),
        "min_us": round(min(us), 3),
        "mean_us": round(statistics.fmean(us), 3),
    }


def normalised(timing: dict | None) -> dict | None:
    """`timing` as read from a capture, its summary re-derived from the steps it lists (older
    captures stored the upper median of an even count)."""
    if not timing or not timing.get("unprofiled_step_us"):
        return timing
    return {**timing, **timing_summary(timing.get("source") or "", timing["unprofiled_step_us"])}
