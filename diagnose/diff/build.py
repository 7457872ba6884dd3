"""Put a DiffReport together from two Diagnoses (each analysed once; nothing is recomputed)."""

from __future__ import annotations

import statistics

from diagnose.diff import matching
from diagnose.diff.attribution import bucket_changes
from diagnose.diff.changes import finding_changes
from diagnose.diff.model import DiffReport, Side
from diagnose.diff.stats import MIN_EFFECT, gate_trips, step_change, step_samples
from diagnose.base.errors import InputError
from diagnose.model.findings import Diagnosis

STALL_POINTS = 5.0  # mean and median changes this many percentage points apart: some steps stall


def diff_diagnoses(
    before: Diagnosis,
    after: Diagnosis,
    *,
    fail_on_regression: float | None = None,
    min_effect: float = MIN_EFFECT.default,
    paths: tuple[str, str] = ("", ""),
) -> DiffReport:
    """Compare BEFORE with AFTER: the step change and verdict, its attribution, the findings' changes.

    `paths` name the two sides as the user gave them. InputError when a side has no measured step."""
    samples, basis, warnings = _samples(before, after)
    change = step_change(*samples, basis=basis, min_effect=min_effect)
    warnings += stall_warning(*samples)
    buckets = bucket_changes(before, after)
    if _time_base(before) != _time_base(after):
        warnings.append(
            "the two sides' step accounting is on different time bases (one on its unprofiled timing, "
            "the other on its profiled step): bucket changes mix profiled and unprofiled time"
        )
    if before.device.get("name") and after.device.get("name") and before.device["name"] != after.device["name"]:
        warnings.append(f"different devices: {before.device['name']} before, {after.device['name']} after")
    shapes = matching.shape_changes(
        matching.op_table(before.details.inventory), matching.op_table(after.details.inventory)
    )
    report = DiffReport(
        _side(before, paths[0]),
        _side(after, paths[1]),
        change,
        buckets,
        finding_changes(before.findings, after.findings),
        shape_changes=shapes,
        warnings=warnings + _side_warnings(before, after),
    )
    if fail_on_regression is not None:
        report.gate_pct = fail_on_regression
        report.gate_tripped = gate_trips(change, fail_on_regression)
    return report


def _samples(before: Diagnosis, after: Diagnosis) -> tuple[tuple[list[float], list[float]], str, list[str]]:
    """Both sides' per-step times on one basis: unprofiled where both have them, else profiled."""
    unprof_b, prof_b = step_samples(before.capture, before.details.steps)
    unprof_a, prof_a = step_samples(after.capture, after.details.steps)
    if unprof_b and unprof_a:
        return (unprof_b, unprof_a), "unprofiled per-step times (meta.json timing.unprofiled_step_us)", []
    if not prof_b or not prof_a:
        side = "BEFORE" if not prof_b else "AFTER"
        raise InputError(f"{side} has no measured step to compare (no GPU activity in its trace)")
    warnings = []
    if unprof_b or unprof_a:
        warnings.append("only one side has unprofiled step times: both are compared on profiled per-step durations")
    if min(len(prof_b), len(prof_a)) < 5:
        warnings.append(f"few steps ({len(prof_b)} before, {len(prof_a)} after): the interval is wide")
    return (prof_b, prof_a), "profiled per-step durations from the traces", warnings


def stall_warning(before: list[float], after: list[float], points: float = STALL_POINTS) -> list[str]:
    """A warning when the mean step moved `points` percentage points more than the median did: some steps of
    one side are much slower than the rest (a DataLoader that falls behind, a sync every few steps). The
    verdict compares medians, which such steps leave alone; a run pays the mean (base/step_timing.py)."""
    if not before or not after or statistics.fmean(before) <= 0 or statistics.median(before) <= 0:
        return []
    mean_pct = (statistics.fmean(after) / statistics.fmean(before) - 1) * 100
    median_pct = (statistics.median(after) / statistics.median(before) - 1) * 100
    if abs(mean_pct - median_pct) < points:
        return []
    return [
        f"the mean step changed by {mean_pct:+.1f} % and the median by {median_pct:+.1f} %: some steps are much "
        "slower than the rest on one side (a DataLoader falling behind, a sync every few steps); the verdict "
        "compares medians, and a run pays the mean"
    ]


def _time_base(d: Diagnosis) -> bool:
    return bool(d.summary.unprofiled_step_time_us)


def _side(d: Diagnosis, path: str) -> Side:
    return Side(d.target, d.device, d.summary.step_time_us, d.verdict, [f.rule for f in d.findings], str(path))


def _side_warnings(before: Diagnosis, after: Diagnosis) -> list[str]:
    out = []
    for label, d in (("BEFORE", before), ("AFTER", after)):
        if d.workload_failed:
            out.append(f"{label}: the workload failed ({d.capture.get('status')}); its numbers cover what ran")
    return out
