"""The cross-rank model: collectives matched across ranks, their time split into transfer and wait.

A collective cannot finish on any rank before the last rank has joined it, so its kernel on an
early rank spends the first part of its time waiting. The k-th collective of step s is the same
collective on every rank (NCCL issues them in program order). Its *transfer* time is its shortest
duration over the ranks (the last rank to arrive waits for nobody); on each rank the rest,
duration − transfer, is *synchronisation wait*: time spent waiting for the slowest rank. This
needs no clock alignment between ranks (each duration comes from one rank's own clock), and
assumes the transfer itself takes as long on every rank, as it does for the symmetric
collectives (all-reduce, all-gather, reduce-scatter) of data parallelism. Steps and collectives
beyond what every rank has are left out, with a warning.

**Arrivals.** Where the profiles carry arrivals (profile.py), collectives are matched across ranks
by key, not by time: per step, the same process group, sequence number in that group, kind and
message size. The ranks' clocks differ, so each rank's clock is aligned to the reference rank's by
one offset: the median, over the matched collectives, of the difference of their kernels' END times
(a blocking collective finishes on every rank together, whenever each rank joined it); the spread
of the ends left after that offset says how good the alignment is. Per collective, each rank's
arrival is its kernel's start (GPU arrival) and its launch on the host (host arrival), the last
arrival is the latest over the ranks; a rank's *wait* is last arrival − own arrival (never more
than its kernel's duration), its *transfer* the rest of the kernel's duration. With arrivals the
wait/transfer split comes from them; without (profiles from an older diagnose, keys that do not
match, or ends that still disagree by more than MAX_END_SPREAD_US after alignment), from the
durations as above, with a warning.
"""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from diagnose.vocabulary.collectives import is_collective_kernel, is_collective_op
from diagnose.metrics.accounting import with_rank_wait
from diagnose.rankset.profile import RankProfile
from diagnose.rankset.timed import TimedArrivals


@dataclasses.dataclass
class RankComm:
    """One rank's collective time per step, split (µs)."""

    rank: int
    wait_us: float
    transfer_us: float


class RankSet:
    """The profiles of every rank of one job, and what comparing them shows."""

    def __init__(self, profiles: list[RankProfile], reference: int | None = None):
        self.profiles = sorted(profiles, key=lambda p: p.rank)
        self.reference = reference if reference is not None else (self.profiles[0].rank if self.profiles else 0)
        self.warnings: list[str] = []
        self.arrival = Arrivals.build(self.profiles, self.reference, self.warnings)
        self.timed = TimedArrivals.build(self.profiles, self.warnings)  # the unprofiled steps' arrivals
        self.comm = self.arrival.comm(len(self.profiles)) if self.arrival else self._split_comm()
        self.work = self._price_work()

    def __len__(self) -> int:
        return len(self.profiles)

    @property
    def ranks(self) -> list[int]:
        """The rank numbers, ascending."""
        return [p.rank for p in self.profiles]

    def profile(self, rank: int) -> RankProfile | None:
        """The profile of `rank`, or None."""
        return next((p for p in self.profiles if p.rank == rank), None)

    def profile_of(self, rank: int) -> RankProfile:
        """The profile of `rank`, one of `ranks` (the reference, a rank named by the arrivals); KeyError
        for a rank the set does not hold."""
        profile = self.profile(rank)
        if profile is None:
            raise KeyError(f"no profile for rank {rank}")
        return profile

    def _split_comm(self) -> dict[int, RankComm]:
        """Per rank, the mean per step of synchronisation wait and transfer inside collectives."""
        n_steps = min((len(p.steps_collectives) for p in self.profiles), default=0)
        longest = max((len(p.steps_collectives) for p in self.profiles), default=0)
        if longest > n_steps:
            self.warnings.append(
                f"ranks recorded different numbers of steps ({n_steps} to {longest}): the first {n_steps} are compared"
            )
        wait = {p.rank: 0.0 for p in self.profiles}
        transfer = {p.rank: 0.0 for p in self.profiles}
        uneven = 0
        for lists in self._matched():
            k = min(len(x) for x in lists)
            uneven += max(len(x) for x in lists) > k
            for i in range(k):
                durations = [x[i][1] for x in lists]
                floor = min(durations)
                for p, d in zip(self.profiles, durations):
                    transfer[p.rank] += floor
                    wait[p.rank] += d - floor
        if uneven:
            self.warnings.append(
                f"in {uneven} step(s) the ranks ran different numbers of collectives: the "
                "ones every rank ran, in issue order, are compared"
            )
        n = max(n_steps, 1)
        return {r: RankComm(r, wait[r] / n, transfer[r] / n) for r in wait}

    def wait_us(self, rank: int) -> float:
        """Synchronisation wait inside collectives per step on `rank`."""
        return self.comm[rank].wait_us if rank in self.comm else 0.0

    def transfer_us(self, rank: int) -> float:
        """Transfer time inside collectives per step on `rank`."""
        return self.comm[rank].transfer_us if rank in self.comm else 0.0

    def median_compute_us(self, exclude: int | None = None) -> float:
        """The median GPU compute per step over the ranks (leaving out `exclude`)."""
        values = [p.compute_us for p in self.profiles if p.rank != exclude]
        return statistics.median(values) if values else 0.0

    def median_work_us(self, exclude: int | None = None) -> float:
        """The median GPU work per step over the ranks (leaving out `exclude`); see `work_of`."""
        values = [self.work_of(p) for p in self.profiles if p.rank != exclude]
        return statistics.median(values) if values else 0.0

    def work_of(self, profile: RankProfile) -> float:
        """GPU work per step of one rank: its kernels priced the same on every rank (`_price_work`), or
        its compute time where the profile has no kernel kinds."""
        return self.work.get(profile.rank, profile.compute_us)

    def _price_work(self) -> dict[int, float]:
        """Per rank, GPU work per step: each kind of kernel it ran at its own median duration with no
        collective beside it; a kind that only ran beside collectives on this rank at the median over
        the other ranks' undisturbed medians, else the smallest median of any rank."""
        with_kinds = [(p, p.kernel_kinds) for p in self.profiles if p.kernel_kinds]
        fallback: dict[str, float] = {}
        for kind in {k for _, kinds in with_kinds for k in kinds}:
            rows = [kinds[kind] for _, kinds in with_kinds if kind in kinds]
            alone = [r[1] for r in rows if r[1] is not None]
            fallback[kind] = statistics.median(alone) if alone else min(r[2] for r in rows)
        return {
            p.rank: round(
                sum(row[0] * (row[1] if row[1] is not None else fallback[kind]) for kind, row in kinds.items())
                + p.work_rest_us,
                3,
            )
            for p, kinds in with_kinds
        }

    def median_kernels(self, exclude: int | None = None) -> float:
        """The median number of kernels launched per step over the ranks (leaving out `exclude`)."""
        values = [p.kernels_per_step for p in self.profiles if p.rank != exclude and p.kernels_per_step is not None]
        return statistics.median(values) if values else 0.0

    def slowest(self) -> RankProfile | None:
        """The rank with the most GPU work per step."""
        return max(self.profiles, key=lambda p: (self.work_of(p), -p.rank)) if self.profiles else None

    def arrivals(self) -> dict[int, float]:
        """Per rank, the share of matched collectives at which it arrived last (by arrival times where the
        profiles have them, else as the rank that waited least)."""
        if self.arrival:
            return dict(self.arrival.last_share)
        return self._least_waits()

    def _least_waits(self) -> dict[int, float]:
        """Per rank, the share of matched collectives at which it waited least (it arrived last and the
        others waited for it). Sums to 1 over the ranks; empty without collectives."""
        counts = {p.rank: 0 for p in self.profiles}
        total = 0
        for lists in self._matched():
            for i in range(min(len(x) for x in lists)):
                durations = [x[i][1] for x in lists]
                counts[self.profiles[durations.index(min(durations))].rank] += 1
                total += 1
        return {r: c / total for r, c in counts.items()} if total else {}

    def _matched(self):
        """Per compared step, every rank's collectives in issue order."""
        n_steps = min((len(p.steps_collectives) for p in self.profiles), default=0)
        for s in range(n_steps):
            yield [p.steps_collectives[s] for p in self.profiles]

    def slow_ops(self, rank: int, top: int = 5) -> list[dict]:
        """The ops whose GPU time per step on `rank` exceeds the other ranks' median the most."""
        mine = self.profile(rank)
        others = [p for p in self.profiles if p.rank != rank]
        if mine is None or not others:
            return []
        rows = []
        for name in set(mine.op_us) | {n for p in others for n in p.op_us}:
            if is_collective_op(name) or is_collective_kernel(name):
                continue
            theirs = statistics.median(p.op_us.get(name, 0.0) for p in others)
            extra = mine.op_us.get(name, 0.0) - theirs
            if extra > 0:
                rows.append(
                    {
                        "op": name,
                        "us_per_step": round(mine.op_us.get(name, 0.0), 1),
                        "others_median_us": round(theirs, 1),
                        "extra_us_per_step": round(extra, 1),
                    }
                )
        return sorted(rows, key=lambda r: -r["extra_us_per_step"])[:top]

    def wait_share(self, profile: RankProfile) -> float | None:
        """The rank's wait inside collectives as a share of its profiled step (the time base both are
        measured on), at most 1; None without a profiled step."""
        step = profile.profiled_step_us
        if not step:
            return None
        return round(min(self.wait_us(profile.rank) / step, 1.0), 4)

    def summary(self) -> dict:
        """findings.json's `summary.ranks`: the ranks side by side (per step, µs). `step_us` is the step
        the estimates start from (`step_basis` says which: unprofiled when the capture timed it); GPU
        work, collective time, wait and transfer are measured under the profiler, so they compare with
        `profiled_step_us`, and `wait_share` is the wait's share of that profiled step."""
        return {
            "count": len(self.profiles),
            "reference": self.reference,
            "step_basis": "step_us: unprofiled where the capture timed steps without the profiler, else profiled; "
            "compute, work, comm, wait and transfer: under the profiler (profiled_step_us)",
            "comm_split": (
                self.arrival.basis
                if self.arrival
                else "transfer = a collective's shortest duration over the ranks; wait = the rest"
            ),
            "arrivals": self.arrival.summary() if self.arrival else None,
            "timed_arrivals": self.timed.summary() if self.timed else None,
            "work": "GPU compute per step, each kind of kernel priced alike on every rank at its duration "
            "with no collective beside it",
            "per_rank": [
                {
                    "rank": p.rank,
                    "source": p.source,
                    "rank_from": p.rank_how,
                    "step_us": p.step_us,
                    "step_basis": _basis(p),
                    "unprofiled_step_us": p.unprofiled_step_us,
                    "profiled_step_us": p.profiled_step_us,
                    "wait_share": self.wait_share(p),
                    "compute_us": p.compute_us,
                    "work_us": round(self.work_of(p), 1),
                    "kernels_per_step": p.kernels_per_step,
                    "forwards_per_step": p.forwards_per_step,
                    "comm_rounds_per_step": p.comm_rounds_per_step,
                    "comm_us": p.comm_us,
                    "exposed_comm_us": p.exposed_us,
                    "wait_us": round(self.wait_us(p.rank), 1),
                    "transfer_us": round(self.transfer_us(p.rank), 1),
                    "timed_wait_us": round(self.timed.wait_us[p.rank], 1) if self.timed else None,
                    "timed_step_us": round(self.timed.step_us[p.rank], 1) if self.timed else None,
                    "findings": list(p.findings),
                }
                for p in self.profiles
            ],
        }

    def step_wait_us(self, profile: RankProfile) -> float:
        """The rank's wait per step on the basis of its `step_us`: where the step was timed without the
        profiler, the timed arrivals' wait (else the profiled wait's share of the profiled step, applied
        to that step); under the profiler, the profiled wait. Never more than the step."""
        if not _on_unprofiled(profile):
            return self.wait_us(profile.rank)
        if self.timed is not None:
            return min(self.timed.wait_us.get(profile.rank, 0.0), profile.step_us)
        return (self.wait_share(profile) or 0.0) * profile.step_us

    def budgets(self) -> list[dict]:
        """Details.ranks: each rank's step budget (the accounting buckets), for the side-by-side chart; its
        wait on the basis of its step (`step_wait_us`), the profiled wait beside it."""
        rows = []
        for p in self.profiles:
            wait = self.step_wait_us(p)
            rows.append(
                {
                    "rank": p.rank,
                    "step_us": p.step_us,
                    "step_basis": _basis(p),
                    "wait_us": round(wait, 1),
                    "wait_basis": "timed arrivals"
                    if self.timed is not None and _on_unprofiled(p)
                    else ("profiled share of the step" if _on_unprofiled(p) else "profiled"),
                    "profiled_wait_us": round(self.wait_us(p.rank), 1),
                    "profiled_step_us": p.profiled_step_us,
                    "wait_share": self.wait_share(p),
                    "buckets": [b for b in with_rank_wait(p.buckets, wait) if b.get("in_sum", True)],
                }
            )
        return rows


def _basis(profile: RankProfile) -> str:
    """Which step `step_us` is: "unprofiled" when it is the capture's timing without the profiler (not
    when that timing was set aside for the profiled step, metrics/budget.step_budget)."""
    return "unprofiled" if _on_unprofiled(profile) else "profiled"


def _on_unprofiled(profile: RankProfile) -> bool:
    """Whether the rank's `step_us` is its unprofiled timing."""
    timed = profile.unprofiled_step_us
    if not timed:
        return False
    return abs(profile.step_us - timed) <= 1e-3 * timed


TIE_US = 5.0  # arrivals closer than this (or twice the ends' spread after alignment) have no last
# Past this p90 spread of end times after alignment, the ends do not pin the clocks (the 2×H200 DDP and
# FSDP captures of 2026-11-30 agree within 13 µs)
MAX_END_SPREAD_US = 100.0


@dataclasses.dataclass
class Arrivals:
    """Collectives matched across ranks by key, on aligned clocks (module docstring). Per rank (µs per
    step unless a share): wait, transfer, lateness (how much later than the next-latest rank it arrived,
    summed over the collectives it was last at), and the share of collectives it was last at; on the GPU
    (kernel starts) and on the host (launches)."""

    ranks: list
    n_steps: int
    matched: int
    offsets_us: dict
    end_spread_us: float
    wait_us: dict
    transfer_us: dict
    last_share: dict
    lateness_us: dict
    host_last_share: dict
    host_lateness_us: dict
    lead_us: dict
    silent_us: dict
    late_silent_us: dict  # per rank, silent host lead-in µs per step before the collectives it was last at
    others_silent_us: dict  # per rank, the other ranks' median silent lead-in µs per step at those collectives
    dropped: int = 0
    group_from: str = "none"
    late_steps: dict = dataclasses.field(default_factory=dict)  # per rank, share of steps it was last in at least once
    behind_us: dict = dataclasses.field(default_factory=dict)  # per rank, GPU arrival after the median rank's (_behind)
    behind_host_us: dict = dataclasses.field(default_factory=dict)  # the part of it its own host launch explains
    behind_steps: dict = dataclasses.field(
        default_factory=dict
    )  # share of steps it is behind beyond what its host explains

    @property
    def basis(self) -> str:
        """How the collectives were matched and the clocks aligned, in words."""
        group = {
            "pg_name": "process group name",
            "stream": "collective stream (the trace records no process group per kernel)",
            "none": "one process group",
        }.get(self.group_from, self.group_from)
        return (
            f"{self.matched} collectives matched across ranks by {group}, sequence number in the group and "
            f"step, kind and message size; clocks aligned per rank by the median difference of the "
            f"collectives' kernel end times (ends agree within {self.end_spread_us:,.0f} µs, p90, after "
            f"alignment); wait = last arrival − own (kernel starts), transfer = the rest of the kernel"
        )

    @classmethod
    def build(cls, profiles: list, reference: int, warnings: list) -> "Arrivals | None":
        """The arrivals of these ranks, or None when some rank has none or no collective matches."""
        if len(profiles) < 2 or any(not p.steps_arrivals for p in profiles):
            return None
        n_steps = min(len(p.steps_arrivals) for p in profiles)
        rows = []  # (step, [per rank: host, start, end, lead, silent])
        dropped = 0
        for s in range(n_steps):
            by_key = [{r[0]: r for r in p.steps_arrivals[s]} for p in profiles]
            keys = [r[0] for r in profiles[0].steps_arrivals[s]]
            common = [k for k in keys if all(k in m for m in by_key)]
            dropped += max(len(m) for m in by_key) - len(common)
            rows += [(s, [m[k][1:6] for m in by_key]) for k in common]
        if not rows:
            warnings.append(
                "no collective matched across the ranks by process group, sequence number, kind and "
                "size: the wait split comes from durations alone"
            )
            return None
        if dropped:
            warnings.append(
                f"{dropped} collective(s) ran on some ranks only (or with other sizes): the "
                f"{len(rows)} every rank ran are compared"
            )
        data = np.array([r[1] for r in rows], dtype=float)  # (instances, ranks, 5)
        ref = next((i for i, p in enumerate(profiles) if p.rank == reference), 0)
        ends = data[:, :, 2]
        offsets = np.median(ends - ends[:, [ref]], axis=0)
        aligned = data.copy()
        aligned[:, :, :3] -= offsets[None, :, None]
        spread = float(np.percentile(np.abs(aligned[:, :, 2] - np.median(aligned[:, :, 2], axis=1, keepdims=True)), 90))
        if spread > MAX_END_SPREAD_US:
            warnings.append(
                f"the collectives' kernel end times disagree by {spread:,.0f} µs (p90) after aligning "
                "the ranks' clocks by them: arrivals are not compared, and the wait split comes from "
                "durations alone"
            )
            return None
        start, host = aligned[:, :, 1], aligned[:, :, 0]
        duration = np.maximum(data[:, :, 2] - data[:, :, 1], 0.0)
        last = start.max(axis=1, keepdims=True)
        wait = np.minimum(last - start, duration)
        transfer = duration - wait
        n = max(n_steps, 1)
        k = len(profiles)

        tie = max(2 * spread, TIE_US)
        steps_of = np.array([r[0] for r in rows])

        def lateness(times):
            order = np.argsort(times, axis=1, kind="stable")
            who = order[:, -1]
            gap = times[np.arange(len(times)), who] - times[np.arange(len(times)), order[:, -2]]
            who = np.where(gap > tie, who, -1)  # within the alignment's error nobody is last
            decided = max(int((who >= 0).sum()), 1)
            share = np.bincount(who[who >= 0], minlength=k) / decided
            late = np.bincount(who[who >= 0], weights=gap[who >= 0], minlength=k) / n
            return who, share, late

        who, share, late = lateness(start)
        _, host_share, host_late = lateness(host)
        behind, behind_host, behind_steps = _behind(start, host, steps_of, n_steps, tie)
        silent = data[:, :, 4]
        late_silent, others_silent, step_share = {}, {}, {}
        for i, p in enumerate(profiles):
            mine = who == i
            step_share[p.rank] = round(len(set(steps_of[mine].tolist())) / n, 3)
            late_silent[p.rank] = float(silent[mine, i].sum()) / n
            rest = np.delete(silent[mine], i, axis=1)
            others_silent[p.rank] = float(np.median(rest, axis=1).sum()) / n if mine.any() else 0.0
        ranks = [p.rank for p in profiles]

        def per(values):
            return {r: round(float(v), 3) for r, v in zip(ranks, values)}

        groups = {p.group_from for p in profiles}
        return cls(
            ranks=ranks,
            n_steps=n_steps,
            matched=len(rows),
            end_spread_us=round(spread, 1),
            offsets_us=per(offsets),
            wait_us=per(wait.sum(axis=0) / n),
            transfer_us=per(transfer.sum(axis=0) / n),
            last_share=per(share),
            lateness_us=per(late),
            host_last_share=per(host_share),
            host_lateness_us=per(host_late),
            lead_us=per(data[:, :, 3].sum(axis=0) / n),
            silent_us=per(silent.sum(axis=0) / n),
            late_silent_us={r: round(v, 3) for r, v in late_silent.items()},
            others_silent_us={r: round(v, 3) for r, v in others_silent.items()},
            dropped=dropped,
            late_steps=step_share,
            group_from=groups.pop() if len(groups) == 1 else "mixed",
            behind_us=per(behind),
            behind_host_us=per(behind_host),
            behind_steps=per(behind_steps),
        )

    def comm(self, _count: int) -> dict:
        """The per-rank wait/transfer split (RankComm) these arrivals give."""
        return {r: RankComm(r, self.wait_us[r], self.transfer_us[r]) for r in self.ranks}

    def latest(self) -> int:
        """The rank whose late arrivals cost the others the most (lateness per step), ties by how often."""
        return max(self.ranks, key=lambda r: (self.lateness_us[r], self.last_share[r], -r))

    def summary(self) -> dict:
        """findings.json's `summary.ranks.arrivals`."""
        return {
            "basis": self.basis,
            "matched": self.matched,
            "steps": self.n_steps,
            "dropped": self.dropped,
            "clock_offset_us": self.offsets_us,
            "end_spread_us": self.end_spread_us,
            "per_rank": [
                {
                    "rank": r,
                    "last_share": self.last_share[r],
                    "lateness_us": self.lateness_us[r],
                    "late_steps": self.late_steps.get(r),
                    "host_last_share": self.host_last_share[r],
                    "host_lateness_us": self.host_lateness_us[r],
                    "wait_us": self.wait_us[r],
                    "transfer_us": self.transfer_us[r],
                    "behind_us": self.behind_us.get(r),
                    "behind_host_us": self.behind_host_us.get(r),
                    "lead_in_us": self.lead_us[r],
                    "silent_lead_in_us": self.silent_us[r],
                }
                for r in self.ranks
            ],
        }


def _behind(start: np.ndarray, host: np.ndarray, steps_of: np.ndarray, n_steps: int, tie: float):
    """Per rank (µs per step, mean over steps): how far its GPU arrival lies after the (lower) median rank's at the
    collective of the step where it lies furthest (0 when never after); the part of that its own host
    explains (its launch as far after the median launch, at most the GPU's); and the share of steps in
    which the unexplained rest exceeds `tie`. Under the profiler a host that issues its calls slower
    makes its GPU late as well, by as much as its launch is late: the rest is lateness on the GPU that
    the profiler's pace of the host does not explain (more GPU work before the collective)."""
    gpu = np.maximum(start - np.quantile(start, 0.5, axis=1, method="lower", keepdims=True), 0.0)
    own = np.clip(host - np.quantile(host, 0.5, axis=1, method="lower", keepdims=True), 0.0, gpu)
    k = start.shape[1]
    behind, explained, hits = np.zeros(k), np.zeros(k), np.zeros(k)
    for s in np.unique(steps_of):
        rows = np.flatnonzero(steps_of == s)
        at = rows[np.argmax(gpu[rows], axis=0)]  # per rank, the collective it lies furthest behind at
        g, h = gpu[at, np.arange(k)], own[at, np.arange(k)]
        behind += g
        explained += h
        hits += (g - h) > tie
    n = max(n_steps, 1)
    return behind / n, explained / n, hits / n
