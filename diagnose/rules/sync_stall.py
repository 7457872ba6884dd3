"""sync-stall: host-device synchronisations inside the step drain the GPU's queue.

**Signal.** A synchronising call (`cudaStreamSynchronize`, `cudaDeviceSynchronize`,
`cudaEventSynchronize`, a blocking `cudaMemcpy`), made by `.item()`, `.cpu()`, `.tolist()`,
printing a tensor, boolean tests on GPU values or `torch.cuda.synchronize()`, makes the host
wait until the GPU has finished everything queued. When it returns, nothing is queued: the GPU
idles until the host has dispatched the next kernels. The rule counts the synchronising calls
inside the measured steps, names the CPU ops that made them, and measures the GPU idle time of
gaps that opened while the host sat in one (*after-sync* host waits). It fires when there is at
least `min_syncs_per_step` sync per step and that idle time is at least `min_idle_share` of the
step. Where the iteration is unsure (a short pattern repeated edge to edge: a step may be a part of
one iteration), the syncs are counted over the analysed window, not per repetition.

**Threshold.** 5 % of the step. On the H200 capture of a training step that logs 12 per-layer
activation norms and the loss with `.item()` (13 syncs per step), after-sync idle is 13 % of the
step; the same step keeping the statistics on the device has no sync and 0 %. A single
end-of-step `loss.item()` in a long step costs well under 5 % and is not worth a finding.
Severity is low below `medium_share` (10 %, at most 1.11×), medium from it, high from
`high_share` (25 %, 1.33× or more); sync_item's 13 % is medium.

**Fix.** `remove-sync`: keep values on the GPU (accumulate into a tensor, read once per N steps),
replace data-dependent host branches, and find hidden syncs with
`torch.cuda.set_sync_debug_mode("warn")`.

**Estimate.** The after-sync idle time is what disappears: speedup = step ÷ (step − after-sync
idle). It is an upper bound when the host is also slow to launch (the queue it then builds is
shallow), and a lower bound when the syncs also stop the host from running ahead of long
kernels. Host-side time is rescaled to the unprofiled step time when it was measured.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.metrics import Metrics
from diagnose.metrics.budget import StepBudget
from diagnose.vocabulary.units import percent


class SyncStall(Rule):
    """Host-device syncs inside the step → remove them."""

    id = "sync-stall"
    order = 30
    title = "Sync stalls: host-device synchronisations drain the GPU queue every step"
    cheat_sheet = {
        "bottleneck": "host-device synchronisation inside the loop",
        "signal": ".item(), .cpu(), torch.cuda.synchronize(), blocking copies: GPU idle after each",
        "fix": "keep values on the device; read them once per N steps",
        "impact": "removes the idle gap after every sync and lets the host run ahead",
    }
    needs = ("gpu", "launch-links", "steps", "steady-state")
    thresholds = (
        Threshold("min_syncs_per_step", 1.0, "count", "fire only with at least this many syncs per step"),
        Threshold("min_idle_share", 0.05, "fraction", "fire when after-sync GPU idle is at least this share"),
        Threshold("medium_share", 0.10, "fraction", "after-sync idle share at which severity is medium (low below)"),
        Threshold("high_share", 0.25, "fraction", "after-sync idle share at which severity is high"),
    )

    def check(self, ctx, t):
        """Count syncs per step and the GPU idle time that follows them."""
        s = _measure(ctx.metrics)
        severity = _decide(s, t)
        if isinstance(severity, Quiet):
            return severity
        return _word(self, s, severity, _estimate(s), t)


_WHY = (
    "The host normally runs ahead of the GPU, queueing kernels while earlier ones run. A sync "
    "makes the host wait until that queue is empty, so after it returns the GPU has nothing "
    "to do until the host dispatches again. Values read back every step (a loss, a norm, a "
    "count) can stay on the GPU and be read once every N steps."
)


@dataclasses.dataclass(frozen=True)
class _Syncs:
    """The host syncs of the measured steps and the GPU idle after them (what `_measure` found)."""

    budget: StepBudget
    syncs: pd.DataFrame  # one row per sync call
    n: int  # measured steps
    idle: float  # GPU idle after syncs, µs per step
    unit_known: bool = True  # False: a step may be a part of one iteration (Steps.unit_known)

    @property
    def per(self) -> int:
        """What counts are divided by: the steps, or 1 where the iteration is unsure and the window is the unit."""
        return self.n if self.unit_known else 1

    @property
    def unit(self) -> str:
        """What the sync count is of, in words."""
        return "per step" if self.unit_known else "in the analysed window (the iteration is unsure)"

    @property
    def per_step(self) -> float:
        """Syncs per step (per window where the iteration is unsure)."""
        return len(self.syncs) / self.per

    @property
    def share(self) -> float:
        """The idle after syncs as a share of the step."""
        return self.budget.share(self.idle)


def _measure(m: Metrics) -> _Syncs:
    """The sync calls and the GPU idle that follows them per step."""
    budget = m.budget
    return _Syncs(
        budget=budget,
        syncs=m.sync_calls,
        n=budget.n_steps,
        idle=budget.host_after_sync_us,
        unit_known=m.steps.unit_known,
    )


def _decide(s: _Syncs, t) -> Severity | Quiet:
    """Quiet below `min_syncs_per_step` or below `min_idle_share` of idle after them; else the idle's severity."""
    if s.per_step < t["min_syncs_per_step"] or s.share < t["min_idle_share"]:
        return Quiet(
            f"{s.per_step:.1f} syncs {s.unit}; GPU idle after syncs {percent(s.share)} of the step "
            f"(fires at ≥ {t['min_syncs_per_step']:g} and ≥ {percent(t['min_idle_share'])})"
        )
    return severity_ladder(s.share, t)


def _estimate(s: _Syncs) -> float:
    """The new step: the step less the idle after syncs, never below the GPU busy time."""
    return max(s.budget.step_us - s.idle, s.budget.busy_us, 1e-9)


def _word(rule: Rule, s: _Syncs, severity: Severity, new_step: float, t) -> Finding:
    """The finding: the idle and the syncs against their thresholds, the ops that sync, remove-sync."""
    budget = s.budget
    by_op = s.syncs.groupby("op_name").size().sort_values(ascending=False)
    return Finding(
        rule=rule.id,
        severity=severity,
        title=rule.title,
        evidence=[
            Evidence.share("GPU idle after syncs", s.share, ">=", t["min_idle_share"]),
            Evidence(f"syncs {s.unit}", round(s.per_step, 1), ">=", t["min_syncs_per_step"]),
            Evidence("idle after syncs per step", round(s.idle, 1), unit="µs"),
        ],
        offenders=_offenders(s, by_op),
        fixes=[fix("remove-sync", code=_code(by_op.index[0] if len(by_op) else ""))],
        est_speedup=round(budget.step_us / new_step, 2),
        recoverable_us=round(s.idle, 1),
        basis=f"new step = {budget.step_us:,.0f} − {s.idle:,.0f} µs idle after syncs; {budget.basis}",
        why=_WHY,
    )


def _code(op: str) -> str:
    return (
        'torch.cuda.set_sync_debug_mode("warn")   # reports every sync with a stack trace\n\n'
        f"# instead of a sync per value ({op or '.item()'}):\n"
        "stats.append(x.detach().norm())        # stays on the GPU\n"
        "if step % 100 == 0:\n"
        "    log(torch.stack(stats).tolist())   # one sync per 100 steps\n"
        "    stats.clear()"
    )


def _offenders(s: _Syncs, by_op: pd.Series) -> list[Offender]:
    """The ops that sync most per step, with the call each makes most."""
    syncs = s.syncs
    return top_offenders(
        [
            {
                "op": op,
                "syncs_per_step": round(count / s.per, 1),
                "call": syncs.loc[syncs["op_name"] == op, "name"].mode().iat[0],
            }
            for op, count in by_op.head(8).items()
        ],
        "op",
    )
