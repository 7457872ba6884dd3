"""One rank's profile for the cross-rank view: small, plain data, built where the trace was decoded.

Per measured step: the GPU compute time (compute kernels merged over all streams), and every
collective kernel in issue order with its duration (NCCL issues collectives in the same order on
every rank, which is what lets model.py match them). Per step on average: the step time, compute,
collective time and its exposed part, the GPU time of each launching op, and the step budget.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from diagnose.metrics import Metrics
from diagnose.metrics.comm import is_comm
from diagnose.metrics.host import merge_intervals

TOP_OPS = 40


@dataclasses.dataclass
class RankProfile:
    """What the cross-rank model needs of one rank (µs; per step unless a list per step)."""

    rank: int
    source: str
    step_us: float
    compute_us: float
    comm_us: float
    exposed_us: float
    steps_compute_us: list
    steps_collectives: list  # per step: [[name, duration µs], ...] in issue order
    op_us: dict  # launching op (or kernel) name -> GPU µs per step, the largest TOP_OPS
    buckets: list  # the step accounting's buckets: {id, label, us_per_step, share, in_sum}
    world_size: int | None = None
    rank_how: str = "order"
    unprofiled_step_us: float | None = None  # the capture's own timing without the profiler, when it has one
    findings: list = dataclasses.field(default_factory=list)  # rule ids that fired on this rank alone

    def to_dict(self) -> dict:
        """Plain data (pickles and serialises cheaply)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RankProfile":
        """Inverse of `to_dict`."""
        return cls(**data)


def rank_profile(metrics: Metrics, rank: int, source: str, how: str = "order") -> RankProfile:
    """Build the profile of one rank from its Metrics."""
    trace = metrics.trace
    windows = metrics.steps.windows
    device = trace.main_device
    gpu = trace.gpu if device is None else trace.gpu[trace.gpu["device"] == device]
    comm_mask = is_comm(gpu["name"]) if len(gpu) else np.zeros(0, dtype=bool)
    compute = gpu[~comm_mask & (gpu["cat"] == "kernel").to_numpy()] if len(gpu) else gpu
    comm = gpu[comm_mask].sort_values("ts") if len(gpu) else gpu
    steps_compute, steps_coll = [], []
    for w in windows:
        part = compute[(compute["ts"] >= w.start) & (compute["ts"] < w.end)]
        iv = merge_intervals(part["ts"].to_numpy(float), np.minimum(part["end"].to_numpy(float), w.end))
        steps_compute.append(round(float((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0.0, 3))
        c = comm[(comm["ts"] >= w.start) & (comm["ts"] < w.end)]
        steps_coll.append([[str(n).split("(")[0], round(float(d), 3)] for n, d in zip(c["name"], c["dur"])])
    c = metrics.comm
    budget = metrics.budget
    summary = metrics.summary() if windows else {}
    buckets = [{k: b.get(k) for k in ("id", "label", "us_per_step", "share", "in_sum")}
               for b in (summary.get("accounting") or {}).get("buckets", [])]
    return RankProfile(rank=rank, source=source, step_us=round(float(budget.step_us), 3) if windows else 0.0,
                       compute_us=round(float(c.compute_us), 3), comm_us=round(float(c.comm_us), 3),
                       exposed_us=round(float(c.comm_exposed_us), 3), steps_compute_us=steps_compute,
                       steps_collectives=steps_coll, op_us=_op_us(metrics, len(windows)), buckets=buckets,
                       world_size=(trace.distributed or {}).get("world_size")
                       if isinstance(trace.distributed, dict) else None, rank_how=how,
                       unprofiled_step_us=((trace.capture or {}).get("timing") or {}).get("median_us"))


def _op_us(metrics: Metrics, n_steps: int) -> dict:
    """GPU µs per step by launching op (kernel name when no op launched it), largest first."""
    work = metrics.op_work
    if not len(work) or not n_steps:
        return {}
    names = work["op_name"].where(work["op_name"].notna(), work["kernel"]).astype(str)
    totals = work["kernel_us"].groupby(names).sum().sort_values(ascending=False).head(TOP_OPS) / n_steps
    return {str(k): round(float(v), 3) for k, v in totals.items()}


def distributed_rank(trace) -> tuple[int | None, int | None]:
    """(rank, world size) from the trace's `distributedInfo`, each None when absent."""
    info = trace.distributed if isinstance(trace.distributed, dict) else {}
    rank, world = info.get("rank"), info.get("world_size")
    return (rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None,
            world if isinstance(world, int) and not isinstance(world, bool) else None)
