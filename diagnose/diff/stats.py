"""Step time before and after, with a confidence interval that survives run-to-run noise.

The per-step times of each side are the unprofiled ones (meta.json `timing.unprofiled_step_us`)
when *both* sides have them, else the profiled per-step durations of the trace (so the two sides
are always on the same time base). The change is the ratio of medians, after ÷ before; its
interval is a percentile bootstrap: both samples are resampled with replacement `RESAMPLES` times
(a fixed seed, so a diff is reproducible), the ratio of the resampled medians taken each time, and
the central `CONFIDENCE` share of those ratios kept. Medians, not means: one slow step (a GC
pause, a clock change) moves a mean, not a median.

The verdict is *slower* when the whole interval lies above 1 and the median change is at least
`diff.min_effect` (a fraction), *faster* when it lies below 1 with the same floor, else *no
significant change*. The floor keeps two captures of the same code (which differ by a little more
than their within-run noise says, since each capture is a new process) from being called
different by a fraction of a percent.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from diagnose.base.thresholds import Threshold
from diagnose.metrics.sections import StepRow
from diagnose.model.details import Capture

RESAMPLES = 4000
CONFIDENCE = 0.95
SEED = 20240614
MIN_EFFECT = Threshold(
    "min_effect",
    0.01,
    "fraction",
    "a change smaller than this share of the step is never called faster or slower",
    kind="fraction",
)
VERDICTS = ("faster", "slower", "no significant change")


@dataclasses.dataclass
class StepChange:
    """Step time before and after, the change and its interval, and the verdict."""

    before_us: float
    after_us: float
    ratio: float
    ratio_low: float
    ratio_high: float
    verdict: str
    basis: str
    n_before: int
    n_after: int
    confidence: float = CONFIDENCE
    method: str = "percentile bootstrap of the ratio of medians"

    @property
    def change_pct(self) -> float:
        """(after ÷ before − 1) in percent: positive is slower."""
        return (self.ratio - 1.0) * 100.0

    @property
    def interval_pct(self) -> tuple[float, float]:
        """The interval of the change, in percent."""
        return (self.ratio_low - 1.0) * 100.0, (self.ratio_high - 1.0) * 100.0

    def excludes_zero(self) -> bool:
        """True when the interval of the change does not contain 0 %."""
        return self.ratio_low > 1.0 or self.ratio_high < 1.0

    def to_dict(self) -> dict:
        """Plain data for diff.json's `step`."""
        low, high = self.interval_pct
        return {
            "before_us": round(self.before_us, 3),
            "after_us": round(self.after_us, 3),
            "change_pct": round(self.change_pct, 3),
            "interval_pct": [round(low, 3), round(high, 3)],
            "confidence": self.confidence,
            "verdict": self.verdict,
            "basis": self.basis,
            "n_before": self.n_before,
            "n_after": self.n_after,
            "method": self.method,
        }


def ratio_interval(
    before, after, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float, float]:
    """(median(after) ÷ median(before), low, high): the ratio and its percentile-bootstrap interval."""
    b = np.asarray(before, dtype=float)
    a = np.asarray(after, dtype=float)
    if not len(b) or not len(a) or np.median(b) <= 0:
        raise ValueError("each side needs at least one positive step time")
    ratio = float(np.median(a) / np.median(b))
    if len(b) < 2 or len(a) < 2:
        return ratio, ratio, ratio
    rng = np.random.default_rng(seed)
    mb = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    ma = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    ratios = ma / np.maximum(mb, 1e-12)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return ratio, float(low), float(high)


def step_change(
    before: list[float],
    after: list[float],
    basis: str,
    min_effect: float = MIN_EFFECT.default,
    confidence: float = CONFIDENCE,
) -> StepChange:
    """Compare two samples of per-step times (µs) and give the verdict."""
    ratio, low, high = ratio_interval(before, after, confidence)
    if low > 1.0 and ratio - 1.0 >= min_effect:
        verdict = "slower"
    elif high < 1.0 and 1.0 - ratio >= min_effect:
        verdict = "faster"
    else:
        verdict = "no significant change"
    return StepChange(
        float(np.median(before)),
        float(np.median(after)),
        ratio,
        low,
        high,
        verdict,
        basis,
        len(before),
        len(after),
        confidence,
    )


def step_samples(capture: Capture, steps: list[StepRow] | None) -> tuple[list[float], list[float]]:
    """(unprofiled per-step times, profiled per-step durations) of one side, µs; either may be empty."""
    timed = capture.timing.unprofiled_step_us if capture.timing else None
    unprofiled = [float(x) for x in timed or [] if x and x > 0]
    profiled = [float(s.duration_us) for s in steps or [] if s.duration_us]
    return unprofiled, profiled


def gate_trips(change: StepChange, pct: float) -> bool:
    """`--fail-on-regression PCT`: AFTER slower than BEFORE by more than PCT % with the interval above 0."""
    return change.change_pct > pct and change.ratio_low > 1.0
