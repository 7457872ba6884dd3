"""GPU time split by what ran: compute kernels, communication kernels, copies.

Collective-communication kernels (NCCL's `ncclKernel_*` / `ncclDevKernel_*`, RCCL's, MSCCL's)
occupy the GPU while they move data between ranks; they are communication, not compute. On one
device (all streams merged), the measured steps' GPU time is split into:

- compute: some kernel other than a collective is running;
- communication, exposed: a collective runs and no compute kernel runs on any stream of the
  device (the step waits for the network);
- copies: only memcpy / memset run;

and, beside the split and not part of it, communication *overlapped* with compute (collective
time during which some compute kernel also ran: hidden, as DDP and FSDP intend).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.vocabulary.collectives import is_collective_kernel
from diagnose.metrics.host import intersect, length, merge_intervals
from diagnose.trace.names import name_match

COPY_CATS = ("memcpy", "memset", "gpu_memcpy", "gpu_memset")


@dataclasses.dataclass
class Communication:
    """Per-step GPU time by what ran (µs per step, profiled trace: kernel durations are not inflated)."""

    n_steps: int
    compute_us: float
    comm_exposed_us: float
    comm_overlapped_us: float
    copy_us: float
    comm_kernels_per_step: float
    collectives: pd.DataFrame  # name, calls_per_step, us_per_step, exposed_us_per_step
    comm_streams: list

    @property
    def comm_us(self) -> float:
        """Time some collective ran, per step (exposed + overlapped)."""
        return self.comm_exposed_us + self.comm_overlapped_us

    @property
    def busy_us(self) -> float:
        """GPU busy time per step: compute + exposed communication + copies."""
        return self.compute_us + self.comm_exposed_us + self.copy_us

    @property
    def overlap_fraction(self) -> float:
        """Share of the collectives' time hidden under compute (0 with no collective)."""
        return self.comm_overlapped_us / self.comm_us if self.comm_us > 0 else 0.0


def is_comm(names: pd.Series) -> np.ndarray:
    """Whether each GPU op name is a collective-communication kernel (diagnose/vocabulary/collectives.py)."""
    hits = {n for n in pd.unique(names) if is_collective_kernel(n)}
    return names.isin(hits).to_numpy(bool) if hits else np.zeros(len(names), dtype=bool)


def communication(ops: pd.DataFrame, start: float, end: float, n_steps: int) -> Communication:
    """Split the GPU time of `ops` (one device) inside [start, end) into compute, exposed
    communication and copies, and measure the communication hidden under compute."""
    n = max(n_steps, 1)
    ts = np.clip(ops["ts"].to_numpy(float), start, end)
    te = np.clip(ops["end"].to_numpy(float), start, end)
    comm = is_comm(ops["name"]) if len(ops) else np.zeros(0, dtype=bool)
    copy = ops["cat"].isin(COPY_CATS).to_numpy() & ~comm if len(ops) else np.zeros(0, dtype=bool)
    compute = ~comm & ~copy
    compute_iv = merge_intervals(ts[compute], te[compute])
    comm_iv = merge_intervals(ts[comm], te[comm])
    copy_iv = merge_intervals(ts[copy], te[copy])
    kernels_iv = merge_intervals(np.concatenate((ts[compute], ts[comm])), np.concatenate((te[compute], te[comm])))
    compute_us = length(compute_iv)
    overlapped = length(intersect(comm_iv, compute_iv))
    exposed = length(comm_iv) - overlapped
    copy_only = length(copy_iv) - length(intersect(copy_iv, kernels_iv))
    return Communication(
        n_steps=n,
        compute_us=compute_us / n,
        comm_exposed_us=exposed / n,
        comm_overlapped_us=overlapped / n,
        copy_us=copy_only / n,
        comm_kernels_per_step=float(comm.sum()) / n,
        collectives=_collectives(ops[comm], ts[comm], te[comm], compute_iv, n),
        comm_streams=sorted({int(s) for s in ops.loc[comm, "stream"].dropna()}) if comm.any() else [],
    )


def _collectives(ops: pd.DataFrame, ts: np.ndarray, te: np.ndarray, compute_iv: np.ndarray, n: int) -> pd.DataFrame:
    """One row per collective kernel name: calls, time and time not hidden under compute, per step."""
    columns = ["name", "calls_per_step", "us_per_step", "exposed_us_per_step"]
    if not len(ops):
        return pd.DataFrame(columns=columns)
    hidden = np.array([length(intersect(np.array([[s, e]]), compute_iv)) for s, e in zip(ts, te)])
    frame = pd.DataFrame({"name": ops["name"].to_numpy(object), "dur": te - ts, "exposed": (te - ts) - hidden})
    grouped = aggregate(
        frame.groupby("name", sort=False), calls=("dur", "size"), us=("dur", "sum"), exposed=("exposed", "sum")
    )
    grouped = grouped.sort_values("exposed", ascending=False)
    return pd.DataFrame(
        {
            "name": grouped.index,
            "calls_per_step": grouped["calls"].to_numpy() / n,
            "us_per_step": grouped["us"].to_numpy() / n,
            "exposed_us_per_step": grouped["exposed"].to_numpy() / n,
        }
    )[columns]


def launch_times(trace, ops) -> np.ndarray:
    """Host time at which each GPU op was launched (its CUDA runtime call; for a collective, the CPU
    op that issued it), or its own start where the trace links it to neither."""
    if not len(ops):
        return np.zeros(0)
    launch = ops["ts"].to_numpy(float).copy()
    linked = np.zeros(len(ops), dtype=bool)
    runtime = trace.runtime
    if len(runtime) and "correlation" in ops:
        by_corr = runtime.drop_duplicates("correlation").set_index("correlation")["ts"]
        found = ops["correlation"].map(by_corr).to_numpy(float)
        linked = ~np.isnan(found)
        launch = np.where(linked, found, launch)
    cpu = trace.cpu_ops
    if len(cpu) and "external_id" in ops and "external_id" in cpu:
        by_ext = cpu.dropna(subset=["external_id"]).drop_duplicates("external_id").set_index("external_id")["ts"]
        found = ops["external_id"].map(by_ext).to_numpy(float)
        launch = np.where(~linked & ~np.isnan(found), found, launch)
    return launch


FORWARD = re.compile(r"^(DistributedDataParallel|FullyShardedDataParallel|FSDP)[.:]*forward", re.IGNORECASE)


def comm_rounds(trace, windows, comm_launch: np.ndarray) -> tuple[int, int]:
    """(data-parallel forward passes, rounds of collectives) in the steps: a round is a forward pass
    (DDP's or FSDP's own annotation) after which collectives were launched before the next forward or
    the end of the step. Gradient accumulation that all-reduces after every micro-batch has as many
    rounds as forwards; with no_sync, one."""
    ops = trace.ops
    if not len(ops) or not windows:
        return 0, 0
    marks = ops[(ops["cat"] == "user_annotation") & name_match(ops["name"], FORWARD)]
    starts = np.sort(marks["ts"].to_numpy(float))
    forwards = rounds = 0
    for w in windows:
        mine = starts[(starts >= w.cpu_start) & (starts < w.cpu_end)]
        bounds = np.append(mine, w.cpu_end)
        forwards += len(mine)
        rounds += sum(bool(((comm_launch >= a) & (comm_launch < b)).any()) for a, b in zip(bounds, bounds[1:]))
    return forwards, rounds


def in_windows(times: np.ndarray, windows) -> np.ndarray:
    """Whether each host time falls inside one of the steps' host ranges."""
    inside = np.zeros(len(times), dtype=bool)
    for w in windows:
        inside |= (times >= w.cpu_start) & (times < w.cpu_end)
    return inside


def rounds_per_step(trace, windows) -> tuple[float, float]:
    """(data-parallel forward passes, rounds of collectives) per step on the trace's main device
    (`comm_rounds`); (0, 0) without windows or collectives."""
    if not windows or not len(trace.gpu):
        return 0.0, 0.0
    gpu = trace.gpu if trace.main_device is None else trace.gpu[trace.gpu["device"] == trace.main_device]
    comm = gpu[is_comm(gpu["name"])] if len(gpu) else gpu
    if not len(comm):
        return 0.0, 0.0
    forwards, rounds = comm_rounds(trace, windows, launch_times(trace, comm))
    return forwards / len(windows), rounds / len(windows)
