"""Step accounting: every microsecond of the analysed step in one named bucket, summing to the step.

The step (on the unprofiled time base when the capture measured one, see budget.py) is the
GPU's busy time plus its idle gaps (timeline.py). Both are split further:

| bucket | what it is | from |
| --- | --- | --- |
| `compute` | some compute kernel runs (any stream of the device) | comm.py |
| `comm_exposed` | a collective (NCCL/RCCL) runs and no compute kernel does | comm.py |
| `copy` | only memcpy / memset run | comm.py |
| `launch` | GPU idle while the host issued CUDA calls at least every `timeline.host_silence_us` (dispatch) | host-paced gaps |
| `host_in_ops` | silent host stretches inside a CPU op that does launch kernels, or a torch.compile range: setup that is not dispatch (cuDNN / cuBLAS plan building, autotuning, compiling, cudaMalloc, first-call initialisation) | silent gaps ∩ launching ops |
| `host_work` | silent host stretches inside recorded CPU ops or DataLoader ranges that launch nothing (data loading, preprocessing) | silent gaps ∩ other ops |
| `host_python` | silent host stretches no recorded op covers, named by the user's Python lines (capture modes sample the stack; a trace recorded with_stack=True has it as python_function events) | silent gaps ∩ stack samples |
| `sync_wait` | host-side idle that opened while the host sat in a synchronising call, or from the start of one that ran to the gap's end | after-sync gaps |
| `kernel_wait` | the next kernel was queued; gap ≤ `timeline.kernel_wait_max_us` | kernel gaps |
| `other_wait` | the next op was queued; longer gaps: waits on events, other streams, copies | other gaps |
| `unexplained` | silent host stretches covered by no recorded op, and any remainder | the rest |

Overlapped communication (collectives running while compute also runs) is reported beside the
buckets and is *not* part of the sum: that time is already `compute`.

Across ranks (`diagnose DIR`), a collective's exposed time on one rank is partly *waiting* for the
last rank to arrive (diagnose/rankset/model.py): `with_rank_wait` splits `comm_exposed` into the
exposed transfer (`comm_exposed`) and `comm_wait`, with `exposed_comm_split`, the one function the
exposed-comm rule also uses, so that the step breakdown and the rule show the same exposed time.

Host-side buckets are measured on the profiled trace and rescaled to the unprofiled step exactly as
the budget rescales them (`StepBudget.host_scale`); GPU-side buckets keep their measured length.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.metrics.comm import Communication
from diagnose.metrics.host import SilentSplit, merge_intervals, silent_split
from diagnose.metrics.pyframes import NO_SAMPLE, PySamples
from diagnose.metrics.budget import StepBudget
from diagnose.metrics.timeline import Timeline
from diagnose.trace.model import Trace
from diagnose.vocabulary.units import percent

LABELS = {
    "compute": "GPU compute",
    "comm_exposed": "GPU communication, exposed",
    "comm_wait": "GPU waiting in collectives for other ranks",
    "copy": "GPU memcpy / memset",
    "launch": "launch / dispatch (host-paced idle)",
    "host_in_ops": "host setup inside kernel-launching ops",
    "host_work": "host work outside CUDA calls",
    "host_python": "host work in the user's Python (its stack sampled or traced)",
    "sync_wait": "waits after host-device syncs",
    "kernel_wait": "gaps between queued kernels",
    "other_wait": "waits on other streams / events",
    "unexplained": "unexplained (host busy, nothing recorded)",
}
HOST_PACED = ("launch", "host_in_ops", "host_work", "host_python", "unexplained")
"""The buckets in which the GPU waits for its host: slack that GPU-side savings first fall into."""
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
            return {
                "id": b.id,
                "label": b.label,
                "us_per_step": round(b.us, 3),
                "share": round(b.share, 4),
                "detail": b.detail,
                "names": list(b.names),
                "in_sum": in_sum,
                "by_name": [{"name": n, "us_per_step": round(float(u), 3)} for n, u in b.amounts],
            }

        largest = self.largest_loss()
        rows = [row(b, True) for b in self.buckets]
        for r, share in zip(rows, _shares([b.us for b in self.buckets])):
            r["share"] = share
        return {
            "step_us": round(self.step_us, 3),
            "buckets": rows + [row(b, False) for b in self.overlapped],
            "largest_non_compute": largest.id if largest else None,
            "basis": self.basis,
        }


def exposed_comm_split(comm_exposed_us: float, wait_us: float) -> tuple[float, float]:
    """(exposed transfer, exposed wait) µs per step of a rank's exposed communication, given its wait for
    the other ranks inside collectives: the wait counts as exposed first (a collective's kernel waits as
    soon as it starts, before any compute could hide it), the rest is transfer."""
    exposed = max(float(comm_exposed_us or 0.0), 0.0)
    wait = min(max(float(wait_us or 0.0), 0.0), exposed)
    return exposed - wait, wait


def with_rank_wait(buckets: list[dict], wait_us: float) -> list[dict]:
    """Accounting buckets (Accounting.to_dict rows) with `comm_exposed` split by `exposed_comm_split`
    into the exposed transfer and `comm_wait`; the summed shares are made again so that they add to 1."""
    out = []
    for b in buckets:
        if b.get("id") != "comm_exposed" or not b.get("in_sum", True) or wait_us <= 0:
            out.append(dict(b))
            continue
        transfer, wait = exposed_comm_split(b.get("us_per_step") or 0.0, wait_us)
        out.append(
            {
                **b,
                "us_per_step": round(transfer, 3),
                "detail": (b.get("detail") or "")
                + ("; " if b.get("detail") else "")
                + f"{wait:,.0f} µs per step of it is waiting for other ranks (comm_wait)",
            }
        )
        out.append(
            {
                "id": "comm_wait",
                "label": LABELS["comm_wait"],
                "us_per_step": round(wait, 3),
                "share": 0.0,
                "detail": "the collectives' kernels waiting for the last rank to arrive (ranks compared)",
                "names": [],
                "in_sum": True,
                "by_name": [],
            }
        )
    summed = [b for b in out if b.get("in_sum", True)]
    for b, share in zip(summed, _shares([float(b.get("us_per_step") or 0.0) for b in summed])):
        b["share"] = share
    return out


def largest_non_compute(buckets: list[dict]) -> str | None:
    """The id of the largest summed bucket other than GPU compute (Accounting.largest_loss on dict rows)."""
    losses = [
        b for b in buckets if b.get("in_sum", True) and b.get("id") != "compute" and (b.get("us_per_step") or 0) > 0
    ]
    return max(losses, key=lambda b: b["us_per_step"])["id"] if losses else None


def step_accounting(
    timeline: Timeline,
    budget: StepBudget,
    comm: Communication,
    trace: Trace,
    samples: PySamples | None = None,
    split: SilentSplit | None = None,
) -> Accounting:
    """Split the measured steps into the buckets above (µs per step); with the capture's Python stack
    samples, the silent host time no recorded op covers is named by the user's lines (`host_python`).
    `split` is silent_split of silent_outside_syncs(timeline), when the caller has it already."""
    n = max(budget.n_steps, 1)
    step = budget.step_us
    gaps = timeline.gaps
    scale = budget.host_scale
    per_step = scale / n
    host = gaps[gaps["kind"] == "host"]
    synced = host["after_sync"].astype(bool)
    launch = float(host.loc[~synced, "paced_us"].sum()) * per_step
    sync_wait = float(host.loc[synced, "dur"].sum()) * per_step
    split = split if split is not None else silent_split(trace, silent_outside_syncs(timeline))
    python_us, python_names, unattributed = _python_split(split, samples)
    values = {
        "compute": (comm.compute_us, f"{_kernels_per_step(timeline, n):.0f} GPU ops per step"),
        "comm_exposed": (comm.comm_exposed_us, _comm_detail(comm)),
        "copy": (comm.copy_us, ""),
        "launch": (launch, ""),
        "host_in_ops": (split.setup_us * per_step, _names(split.setup_ops, per_step)),
        "host_work": (split.named_us * per_step, _names(split.fillers, per_step)),
        "host_python": (python_us * per_step, _names(python_names, per_step)),
        "sync_wait": (sync_wait, ""),
        "kernel_wait": (budget.kernel_wait_us, ""),
        "other_wait": (budget.other_wait_us, ""),
    }
    names = {
        "host_in_ops": list(split.setup_ops["name"].head(3)),
        "host_work": list(split.fillers["name"].head(3)),
        "host_python": list(python_names["name"].head(3)),
        "comm_exposed": [_short(x) for x in comm.collectives["name"].head(3)],
    }
    # The GPU split comes from the same clipped ops as the timeline's busy time, so on the profiled
    # base the buckets sum to the step exactly. On the unprofiled base the budget gives the host
    # side what the unprofiled step leaves; if the trace shows no host-side idle to rescale, that
    # time (the timing loop's own per-step cost) stays here as unexplained.
    unattributed *= per_step
    accounted = sum(v for v, _ in values.values())
    remainder = step - accounted - unattributed
    unexplained = unattributed + max(remainder, 0.0)
    details = []
    if unattributed > 0:
        details.append(
            f"{unattributed:,.0f} µs of silent host stretches (no CUDA call for > "
            "timeline.host_silence_us) that no recorded op covers"
            + ("" if samples is None else " and no Python stack sample fell in")
        )
    if remainder > 0.005 * step:
        details.append(f"{remainder:,.0f} µs of the unprofiled step that the profiled trace shows no idle time for")
    values["unexplained"] = (unexplained, "; ".join(details))
    total = accounted + unexplained
    if total > step > 0:
        values = _fit(values, total - step)
    amounts = {
        "host_in_ops": _amounts(split.setup_ops, per_step),
        "host_work": _amounts(split.fillers, per_step),
        "host_python": _amounts(python_names, per_step),
    }
    buckets = [
        Bucket(k, LABELS[k], float(v), float(v) / step if step > 0 else 0.0, d, names.get(k, []), amounts.get(k, []))
        for k, (v, d) in values.items()
    ]
    overlapped = [
        Bucket(
            "comm_overlapped",
            NOT_IN_SUM["comm_overlapped"],
            comm.comm_overlapped_us,
            comm.comm_overlapped_us / step if step > 0 else 0.0,
            "hidden under compute",
        )
    ]
    return Accounting(step, buckets, overlapped, budget.basis)


def _python_split(split: SilentSplit, samples: PySamples | None) -> tuple[float, pd.DataFrame, float]:
    """The silent host time no op names, shared among the user's sampled lines: (µs the samples name,
    per line as a name/overlap_us frame, µs no sample fell in)."""
    empty = pd.DataFrame(columns=["name", "overlap_us"])
    if samples is None or split.unnamed_us <= 0:
        return 0.0, empty, split.unnamed_us
    lines = samples.attribute(split.unnamed)
    missed = float(lines.loc[lines["where"] == NO_SAMPLE, "us"].sum())
    named = lines[lines["where"] != NO_SAMPLE].rename(columns={"where": "name", "us": "overlap_us"})
    return float(named["overlap_us"].sum()), named[["name", "overlap_us"]], missed


BY_NAME_ROWS = 10
HOST_SIDE = ("unexplained", "host_work", "host_in_ops", "launch", "sync_wait")
QUEUED_WAITS = ("kernel_wait", "other_wait")
# A collective kernel spins while it waits for the other ranks, and under the profiler the ranks drift
# further apart than they do unprofiled: its measured time can exceed the unprofiled step. Last to shrink.
COMM_WAITS = ("comm_exposed",)


def _shares(amounts: list[float], places: int = 4) -> list[float]:
    """Each amount's share of their sum, rounded to `places` decimals so that the shares sum to 1
    exactly (largest remainder: the units rounding leaves go to the largest remainders)."""
    total = sum(amounts)
    if total <= 0:
        return [0.0 for _ in amounts]
    unit = 10**places
    exact = [a / total * unit for a in amounts]
    floors = [int(x) for x in exact]
    left = unit - sum(floors)
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - floors[i], reverse=True)[:left]:
        floors[i] += 1
    return [f / unit for f in floors]


def _fit(values: dict, excess: float) -> dict:
    """Take `excess` µs off, so that the buckets sum to the step: first off the host side, in
    proportion, then off the queued waits.

    Happens only on the unprofiled time base, when the GPU busy time and queued waits measured
    under the profiler already exceed the unprofiled step (the budget then has no host time left
    to give, and the profiler's own gaps between queued kernels are what was inflated); last, off
    exposed communication, whose kernels spin while waiting for other ranks. If the GPU work measured
    under the profiler alone exceeds the unprofiled step, the rest comes off every bucket in proportion
    (the profiler slowed the GPU too), so that no bucket is more than the step.
    """
    for group in (HOST_SIDE, QUEUED_WAITS, COMM_WAITS, tuple(values)):
        total = sum(values[k][0] for k in group)
        if total <= 0 or excess <= 0:
            continue
        keep = max(total - excess, 0.0) / total
        excess -= total - total * keep
        values = {k: ((v * keep, d) if k in group else (v, d)) for k, (v, d) in values.items()}
    return values


def silent_outside_syncs(timeline: Timeline) -> pd.DataFrame:
    """The silent host stretches of host gaps that did not open in a sync, merged (start, end)."""
    silent, gaps = timeline.silent, timeline.gaps
    if not len(silent) or not len(gaps):
        return pd.DataFrame({"start": [], "end": []})
    starts = gaps["start"].to_numpy(float)
    order = np.argsort(starts, kind="stable")
    at = np.searchsorted(starts[order], silent["start"].to_numpy(float), side="right") - 1
    owner = order[np.clip(at, 0, len(order) - 1)]
    keep = ~gaps["after_sync"].astype(bool).to_numpy()[owner]
    kept = merge_intervals(silent["start"].to_numpy(float)[keep], silent["end"].to_numpy(float)[keep])
    return pd.DataFrame({"start": kept[:, 0], "end": kept[:, 1]})


def _names(by_name: pd.DataFrame, per_step: float, top: int = 3) -> str:
    return "; ".join(f"{r.name} {r.overlap_us * per_step:,.0f} µs" for r in by_name.head(top).itertuples())


def _amounts(by_name: pd.DataFrame, per_step: float, top: int = BY_NAME_ROWS) -> list:
    """[(name, µs per step)] of the largest names (what `diagnose diff` matches across runs)."""
    return [(str(r.name), r.overlap_us * per_step) for r in by_name.head(top).itertuples()]


def _comm_detail(comm: Communication) -> str:
    if not comm.comm_kernels_per_step:
        return ""
    top = comm.collectives.head(2)
    names = ", ".join(f"{_short(r.name)} ×{r.calls_per_step:g}" for r in top.itertuples())
    return (
        f"{comm.comm_kernels_per_step:g} collectives per step ({names}); "
        f"{percent(comm.overlap_fraction)} of their time overlapped with compute"
    )


def _short(name: str) -> str:
    return name.split("(")[0].removeprefix("void ")[:60]


def _kernels_per_step(timeline: Timeline, n: int) -> float:
    return len(timeline.ops) / n
