"""Put a DiffReport together from two Diagnoses (each analysed once; nothing is recomputed)."""

from __future__ import annotations

import statistics

import msgspec

from diagnose.diff import matching
from diagnose.diff.attribution import bucket_changes
from diagnose.diff.changes import finding_changes
from diagnose.diff.model import DiffReport, Side
from diagnose.diff.stats import MIN_EFFECT, gate_trips, step_change, step_samples
from diagnose.diff.units import match_units
from diagnose.vocabulary.markers import STEP_RANGE_HOWS
from diagnose.base.errors import InputError
from diagnose.model.findings import Diagnosis

# the step basis both sides share, by how each side's samples were taken (`_side_samples`)
BASIS_SENTENCES = {
    "unprofiled": "unprofiled per-step times (meta.json timing.unprofiled_step_us)",
    "estimated": "estimated unprofiled per-step times (each trace's profiled steps scaled to the step its "
    "report estimates without the profiler)",
    "profiled": "profiled per-step durations from the traces",
}
MIXED_BASIS = "each side on its report's own step basis"  # the sides' bases differ
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
    found = [how_found(d.summary) for d in (before, after)]
    unsure = any(f in UNSURE for f in found)
    unit = match_units(before.details.inventory, after.details.inventory, rescale=unsure)
    if unit.rescaled:
        samples = (samples[0], [x / unit.ratio for x in samples[1]])
        basis += f", AFTER per BEFORE-sized unit of work (÷ {unit.ratio:.3g})"
    if unit.note:
        warnings.append(unit.note)
    warnings += _found_differently(before, after)
    change = step_change(*samples, basis=basis, min_effect=min_effect)
    warnings += stall_warning(*samples)
    buckets = bucket_changes(before, after)
    if _time_base(before) != _time_base(after):
        warnings.append(
            "the two sides' step accounting is on different time bases (one on its unprofiled timing, "
            "the other on its profiled step): bucket changes mix profiled and unprofiled time"
        )
    if before.device.name and after.device.name and before.device.name != after.device.name:
        warnings.append(f"different devices: {before.device.name} before, {after.device.name} after")
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
    """Both sides' per-step times, each on its report's own step basis: the steps timed without the profiler
    (a capture folder), else the profiled steps scaled to the step the report estimates without the profiler
    (a trace file), else the profiled steps as recorded."""
    (b, how_b), (a, how_a) = _side_samples(before, "BEFORE"), _side_samples(after, "AFTER")
    warnings = []
    if how_b == how_a:
        basis = BASIS_SENTENCES[how_b]
    else:
        basis = f"{MIXED_BASIS} ({how_b} before, {how_a} after)"
        warnings.append(
            f"the two sides' steps are on different bases ({how_b} before, {how_a} after): each is the step its "
            "report gives, which is the closest either has to the step without the profiler"
        )
    if min(len(b), len(a)) < 5:
        warnings.append(f"few steps ({len(b)} before, {len(a)} after): the interval is wide")
    return (b, a), basis, warnings


def basis_words(basis: str) -> str:
    """A step basis sentence of `_samples` in a few words, for a one-line summary."""
    if basis.startswith(MIXED_BASIS):
        return "each side's own basis"
    short = {sentence: how for how, sentence in BASIS_SENTENCES.items()}.get(basis, "profiled")
    return "estimated unprofiled" if short == "estimated" else short


def _side_samples(d: Diagnosis, label: str) -> tuple[list[float], str]:
    """One side's per-step times on its report's own basis, and which basis that is."""
    unprofiled, profiled = step_samples(d.capture, d.details.steps)
    if unprofiled:
        return unprofiled, "unprofiled"
    if not profiled:
        raise InputError(f"{label} has no measured step to compare (no GPU activity in its trace)")
    estimate = d.summary.estimated_unprofiled_step_time_us
    if estimate:
        scale = estimate / statistics.median(profiled)
        return [x * scale for x in profiled], "estimated"
    return profiled, "profiled"


def _found_differently(before: Diagnosis, after: Diagnosis) -> list[str]:
    """A warning when the two sides' steps were found in different ways (marks on one, a pattern on the other)."""
    kinds = [how_found(d.summary) for d in (before, after)]
    if kinds[0] == kinds[1]:
        return []
    return [f"the steps were found differently: {kinds[0]} before, {kinds[1]} after"]


# ways of finding steps that leave the unit in doubt: the iteration may be any multiple of what was found
UNSURE = ("as one window", "by a repeating pattern whose iteration is unsure")


METHOD_WORDS = {
    "step-ranges": "by step ranges",
    "iteration-marks": "by iteration marks",
    "user-range": "by the user's own range",
    "window": "as one window",
    "pattern": "by a repeating pattern",
}


def how_found(summary) -> str:
    """How a side's steps were found, in the words of the diff's warning: from the summary's steps_method
    and step_unit_known, or, in a findings.json written before those were recorded, from its words."""
    method = summary.steps_method
    if method in METHOD_WORDS:
        if method == "pattern" and summary.step_unit_known is False:
            return UNSURE[1]
        return METHOD_WORDS[method]
    return _how_found_in_words(summary.steps_found_by or "")


def _how_found_in_words(text: str) -> str:
    """How steps were found, read from the steps line of an older findings.json."""
    if text.startswith(STEP_RANGE_HOWS):
        return "by step ranges"
    if text.startswith(("the ends of the optimizer", "the starts of")):
        return "by iteration marks"
    if text.startswith("the user's own range"):
        return "by the user's own range"
    if "one window" in text:
        return "as one window"
    if "unsure" in text:
        return "by a repeating pattern whose iteration is unsure"
    return "by a repeating pattern"


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
    return Side(
        d.target,
        msgspec.structs.asdict(d.device),
        d.summary.step_time_us,
        d.verdict,
        [f.rule for f in d.findings],
        str(path),
    )


def _side_warnings(before: Diagnosis, after: Diagnosis) -> list[str]:
    out = []
    for label, d in (("BEFORE", before), ("AFTER", after)):
        if d.workload_failed:
            out.append(f"{label}: the workload failed ({d.capture.status}); its numbers cover what ran")
    return out
