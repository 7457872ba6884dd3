"""The one step that turns a trace into a Diagnosis: run the rules, then build the report's data.

Everything a renderer shows is computed here, once, from the trace, its Metrics and the rules'
results: the summary numbers, the capture and device, and the `Details` sections (top kernels with
their Nsight Compute columns, the median step's timeline, the per-step table, memory, roofline,
the ncu join), each a typed section its builder returns (diagnose/model/details.py names where each is
defined), gathered by one Details constructor. The Diagnosis
is made by its one constructor, `Diagnosis.assemble`, which holds it to diagnose/model/invariants.py
(a finding with an impossible number is dropped) and writes the verdict. Renderers (diagnose/report)
read it by field; nothing writes on the trace.
"""

from __future__ import annotations

from typing import Sequence

from diagnose.model.config import Config
from diagnose.rulebook.engine import Context, run_rules, verdict
from diagnose.base.typed import typed
from diagnose.model.details import CAPTURE_KEYS, Details, Device, capture_of
from diagnose.model.findings import Diagnosis, Summary
from diagnose.memory.details import memory_details
from diagnose.metrics import views
from diagnose.ncu.details import enrich_top_kernels, join_warnings, ncu_details
from diagnose.ncu.roofline import roofline
from diagnose.rules import ALL_RULES
from diagnose.ruleset.step_range import across_step_range
from diagnose.trace.model import Trace


def diagnose_trace(
    trace: Trace,
    config: Config | None = None,
    rules: list | None = None,
    *,
    sweep=None,
    ncu=None,
    notes: Sequence[str] = (),
    ncu_label: str = "--ncu",
    ncu_seconds: float | None = None,
    ranks=None,
    context: Context | None = None,
    target: str | None = None,
) -> Diagnosis:
    """Run the rules (all of them, or `rules`) on `trace` and assemble the Diagnosis.

    `sweep` (a diagnose.memory.Sweep) when the trace is one point of a parameter sweep; `ncu` (an
    NcuTable) when Nsight Compute measured the same workload, `ncu_label` naming where it came
    from and `ncu_seconds` how long its pass took; `notes` go first among the warnings; `ranks` (a
    diagnose.rankset.model.RankSet) when the trace is one rank of several analysed together; `context`
    when rules already ran on this trace with this configuration and `ncu` (a rank measured on its
    own before the cross-rank pass): its views are reused, and it takes `sweep` and `ranks`; `target` names
    what was analysed when that is not the trace (a sweep folder), else the capture's target or the trace's path."""
    config = config or Config()
    if context is None:
        ctx = Context(trace, config, sweep=sweep, ncu=ncu, ranks=ranks)
    else:
        ctx, ctx.sweep, ctx.ranks = context, sweep, ranks
    rules = rules or ALL_RULES
    results = across_step_range(ctx, run_rules(ctx, rules), rules)
    return Diagnosis.assemble(
        target=target or (trace.capture or {}).get("target") or trace.source,
        device=typed(trace.device, Device),
        summary=summary(ctx),
        findings=results.findings,
        skipped=results.skipped,
        checked=results.checked,
        capture=capture_of(trace.capture),
        details=details(ctx, ncu, ncu_seconds),
        warnings=[
            *notes,
            *join_warnings(ctx.metrics, ncu_label),
            *trace.warnings,
            *ctx.warnings,
            *ctx.metrics.warnings,
        ],
        verdict=verdict,
    )


def summary(ctx: Context) -> Summary:
    """The headline numbers (Metrics.summary), with how the steps were found; empty for an empty trace."""
    trace = ctx.trace
    if not (trace.has_gpu_activity or len(trace.ops)):
        return Summary()
    out = ctx.metrics.summary()
    how = ((trace.capture or {}).get("steps") or {}).get("how")
    if how and not how.startswith("none found"):
        out["steps_found_by"] = f"{out['steps_found_by']}; the capture marked a step as {how}"
    return typed(out, Summary)


def details(ctx: Context, ncu=None, ncu_seconds: float | None = None) -> Details:
    """The report's supporting sections, each typed by its builder, in one Details; each None when this run has
    nothing for it."""
    metrics = ctx.metrics
    memory = memory_details(ctx)
    if not ctx.trace.has_gpu_activity:
        return Details(memory=memory)
    top = views.top_kernels(metrics)
    measured = None
    if metrics.ncu is not None:
        measured = ncu_details(metrics, ncu, ncu_seconds)
        top = enrich_top_kernels(top, metrics)
    return Details(
        top_kernels=top,
        step_timeline=views.step_timeline(metrics),
        steps=views.per_step(metrics),
        memory=memory,
        roofline=roofline(metrics),
        ncu=measured,
        inventory=views.work_inventory(metrics),
    )


def capture_summary(trace: Trace) -> dict:
    """What the capture said about itself (status, error, steps, timing...), as plain data (a rank
    worker's result; `capture_of` makes the Diagnosis's Capture of it)."""
    meta = trace.capture or {}
    return {k: meta.get(k) for k in CAPTURE_KEYS if k in meta}
