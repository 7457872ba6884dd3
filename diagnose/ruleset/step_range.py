"""Whether each finding holds across an uncertain estimated step.

A trace analysed alone has no step timed without the profiler: its step is estimated by replaying its steps
(metrics/overhead.py), and where the replayed steps lie far apart the estimate is uncertain within their range
(Summary.estimated_step_range_us). A finding whose gate is a share of the step (launch-paced idle, host idle,
copies, syncs) can then fire on the estimate and not on a step nearer the range's fast end, or the other way.
So each rule that fired is run again with the step taken as the fastest and as the slowest replayed step, and
the finding carries its severity at both ends (model/findings.py StepRange): the report says beside it where it
would change. The order of the findings and their estimates stay those of the estimated step.
"""

from __future__ import annotations

import copy

import msgspec

from diagnose.model.findings import QUIET, Finding, StepRange
from diagnose.rulebook.engine import Context, run_rules


def across_step_range(ctx: Context, findings: list[Finding], rules) -> list[Finding]:
    """`findings` with `step_range` filled in where the trace's estimated step is uncertain, else as they are;
    `rules` the rule classes that ran (those of the findings run again at each end of the range)."""
    span = ctx.metrics.estimated_step_range()
    if not span or not findings:
        return findings
    fired = {f.rule for f in findings}
    again = [r for r in rules if r.id in fired]
    fastest, slowest = (_severities(ctx, again, step_us) for step_us in span)
    return [
        msgspec.structs.replace(
            f, step_range=StepRange(span[0], span[1], fastest.get(f.rule, QUIET), slowest.get(f.rule, QUIET))
        )
        for f in findings
    ]


def _severities(ctx: Context, rules, step_us: float) -> dict[str, str]:
    """The severity of each of `rules` that fires with the step taken as `step_us` (a rule that does not fire, or
    is skipped there, is absent)."""
    there = copy.copy(ctx)
    there.metrics = ctx.metrics.at_step(step_us)
    there.warnings = []
    return {f.rule: f.severity for f in run_rules(there, rules).findings}
