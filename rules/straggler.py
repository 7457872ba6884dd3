"""straggler: one rank computes longer each step, and the other ranks wait for it inside collectives.

**Signal.** With the traces of every rank (`diagnose DIR`), the GPU compute per step of each rank
(compute kernels merged over its streams) is compared with the median of the other ranks. A
collective cannot finish before the last rank joins it, so while a slow rank is still computing,
the others sit inside the collective's kernel: for each collective (matched across ranks by its
place in the step) the shortest duration over the ranks is the transfer, and the rest on each
rank is *synchronisation wait* (diagnose/ranks/model.py). The rule fires when the slowest rank's
compute exceeds the others' median by at least `min_skew` and the other ranks wait at least
`min_wait_share` of the step inside collectives. Offenders are the slow rank and the ops whose
GPU time on it exceeds the other ranks' median the most.

**Threshold.** A 10 % skew: less is within the run-to-run spread of one GPU's step. A 5 % wait:
less is not worth balancing. Severity is high when the others wait 25 % of the step or more.

**Fix.** `balance-ranks`: equal work per rank per step (equal shards, length-bucketed batches,
no rank-0-only work inside the step). Overlapping communication does not help: the wait is for a
rank, not for the network.

**Estimate.** With the ranks balanced the others no longer wait: new step = step − the median
wait of the other ranks, never below the step less the slow rank's extra compute; an upper bound.
"""
from __future__ import annotations

import statistics

from diagnose.engine import Quiet, Rule, Threshold
from diagnose.findings import Evidence, Finding
from diagnose.fixes import fix


class Straggler(Rule):
    """One rank slower than the rest → the others wait in collectives → balance the ranks."""

    id = "straggler"
    order = 34
    title = "Straggler: one rank computes longer and the others wait for it in collectives"
    cheat_sheet = {
        "bottleneck": "load imbalance between ranks (a straggler)",
        "signal": "one rank's GPU compute per step above the others', the others waiting inside collectives",
        "fix": "balance the work per rank (equal shards and batches, no rank-only work in the step)",
        "impact": "the step shrinks by the time the other ranks wait",
    }
    needs = ("gpu", "ranks")
    thresholds = (
        Threshold("min_skew", 0.10, "fraction", "fire when the slowest rank's compute exceeds the others' median by this"),
        Threshold("min_wait_share", 0.05, "fraction",
                  "and the other ranks wait at least this share of the step inside collectives"),
        Threshold("high_wait_share", 0.25, "fraction", "wait share at which severity is high"),
    )

    def check(self, ctx, t):
        """Compare each rank's compute with the others' and measure the wait it causes."""
        ranks = ctx.ranks
        slow = ranks.slowest()
        others = [p for p in ranks.profiles if p.rank != slow.rank]
        median = ranks.median_compute_us(exclude=slow.rank)
        skew = slow.compute_us / median - 1 if median > 0 else 0.0
        step = statistics.median(p.step_us for p in ranks.profiles) or 1e-9
        wait = statistics.median(ranks.wait_us(p.rank) for p in others)
        wait_share = wait / step
        detail = (f"slowest rank {slow.rank}: compute {slow.compute_us:,.0f} µs per step, {skew:+.1%} against the "
                  f"others' median {median:,.0f} µs; the others wait {wait:,.0f} µs ({wait_share:.1%} of the step) "
                  f"inside collectives")
        if skew < t["min_skew"] or wait_share < t["min_wait_share"]:
            return Quiet(detail)
        recoverable = min(wait, max(slow.compute_us - median, 0.0)) if slow.compute_us > median else wait
        new_step = max(step - recoverable, 1e-9)
        evidence = [
            Evidence(f"rank {slow.rank} compute above the other ranks' median", round(skew * 100, 1), ">=",
                     t["min_skew"] * 100, "%"),
            Evidence("other ranks' wait inside collectives per step", round(wait_share * 100, 1), ">=",
                     t["min_wait_share"] * 100, "%"),
        ]
        for p in ranks.profiles:
            evidence.append(Evidence(f"rank {p.rank}: compute / wait µs per step, skew %",
                                     round(p.compute_us, 1), unit=f"µs compute, {ranks.wait_us(p.rank):,.0f} µs wait, "
                                     f"{(p.compute_us / median - 1) * 100 if median else 0:+.1f} % skew"))
        offenders = [{"offender": f"rank {slow.rank}", "rank": slow.rank, "compute_us_per_step": round(slow.compute_us, 1),
                      "others_median_compute_us": round(median, 1), "skew_pct": round(skew * 100, 1)}]
        offenders += [{**row, "rank": slow.rank} for row in ranks.slow_ops(slow.rank)]
        return Finding(
            rule=self.id,
            severity="high" if wait_share >= t["high_wait_share"] else "medium" if wait_share >= 0.10 else "low",
            title=f"Straggler: rank {slow.rank} computes longer and the other ranks wait for it in collectives",
            evidence=evidence,
            offenders=offenders,
            fixes=[fix("balance-ranks")],
            est_speedup=round(step / new_step, 2),
            recoverable_us=round(step - new_step, 1),
            basis=(f"new step = {step:,.0f} µs (median over ranks) − {recoverable:,.0f} µs the other ranks wait "
                   f"(at most rank {slow.rank}'s extra compute) = {new_step:,.0f} µs; an upper bound"),
            why=("Data-parallel ranks meet at every collective: an all-reduce cannot finish on any rank before "
                 "the last one has contributed its gradients. When one rank has more work (a larger shard, "
                 "longer sequences, rank-0-only logging, a slower or throttled GPU), every other rank idles "
                 "inside the collective's kernel until it arrives, so the whole job runs at the slowest "
                 "rank's pace."),
            ranks=[slow.rank],
        )
