"""straggler: one rank arrives late at the collectives each step, so every other rank waits for it.

**Signal.** Timed arrivals first. A `--nproc-per-node` capture records, in the steps it times
without the profiler, when each rank entered each collective, on clocks aligned at a barrier before
and after (arrivals.json; diagnose/rankset/timed.py). The late rank is the one last at the
collectives by more than the clocks' error in at least `min_timed_late_steps` of the timed steps; its
cost is its lateness per step (median over the timed steps), at most what the least-waiting other
rank waits and, where the profiled steps show a cause, at most what the cause explains. The cause
comes from the profiled steps before its first late collective (diagnose/rankset/late_cause.py): extra
host time that no op or CUDA call covers (a host-only straggler: input pipeline, logging, a sleep,
named by its host ranges and Python lines) or extra work (op time on a CPU rank, GPU work on a GPU
rank). Other ranks that arrive well after the median rank (`min_cost_share` of the step) are named
too. Proven on CPU gloo captures (fixtures/captures/gloo_*, a 2-core CPU machine, 2026-12-06):
rank 1 sleeping 20 ms in `load_batch` each step is named with its input pipeline, estimated 2.84×
(30,496 → 10,723 µs, unprofiled) where removing the delay measured 3.0× (30,496 → 10,148 µs, the
healthy control's unprofiled step); rank 1 running 60 extra matmuls is named on its work, estimated
2.22× (29,230 → 13,155 µs) where removing them measured 2.9× (29,230 → 10,148 µs): its profiled op
time (16.1 ms) explains less than its 20.6 ms lateness; the control is quiet (rank 1 last in 60 % of
the timed steps). Estimates start from the reference rank's unprofiled step, the basis of the
lateness.

Then the trace's arrivals. With the traces of every rank (`diagnose DIR`), every collective is matched
across ranks by its process group, sequence number, kind and size, and the ranks' clocks are
aligned by the collectives' end times (diagnose/rankset/model.py, `Arrivals`). Each rank's arrival is
its kernel's start (and its launch on the host); the last to arrive makes the others wait. The
*late rank* is the one whose late arrivals cost the others the most (its lateness per step: how much
later than the next-latest rank it arrived, summed over the collectives it was last at). What
precedes its late arrivals is its *cause*: extra GPU work (its GPU work above the others' median by
`min_work_skew`: each kind of kernel priced alike on every rank at its duration with no collective
beside it, diagnose/rankset/profile.py), or extra host time (its *silent* host time before those
collectives, no CUDA call for 200 µs or longer, above the other ranks' at the same collectives by
`min_host_share` of the profiled step), named by the host ranges and Python lines in it. The rule
fires on arrivals when the late rank was last in at least `min_late_steps` of the steps and what
its cause explains of its lateness costs at least `min_cost_share` of the step. When arrivals do
not decide, by work (below).

**On the GPU, surviving the profiler's skew** (traces from elsewhere, no timed arrivals). When neither
extra GPU work nor extra silent host time explains the late rank, each rank's GPU arrival is compared
with the (lower) median rank's at the collective of each step where it lies furthest behind, and the
part its own host launch explains (its launch as far behind the median launch) is taken off: a host
that the profiler slows makes its GPU late by as much, so only the rest is lateness on the GPU (more
GPU work before the collective, a slower GPU). The ranks whose rest costs at least `min_cost_share`
of the profiled step in `min_late_steps` of the steps are named, latest first, each with how much of
its lateness its host explains and its wait; the estimate is the latest one's rest, at most how far
it arrives after the next-latest rank and what the least-waiting other rank waits. On the 2×H200
DDP and FSDP captures of 2026-11-30 that rest is at most 0.02 % of the profiled step on every rank
of every control (the hosts explain all their lateness: up to 58.8 ms on ddp_no_sync), and 14.6 %
on ddp_heavy_straggler's rank 1 (15.0 ms behind, 2.25 ms of it explained by its host), the rank with
the extra GPU work, which the GPU work already names.

**Why not the arrivals alone.** Under the profiler each rank's host issues its CUDA calls several
times slower than without it, and by different amounts: which rank arrives last then follows the
hosts' pace. On our 2×H200 DDP captures (2026-11-30) the healthy control has rank 1 last at every
collective and rank 0 waiting 25 ms of a 36 ms profiled step (18 ms unprofiled), and in the
host-paced straggler capture the rank with the extra work is not the last to arrive. A late arrival
that neither extra GPU work nor extra silent host time explains (the same calls issued slower) is
reported in the quiet line, not as a straggler. Silent host time differs between identical ranks
under the profiler too: on every 2×H200 DDP and FSDP capture of 2026-11-30 the late rank's extra
silent host time before its late collectives was at most 12 % of the profiled step (ddp_overlap),
so `min_host_share` is 15 %.

**By work (when arrivals do not decide).** Each rank's own work is also measured two ways the
profiler does not distort: its GPU work and the number of kernels it launches (host work: each
launch is host time in the framework). When arrivals do not explain a straggler, the rule fires
when the rank with the most work exceeds the other ranks' median by at least `min_work_skew` in
GPU work or `min_launch_skew` in launches, and what the extra work costs is at least
`min_cost_share` of the step.

**Threshold.** Identical ranks launch identical numbers of kernels (equal on every
2×H200 DDP and FSDP control of 2026-11-30), so 5 % more launches is real work; their GPU work
agreed to within 10.1 % (FSDP without prefetch), so GPU work needs 10 %. A late rank must be last
in two thirds of the steps (`min_late_steps`): a straggler is late every step. A 5 % cost: less is
not worth balancing. Severity is high at 25 % of the step, medium at 10 %. The finding says which
basis it used.

**Fix.** `balance-ranks`, with the cause: a late host in the input pipeline (DataLoader ranges,
`__next__`, collate) → more DataLoader workers and prefetch on that rank; logging or checkpointing
→ move it off the step or make it asynchronous; extra GPU work → equal shards and
length-bucketed batches (uneven data). Overlapping communication does not help: the wait is for a
rank, not for the network.

**Estimate.** On arrivals: the cost is what the cause explains of the late rank's lateness (its
extra GPU work and its extra silent host time, never more than the lateness); on work: the larger
of the extra GPU time and, where the host paces the step (on some rank the GPU waits for the host
at least `host_paced_share` of the step), its extra launches at the step's pace. New step = step −
cost, the step being the unprofiled one when the capture timed steps without the profiler (meta.json
timing per rank), else the profiled one; the finding says which. Measured on 2×H200 captures: the
GPU-bound pair (ddp_heavy_*: rank 1 does 8 extra 8192³ matmuls) estimated 1.18×, removing the extra
work measured 1.20× (87.96 → 73.58 ms, unprofiled); the host-paced pair (ddp_straggler: 24 small
extra matmuls) estimated 1.09× and measured 1.43× (26.5 → 18.5 ms), because the extra launches
slowed its host beyond their count.
"""

from __future__ import annotations

import dataclasses
import re
import statistics

import msgspec

from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.rankset.late_cause import TimedLate, timed_late
from diagnose.rankset.model import Arrivals, RankSet
from diagnose.rankset.timed import TimedArrivals
from diagnose.rankset.profile import RankProfile
from diagnose.vocabulary.units import percent, percent_value


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
    needs = (("gpu", "timed-arrivals"), "ranks")
    thresholds = (
        Threshold(
            "min_work_skew", 0.10, "fraction", "fire when one rank's GPU work exceeds the others' median by this"
        ),
        Threshold(
            "min_launch_skew", 0.05, "fraction", "or its kernel launches per step exceed the others' median by this"
        ),
        Threshold("min_cost_share", 0.05, "fraction", "and the extra work costs at least this share of the step"),
        Threshold("high_cost_share", 0.25, "fraction", "cost share at which severity is high"),
        Threshold("medium_cost_share", 0.10, "fraction", "cost share at which severity is medium (below: low)"),
        Threshold(
            "host_paced_share",
            0.20,
            "fraction",
            "extra launches cost time when the GPU waits for the host at least this share of the step",
        ),
        Threshold(
            "min_host_share",
            0.15,
            "fraction",
            "a late rank's extra silent host time counts as its cause from this share of the profiled step",
        ),
        Threshold(
            "min_late_steps",
            0.67,
            "fraction",
            "on arrivals, the late rank must be last in at least this share of the steps",
        ),
        Threshold(
            "min_timed_late_steps",
            0.80,
            "fraction",
            "on timed arrivals, the late rank must be last in at least this share of the timed steps",
        ),
    )

    def check(self, ctx, t):
        """Judge by the timed steps' arrivals where the capture has them, else by the trace's arrivals where
        they explain a late rank, else by each rank's work."""
        if ctx.ranks.timed is not None:
            return self._by_timed(ctx, t)
        on_arrivals = self._by_arrivals(ctx, t)
        if isinstance(on_arrivals, Finding):
            return on_arrivals
        by_work = self._by_work(ctx, t)
        if on_arrivals is not None and isinstance(by_work, Quiet):
            by_work.detail = f"{on_arrivals}; {by_work.detail}"
        elif on_arrivals is not None:
            by_work = msgspec.structs.replace(by_work, basis=f"{by_work.basis}; {on_arrivals}")
        return by_work

    def _by_timed(self, ctx, t):
        """The finding on the unprofiled steps' arrivals, its cause from the profiled trace (late_cause.py)."""
        timed = ctx.ranks.timed
        x = timed_late(ctx.ranks, timed)
        waits = ", ".join(f"rank {r} {timed.wait_us[r]:,.0f} µs" for r in timed.ranks)
        said = (
            f"timed arrivals: rank {x.late} arrived last in {percent(x.late_steps)} of the {timed.steps} timed "
            f"steps, {x.lateness:,.0f} µs per step after the next-latest rank (wait per step: {waits})"
        )
        if x.lateness <= 0:
            return Quiet(
                f"timed arrivals: no rank arrived last beyond the clocks' error ({timed.tie_us:,.0f} µs) in "
                f"{timed.steps} timed steps ({timed.matched} collective calls)"
            )
        share = x.cost / x.step
        if x.late_steps < t["min_timed_late_steps"] or share < t["min_cost_share"]:
            return Quiet(said + f": costing {percent(share)} of the step")
        severity = severity_ladder(share, t, "high_cost_share", "medium_cost_share")
        return _word_timed(self, ctx.ranks, timed, x, severity, t)

    def _by_work(self, ctx, t):
        """Compare each rank's work with the others' and price the difference."""
        w = _measure_work(ctx.ranks, ctx.ranks.slowest(), t)
        severity = _decide_work(w, t)
        if isinstance(severity, Quiet):
            return severity
        return _word_work(self, w, severity, _estimate(w.step, w.cost), t)

    def _by_arrivals(self, ctx, t):
        """The finding on arrivals; else a sentence saying why arrivals do not decide (None without them)."""
        arr = ctx.ranks.arrival
        if arr is None:
            return None
        late = arr.latest()
        if arr.lateness_us[late] <= 0:
            return f"arrivals: no rank arrived last beyond the clocks' alignment error ({arr.matched} collectives)"
        x = _measure_late(ctx.ranks, arr, ctx.ranks.profile(late), t)
        severity = _decide_late(x, t)
        if isinstance(severity, Quiet):
            on_gpu = _gpu_side(self, ctx.ranks, arr, t) if not x.gpu_counts and not x.host_counts else None
            return on_gpu or severity.detail
        return _word_late(self, x, severity, _estimate(x.step, x.cost), t)

    @staticmethod
    def _arrival_note(ranks, slow) -> str:
        """What the trace's waits say, when they do not point at the rank with the extra work."""
        arrivals = ranks.arrivals()
        if not arrivals:
            return ""
        last = max(arrivals, key=arrivals.get)
        if last == slow.rank:
            return (
                f"; in the trace the others waited for rank {slow.rank} at {percent(arrivals[last])} of the collectives"
            )
        return (
            f"; in the trace rank {last} arrived last at {percent(arrivals[last])} of the collectives: under the "
            f"profiler the ranks' hosts set the pace, so the waits follow the hosts, while the work measured "
            f"here does not depend on them"
        )


INPUT_PIPELINE = re.compile(
    r"DataLoader|__next__|collate|dataset|fetch|prefetch|_next_data|load_batch|read", re.IGNORECASE
)
LOGGING = re.compile(r"log|print|checkpoint|save|wandb|tensorboard|summary|flush|write|metric", re.IGNORECASE)
FIX_HOW = {
    "input": (
        "Rank {rank} waits for its input pipeline before its collectives: give its DataLoader more "
        "workers (num_workers), pin_memory=True and prefetch_factor, or move preprocessing into the "
        "workers, so that its batches are ready when its step starts; the other ranks wait for it."
    ),
    "logging": (
        "Rank {rank} logs or checkpoints inside the step: move it off the step (every N steps, "
        "after the optimizer step) or make it asynchronous (a background thread, torch.distributed."
        "checkpoint's async_save), or spread it over the ranks; the other ranks wait for it."
    ),
    "host": (
        "Rank {rank}'s host spends time outside CUDA calls before its collectives that the other ranks "
        "do not: find it in the host ranges named here and move it out of the step or off that rank."
    ),
    "work": (
        "Rank {rank} has more compute each step before its collectives: give every rank the same work "
        "(equal shards, a DistributedSampler with drop_last, batches bucketed by length for variable-length "
        "data, no rank-only work inside the step); every collective waits for the slowest rank."
    ),
    "unexplained": (
        "Rank {rank} arrives last at its collectives, but its profiled steps show no extra host or compute "
        "time before them: compare what it runs per step with the other ranks (its data, its device, what "
        "else runs on its host)."
    ),
    "gpu": (
        "Rank {rank} has more GPU work each step: give every rank the same work (equal shards, "
        "a DistributedSampler with drop_last, batches bucketed by length for variable-length data, "
        "no rank-only work inside the step); every collective waits for the slowest rank."
    ),
}


def _host_causes(ranks, late: int) -> list[tuple[str, float]]:
    """The host ranges and lines that fill rank `late`'s silent lead-ins more than the other ranks'
    median, largest first (µs per step)."""
    mine = ranks.profile(late).host_ranges_us or {}
    others = [p.host_ranges_us or {} for p in ranks.profiles if p.rank != late]
    rows = []
    for name, us in mine.items():
        extra = us - statistics.median(o.get(name, 0.0) for o in others) if others else us
        if extra > 0:
            rows.append((name, extra))
    return sorted(rows, key=lambda x: -x[1])


def _cause_kind(names: list[str]) -> str:
    """input | logging | host: what the host ranges before a late arrival say the host was doing."""
    for name in names[:3]:
        if INPUT_PIPELINE.search(name):
            return "input"
        if LOGGING.search(name):
            return "logging"
    return "host"


def _step_basis(ranks) -> str:
    """Which step the estimate starts from: the capture's unprofiled timing, else the profiled step."""
    if all(p.unprofiled_step_us for p in ranks.profiles):
        if all(abs(p.step_us - p.unprofiled_step_us) <= 1e-3 * p.unprofiled_step_us for p in ranks.profiles):
            return "unprofiled: the capture's own timing per rank"
        return "profiled: the capture's timing, synchronised after each step, was set aside as longer"
    return "profiled: the capture has no unprofiled timing"


_WORK_WHY = (
    "Data-parallel ranks meet at every collective: an all-reduce cannot finish on any rank before "
    "the last one has contributed its gradients. When one rank has more work (a larger shard, "
    "longer sequences, rank-0-only logging or evaluation, a slower or throttled GPU), every other "
    "rank idles inside the collective until it arrives, so the whole job runs at the slowest "
    "rank's pace."
)
_LATE_WHY = (
    "Data-parallel ranks meet at every collective: an all-reduce cannot finish on any rank before "
    "the last one has joined it. When one rank arrives late (more GPU work from a larger shard or "
    "longer sequences, or a host busy loading data, logging or checkpointing), every other rank "
    "idles inside the collective until it arrives, so the whole job runs at the slowest "
    "rank's pace."
)


def _estimate(step: float, cost: float) -> float:
    """The new step: the step less what the extra work costs, never below zero."""
    return max(step - cost, 1e-9)


def _skew(value: float, median: float) -> float:
    """How far `value` lies above `median`, as a fraction (0 without a median)."""
    return value / median - 1 if median > 0 else 0.0


# --- by work: each rank's GPU work and launches against the others' ---


@dataclasses.dataclass(frozen=True)
class _Work:
    """The rank with the most work and what its extra work costs per step (what `_measure_work` found)."""

    ranks: RankSet
    slow: RankProfile  # the rank judged: most GPU work, or most launches when only those are skewed
    by_kernels: RankProfile  # the rank that launches the most kernels
    work_median: float  # the other ranks' median GPU work, µs per step
    work_skew: float  # `slow`'s GPU work above `work_median`, as a fraction
    kernel_skew: float  # `by_kernels`' launches above the others' median, as a fraction
    step: float  # median step over the ranks, µs
    extra_work: float  # `slow`'s GPU work above the others' median, µs per step
    extra_kernels: float  # `slow`'s launches above the others' median, per step
    pace: float  # µs of step per launch when the GPU waits for the host, else 0
    cost: float  # the larger of the extra work and the extra launches at `pace`, µs per step

    @property
    def share(self) -> float:
        """The cost as a share of the step."""
        return self.cost / self.step


def _measure_work(ranks: RankSet, slow: RankProfile, t: dict[str, float]) -> _Work:
    """The rank with the most GPU work (or, when only launches are skewed, the most launches), its skews
    against the other ranks' medians, and the cost of its extra work and launches per step."""
    by_kernels = max(ranks.profiles, key=lambda p: (p.kernels_per_step or 0.0, -p.rank))
    work_median = ranks.median_work_us(exclude=slow.rank)
    work_skew = _skew(ranks.work_of(slow), work_median)
    kernel_skew = _skew(by_kernels.kernels_per_step or 0.0, ranks.median_kernels(exclude=by_kernels.rank))
    if kernel_skew >= t["min_launch_skew"] and work_skew < t["min_work_skew"]:
        slow, work_median = by_kernels, ranks.median_work_us(exclude=by_kernels.rank)
        work_skew = _skew(ranks.work_of(slow), work_median)
    extra_work = max(ranks.work_of(slow) - work_median, 0.0)
    extra_kernels = max((slow.kernels_per_step or 0.0) - ranks.median_kernels(exclude=slow.rank), 0.0)
    paced = max(p.host_paced("share") for p in ranks.profiles)  # a waiting rank's idle hides in its collectives
    pace = slow.step_us / slow.kernels_per_step if slow.kernels_per_step and paced >= t["host_paced_share"] else 0.0
    return _Work(
        ranks=ranks,
        slow=slow,
        by_kernels=by_kernels,
        work_median=work_median,
        work_skew=work_skew,
        kernel_skew=kernel_skew,
        step=statistics.median(p.step_us for p in ranks.profiles) or 1e-9,
        extra_work=extra_work,
        extra_kernels=extra_kernels,
        pace=pace,
        cost=max(extra_work, extra_kernels * pace),
    )


def _decide_work(w: _Work, t: dict[str, float]) -> Severity | Quiet:
    """Quiet unless the GPU work (or the launches of the rank that launches most) is skewed past its
    threshold and the extra costs `min_cost_share` of the step; else the severity of the cost share."""
    fired = w.work_skew >= t["min_work_skew"] or (w.slow is w.by_kernels and w.kernel_skew >= t["min_launch_skew"])
    if not fired or w.share < t["min_cost_share"]:
        return Quiet(
            f"most work on rank {w.slow.rank}: GPU work {w.ranks.work_of(w.slow):,.0f} µs per step "
            f"({percent(w.work_skew, signed=True)} "
            f"against the others' median), {w.slow.kernels_per_step or 0:,.0f} kernels launched per step "
            f"({w.extra_kernels:+,.0f}); the extra costs {w.cost:,.0f} µs ({percent(w.share)} of the step)"
        )
    return severity_ladder(w.share, t, "high_cost_share", "medium_cost_share")


def _word_work(rule: Straggler, w: _Work, severity: Severity, new_step: float, t: dict[str, float]) -> Finding:
    """The finding on work: the skews and every rank's work, the rank and its ops, the basis."""
    slow = w.slow
    note = "" if w.ranks.arrival else rule._arrival_note(w.ranks, slow)  # else check() adds the arrivals
    return Finding(
        rule=rule.id,
        severity=severity,
        title=f"Straggler: rank {slow.rank} has more work each step and the other ranks wait for it",
        evidence=_work_evidence(w, t),
        offenders=_work_offenders(w),
        fixes=[fix("balance-ranks")],
        est_speedup=round(w.step / new_step, 2),
        recoverable_us=round(w.step - new_step, 1),
        basis=(
            f"basis: work; new step = {w.step:,.0f} µs (median over ranks, {_step_basis(w.ranks)}) − "
            f"{w.cost:,.0f} µs, the larger of rank {slow.rank}'s "
            f"extra GPU work ({w.extra_work:,.0f} µs) and its {w.extra_kernels:,.0f} extra launches at "
            f"{w.pace:,.1f} µs each = {new_step:,.0f} µs{note}"
        ),
        why=_WORK_WHY,
        ranks=[slow.rank],
    )


def _work_evidence(w: _Work, t: dict[str, float]) -> list[Evidence]:
    """The skews and the cost against their thresholds, then each rank's work, launches and wait."""
    slow, ranks = w.slow, w.ranks
    evidence = [
        Evidence.share(
            f"rank {slow.rank}: GPU work above the other ranks' median", w.work_skew, ">=", t["min_work_skew"]
        ),
        Evidence.share(
            f"rank {slow.rank}: kernels launched per step above the other ranks' median",
            w.kernel_skew if slow is w.by_kernels else 0.0,
            ">=",
            t["min_launch_skew"],
        ),
        Evidence.share(
            "cost of the extra work per step (GPU time, or launches at the step's pace)",
            w.share,
            ">=",
            t["min_cost_share"],
        ),
    ]
    for p in ranks.profiles:
        evidence.append(
            Evidence(
                f"rank {p.rank}: GPU work / kernels / wait in collectives per step",
                round(ranks.work_of(p), 1),
                unit=f"µs work, {p.kernels_per_step or 0:,.0f} kernels, {ranks.wait_us(p.rank):,.0f} µs wait",
            )
        )
    return evidence


def _work_offenders(w: _Work) -> list[Offender]:
    """The rank with the extra work, then its ops that run longer than the other ranks'."""
    slow = w.slow
    offenders = [
        Offender.of(
            "rank",
            f"rank {slow.rank}",
            rank=slow.rank,
            work_us_per_step=round(w.ranks.work_of(slow), 1),
            others_median_work_us=round(w.work_median, 1),
            skew_pct=percent_value(w.work_skew),
            extra_kernels_per_step=round(w.extra_kernels, 1),
        )
    ]
    slow_ops = w.ranks.slow_ops(slow.rank)
    return offenders + top_offenders([{**row, "rank": slow.rank} for row in slow_ops], "op", n=len(slow_ops))


# --- by arrivals: which rank arrives last at the collectives, and why ---


@dataclasses.dataclass(frozen=True)
class _Late:
    """The rank that arrives last at the collectives and what explains it (what `_measure_late` found)."""

    ranks: RankSet
    arr: Arrivals
    late: int  # the rank that arrives last
    step: float  # median step over the ranks, µs
    profiled: float  # median profiled step over the ranks, µs
    gpu_extra: float  # the late rank's GPU work above the others' median, µs per step
    gpu_skew: float  # `gpu_extra` as a fraction of that median
    host_extra: float  # the late rank's silent host time before its collectives above the others', µs per step
    gpu_counts: bool  # the GPU work is skewed past min_work_skew: it is a cause
    host_counts: bool  # the host time is past min_host_share of the profiled step: it is a cause
    cost: float  # what the causes explain of the lateness, µs per step

    @property
    def lateness(self) -> float:
        """µs per step the late rank arrives after the next-latest rank."""
        return self.arr.lateness_us[self.late]

    @property
    def share(self) -> float:
        """The cost as a share of the step."""
        return self.cost / self.step

    @property
    def late_steps(self) -> float:
        """The share of the steps in which the late rank arrived last."""
        return self.arr.late_steps.get(self.late, 0.0)


def _measure_late(ranks: RankSet, arr: Arrivals, profile: RankProfile, t: dict[str, float]) -> _Late:
    """The late rank's (`profile`'s) extra GPU work and extra silent host time against the other ranks',
    which of them count as causes, and what they explain of its lateness."""
    late = profile.rank
    step = statistics.median(x.step_us for x in ranks.profiles) or 1e-9
    profiled = statistics.median(x.profiled_step_us or x.step_us for x in ranks.profiles) or 1e-9
    work_median = ranks.median_work_us(exclude=late)
    gpu_extra = max(ranks.work_of(profile) - work_median, 0.0)
    gpu_skew = gpu_extra / work_median if work_median > 0 else 0.0
    host_extra = max(arr.late_silent_us[late] - arr.others_silent_us[late], 0.0)
    gpu_counts = gpu_skew >= t["min_work_skew"]
    host_counts = host_extra / profiled >= t["min_host_share"]
    explained = (gpu_extra if gpu_counts else 0.0) + (host_extra if host_counts else 0.0)
    return _Late(
        ranks=ranks,
        arr=arr,
        late=late,
        step=step,
        profiled=profiled,
        gpu_extra=gpu_extra,
        gpu_skew=gpu_skew,
        host_extra=host_extra,
        gpu_counts=gpu_counts,
        host_counts=host_counts,
        cost=min(explained, arr.lateness_us[late], step),
    )


def _decide_late(x: _Late, t: dict[str, float]) -> Severity | Quiet:
    """Quiet (its detail the sentence `check` adds) when neither the GPU work nor the host time explains
    the lateness, or the rank is last in fewer than `min_late_steps` of the steps, or the cost is below
    `min_cost_share`; else the severity of the cost share."""
    arr, late = x.arr, x.late
    waits = ", ".join(f"rank {r} {arr.wait_us[r]:,.0f} µs" for r in arr.ranks)
    said = (
        f"arrivals: rank {late} arrived last at {percent(arr.last_share[late])} of the collectives, "
        f"{x.lateness:,.0f} µs per step after the next-latest rank (wait per step: {waits}); "
        f"its extra GPU work {x.gpu_extra:,.0f} µs ({percent(x.gpu_skew, signed=True)}), its extra silent host "
        f"time before them {x.host_extra:,.0f} µs ({percent(x.host_extra / x.profiled)} of the profiled step)"
    )
    if not x.gpu_counts and not x.host_counts:
        return Quiet(
            said + ": neither explains it (under the profiler the ranks' hosts issue the same calls at "
            "different paces, and arrivals follow them)"
        )
    if x.late_steps < t["min_late_steps"] or x.share < t["min_cost_share"]:
        return Quiet(said + f": last in {percent(x.late_steps)} of the steps, costing {percent(x.share)} of the step")
    return severity_ladder(x.share, t, "high_cost_share", "medium_cost_share")


def _word_late(rule: Straggler, x: _Late, severity: Severity, new_step: float, t: dict[str, float]) -> Finding:
    """The finding on arrivals: the late rank, its causes (GPU work, host ranges), the fix for the cause."""
    names = _host_causes(x.ranks, x.late) if x.host_counts else []
    kind = _cause_kind([n for n, _ in names]) if x.host_counts and not x.gpu_counts else "gpu"
    others = [r for r in x.arr.ranks if r != x.late]
    return Finding(
        rule=rule.id,
        severity=severity,
        title=f"Straggler: rank {x.late} arrives last at the collectives and the other ranks wait for it",
        evidence=_late_evidence(x, t) + _arrival_evidence(x),
        offenders=_late_offenders(x, names, kind),
        fixes=[fix("balance-ranks", how=FIX_HOW[kind].format(rank=x.late))],
        est_speedup=round(x.step / new_step, 2),
        recoverable_us=round(x.step - new_step, 1),
        basis=(
            f"basis: arrivals ({x.arr.basis}); cause: {'; '.join(_late_causes(x, names))}; new step = "
            f"{x.step:,.0f} µs (median over ranks, {_step_basis(x.ranks)}) − {x.cost:,.0f} µs (what the cause "
            f"explains of rank {x.late}'s {x.lateness:,.0f} µs lateness per step) = {new_step:,.0f} µs; ranks "
            f"{', '.join(map(str, others))} wait for it"
        ),
        why=_LATE_WHY,
        ranks=[x.late, *[r for r in _gpu_late_ranks(x.ranks, x.arr, t) if r != x.late]],
    )


def _late_causes(x: _Late, names: list[tuple[str, float]]) -> list[str]:
    """The causes the basis names: the extra GPU work, the extra host time with its largest ranges."""
    causes = []
    if x.gpu_counts:
        causes.append(f"GPU work ({x.gpu_extra:,.0f} µs per step above the other ranks' median)")
    if x.host_counts:
        named = ", ".join(f"{n} {u:,.0f} µs" for n, u in names[:3]) or "nothing recorded names it"
        causes.append(
            f"host time outside CUDA calls before its collectives ({x.host_extra:,.0f} µs per step "
            f"above the other ranks': {named})"
        )
    return causes


def _late_evidence(x: _Late, t: dict[str, float]) -> list[Evidence]:
    """The late steps and the cost against their thresholds, then each cause against its own."""
    late = x.late
    evidence = [
        Evidence.share(f"rank {late}: steps in which it arrived last", x.late_steps, ">=", t["min_late_steps"]),
        Evidence.share(
            f"rank {late}: cost of its late arrivals per step (what its cause explains)",
            x.share,
            ">=",
            t["min_cost_share"],
        ),
    ]
    if x.gpu_counts:
        evidence.append(
            Evidence.share(f"rank {late}: GPU work above the other ranks' median", x.gpu_skew, ">=", t["min_work_skew"])
        )
    if x.host_counts:
        evidence.append(
            Evidence.share(
                f"rank {late}: extra silent host time before its late collectives (share of the profiled step)",
                x.host_extra / x.profiled,
                ">=",
                t["min_host_share"],
            )
        )
    return evidence


def _arrival_evidence(x: _Late) -> list[Evidence]:
    """How well the clocks are aligned, then each rank's wait, last arrivals, lateness and GPU work."""
    arr, ranks = x.arr, x.ranks
    work = {p.rank: ranks.work_of(p) for p in ranks.profiles}
    evidence = [
        Evidence(
            "clocks aligned by the collectives' kernel end times: ends agree within (p90)",
            arr.end_spread_us,
            unit=f"µs over {arr.matched} matched collectives",
        )
    ]
    for r in arr.ranks:
        evidence.append(
            Evidence(
                f"rank {r}: wait in collectives / last arrivals / lateness per step",
                round(arr.wait_us[r], 1),
                unit=f"µs wait, last at {percent(arr.last_share[r])}, "
                f"{arr.lateness_us[r]:,.0f} µs late, GPU work {work[r]:,.0f} µs",
            )
        )
    return evidence


def _late_offenders(x: _Late, names: list[tuple[str, float]], kind: str) -> list[Offender]:
    """The late rank, the host ranges it fills more than the others, and (a GPU cause) its slow ops."""
    arr, late = x.arr, x.late
    offenders = [
        Offender.of(
            "rank",
            f"rank {late}",
            rank=late,
            lateness_us_per_step=round(x.lateness, 1),
            last_share=arr.last_share[late],
            cause=kind,
            wait_us_per_step={str(r): arr.wait_us[r] for r in arr.ranks},
            extra_gpu_work_us=round(x.gpu_extra, 1),
            extra_host_us=round(x.host_extra, 1),
        )
    ]
    ranges = [{"host_range": n, "rank": late, "extra_us_per_step": round(u, 1)} for n, u in names]
    offenders += top_offenders(ranges, "host range", n=5)
    if x.gpu_counts:
        slow_ops = x.ranks.slow_ops(late)
        offenders += top_offenders([{**row, "rank": late} for row in slow_ops], "op", n=len(slow_ops))
    return offenders


# --- by timed arrivals: the unprofiled steps say who is late, the profiled trace why ---

EXTRA_FIXES = {"input": "dataloader-workers", "work": "shape-bucketing"}


def _word_timed(
    rule: Straggler, ranks: RankSet, timed: TimedArrivals, x: TimedLate, severity: Severity, t: dict[str, float]
) -> Finding:
    """The finding on timed arrivals: the late rank, its cause, the fix for that cause, a bounded estimate."""
    names = _host_causes(ranks, x.late) if x.cause == "host" else []
    kind = _cause_kind([n for n, _ in names]) if x.cause == "host" else x.cause
    if kind == "work" and x.on_gpu:
        kind = "gpu"
    new_step = _estimate(x.step, x.cost)
    others = [r for r in timed.ranks if r != x.late]
    fixes = [fix("balance-ranks", how=FIX_HOW[kind].format(rank=x.late))]
    if kind in EXTRA_FIXES:
        fixes.append(fix(EXTRA_FIXES[kind]))
    # other ranks that also arrive well after the median rank each step, latest first
    late_too = [r for r in timed.ranks if r != x.late and timed.behind_us[r] / x.step >= t["min_cost_share"]]
    return Finding(
        rule=rule.id,
        severity=severity,
        title=f"Straggler: rank {x.late} arrives last at the collectives and the other ranks wait for it",
        evidence=_timed_evidence(timed, x, t),
        offenders=_timed_offenders(ranks, timed, x, names, kind),
        fixes=fixes,
        est_speedup=round(x.step / new_step, 2),
        recoverable_us=round(x.step - new_step, 1),
        basis=(
            f"basis: timed arrivals ({timed.basis}); cause in the profiled steps before its first late "
            f"collective (#{x.place}): {_timed_cause(x, names)}; new step = {x.step:,.0f} µs (rank {ranks.reference}'s step"
            f"{' timed without the profiler' if ranks.profile_of(ranks.reference).unprofiled_step_us else ', profiled'}) − {x.cost:,.0f} µs (rank {x.late}'s {x.lateness:,.0f} µs lateness per "
            f"step, at most the {x.bound:,.0f} µs the other ranks wait and the {x.explained:,.0f} µs its cause "
            f"explains) = {new_step:,.0f} µs; ranks {', '.join(map(str, others))} "
            f"wait for it"
        ),
        why=_LATE_WHY,
        ranks=[x.late, *sorted(late_too, key=lambda r: -timed.behind_us[r])],
    )


def _timed_cause(x: TimedLate, names: list[tuple[str, float]]) -> str:
    """The cause in words, with the extras it rests on."""
    host = f"{x.host_extra:,.0f} µs more host time outside ops" + (
        f" ({', '.join(f'{n} {u:,.0f} µs' for n, u in names[:3])})" if names else ""
    )
    work = f"{x.work_extra:,.0f} µs more {'GPU work' if x.on_gpu else 'op time (compute)'}"
    lead = {"host": "host time", "work": "work", "unexplained": "not found"}[x.cause]
    return f"{lead}: {host} and {work} than the other ranks' median per profiled step"


def _timed_evidence(timed: TimedArrivals, x: TimedLate, t: dict[str, float]) -> list[Evidence]:
    """The late steps and the cost against their thresholds, the clocks, then each rank's timed wait."""
    evidence = [
        Evidence.share(
            f"rank {x.late}: timed steps in which it arrived last", x.late_steps, ">=", t["min_timed_late_steps"]
        ),
        Evidence.share(
            f"rank {x.late}: cost of its late arrivals per timed step", x.cost / x.step, ">=", t["min_cost_share"]
        ),
        Evidence(
            "clocks aligned at a barrier before and after the timed steps: error and drift",
            timed.tie_us,
            unit=f"µs (drift {timed.drift_us:,.0f} µs) over {timed.matched} matched calls",
        ),
    ]
    for r in timed.ranks:
        evidence.append(
            Evidence(
                f"rank {r}: wait in collectives / lateness per timed step",
                round(timed.wait_us[r], 1),
                unit=f"µs wait of a {timed.step_us[r]:,.0f} µs step, {timed.lateness_us[r]:,.0f} µs last, "
                f"{timed.behind_us[r]:,.0f} µs after the median rank",
            )
        )
    return evidence


def _timed_offenders(
    ranks: RankSet, timed: TimedArrivals, x: TimedLate, names: list[tuple[str, float]], kind: str
) -> list[Offender]:
    """The late rank, the host ranges it fills more than the others, and (extra work) its slow ops."""
    offenders = [
        Offender.of(
            "rank",
            f"rank {x.late}",
            rank=x.late,
            lateness_us_per_step=round(x.lateness, 1),
            late_steps=x.late_steps,
            cause=kind,
            wait_us_per_step={str(r): timed.wait_us[r] for r in timed.ranks},
            extra_host_us=round(x.host_extra, 1),
            extra_work_us=round(x.work_extra, 1),
        )
    ]
    ranges = [{"host_range": n, "rank": x.late, "extra_us_per_step": round(u, 1)} for n, u in names]
    offenders += top_offenders(ranges, "host range", n=5)
    if kind in ("work", "gpu"):
        slow_ops = ranks.slow_ops(x.late)
        offenders += top_offenders([{**row, "rank": x.late} for row in slow_ops], "op", n=len(slow_ops))
    return offenders


# --- on the GPU: lateness of kernel starts that the rank's own host launch does not explain ---


def _gpu_late_ranks(ranks: RankSet, arr: Arrivals, t: dict[str, float]) -> list[int]:
    """The ranks whose GPU arrival lies after the median rank's, beyond what their own host launch explains,
    by at least `min_cost_share` of the profiled step in `min_late_steps` of the steps; latest first."""
    rows = []
    for p in ranks.profiles:
        step = p.profiled_step_us or p.step_us or 0.0
        rest = arr.behind_us.get(p.rank, 0.0) - arr.behind_host_us.get(p.rank, 0.0)
        if step and rest / step >= t["min_cost_share"] and arr.behind_steps.get(p.rank, 0.0) >= t["min_late_steps"]:
            rows.append((rest, p.rank))
    return [r for _, r in sorted(rows, reverse=True)]


def _gpu_side(rule: Straggler, ranks: RankSet, arr: Arrivals, t: dict[str, float]) -> Finding | None:
    """The finding on GPU arrivals that survive the profiler's skew (a trace from elsewhere, no timed
    arrivals): the ranks whose collectives start late on their GPU while their hosts launched them in
    time, named latest first with their wait; None when no rank is."""
    late = _gpu_late_ranks(ranks, arr, t)
    if not late:
        return None
    top = late[0]
    rest = {r: arr.behind_us[r] - arr.behind_host_us[r] for r in late}
    bound = min((arr.wait_us[r] for r in arr.ranks if r != top), default=0.0)
    step = statistics.median(p.step_us for p in ranks.profiles) or 1e-9
    cost = max(min(rest[top], arr.lateness_us[top], bound, step), 0.0)
    if cost / step < t["min_cost_share"]:
        return None
    new_step = _estimate(step, cost)
    named = ", ".join(
        f"rank {r} {rest[r]:,.0f} µs (its host explains {arr.behind_host_us[r]:,.0f} µs of {arr.behind_us[r]:,.0f} µs)"
        for r in late
    )
    return Finding(
        rule=rule.id,
        severity=severity_ladder(cost / step, t, "high_cost_share", "medium_cost_share"),
        title=f"Straggler: rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} start their "
        "collectives late on the GPU and the other ranks wait",
        evidence=_gpu_late_evidence(ranks, rest, step, t) + _gpu_wait_evidence(ranks, arr),
        offenders=_gpu_late_offenders(arr, rest),
        fixes=[fix("balance-ranks", how=FIX_HOW["gpu"].format(rank=top))],
        est_speedup=round(step / new_step, 2),
        recoverable_us=round(step - new_step, 1),
        basis=(
            f"basis: GPU arrivals ({arr.basis}); late on the GPU beyond what each rank's own host launch explains: "
            f"{named}; new step = {step:,.0f} µs (median over ranks, {_step_basis(ranks)}) − {cost:,.0f} µs (rank "
            f"{top}'s unexplained lateness, at most its {arr.lateness_us[top]:,.0f} µs after the next-latest rank "
            f"and the {bound:,.0f} µs the least-waiting other rank waits) = {new_step:,.0f} µs"
        ),
        why=_LATE_WHY,
        ranks=late,
    )


def _gpu_late_evidence(ranks: RankSet, rest: dict, step: float, t: dict[str, float]) -> list[Evidence]:
    """Each late rank's GPU lateness that its own launch does not explain, against the cost threshold."""
    return [
        Evidence(
            f"rank {r}: GPU arrival after the median rank's that its own launch does not explain, per step",
            round(rest[r], 1),
            ">=",
            round(t["min_cost_share"] * (ranks.profile_of(r).profiled_step_us or step), 1),
            "µs",
        )
        for r in rest
    ]


def _gpu_late_offenders(arr: Arrivals, rest: dict) -> list[Offender]:
    """The late ranks, latest first: their unexplained GPU lateness, what their host explains, their wait."""
    return [
        Offender.of(
            "rank",
            f"rank {r}",
            rank=r,
            gpu_late_us_per_step=round(rest[r], 1),
            host_explains_us=round(arr.behind_host_us[r], 1),
            wait_us_per_step=arr.wait_us[r],
            cause="gpu",
        )
        for r in rest
    ]


def _gpu_wait_evidence(ranks: RankSet, arr: Arrivals) -> list[Evidence]:
    """Each rank's wait in collectives per step (GPU arrivals), with the clocks' alignment."""
    return [
        Evidence(
            "clocks aligned by the collectives' kernel end times: ends agree within (p90)",
            arr.end_spread_us,
            unit=f"µs over {arr.matched} matched collectives",
        )
    ] + [Evidence(f"rank {r}: wait in collectives per step", round(arr.wait_us[r], 1), unit="µs") for r in arr.ranks]
