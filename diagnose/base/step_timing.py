"""Step times measured without the profiler: the one summary every reader of a capture uses.

The capture stores each timed step; the median, minimum and mean are derived here. The step a
run pays for is the mean (the timed steps' total over their count): a DataLoader whose workers
fall behind every few steps, or a recompile every few steps, costs the run its slow steps, which a
median leaves out (fixtures/captures/host_loader_workers: median 5.5 ms, mean 26.9 ms, the slow
steps up to 108 ms once the workers' prefetched batches ran out). So the step budget, the report
and the rank view start from `paid_step_us`. `diagnose diff` compares medians (diff/stats.py): two
runs of the same code differ by 1-2 % in their mean step (regress_base and its ten re-runs), more
than its 1 % floor, where their medians do not.
"""

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


def paid_step_us(timing: dict | None) -> float | None:
    """The measured unprofiled step a run pays for: the mean of the timed steps (None without them)."""
    if not timing:
        return None
    return timing.get("mean_us") or None


def set_aside_timing(step_basis: str, capture: dict | None) -> float | None:
    """The capture's measured step when the report's step is the profiled one all the same: the timing,
    synchronised after each step, was longer than the profiled steps (metrics/budget.step_budget)."""
    return paid_step_us((capture or {}).get("timing")) if step_basis == "profiled" else None


def timing_words(timing: dict) -> str:
    """How the measured step is summarised, for a time basis: the mean, with the median beside it
    when the two differ by more than rounding."""
    mean, median = timing.get("mean_us"), timing.get("median_us")
    words = f"unprofiled mean step time {mean:,.0f} µs"
    if median and abs(mean - median) >= 0.005 * median:
        words += f" (median {median:,.0f} µs)"
    return words


def normalised(timing: dict | None) -> dict | None:
    """`timing` as read from a capture, its summary re-derived from the steps it lists (older
    captures stored the upper median of an even count)."""
    if not timing or not timing.get("unprofiled_step_us"):
        return timing
    return {**timing, **timing_summary(timing.get("source") or "", timing["unprofiled_step_us"])}
