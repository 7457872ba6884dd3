"""How far the unchanged step's own time wandered while `--verify` timed the fixes.

Each variant is compared with a baseline timed in its own process just before the fixed step, so a
host that speeds up or slows down between runs moves every baseline. Where the medians of the unchanged
step (the capture's unprofiled steps and each in-process baseline) lie far apart, a speedup no larger
than that spread can be the host's drift rather than the fix: the diagnosis says so in one line.
"""

from __future__ import annotations

from typing import Iterable

from diagnose.verify.model import FixTrial
from diagnose.vocabulary.units import fmt

IN_PROCESS = "timed in the same process just before the fixed step"
"""A trial's baseline_basis where its baseline was timed beside the fixed step (else the capture's own steps)."""
NOTE_AT = 1.10
"""Slowest ÷ fastest median of the unchanged step at which the spread is worth a line."""


def baseline_spread(trials: Iterable[FixTrial], capture_median_us: float | None) -> tuple[float, float, int] | None:
    """(fastest, slowest, how many) of the unchanged step's medians: the capture's and each baseline timed in
    a variant's process; None with fewer than two."""
    medians = [float(capture_median_us)] if capture_median_us else []
    medians += [t.baseline_us for t in trials if t.status == "ok" and t.baseline_us and t.baseline_basis == IN_PROCESS]
    if len(medians) < 2:
        return None
    return min(medians), max(medians), len(medians)


def drift_note(trials: Iterable[FixTrial], capture_median_us: float | None) -> str:
    """The line that says the unchanged step's time wandered by NOTE_AT or more, naming the speedups it
    could explain; "" where it did not."""
    trials = list(trials)
    spread = baseline_spread(trials, capture_median_us)
    if spread is None or spread[1] / spread[0] < NOTE_AT:
        return ""
    fastest, slowest, n = spread
    factor = slowest / fastest
    within = sorted(t.variant for t in trials if t.speedup and t.speedup > 1.0 and t.speedup <= factor)
    named = f" ({', '.join(within)} measured within it)" if within else ""
    return (
        f"--verify: the unchanged step's median ran {fmt(fastest)}-{fmt(slowest)} µs across {n} timings "
        f"(the capture's and the baselines beside each variant), {fmt(factor)}× apart: the host's speed wandered "
        f"while the fixes were timed, so a speedup below {fmt(factor)}× may be drift, not the fix{named}"
    )
