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
import re
import statistics

from diagnose.ranks.profile import RankProfile

COMM_OP = re.compile(r"nccl|rccl|c10d|allreduce|all_reduce|allgather|all_gather|reduce_scatter|broadcast",
                     re.IGNORECASE)


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
        for s in range(n_steps):
            lists = [p.steps_collectives[s] for p in self.profiles]
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

    def slowest(self) -> RankProfile | None:
        """The rank with the most GPU compute per step."""
        return max(self.profiles, key=lambda p: (p.compute_us, -p.rank)) if self.profiles else None

    def slow_ops(self, rank: int, top: int = 5) -> list[dict]:
        """The ops whose GPU time per step on `rank` exceeds the other ranks' median the most."""
        mine = self.profile(rank)
        others = [p for p in self.profiles if p.rank != rank]
        if mine is None or not others:
            return []
        rows = []
        for name in set(mine.op_us) | {n for p in others for n in p.op_us}:
            if COMM_OP.search(name):
                continue
            theirs = statistics.median(p.op_us.get(name, 0.0) for p in others)
            extra = mine.op_us.get(name, 0.0) - theirs
            if extra > 0:
                rows.append({"op": name, "us_per_step": round(mine.op_us.get(name, 0.0), 1),
                             "others_median_us": round(theirs, 1), "extra_us_per_step": round(extra, 1)})
        return sorted(rows, key=lambda r: -r["extra_us_per_step"])[:top]

    def summary(self) -> dict:
        """findings.json's `summary.ranks`: the ranks side by side (per step, µs)."""
        return {
            "count": len(self.profiles), "reference": self.reference,
            "comm_split": "transfer = a collective's shortest duration over the ranks; wait = the rest",
            "per_rank": [{"rank": p.rank, "source": p.source, "rank_from": p.rank_how,
                          "step_us": p.step_us, "unprofiled_step_us": p.unprofiled_step_us, "compute_us": p.compute_us, "comm_us": p.comm_us,
                          "exposed_comm_us": p.exposed_us, "wait_us": round(self.wait_us(p.rank), 1),
                          "transfer_us": round(self.transfer_us(p.rank), 1), "findings": list(p.findings)}
                         for p in self.profiles],
        }

    def budgets(self) -> list[dict]:
        """Details.ranks: each rank's step budget (the accounting buckets), for the side-by-side chart."""
        return [{"rank": p.rank, "step_us": p.step_us, "wait_us": round(self.wait_us(p.rank), 1),
                 "buckets": [b for b in p.buckets if b.get("in_sum", True)]} for p in self.profiles]
