"""`--verify` results of one finding as plain lines, shared by the text, Markdown and HTML reports.

Each line: the fix and variant, the estimate, the measured speedup with its 95 % interval, the
numerics verdict, and the fixed step's budget next to the original step's. Reads the typed
`Finding.verify` entries (diagnose.model.findings Verify; diagnose/verify/model.py writes them).
"""

from __future__ import annotations

from diagnose.model.findings import Numerics, Trial, TrialBudget
from diagnose.vocabulary.dtypes import precision_label
from diagnose.vocabulary.units import fmt, percent


def trial_line(trial: Trial, estimate: float | None = None, step_us: float | None = None) -> str:
    """One variant: "cuda-graph: verified · measured 2.31× (95 % 2.20–2.45×, est. 2.4×) · outputs match · ..."."""
    head = f"{trial.variant}: {trial.verdict or trial.status}"
    if trial.status == "already applied":  # the verdict says it; the error is what the step already runs
        return f"{head}: {trial.error}"
    if trial.status != "ok":
        return f"{head} ({trial.status}): {trial.error or 'no detail'}"
    parts = [head]
    if trial.speedup is not None:
        low, high = trial.interval or (None, None)
        gain = f"measured {fmt(trial.speedup)}×"
        if low is not None:
            gain += f" (95 % {fmt(low)}–{fmt(high)}×"
            gain += f", est. {fmt(estimate)}×)" if estimate else ")"
        parts.append(gain)
    parts.append(numerics_text(trial.numerics))
    budget = budget_text(trial.budget, step_us, trial.baseline_us, trial.fixed_us)
    if budget:
        parts.append(budget)
    return " · ".join(parts)


def numerics_text(numerics: Numerics | None) -> str:
    """ "outputs match (12 tensors)", "changes results: ..." or "outputs not compared"."""
    if not numerics:
        return "outputs not compared (process-level fix: no in-process baseline)"
    verdict = numerics.verdict
    if verdict == "match":
        return f"outputs match ({numerics.tensors or 0} tensors)"
    if verdict == "within precision":
        return f"outputs {numerics.detail or 'within the rounding of the fix precision'}"
    if verdict == "within run-to-run variation":
        return f"outputs {numerics.detail or 'within the baseline run-to-run variation'}"
    if verdict == "changes results":
        worst, rel = numerics.max_abs_diff, numerics.max_rel_error
        at = f" {precision_label(numerics.precision)}" if numerics.precision else ""
        return (
            f"changes results ({numerics.failed or 0} of {numerics.tensors or 0} tensors beyond "
            f"the{at} tolerance"
            + (f", max |Δ| {fmt(worst)}" if worst is not None else "")
            + (f", max relative error {percent(rel, 2)}" if rel is not None else "")
            + ")"
        )
    return f"outputs not compared ({numerics.detail or ''})"


def budget_text(
    budget: TrialBudget | None, step_us: float | None, baseline_us: float | None, fixed_us: float | None
) -> str:
    """The fixed step next to the original: "step 812 → 350 µs · GPU busy 31 % → 88 %"."""
    parts = []
    if baseline_us and fixed_us:
        parts.append(f"step {fmt(baseline_us)} → {fmt(fixed_us)} µs")
    if budget and budget.gpu_ops_per_step:  # a CPU-only run has no GPU budget to show
        parts.append(f"fixed step GPU busy {percent(budget.gpu_busy_fraction or 0)}")
        parts.append(f"{fmt(budget.gpu_ops_per_step)} GPU ops/step")
    return " · ".join(parts)


def verify_lines(finding, step_us: float | None = None) -> list[str]:
    """Every verify entry of `finding` as lines (none when --verify did not run)."""
    lines = []
    for entry in finding.verify or []:
        if not entry.applicable:
            lines.append(f"{entry.fix}: {entry.why or 'needs a code change'}")
            continue
        for trial in entry.trials:
            lines.append(f"{entry.fix} → " + trial_line(trial, finding.est_speedup, step_us))
    return lines
