"""From measurements to a verdict: is the fix faster (the speedup's interval above 1) and are its
outputs the baseline's (the child's assert_close per dtype, diagnose/child/verify.py)?

A fix that changes results beyond the tolerances is "faster but changes results", never "verified";
one within the rounding of the precision it computes in (bf16 autocast, TF32) is verified, and the
report gives its relative error.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from diagnose.diff.stats import ratio_interval

VERIFIED = "verified"
CHANGES = "faster but changes results"
UNCOMPARED = "faster, outputs not compared"
NO_GAIN = "no measured speedup"
SLOWER = "slower"
FAILED = "failed to apply"
NEEDS_CODE = "needs a code change"
ALREADY = "already in the code"
VERDICTS = (VERIFIED, CHANGES, UNCOMPARED, NO_GAIN, SLOWER, FAILED, NEEDS_CODE, ALREADY)


def speedup(baseline_us: list[float], fixed_us: list[float]) -> tuple[float, float, float]:
    """(speedup, low, high): median(baseline) ÷ median(fixed) and its 95 % percentile-bootstrap interval."""
    ratio, low, high = ratio_interval(baseline_us, fixed_us)  # fixed ÷ baseline
    return 1.0 / ratio, 1.0 / high, 1.0 / low


def verdict(status: str, low: float | None, high: float | None, numerics: dict | None) -> str:
    """The trial's verdict from its status, the speedup's interval and the numerics check."""
    if status == "not applicable":
        return NEEDS_CODE
    if status == "already applied":
        return ALREADY
    if status != "ok" or low is None or high is None:
        return FAILED
    changed = (numerics or {}).get("verdict") == "changes results"
    if low > 1.0:
        if changed:
            return CHANGES
        if (numerics or {}).get("verdict") not in ("match", "within precision", "within run-to-run variation"):
            return UNCOMPARED
        return VERIFIED
    if high < 1.0:
        return SLOWER
    return NO_GAIN


class _Judged(Protocol):
    """What `rank` reads of a FixTrial (verify/model.py, which imports this module)."""

    verdict: str
    speedup: float | None


def rank(trial: _Judged) -> tuple:
    """Sort key: verified first, then faster with other caveats, then by speedup."""
    order = {VERIFIED: 5, UNCOMPARED: 4, CHANGES: 3, NO_GAIN: 2, SLOWER: 1, FAILED: 0, NEEDS_CODE: 0, ALREADY: 0}
    return order.get(trial.verdict, 0), trial.speedup or 0.0


def median(values: list[float]) -> float | None:
    """The median, None for no values."""
    return float(np.median(values)) if len(values) else None
