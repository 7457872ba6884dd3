"""One rank's profile for the cross-rank view: small, plain data, built where the trace was decoded.

Per measured step: the GPU compute time (compute kernels merged over all streams), and every
collective kernel in issue order with its duration (NCCL issues collectives in the same order on
every rank, which is what lets model.py match them). A collective belongs to the step whose host
window launched it, not the one its kernel ran in: a rank whose GPU lags its host runs the last
collectives of step s during step s + 1, and matching by kernel time would pair them with the
other ranks' collectives of a different step. Per step on average: the step time, compute,
collective time and its exposed part, the GPU time of each launching op, and the step budget.

*GPU work* is compute as it would take with no collective beside it. A collective's kernel
occupies SMs while it spins, so compute kernels running next to one run slower, and a rank that
waits long inside collectives shows more compute time for the same work (measured on the 2×H200
DDP and FSDP captures: identical ranks differed by up to 24 % in compute time). The profile keeps,
per kind of compute kernel (name, grid and block), how many ran per step, the median duration of
those that ran with no collective beside them, and the median of all; model.py prices each kind
at that undisturbed median (a kind that only ran beside collectives on a rank at the other ranks'
undisturbed median), so that a rank's work counts what it ran and how fast its GPU ran it alone,
not how crowded its GPU was. The launch count per step
is the other measure of work: identical ranks launch identical numbers of kernels.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.metrics import Metrics
from diagnose.metrics.accounting import HOST_PACED
from diagnose.metrics.comm import comm_rounds, in_windows, is_comm, launch_times
from diagnose.metrics.host import merge_intervals

TOP_OPS = 40
MAX_KINDS = 600  # kernel kinds kept per rank for the cross-rank work measure; the rest count as they ran


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
    forwards_per_step: float | None = None  # data-parallel forward passes per step (DDP/FSDP annotations)
    comm_rounds_per_step: float | None = None  # of those, how many were followed by collectives before the next
    kernel_kinds: dict | None = None  # kind -> [kernels per step, undisturbed median µs or None, median µs]
    work_rest_us: float = 0.0  # GPU µs per step of the kinds beyond MAX_KINDS, at their own durations
    kernels_per_step: float | None = None  # GPU kernels launched per step (collectives included)
    profiled_step_us: float | None = None  # the mean step under the profiler: the base of comm, wait and work

    def host_paced(self, field: str = "us_per_step") -> float:
        """The rank's step buckets in which its GPU waited for its host (launch and host buckets), as
        µs per step (`field` "us_per_step") or as a share of the step ("share")."""
        return float(sum(b.get(field) or 0.0 for b in self.buckets
                         if b.get("id") in HOST_PACED and b.get("in_sum", True)))

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
    launched = pd.Series(launch_times(trace, gpu), index=gpu.index) if len(gpu) else pd.Series(dtype=float)
    comm_launch = launched.loc[comm.index].to_numpy(float)
    steps_compute, steps_coll = [], []
    for w in windows:
        part = compute[(compute["ts"] >= w.start) & (compute["ts"] < w.end)]
        iv = merge_intervals(part["ts"].to_numpy(float), np.minimum(part["end"].to_numpy(float), w.end))
        steps_compute.append(round(float((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0.0, 3))
        c = comm[(comm_launch >= w.cpu_start) & (comm_launch < w.cpu_end)]
        steps_coll.append([[str(n).split("(")[0], round(float(d), 3)] for n, d in zip(c["name"], c["dur"])])
    n_steps = max(len(windows), 1)
    forwards, rounds = comm_rounds(trace, windows, comm_launch)
    in_steps = in_windows(launched.to_numpy(float), windows)
    kinds, rest = _kernel_kinds(compute, comm, in_windows(launched.loc[compute.index].to_numpy(float), windows),
                                n_steps)
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
                       unprofiled_step_us=((trace.capture or {}).get("timing") or {}).get("median_us"),
                       kernel_kinds=kinds, work_rest_us=rest,
                       forwards_per_step=round(forwards / n_steps, 2) if windows else None,
                       comm_rounds_per_step=round(rounds / n_steps, 2) if windows else None,
                       kernels_per_step=round(float(in_steps.sum()) / n_steps, 1) if windows else None,
                       profiled_step_us=round(float(budget.profiled_step_us), 3) if windows else None)


def _kernel_kinds(compute, comm, in_steps: np.ndarray, n_steps: int) -> tuple[dict, float]:
    """Per kind of compute kernel launched in the steps: [kernels per step, median µs of the instances
    with no collective beside them (None if none), median µs of all]; and the µs per step of the kinds
    beyond MAX_KINDS (module docstring)."""
    if not len(compute) or not in_steps.any():
        return {}, 0.0
    iv = merge_intervals(comm["ts"].to_numpy(float), comm["end"].to_numpy(float)) if len(comm) else np.zeros((0, 2))
    ts, te = compute["ts"].to_numpy(float), compute["end"].to_numpy(float)
    if len(iv):
        k = np.searchsorted(iv[:, 0], te, side="left") - 1
        beside = (k >= 0) & (iv[np.maximum(k, 0), 1] > ts)
    else:
        beside = np.zeros(len(ts), dtype=bool)
    frame = pd.DataFrame({"kind": (compute["name"].astype(str).str.slice(0, 200) + "|" + compute["grid"].astype(str)
                                   + "|" + compute["block"].astype(str)).to_numpy(),
                          "dur": compute["dur"].to_numpy(float), "beside": beside})
    alone = frame[~frame["beside"]].groupby("kind")["dur"].median()
    steps = frame[in_steps]
    stats = steps.groupby("kind")["dur"].agg(["size", "median", "sum"]).sort_values("sum", ascending=False)
    kept, rest = stats.head(MAX_KINDS), stats.iloc[MAX_KINDS:]
    kinds = {str(kind): [round(float(row.size) / n_steps, 3),
                         round(float(alone[kind]), 3) if kind in alone.index else None, round(float(row.median), 3)]
             for kind, row in zip(kept.index, kept.itertuples())}
    return kinds, round(float(rest["sum"].sum()) / n_steps, 3)


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
