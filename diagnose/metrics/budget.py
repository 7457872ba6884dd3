"""Honest step time: what a step costs without the profiler, and how the idle time splits.

torch.profiler adds a few µs of host work to every op, which inflates host-side gaps (on the
bundled decode capture a 2.7 ms step reads as 6.5 ms under the profiler). Kernel durations are
barely touched. So when the capture timed steps without the profiler, the idle time of a real
step is that step time minus the GPU busy time measured in the trace, and it is shared among
the gap classes in the proportions the trace shows for host-side gaps (kernel-wait and other
gaps, which the profiler does not inflate, keep their measured length).

A trace without that timing (one from elsewhere, a bare trace file) gets the unprofiled step that
metrics/overhead.py estimates by replaying its steps without the profiler's own host time:
`on_estimate` rescales the host-side idle to it the same way, and the basis says which share of the
host time is the profiler's own (estimated).
"""

from __future__ import annotations

import dataclasses

from diagnose.base.step_timing import paid_step_us, timing_words
from diagnose.metrics.overhead import OverheadEstimate
from diagnose.vocabulary.units import percent
from diagnose.metrics.steps import Steps
from diagnose.metrics.timeline import Timeline


@dataclasses.dataclass
class StepBudget:
    """Per-step time split into GPU busy and idle classes, in µs, on the honest time base."""

    n_steps: int
    profiled_step_us: float
    unprofiled_step_us: float | None
    busy_us: float
    host_paced_us: float
    host_silent_us: float
    host_after_sync_us: float
    kernel_wait_us: float
    other_wait_us: float
    basis: str
    host_scale: float = 1.0
    estimated_step_us: float | None = None  # the unprofiled step estimated from the trace (on_estimate)
    # the measured step when it was longer than the profiled one (whose steps ran without the timing's syncs)
    synced_step_us: float | None = None

    @property
    def step_us(self) -> float:
        """The step time the estimates start from: unprofiled when measured, else estimated from
        the trace when the budget is on the estimate, else profiled."""
        return self.unprofiled_step_us or self.estimated_step_us or self.profiled_step_us

    @property
    def idle_us(self) -> float:
        """All idle time of one step."""
        return self.host_paced_us + self.host_silent_us + self.kernel_wait_us + self.other_wait_us

    @property
    def host_idle_us(self) -> float:
        """The host-side idle of one step (launch-paced and silent): what the profiler's own time inflates."""
        return self.host_paced_us + self.host_silent_us

    @property
    def gpu_side_us(self) -> float:
        """The rest of one step: GPU busy time and the waits the profiler does not inflate."""
        return self.busy_us + self.kernel_wait_us + self.other_wait_us

    def share(self, value_us: float) -> float:
        """`value_us` as a fraction of the step time."""
        return value_us / self.step_us if self.step_us > 0 else 0.0


def step_budget(steps: Steps, timeline: Timeline, capture: dict | None) -> StepBudget:
    """Build the per-step budget, corrected to the unprofiled step time where one was measured; on the
    profiled step as recorded where the measured one, synchronised after each step, is the longer."""
    n = max(len(steps.windows), 1)
    gaps = timeline.gaps
    host = gaps[gaps["kind"] == "host"]
    paced = float(host["paced_us"].sum()) / n
    silent = float(host["silent_us"].sum()) / n
    after_sync = float(host.loc[host["after_sync"].astype(bool), "dur"].sum()) / n
    kernel = float(gaps.loc[gaps["kind"] == "kernel", "dur"].sum()) / n
    other = float(gaps.loc[gaps["kind"] == "other", "dur"].sum()) / n
    busy = timeline.busy_us / n
    profiled = timeline.window_us / n
    timing = (capture or {}).get("timing") or {}
    unprofiled = paid_step_us(timing)
    basis = "profiled step time (no unprofiled timing in the capture: host gaps include profiler overhead)"
    scale = 1.0
    if unprofiled and unprofiled > profiled:
        # The capture times its steps with a sync after each and profiles them without one: a measured step
        # longer than the profiled one holds those syncs (the profiler only adds time). The profiled step is
        # then the closer bound on the free-running step, its idle as recorded.
        basis = (
            f"{timing_words(timing)} ({timing.get('source', 'measured')}) is longer than the profiled step, "
            f"{profiled:,.0f} µs, whose steps ran without a sync between them: the profiler only adds time, so "
            "the timing's syncs are in the difference and the profiled step is used, its idle as recorded"
        )
        return StepBudget(
            n, profiled, profiled, busy, paced, silent, after_sync, kernel, other, basis, synced_step_us=unprofiled
        )
    if unprofiled:
        host_real = max(0.0, unprofiled - busy - kernel - other)
        host_seen = paced + silent
        scale = host_real / host_seen if host_seen > 0 else 0.0
        paced, silent, after_sync = paced * scale, silent * scale, after_sync * scale
        basis = (
            f"{timing_words(timing)} ({timing.get('source', 'measured')}); "
            f"host-side idle rescaled by {scale:.2f} to remove profiler overhead"
        )
    return StepBudget(n, profiled, unprofiled, busy, paced, silent, after_sync, kernel, other, basis, scale)


def on_estimate(budget: StepBudget, estimate: OverheadEstimate | None) -> StepBudget:
    """`budget` on the unprofiled step estimated from the trace (metrics/overhead.py), when the
    capture measured none: the replay's saving per step (the profiler's own host time on
    the step's path) comes off the host-side idle the GPU shows, never more than that idle. The saving
    is a median over steps, like the replay, and is taken off this budget's own per-step idle: steps of
    unequal length (a DataLoader that stalls every few steps) keep their stalls, which are not the
    profiler's. Unchanged when a step was measured, nothing was estimated, or the trace shows no
    host-side idle to rescale."""
    if budget.unprofiled_step_us or estimate is None:
        return budget
    seen = budget.host_idle_us
    if seen <= 0:
        return budget
    real = min(seen, max(0.0, seen - estimate.saving_us))
    scale = real / seen
    basis = (
        f"estimated unprofiled step {budget.gpu_side_us + real:,.0f} µs against {budget.profiled_step_us:,.0f} µs "
        f"profiled: {estimate.text()}; host-side idle rescaled by {scale:.2f}: {percent(1 - scale)} of this host "
        f"time is the profiler's own (estimated)"
    )
    return _host_rescaled(budget, real, basis)


def at_step(budget: StepBudget, step_us: float) -> StepBudget:
    """`budget` (as recorded, with no measured step) on an estimated step of `step_us` instead: its host-side idle
    rescaled so that the step is `step_us`, within what the trace allows (no less than its GPU-side time, no more
    than all the host-side idle it recorded). The estimate's range is judged on it (ruleset/step_range.py)."""
    if budget.unprofiled_step_us or budget.host_idle_us <= 0:
        return budget
    real = min(budget.host_idle_us, max(0.0, step_us - budget.gpu_side_us))
    return _host_rescaled(budget, real, f"the estimated step taken as {budget.gpu_side_us + real:,.0f} µs")


def _host_rescaled(budget: StepBudget, real: float, basis: str) -> StepBudget:
    """`budget` with its host-side idle scaled to `real` µs a step: an estimated step of GPU-side time + `real`."""
    scale = real / budget.host_idle_us
    return dataclasses.replace(
        budget,
        host_paced_us=budget.host_paced_us * scale,
        host_silent_us=budget.host_silent_us * scale,
        host_after_sync_us=budget.host_after_sync_us * scale,
        basis=basis,
        host_scale=scale,
        estimated_step_us=budget.gpu_side_us + real,
    )
