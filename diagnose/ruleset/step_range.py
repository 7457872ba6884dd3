"""Whether each finding holds across an uncertain estimated step.

A trace analysed alone has no step timed without the profiler: its step is estimated by replaying its steps
(metrics/overhead.py), and where the replayed steps lie far apart the estimate is uncertain within their range
(Summary.estimated_step_range_us). A finding whose gate is a share of the step (launch-paced idle, host idle,
copies, syncs) can then fire on the estimate and not on a step nearer the range's fast end, or the other way.
So each rule that fired or ran quiet is run again with the step taken as the fastest and as the slowest
replayed step, and the finding or quiet rule carries its verdict at both ends (model/findings.py StepRange): the
report says beside it where that would change. The order of the findings and their estimates stay those of the
estimated step.
"""

from __future__ import annotations

import copy

import msgspec

from diagnose.model.findings import QUIET, StepRange
from diagnose.rulebook.engine import Context, RuleResults, run_rules


def across_step_range(ctx: Context, results: RuleResults, rules) -> RuleResults:
    """`results` with `step_range` filled in on every finding and every quiet rule where the trace's estimated step
    is uncertain, else as they are; `rules` the rule classes that ran (those that fired or ran quiet are run again
    at each end of the range; a skipped rule stays skipped)."""
    span = ctx.metrics.estimated_step_range()
    if not span:
        return results
    judged = {f.rule for f in results.findings} | {c.rule for c in results.checked}
    again = [r for r in rules if r.id in judged]
    (fast_us, fastest), (slow_us, slowest) = (_verdicts(ctx, again, step_us) for step_us in span)
    held_fast, held_slow = _held(span[0], fast_us), _held(span[1], slow_us)

    def at_ends(rule: str) -> StepRange:
        (at_fast, est_fast), (at_slow, est_slow) = fastest.get(rule, NOT_FIRED), slowest.get(rule, NOT_FIRED)
        return StepRange(
            fast_us,
            slow_us,
            at_fast,
            at_slow,
            replayed_fastest_us=held_fast,
            replayed_slowest_us=held_slow,
            est_at_fastest=est_fast,
            est_at_slowest=est_slow,
        )

    return RuleResults(
        [msgspec.structs.replace(f, step_range=at_ends(f.rule)) for f in results.findings],
        [msgspec.structs.replace(c, step_range=at_ends(c.rule)) for c in results.checked],
        results.skipped,
    )


NOT_FIRED = (QUIET, None)


def _held(replayed_us: float, judged_us: float) -> float:
    """The replayed step where the end judged was held to a bound the trace sets (budget.at_step), else 0."""
    replayed = round(replayed_us, 1)
    return replayed if abs(replayed - judged_us) >= 0.05 else 0.0


def _verdicts(ctx: Context, rules, step_us: float) -> tuple[float, dict[str, tuple[str, float | None]]]:
    """The step judged for `step_us` (no shorter than the step's GPU-side time, no longer than all the host-side idle
    the trace recorded allows: budget.at_step) and the severity and estimated speedup of each of `rules` that fires on
    it (a rule that does not fire, or is skipped there, is absent)."""
    there = copy.copy(ctx)
    there.metrics = ctx.metrics.at_step(step_us)
    there.warnings = []
    fired = run_rules(there, rules).findings
    return round(there.metrics.budget.step_us, 1), {f.rule: (f.severity, f.est_speedup) for f in fired}
