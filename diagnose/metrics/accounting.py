"""Step accounting: every microsecond of the analysed step in one named bucket, summing to the step.

The step (on the unprofiled time base when the capture measured one, see step_time.py) is the
GPU's busy time plus its idle gaps (timeline.py). Both are split further:

| bucket | what it is | from |
| --- | --- | --- |
| `compute` | some compute kernel runs (any stream of the device) | comm.py |
| `comm_exposed` | a collective (NCCL/RCCL) runs and no compute kernel does | comm.py |
| `copy` | only memcpy / memset run | comm.py |
| `launch` | GPU idle while the host issued CUDA calls at least every `timeline.host_silence_us` (dispatch) | host-paced gaps |
| `host_in_ops` | silent host stretches inside a CPU op that does launch kernels: setup that is not dispatch (cuDNN / cuBLAS plan building, autotuning, cudaMalloc, first-call initialisation) | silent gaps ∩ launching ops |
| `host_work` | silent host stretches inside recorded CPU ops or user ranges that launch nothing (data loading, preprocessing) | silent gaps ∩ other ops |
| `sync_wait` | host-side idle that opened while the host sat in a synchronising call | after-sync gaps |
| `kernel_wait` | the next kernel was queued; gap ≤ `timeline.kernel_wait_max_us` | kernel gaps |
| `other_wait` | the next op was queued; longer gaps: waits on events, other streams, copies | other gaps |
| `unexplained` | silent host stretches covered by no recorded op, and any remainder | the rest |

Overlapped communication (collectives running while compute also runs) is reported beside the
buckets and is *not* part of the sum: that time is already `compute`.

Host-side buckets are measured on the profiled trace and rescaled to the unprofiled step exactly as
the budget rescales them (`StepBudget.host_scale`); GPU-side buckets keep their measured length.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.metrics.comm import Communication
from diagnose.metrics.host import intersect, merge_intervals, overlap_us
from diagnose.metrics.step_time import StepBudget
from diagnose.metrics.timeline import Timeline
from diagnose.trace.model import Trace

STEP_MARKERS = ("diagnose/", "ProfilerStep#")
LABELS = {
    "compute": "GPU compute",
    "comm_exposed": "GPU communication, exposed",
    "copy": "GPU memcpy / memset",
    "launch": "launch / dispatch (host-paced idle)",
    "host_in_ops": "host setup inside kernel-launching ops",
    "host_work": "host work outside CUDA calls",
    "sync_wait": "waits after host-device syncs",
    "kernel_wait": "gaps between queued kernels",
    "other_wait": "waits on other streams / events",
    "unexplained": "unexplained (host busy, nothing recorded)",
}
NOT_IN_SUM = {"comm_overlapped": "GPU communication overlapped with compute (inside GPU compute, not summed)"}


@dataclasses.dataclass
class Bucket:
    """One named part of the step."""

    id: str
    label: str
    us: float
    share: float
    detail: str = ""
    names: list = dataclasses.field(default_factory=list)  # what filled it (op names, collectives), largest first
    amounts: list = dataclasses.field(default_factory=list)  # [(name, µs per step)] for host buckets, largest first


@dataclasses.dataclass
class Accounting:
    """The analysed step split into ordered buckets that sum to `step_us` (µs per step)."""

    step_us: float
    buckets: list[Bucket]
    overlapped: list[Bucket]
    basis: str

    @property
    def total_us(self) -> float:
        """Sum of the buckets (equals the step within rounding)."""
        return float(sum(b.us for b in self.buckets))

    def bucket(self, bucket_id: str) -> Bucket:
        """The bucket with this id."""
        return next(b for b in self.buckets + self.overlapped if b.id == bucket_id)

    def largest_loss(self) -> Bucket | None:
        """The largest bucket other than GPU compute: where most of the rest of the step went."""
        losses = [b for b in self.buckets if b.id != "compute" and b.us > 0]
        return max(losses, key=lambda b: b.us) if losses else None

    def to_dict(self) -> dict:
        """Plain data for findings.json (`summary.accounting`) and the report's chart."""
        def row(b: Bucket, in_sum: bool) -> dict:
            return {"id": b.id, "label": b.label, "us_per_step": round(b.us, 3), "share": round(b.share, 4),
                    "detail": b.detail, "names": list(b.names), "in_sum": in_sum,
                    "by_name": [{"name": n, "us_per_step": round(float(u), 3)} for n, u in b.amounts]}

        largest = self.largest_loss()
        return {"step_us": round(self.step_us, 3),
                "buckets": [row(b, True) for b in self.buckets] + [row(b, False) for b in self.overlapped],
                "largest_non_compute": largest.id if largest else None,
                "basis": self.basis}


def step_accounting(trace: Trace, timeline: Timeline, budget: StepBudget, comm: Communication) -> Accounting:
    """Split the measured steps into the buckets above (µs per step)."""
    n = max(budget.n_steps, 1)
    step = budget.step_us
    gaps = timeline.gaps
    scale = budget.host_scale
    host = gaps[gaps["kind"] == "host"]
    synced = host["after_sync"].astype(bool)
    launch = float(host.loc[~synced, "paced_us"].sum()) / n * scale
    sync_wait = float(host.loc[synced, "dur"].sum()) / n * scale
    silent = _silent_outside_syncs(timeline)
    in_ops, in_ops_names, work, work_names = _silent_split(trace, silent)
    silent_total = _length(silent)
    in_ops_us, work_us = in_ops / n * scale, work / n * scale
    unattributed = max(silent_total - in_ops - work, 0.0) / n * scale
    values = {
        "compute": (comm.compute_us, f"{_kernels_per_step(timeline, n):.0f} GPU ops per step"),
        "comm_exposed": (comm.comm_exposed_us, _comm_detail(comm)),
        "copy": (comm.copy_us, ""),
        "launch": (launch, ""),
        "host_in_ops": (in_ops_us, _names(in_ops_names, n, scale)),
        "host_work": (work_us, _names(work_names, n, scale)),
        "sync_wait": (sync_wait, ""),
        "kernel_wait": (budget.kernel_wait_us, ""),
        "other_wait": (budget.other_wait_us, ""),
    }
    names = {"host_in_ops": list(in_ops_names.index[:3]), "host_work": list(work_names.index[:3]),
             "comm_exposed": [_short(x) for x in comm.collectives["name"].head(3)]}
    # The GPU split comes from the same clipped ops as the timeline's busy time, so on the profiled
    # base the buckets sum to the step exactly. On the unprofiled base the budget gives the host
    # side what the unprofiled step leaves; if the trace shows no host-side idle to rescale, that
    # time (the timing loop's own per-step cost) stays here as unexplained.
    accounted = sum(v for v, _ in values.values())
    remainder = step - accounted - unattributed
    unexplained = unattributed + max(remainder, 0.0)
    details = []
    if unattributed > 0:
        details.append(f"{unattributed:,.0f} µs of silent host stretches (no CUDA call for > "
                       "timeline.host_silence_us) that no recorded op covers")
    if remainder > 0.005 * step:
        details.append(f"{remainder:,.0f} µs of the unprofiled step that the profiled trace shows no idle "
                       "time for")
    values["unexplained"] = (unexplained, "; ".join(details))
    total = accounted + unexplained
    if total > step > 0:
        values = _fit(values, total - step)
    amounts = {"host_in_ops": _amounts(in_ops_names, n, scale), "host_work": _amounts(work_names, n, scale)}
    buckets = [Bucket(k, LABELS[k], float(v), float(v) / step if step > 0 else 0.0, d, names.get(k, []),
                      amounts.get(k, [])) for k, (v, d) in values.items()]
    overlapped = [Bucket("comm_overlapped", NOT_IN_SUM["comm_overlapped"], comm.comm_overlapped_us,
                         comm.comm_overlapped_us / step if step > 0 else 0.0, "hidden under compute")]
    return Accounting(step, buckets, overlapped, budget.basis)


BY_NAME_ROWS = 10
HOST_SIDE = ("unexplained", "host_work", "host_in_ops", "launch", "sync_wait")
QUEUED_WAITS = ("kernel_wait", "other_wait")


def _fit(values: dict, excess: float) -> dict:
    """Take `excess` µs off, so that the buckets sum to the step: first off the host side, in
    proportion, then off the queued waits.

    Happens only on the unprofiled time base, when the GPU busy time and queued waits measured
    under the profiler already exceed the unprofiled step (the budget then has no host time left
    to give, and the profiler's own gaps between queued kernels are what was inflated).
    """
    for group in (HOST_SIDE, QUEUED_WAITS):
        total = sum(values[k][0] for k in group)
        if total <= 0 or excess <= 0:
            continue
        keep = max(total - excess, 0.0) / total
        excess -= total - total * keep
        values = {k: ((v * keep, d) if k in group else (v, d)) for k, (v, d) in values.items()}
    return values


def _silent_outside_syncs(timeline: Timeline) -> np.ndarray:
    """The silent host stretches of host gaps that did not open in a sync, merged, as (n, 2)."""
    silent, gaps = timeline.silent, timeline.gaps
    if not len(silent) or not len(gaps):
        return np.empty((0, 2))
    starts = gaps["start"].to_numpy(float)
    order = np.argsort(starts, kind="stable")
    at = np.searchsorted(starts[order], silent["start"].to_numpy(float), side="right") - 1
    owner = order[np.clip(at, 0, len(order) - 1)]
    keep = ~gaps["after_sync"].astype(bool).to_numpy()[owner]
    return merge_intervals(silent["start"].to_numpy(float)[keep], silent["end"].to_numpy(float)[keep])


def _silent_split(trace: Trace, silent: np.ndarray):
    """Silent host time inside launching CPU ops, and inside other recorded ops or user ranges,
    with the µs each op name covers (innermost first: a shorter op of the same overlap wins)."""
    empty = pd.Series(dtype=float)
    if not len(silent):
        return 0.0, empty, 0.0, empty
    ops = trace.ops
    near = ops[(ops["end"] > silent[0, 0]) & (ops["ts"] < silent[-1, 1])]
    cpu = near[near["cat"] == "cpu_op"]
    launching = _launching(trace, cpu)
    ranges = near[(near["cat"] == "user_annotation") & ~near["name"].str.startswith(STEP_MARKERS)]
    launch_ops = cpu[launching]
    other_ops = pd.concat([cpu[~launching], ranges])
    in_ops_iv = intersect(silent, _spans(launch_ops))
    named_iv = intersect(silent, _spans(other_ops))
    in_ops = _length(in_ops_iv)
    work = _length(named_iv) - overlap_us(named_iv, merge_intervals(in_ops_iv[:, 0], in_ops_iv[:, 1]))
    return in_ops, _by_name(launch_ops, in_ops_iv), max(work, 0.0), _by_name(other_ops, named_iv)


def _launching(trace: Trace, cpu: pd.DataFrame) -> np.ndarray:
    """For each CPU op, whether a CUDA runtime call on its own thread falls inside its span."""
    runtime = trace.runtime
    out = np.zeros(len(cpu), dtype=bool)
    positions = np.arange(len(cpu))
    tids = cpu["tid"].to_numpy(object)
    for tid in pd.unique(tids):
        calls = np.sort(runtime.loc[runtime["tid"] == tid, "ts"].to_numpy(float))
        rows = positions[tids == tid]
        if not len(calls):
            continue
        lo = np.searchsorted(calls, cpu["ts"].to_numpy(float)[rows], side="left")
        hi = np.searchsorted(calls, cpu["end"].to_numpy(float)[rows], side="right")
        out[rows] = hi > lo
    return out


def _by_name(ops: pd.DataFrame, covered: np.ndarray) -> pd.Series:
    """µs of `covered` inside each op name, largest first; among names covering about the same
    time (nested ops), the innermost first: the one whose instances are most filled by it."""
    if not len(ops) or not len(covered):
        return pd.Series(dtype=float)
    rows = []
    for name, group in ops.groupby("name", sort=False):
        spans = _spans(group)
        share = overlap_us(covered, spans)
        if share > 0:
            touched = spans[_touches(spans, covered)]
            rows.append((name, share, share / max(_length(touched), 1e-9)))
    if not rows:
        return pd.Series(dtype=float)
    frame = pd.DataFrame(rows, columns=["name", "us", "filled"])
    frame["rank"] = (frame["us"] / frame["us"].max()).round(2)
    frame = frame.sort_values(["rank", "filled", "name"], ascending=[False, False, True], kind="stable")
    return pd.Series(frame["us"].to_numpy(), index=frame["name"].to_numpy())


def _touches(spans: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """For each span (sorted, disjoint), whether it overlaps some interval of `covered`."""
    k = np.searchsorted(covered[:, 1], spans[:, 0], side="right")
    inside = k < len(covered)
    out = np.zeros(len(spans), dtype=bool)
    out[inside] = covered[k[inside], 0] < spans[inside, 1]
    return out


def _names(by_name: pd.Series, n: int, scale: float, top: int = 3) -> str:
    return "; ".join(f"{name} {us / n * scale:,.0f} µs" for name, us in by_name.head(top).items())


def _amounts(by_name: pd.Series, n: int, scale: float, top: int = BY_NAME_ROWS) -> list:
    """[(name, µs per step)] of the largest names (what `diagnose diff` matches across runs)."""
    return [(str(name), us / n * scale) for name, us in by_name.head(top).items()]


def _comm_detail(comm: Communication) -> str:
    if not comm.comm_kernels_per_step:
        return ""
    top = comm.collectives.head(2)
    names = ", ".join(f"{_short(r.name)} ×{r.calls_per_step:g}" for r in top.itertuples())
    return (f"{comm.comm_kernels_per_step:g} collectives per step ({names}); "
            f"{comm.overlap_fraction:.0%} of their time overlapped with compute")


def _short(name: str) -> str:
    return name.split("(")[0].removeprefix("void ")[:60]


def _kernels_per_step(timeline: Timeline, n: int) -> float:
    return len(timeline.ops) / n


def _spans(frame: pd.DataFrame) -> np.ndarray:
    return merge_intervals(frame["ts"].to_numpy(float), frame["end"].to_numpy(float))


def _length(intervals: np.ndarray) -> float:
    return float((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0.0
