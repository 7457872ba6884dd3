"""`--verify` results of one finding as plain lines, shared by the text, Markdown and HTML reports.

Each line: the fix and variant, the estimate, the measured speedup with its 95 % interval, the
numerics verdict, and the fixed step's budget next to the original step's. Reads only the plain
data of `Finding.verify` (diagnose/verify/model.py writes it).
"""

from __future__ import annotations

from diagnose.vocabulary.dtypes import precision_label
from diagnose.vocabulary.units import fmt, percent


def trial_line(trial: dict, estimate: float | None = None, step_us: float | None = None) -> str:
    """One variant: "cuda-graph: verified · measured 2.31× (95 % 2.20–2.45×, est. 2.4×) · outputs match · ..."."""
    head = f"{trial.get('variant')}: {trial.get('verdict') or trial.get('status')}"
    if trial.get("status") != "ok":
        return f"{head} ({trial.get('status')}): {trial.get('error') or 'no detail'}"
    parts = [head]
    if trial.get("speedup") is not None:
        low, high = trial.get("interval") or (None, None)
        gain = f"measured {fmt(trial['speedup'])}×"
        if low is not None:
            gain += f" (95 % {fmt(low)}–{fmt(high)}×"
            gain += f", est. {fmt(estimate)}×)" if estimate else ")"
        parts.append(gain)
    parts.append(numerics_text(trial.get("numerics")))
    budget = budget_text(trial.get("budget"), step_us, trial.get("baseline_us"), trial.get("fixed_us"))
    if budget:
        parts.append(budget)
    return " · ".join(parts)


def numerics_text(numerics: dict | None) -> str:
    """ "outputs match (12 tensors)", "changes results: ..." or "outputs not compared"."""
    if not numerics:
        return "outputs not compared (process-level fix: no in-process baseline)"
    verdict = numerics.get("verdict")
    if verdict == "match":
        return f"outputs match ({numerics.get('tensors', 0)} tensors)"
    if verdict == "within precision":
        return f"outputs {numerics.get('detail') or 'within the rounding of the fix precision'}"
    if verdict == "within run-to-run variation":
        return f"outputs {numerics.get('detail') or 'within the baseline run-to-run variation'}"
    if verdict == "changes results":
        worst, rel = numerics.get("max_abs_diff"), numerics.get("max_rel_error")
        at = f" {precision_label(numerics['precision'])}" if numerics.get("precision") else ""
        return (
            f"changes results ({numerics.get('failed', 0)} of {numerics.get('tensors', 0)} tensors beyond "
            f"the{at} tolerance"
            + (f", max |Δ| {fmt(worst)}" if worst is not None else "")
            + (f", max relative error {percent(rel, 2)}" if rel is not None else "")
            + ")"
        )
    return f"outputs not compared ({numerics.get('detail', '')})"


def budget_text(budget: dict | None, step_us: float | None, baseline_us: float | None, fixed_us: float | None) -> str:
    """The fixed step next to the original: "step 812 → 350 µs · GPU busy 31 % → 88 %"."""
    parts = []
    if baseline_us and fixed_us:
        parts.append(f"step {fmt(baseline_us)} → {fmt(fixed_us)} µs")
    if budget and budget.get("gpu_ops_per_step"):  # a CPU-only run has no GPU budget to show
        parts.append(f"fixed step GPU busy {percent(budget.get('gpu_busy_fraction', 0))}")
        parts.append(f"{fmt(budget['gpu_ops_per_step'])} GPU ops/step")
    return " · ".join(parts)


def verify_lines(finding, step_us: float | None = None) -> list[str]:
    """Every verify entry of `finding` as lines (none when --verify did not run)."""
    lines = []
    for entry in finding.verify or []:
        if not entry.get("applicable"):
            lines.append(f"{entry.get('fix')}: {entry.get('why') or 'needs a code change'}")
            continue
        for trial in entry.get("trials") or []:
            lines.append(f"{entry.get('fix')} → " + trial_line(trial, finding.est_speedup, step_us))
    return lines
