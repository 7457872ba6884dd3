"""straggler: one rank has more work each step than the others, so every rank runs at its pace.

**Signal.** With the traces of every rank (`diagnose DIR`), each rank's own work per step is
measured two ways that the profiler does not distort (diagnose/ranks/profile.py): its *GPU work*
(every compute kernel it ran, each kind of kernel priced alike on every rank at its duration with
no collective beside it, so a rank whose GPU is crowded by spinning collectives does not look
slower than it is) and the number of *kernels it launches* (host work: each launch is host time
in the framework). The rule fires when the rank with the most work exceeds the other ranks'
median by at least `min_work_skew` in GPU work or `min_launch_skew` in launches, and what the extra
work costs is at least `min_cost_share` of the step. Offenders are that rank and the ops whose GPU time on it exceeds the
other ranks' median the most.

**Why not the waits.** A collective cannot finish before the last rank joins it, so the others
wait inside it for a straggler; the wait split of diagnose/ranks/model.py measures that. But under
the profiler each rank's host launches far slower than without it, and which rank arrives last
then follows the hosts' pace, not the work: on the 2×H200 DDP captures (2026-11-30) the healthy
control had rank 0 waiting 25 ms a step for rank 1, and in the straggler capture the rank with the
extra work was the one that waited. The waits are shown as evidence, never required.

**Threshold.** Identical ranks launch identical numbers of kernels (equal on every 2×H200 DDP and
FSDP control of 2026-11-30), so 5 % more launches is real work. Their GPU work agreed to within
10.1 % (the residue of interference that the pricing does not remove: FSDP without prefetch),
so GPU work needs 10 % and the cost threshold keeps that control quiet (3 % of its step). A 5 % cost: less is not worth balancing. Severity is high at 25 % of the step, medium at 10 %.

**Fix.** `balance-ranks`: equal work per rank per step (equal shards, length-bucketed batches,
no rank-0-only work inside the step). Overlapping communication does not help: the wait is for a
rank, not for the network.

**Estimate.** The extra work costs the larger of its GPU time and, where the host paces the step
(on some rank the GPU waits for the host at least `host_paced_share` of the step: the launch and host
buckets of the step accounting; a rank that waits for the others shows its idle inside collectives
instead), its extra launches at the step's pace (step ÷ kernels launched per step); with the ranks balanced the others no longer wait for it:
new step = step − that cost. Measured on 2×H200 captures: the GPU-bound pair (ddp_heavy_*: rank 1
does 8 extra 8192³ matmuls) estimated 1.18×, removing the extra work measured 1.20× (87.96 → 73.58
ms, unprofiled); the host-paced pair (ddp_straggler: 24 small extra matmuls) estimated 1.09× and
measured 1.43× (26.5 → 18.5 ms), because the extra launches slowed its host beyond their count.
"""
from __future__ import annotations

import statistics

from diagnose.engine import Quiet, Rule, Threshold
from diagnose.findings import Evidence, Finding
from diagnose.fixes import fix


class Straggler(Rule):
    """One rank with more work than the rest → the others wait for it → balance the ranks."""

    id = "straggler"
    order = 34
    title = "Straggler: one rank has more work each step and the others wait for it in collectives"
    cheat_sheet = {
        "bottleneck": "load imbalance between ranks (a straggler)",
        "signal": "one rank's GPU work or kernel launches per step above the other ranks'",
        "fix": "balance the work per rank (equal shards and batches, no rank-only work in the step)",
        "impact": "the step shrinks by what the extra work costs",
    }
    needs = ("gpu", "ranks")
    thresholds = (
        Threshold("min_work_skew", 0.10, "fraction", "fire when one rank's GPU work exceeds the others' median by this"),
        Threshold("min_launch_skew", 0.05, "fraction",
                  "or its kernel launches per step exceed the others' median by this"),
        Threshold("min_cost_share", 0.05, "fraction", "and the extra work costs at least this share of the step"),
        Threshold("high_cost_share", 0.25, "fraction", "cost share at which severity is high"),
        Threshold("host_paced_share", 0.20, "fraction",
                  "extra launches cost time when the GPU waits for the host at least this share of the step"),
    )

    def check(self, ctx, t):
        """Compare each rank's work with the others' and price the difference."""
        ranks = ctx.ranks
        slow = ranks.slowest()
        by_kernels = max(ranks.profiles, key=lambda p: (p.kernels_per_step or 0.0, -p.rank))
        work_median = ranks.median_work_us(exclude=slow.rank)
        work_skew = ranks.work_of(slow) / work_median - 1 if work_median > 0 else 0.0
        kernel_median = ranks.median_kernels(exclude=by_kernels.rank)
        kernel_skew = (by_kernels.kernels_per_step or 0.0) / kernel_median - 1 if kernel_median > 0 else 0.0
        if kernel_skew >= t["min_launch_skew"] and work_skew < t["min_work_skew"]:
            slow, work_median = by_kernels, ranks.median_work_us(exclude=by_kernels.rank)
            work_skew = ranks.work_of(slow) / work_median - 1 if work_median > 0 else 0.0
        step = statistics.median(p.step_us for p in ranks.profiles) or 1e-9
        extra_work = max(ranks.work_of(slow) - work_median, 0.0)
        extra_kernels = max((slow.kernels_per_step or 0.0) - ranks.median_kernels(exclude=slow.rank), 0.0)
        paced = max(p.host_paced("share") for p in ranks.profiles)  # a waiting rank's idle hides in its collectives
        pace = slow.step_us / slow.kernels_per_step if slow.kernels_per_step and paced >= t["host_paced_share"] else 0.0
        cost = max(extra_work, extra_kernels * pace)
        share = cost / step
        fired = work_skew >= t["min_work_skew"] or (slow is by_kernels and kernel_skew >= t["min_launch_skew"])
        detail = (f"most work on rank {slow.rank}: GPU work {ranks.work_of(slow):,.0f} µs per step ({work_skew:+.1%} "
                  f"against the others' median), {slow.kernels_per_step or 0:,.0f} kernels launched per step "
                  f"({extra_kernels:+,.0f}); the extra costs {cost:,.0f} µs ({share:.1%} of the step)")
        if not fired or share < t["min_cost_share"]:
            return Quiet(detail)
        new_step = max(step - cost, 1e-9)
        evidence = [
            Evidence(f"rank {slow.rank}: GPU work above the other ranks' median", round(work_skew * 100, 1), ">=",
                     t["min_work_skew"] * 100, "%"),
            Evidence(f"rank {slow.rank}: kernels launched per step above the other ranks' median",
                     round(kernel_skew * 100 if slow is by_kernels else 0.0, 1), ">=", t["min_launch_skew"] * 100, "%"),
            Evidence("cost of the extra work per step (GPU time, or launches at the step's pace)",
                     round(share * 100, 1), ">=", t["min_cost_share"] * 100, "%"),
        ]
        for p in ranks.profiles:
            evidence.append(Evidence(f"rank {p.rank}: GPU work / kernels / wait in collectives per step",
                                     round(ranks.work_of(p), 1), unit=f"µs work, {p.kernels_per_step or 0:,.0f} kernels, "
                                     f"{ranks.wait_us(p.rank):,.0f} µs wait"))
        note = self._arrival_note(ranks, slow)
        offenders = [{"offender": f"rank {slow.rank}", "rank": slow.rank, "work_us_per_step": round(ranks.work_of(slow), 1),
                      "others_median_work_us": round(work_median, 1), "skew_pct": round(work_skew * 100, 1),
                      "extra_kernels_per_step": round(extra_kernels, 1)}]
        offenders += [{**row, "rank": slow.rank} for row in ranks.slow_ops(slow.rank)]
        return Finding(
            rule=self.id,
            severity="high" if share >= t["high_cost_share"] else "medium" if share >= 0.10 else "low",
            title=f"Straggler: rank {slow.rank} has more work each step and the other ranks wait for it",
            evidence=evidence,
            offenders=offenders,
            fixes=[fix("balance-ranks")],
            est_speedup=round(step / new_step, 2),
            recoverable_us=round(step - new_step, 1),
            basis=(f"new step = {step:,.0f} µs (median over ranks) − {cost:,.0f} µs, the larger of rank {slow.rank}'s "
                   f"extra GPU work ({extra_work:,.0f} µs) and its {extra_kernels:,.0f} extra launches at "
                   f"{pace:,.1f} µs each = {new_step:,.0f} µs{note}"),
            why=("Data-parallel ranks meet at every collective: an all-reduce cannot finish on any rank before "
                 "the last one has contributed its gradients. When one rank has more work (a larger shard, "
                 "longer sequences, rank-0-only logging or evaluation, a slower or throttled GPU), every other "
                 "rank idles inside the collective until it arrives, so the whole job runs at the slowest "
                 "rank's pace."),
            ranks=[slow.rank],
        )

    @staticmethod
    def _arrival_note(ranks, slow) -> str:
        """What the trace's waits say, when they do not point at the rank with the extra work."""
        arrivals = ranks.arrivals()
        if not arrivals:
            return ""
        last = max(arrivals, key=arrivals.get)
        if last == slow.rank:
            return f"; in the trace the others waited for rank {slow.rank} at {arrivals[last]:.0%} of the collectives"
        return (f"; in the trace rank {last} arrived last at {arrivals[last]:.0%} of the collectives: under the "
                f"profiler the ranks' hosts set the pace, so the waits follow the hosts, while the work measured "
                f"here does not depend on them")
