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
"""
from __future__ import annotations

import dataclasses
import statistics

from diagnose.collectives import is_collective_kernel, is_collective_op
from diagnose.ranks.profile import RankProfile



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
        self.comm = self._split_comm()
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

    def _split_comm(self) -> dict[int, RankComm]:
        """Per rank, the mean per step of synchronisation wait and transfer inside collectives."""
        n_steps = min((len(p.steps_collectives) for p in self.profiles), default=0)
        longest = max((len(p.steps_collectives) for p in self.profiles), default=0)
        if longest > n_steps:
            self.warnings.append(f"ranks recorded different numbers of steps ({n_steps} to {longest}): "
                                 f"the first {n_steps} are compared")
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
            self.warnings.append(f"in {uneven} step(s) the ranks ran different numbers of collectives: the "
                                 "ones every rank ran, in issue order, are compared")
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
        with_kinds = [p for p in self.profiles if p.kernel_kinds]
        fallback: dict[str, float] = {}
        for kind in {k for p in with_kinds for k in p.kernel_kinds}:
            rows = [p.kernel_kinds[kind] for p in with_kinds if kind in p.kernel_kinds]
            alone = [r[1] for r in rows if r[1] is not None]
            fallback[kind] = statistics.median(alone) if alone else min(r[2] for r in rows)
        return {p.rank: round(sum(row[0] * (row[1] if row[1] is not None else fallback[kind])
                                  for kind, row in p.kernel_kinds.items()) + p.work_rest_us, 3)
                for p in with_kinds}

    def median_kernels(self, exclude: int | None = None) -> float:
        """The median number of kernels launched per step over the ranks (leaving out `exclude`)."""
        values = [p.kernels_per_step for p in self.profiles if p.rank != exclude and p.kernels_per_step is not None]
        return statistics.median(values) if values else 0.0

    def slowest(self) -> RankProfile | None:
        """The rank with the most GPU work per step."""
        return max(self.profiles, key=lambda p: (self.work_of(p), -p.rank)) if self.profiles else None

    def arrivals(self) -> dict[int, float]:
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
                rows.append({"op": name, "us_per_step": round(mine.op_us.get(name, 0.0), 1),
                             "others_median_us": round(theirs, 1), "extra_us_per_step": round(extra, 1)})
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
            "count": len(self.profiles), "reference": self.reference,
            "step_basis": "step_us: unprofiled where the capture timed steps without the profiler, else profiled; "
                          "compute, work, comm, wait and transfer: under the profiler (profiled_step_us)",
            "comm_split": "transfer = a collective's shortest duration over the ranks; wait = the rest",
            "work": "GPU compute per step, each kind of kernel priced alike on every rank at its duration "
                    "with no collective beside it",
            "per_rank": [{"rank": p.rank, "source": p.source, "rank_from": p.rank_how,
                          "step_us": p.step_us, "step_basis": _basis(p), "unprofiled_step_us": p.unprofiled_step_us,
                          "profiled_step_us": p.profiled_step_us, "wait_share": self.wait_share(p),
                          "compute_us": p.compute_us,
                          "work_us": round(self.work_of(p), 1), "kernels_per_step": p.kernels_per_step,
                          "forwards_per_step": p.forwards_per_step, "comm_rounds_per_step": p.comm_rounds_per_step, "comm_us": p.comm_us,
                          "exposed_comm_us": p.exposed_us, "wait_us": round(self.wait_us(p.rank), 1),
                          "transfer_us": round(self.transfer_us(p.rank), 1), "findings": list(p.findings)}
                         for p in self.profiles],
        }

    def budgets(self) -> list[dict]:
        """Details.ranks: each rank's step budget (the accounting buckets), for the side-by-side chart."""
        return [{"rank": p.rank, "step_us": p.step_us, "step_basis": _basis(p), "wait_us": round(self.wait_us(p.rank), 1),
                 "profiled_step_us": p.profiled_step_us, "wait_share": self.wait_share(p),
                 "buckets": [b for b in p.buckets if b.get("in_sum", True)]} for p in self.profiles]


def _basis(profile: RankProfile) -> str:
    """Which step `step_us` is: "unprofiled" when the capture timed steps without the profiler."""
    return "unprofiled" if profile.unprofiled_step_us else "profiled"
