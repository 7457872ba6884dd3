"""optimizer-step: a single-tensor optimizer launches a few small kernels per parameter tensor.

**Signal.** torch.optim marks each step in the trace (`Optimizer.step#AdamW.step`). The rule finds
those ranges inside the measured steps, the kernels launched from them and the ops they ran
(diagnose/metrics/optimizer.py). With `foreach=False` (or an optimizer that has no multi-tensor
path) the step runs its update one parameter tensor at a time: AdamW launches about ten elementwise
kernels per tensor (weight decay, the two moments, the square root, the division, the update), each
a few µs of host dispatch for a few µs of GPU work. The rule fires when such a single-tensor step
takes at least `min_share` of the step. Optimizers that already run `_foreach_` or `_fused_` ops
are quiet.

**Threshold.** 15 % of the step (at most ~1.18× to gain below it). On the H200 capture of AdamW
`foreach=False` over a 48-block MLP (opt_single) the optimizer step launches 1,536 of the step's
2,115 kernels and its range is 60 % of the step; the same model with `foreach=True` or `fused=True`
(opt_foreach, opt_fused) and the training captures that use PyTorch's default (foreach on CUDA) are
quiet.

**Fix.** `fused-optimizer`: `torch.optim.AdamW(params, fused=True)` (one kernel per chunk of
tensors, all of the update in registers), or `foreach=True` (a few multi-tensor kernels);
`zero_grad(set_to_none=True)` (PyTorch's default since 2.0) instead of zeroing every gradient; and
`clip_grad_norm_(…, foreach=True)` when gradients are clipped. A fused or capturable optimizer is
also what lets CUDA graphs capture the step: the launch-overhead rule names this fix first when a
single-tensor optimizer launches most of the step's kernels.

**Estimate.** fused step = step − optimizer time + fused optimizer time. The optimizer time is the
share of the profiled step spent inside its ranges, applied to the (unprofiled) step. The fused time
is the larger of the optimizer kernels' GPU time × the share of their memory traffic a fused kernel
keeps (`FUSED_TRAFFIC`: AdamW reads the parameter, gradient and both moments and writes three of
them, 7 passes over the parameters, against ≈20 for its single-tensor ops; SGD with momentum 5
against 8) and `fused_host_us` of host work per optimizer call. On opt_single: 2.31×; measured 2.49× with
`fused=True`, 2.39× with `foreach=True` (docs/measured-fixes.md).
"""

from __future__ import annotations

import dataclasses

from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix, optimizer_code
from diagnose.metrics.optimizer import SINGLE
from diagnose.metrics.optimizer import OptimizerStep as OptimizerRun  # the rule's class holds the name
from diagnose.metrics.budget import StepBudget
from diagnose.vocabulary.units import percent

FUSED_TRAFFIC = {"Adam": 7 / 20, "AdamW": 7 / 20, "SGD": 5 / 8}
DEFAULT_TRAFFIC = 0.5  # other optimizers: half the passes


class OptimizerStep(Rule):
    """A single-tensor optimizer step → fused (or foreach) optimizer."""

    id = "optimizer-step"
    order = 40
    title = "Single-tensor optimizer: the optimizer step launches small kernels one parameter at a time"
    cheat_sheet = {
        "bottleneck": "the optimizer step, one parameter tensor at a time",
        "signal": "Optimizer.step# range with many small elementwise kernels and no _foreach_/_fused_ ops",
        "fix": "fused=True or foreach=True optimizers; zero_grad(set_to_none=True); foreach grad clipping",
        "impact": "the optimizer step in a few kernels instead of ~10 per parameter tensor",
    }
    needs = ("gpu", "launch-links", "steps")
    thresholds = (
        Threshold(
            "min_share", 0.15, "fraction", "fire when a single-tensor optimizer takes at least this share of the step"
        ),
        Threshold("fused_host_us", 100.0, "µs", "host time of one fused optimizer call"),
        Threshold("high_share", 0.40, "fraction", "optimizer share at which severity is high"),
    )

    def check(self, ctx, t):
        """Find the optimizer's steps and weigh a single-tensor one against the step."""
        found = ctx.metrics.optimizer_steps
        if not found:
            return Quiet("no Optimizer.step range inside the measured steps")
        single = [o for o in found if o.impl == SINGLE]
        if not single:
            what = ", ".join(f"{o.name} ({o.impl})" for o in found)
            return Quiet(f"the optimizer already runs multi-tensor kernels: {what}")
        x = _measure(ctx, found, max(single, key=lambda o: o.time_share), t)
        severity = _decide(x, t)
        if isinstance(severity, Quiet):
            return severity
        return _word(self, x, severity, _estimate(x), t)


_WHY = (
    "A single-tensor optimizer updates each parameter tensor with its own sequence of elementwise "
    "ops: for AdamW about ten kernels per tensor, each reading and writing the whole tensor, each "
    "costing the host a dispatch. With hundreds of parameter tensors that is thousands of small "
    "launches per step, and the GPU waits between them. A foreach optimizer launches one kernel "
    "per op for a list of tensors; a fused one does the whole update in one pass per chunk, "
    "reading the parameter, gradient and moments once."
)


@dataclasses.dataclass(frozen=True)
class _Single:
    """The single-tensor optimizer that takes the most of the step, and its fused cost (what `_measure` found)."""

    found: list[OptimizerRun]  # every optimizer step in the measured steps
    opt: OptimizerRun  # the single-tensor one with the largest share of the step
    budget: StepBudget
    opt_us: float  # its share of the step, µs
    traffic: float  # share of its GPU time a fused step keeps
    fused_us: float  # a fused step: its GPU time × `traffic`, at least `fused_host_us` per call


def _measure(ctx, found: list[OptimizerRun], opt: OptimizerRun, t: dict[str, float]) -> _Single:
    """The optimizer's time in the step and what a fused step would take."""
    budget = ctx.metrics.budget
    traffic = FUSED_TRAFFIC.get(opt.name, DEFAULT_TRAFFIC)
    return _Single(
        found=found,
        opt=opt,
        budget=budget,
        opt_us=opt.time_share * budget.step_us,
        traffic=traffic,
        fused_us=max(opt.gpu_us * traffic, t["fused_host_us"] * opt.calls),
    )


def _decide(x: _Single, t: dict[str, float]) -> Severity | Quiet:
    """Quiet when the optimizer takes less than `min_share` of the step, or a fused step would take as long;
    else high from `high_share`, medium below."""
    opt = x.opt
    if opt.time_share < t["min_share"]:
        return Quiet(
            f"{opt.name} (single-tensor) takes {percent(opt.time_share)} of the step < "
            f"{percent(t['min_share'])} ({opt.kernels:.0f} of {opt.step_kernels:.0f} kernels)"
        )
    if x.fused_us >= x.opt_us:
        return Quiet(
            f"{opt.name} (single-tensor) takes {percent(opt.time_share)} of the step, but a fused step "
            f"would take about as long ({x.fused_us:,.0f} µs ≥ {x.opt_us:,.0f} µs)"
        )
    return severity_ladder(opt.time_share, t, medium=None)


def _estimate(x: _Single) -> float:
    """The fused step: the step less the optimizer plus the fused optimizer step."""
    return x.budget.step_us - x.opt_us + x.fused_us


def _word(rule: Rule, x: _Single, severity: Severity, fixed: float, t: dict[str, float]) -> Finding:
    """The finding: the optimizer's share, kernels and GPU time; every optimizer step; fused-optimizer."""
    opt, budget = x.opt, x.budget
    return Finding(
        rule=rule.id,
        severity=severity,
        title=rule.title,
        evidence=[
            Evidence.share(f"{opt.name}.step share of the step", opt.time_share, ">=", t["min_share"]),
            Evidence("kernels launched by the optimizer per step", round(opt.kernels, 1)),
            Evidence.share("share of the step's kernels", opt.launch_share),
            Evidence("optimizer GPU time per step", round(opt.gpu_us, 1), unit="µs"),
            Evidence("implementation", f"{opt.impl} (no _foreach_ or _fused_ ops)"),
        ],
        offenders=_offenders(x.found),
        fixes=[fix("fused-optimizer", code=optimizer_code(opt.name))],
        est_speedup=round(budget.step_us / fixed, 2),
        recoverable_us=round(x.opt_us - x.fused_us, 2),
        basis=(
            f"fused step ≈ {budget.step_us:,.0f} − {x.opt_us:,.0f} µs optimizer ({percent(opt.time_share)} of the "
            f"profiled step) + max({opt.gpu_us:,.0f} µs GPU × {x.traffic:.2f} traffic kept, "
            f"{t['fused_host_us']:g} µs × {opt.calls:g} calls) = {fixed:,.0f} µs; {budget.basis}"
        ),
        why=_WHY,
    )


def _offenders(found: list[OptimizerRun]) -> list[Offender]:
    """Every optimizer step of the measured steps: implementation, kernels, GPU time, share of the step."""
    return top_offenders(
        [
            {
                "op": f"Optimizer.step#{o.name}.step",
                "implementation": o.impl,
                "kernels_per_step": round(o.kernels, 1),
                "gpu_us_per_step": round(o.gpu_us, 1),
                "share_of_step": round(o.time_share, 3),
            }
            for o in found
        ],
        "op",
        n=len(found),
    )
