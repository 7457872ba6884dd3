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

*Arrivals* (`steps_arrivals`): per step, every collective with the key that matches it across ranks
(its process group, its sequence number in that group: the trace's own `seq` where the trace layer
provides it, else its place among the group's collectives in the step; its kind and message size:
`collective_key`) and three times on the rank's own clock (trace time + the trace's t0, µs): its
host arrival (the start of the CPU op that launched it, `record_param_comms` when the trace has it),
its kernel's start (its GPU arrival) and end. Beside each, what the host did before it: the
*lead-in* from the previous collective's launch (or the step's start) to this one, and how much of
it was *silent* (no CUDA call for `host_silence_us` or longer: host work that is not dispatch, the
part a slower input pipeline, logging or a sleep adds). The names that filled the silent lead-ins
(host ranges, the user's sampled Python lines) are kept per step in `host_ranges_us`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.base.step_timing import paid_step_us
from diagnose.vocabulary.collectives import collective_key
from diagnose.metrics import Metrics
from diagnose.metrics.accounting import HOST_PACED
from diagnose.metrics.comm import comm_rounds, in_windows, is_comm, launch_times
from diagnose.metrics.host import intersect, length, merge_intervals, subtract
from diagnose.metrics.pyframes import NO_SAMPLE
from diagnose.rankset.host_lead import cpu_lead_ins
from diagnose.metrics.timeline import DEFAULTS as TIMELINE_DEFAULTS
from diagnose.trace.names import name_starts
from diagnose.vocabulary.markers import STEP_MARKERS

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
    steps_arrivals: list = dataclasses.field(default_factory=list)  # per step: [[key, host, start, end, lead, silent]]
    host_ranges_us: dict = dataclasses.field(default_factory=dict)  # name -> silent lead-in µs per step it fills
    group_from: str = "none"  # how collectives got their process group: "pg_name" | "stream" | "none"
    host_leads: list = dataclasses.field(default_factory=list)  # per step: [[lead-in, silent µs], ...] per collective
    timed_arrivals: dict | None = None  # the capture's arrivals.json (diagnose/rankset/timed.py), when it has one

    def host_paced(self, field: str = "us_per_step") -> float:
        """The rank's step buckets in which its GPU waited for its host (launch and host buckets), as
        µs per step (`field` "us_per_step") or as a share of the step ("share")."""
        return float(
            sum(b.get(field) or 0.0 for b in self.buckets if b.get("id") in HOST_PACED and b.get("in_sum", True))
        )

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
    kinds, rest = _kernel_kinds(
        compute, comm, in_windows(launched.loc[compute.index].to_numpy(float), windows), n_steps
    )
    c = metrics.comm
    budget = metrics.budget
    summary = metrics.summary() if windows else {}
    buckets = [
        {k: b.get(k) for k in ("id", "label", "us_per_step", "share", "in_sum")}
        for b in (summary.get("accounting") or {}).get("buckets", [])
    ]
    profile = RankProfile(
        rank=rank,
        source=source,
        step_us=round(float(budget.step_us), 3) if windows else 0.0,
        compute_us=round(float(c.compute_us), 3),
        comm_us=round(float(c.comm_us), 3),
        exposed_us=round(float(c.comm_exposed_us), 3),
        steps_compute_us=steps_compute,
        steps_collectives=steps_coll,
        op_us=_op_us(metrics, len(windows)),
        buckets=buckets,
        world_size=(trace.distributed or {}).get("world_size") if isinstance(trace.distributed, dict) else None,
        rank_how=how,
        unprofiled_step_us=paid_step_us((trace.capture or {}).get("timing")),
        kernel_kinds=kinds,
        work_rest_us=rest,
        forwards_per_step=round(forwards / n_steps, 2) if windows else None,
        comm_rounds_per_step=round(rounds / n_steps, 2) if windows else None,
        kernels_per_step=round(float(in_steps.sum()) / n_steps, 1) if windows else None,
        profiled_step_us=round(float(budget.profiled_step_us), 3) if windows else None,
        **_arrivals(metrics, comm, comm_launch),
    )
    profile.host_leads = [[[r[4], r[5]] for r in step] for step in profile.steps_arrivals]
    if not profile.host_leads:  # a CPU rank: its collectives are host ops (host_lead.py)
        profile.host_leads, stretches = cpu_lead_ins(metrics)
        if len(stretches):
            profile.host_ranges_us = _host_ranges(metrics, stretches, len(windows))
    return profile


ARRIVAL_NAMES = 8  # host ranges kept per rank for naming the cause of a late arrival
PYTHON_FRAMES = 5000  # python_function events looked at for naming silent lead-ins


def _arrivals(metrics: Metrics, comm: pd.DataFrame, comm_launch: np.ndarray) -> dict:
    """steps_arrivals, host_ranges_us and group_from of the profile (module docstring)."""
    trace, windows = metrics.trace, metrics.steps.windows
    if not len(comm) or not windows:
        return {}
    cpu = trace.cpu_ops
    host = comm_launch.copy()
    dims = pd.Series([None] * len(comm), index=comm.index, dtype=object)
    if len(cpu) and "external_id" in cpu and "external_id" in comm:
        issuing = cpu[cpu["name"].astype(str) == "record_param_comms"].dropna(subset=["external_id"])
        if not len(issuing):
            issuing = cpu.dropna(subset=["external_id"])
        issuing = issuing.drop_duplicates("external_id").set_index("external_id")
        found = comm["external_id"].map(issuing["ts"]).to_numpy(float)
        host = np.where(np.isnan(found), host, found)
        if "input_dims" in issuing:
            dims = comm["external_id"].map(issuing["input_dims"])
    groups, group_from = _groups(comm)
    recorded = next((comm[c].to_numpy(object) for c in ("seq", "Seq") if c in comm), None)
    silence = float(metrics.timeline_params.get("host_silence_us", TIMELINE_DEFAULTS["host_silence_us"]))
    quiet = _silent_host(trace, silence)
    t0 = float(trace.t0_us or 0.0)
    steps, silent_parts = [], []
    for w in windows:
        inside = np.flatnonzero((host >= w.cpu_start) & (host < w.cpu_end))
        inside = inside[np.argsort(host[inside], kind="stable")]
        seen: dict = {}
        rows, previous = [], float(w.cpu_start)
        for i in inside:
            group = groups[i]
            seq = seen.get(group, 0)
            seen[group] = seq + 1
            if recorded is not None and not pd.isna(recorded[i]):
                seq = int(recorded[i])  # the process group's own sequence number, where the trace has it
            name = str(comm["name"].iat[i])
            lead = np.array([[previous, max(float(host[i]), previous)]])
            silent = intersect(lead, quiet) if len(quiet) else np.zeros((0, 2))
            silent_parts.append(silent)
            rows.append(
                [
                    collective_key(group, seq, name, dims.iat[i]),
                    round(float(host[i]) + t0, 3),
                    round(float(comm["ts"].iat[i]) + t0, 3),
                    round(float(comm["end"].iat[i]) + t0, 3),
                    round(float(lead[0, 1] - lead[0, 0]), 3),
                    round(length(silent), 3),
                ]
            )
            previous = max(previous, float(host[i]))
        steps.append(rows)
    stretches = np.concatenate(silent_parts) if silent_parts else np.zeros((0, 2))
    return {
        "steps_arrivals": steps,
        "group_from": group_from,
        "host_ranges_us": _host_ranges(metrics, stretches, len(windows)),
    }


def _groups(comm: pd.DataFrame) -> tuple[list, str]:
    """Each collective's process group: its `pg_name` where the trace records one per kernel, else its
    CUDA stream's place in the order the rank first used its collective streams (NCCL runs each
    communicator on its own stream, and every rank creates and first uses its groups in program order)."""
    for column in ("pg_name", "process_group"):
        if column in comm and comm[column].notna().any():
            return [str(x) for x in comm[column]], "pg_name"
    if "stream" not in comm or comm["stream"].isna().all():
        return ["0"] * len(comm), "none"
    order: dict = {}
    for stream in comm["stream"]:
        order.setdefault(stream, f"stream#{len(order)}")
    return [order[s] for s in comm["stream"]], "stream"


def _silent_host(trace, silence: float) -> np.ndarray:
    """The host's silent stretches: between two CUDA calls of the process that launches the most,
    gaps of at least `silence` µs (host work that is not dispatch)."""
    runtime = trace.runtime
    if not len(runtime):
        return np.zeros((0, 2))
    main = runtime["tid"].value_counts().idxmax() if "tid" in runtime else None
    calls = runtime if main is None else runtime[runtime["tid"] == main]
    iv = merge_intervals(calls["ts"].to_numpy(float), (calls["ts"] + calls["dur"].fillna(0)).to_numpy(float))
    if len(iv) < 2:
        return np.zeros((0, 2))
    gaps = np.column_stack((iv[:-1, 1], iv[1:, 0]))
    return gaps[gaps[:, 1] - gaps[:, 0] >= silence]


def _host_ranges(metrics: Metrics, stretches: np.ndarray, n_steps: int) -> dict:
    """What filled the silent lead-ins, µs per step by name: host ranges (ops, DataLoader ranges) and,
    for the time no range covers, the user's Python lines from the capture's stack samples or the
    trace's python_function events; what nothing names is "(host, nothing recorded)"."""
    if not len(stretches):
        return {}
    stretches = merge_intervals(stretches[:, 0], stretches[:, 1])
    split = metrics.split_silent(pd.DataFrame({"start": stretches[:, 0], "end": stretches[:, 1]}))
    out: dict = {}
    for row in split.fillers.itertuples():
        if not str(row.name).startswith(STEP_MARKERS):
            out[str(row.name)] = out.get(str(row.name), 0.0) + float(row.overlap_us)
    unnamed = split.unnamed
    samples = metrics.python_samples
    if samples is not None and len(unnamed):
        lines = samples.attribute(unnamed)
        for row in lines[lines["where"] != NO_SAMPLE].itertuples():
            out[str(row.where)] = out.get(str(row.where), 0.0) + float(row.us)
        rest = float(lines.loc[lines["where"] == NO_SAMPLE, "us"].sum())
    else:
        rest = length(unnamed)
    if rest > 0 and samples is None:
        ops = metrics.trace.ops
        marks = ops[(ops["cat"] == "user_annotation") & ~name_starts(ops["name"], STEP_MARKERS)]
        unnamed, rest = _name_by(marks, unnamed, out)
        unnamed, rest = _name_by(metrics.trace.python, unnamed, out)
    if rest > 0:
        out["(host, nothing recorded)"] = rest
    top = sorted(out.items(), key=lambda kv: -kv[1])[:ARRIVAL_NAMES]
    return {k: round(v / max(n_steps, 1), 3) for k, v in top if v > 0}


def _name_by(python: pd.DataFrame, unnamed: np.ndarray, out: dict) -> tuple[np.ndarray, float]:
    """Name `unnamed` stretches by the innermost of these ranges over each (user annotations, or the
    python_function events of with_stack=True traces); returns the stretches none covers and their µs."""
    total = length(unnamed)
    if not len(python) or not total:
        return unnamed, total
    starts, ends = python["ts"].to_numpy(float), (python["ts"] + python["dur"]).to_numpy(float)
    at = np.searchsorted(unnamed[:, 1], starts, side="right")
    touching = (at < len(unnamed)) & (unnamed[np.minimum(at, len(unnamed) - 1), 0] < ends)
    frames = python[touching].sort_values("dur").head(PYTHON_FRAMES)  # innermost (shortest) first
    covered = 0.0
    left = unnamed
    for row in frames.itertuples():
        if not len(left):
            break
        span = np.array([[float(row.ts), float(row.ts) + float(row.dur)]])
        hit = intersect(left, span)
        got = length(hit)
        if got > 0:
            out[str(row.name)] = out.get(str(row.name), 0.0) + got
            covered += got
            left = subtract(left, hit)
    return left, max(total - covered, 0.0)


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
    frame = pd.DataFrame(
        {
            "kind": (
                compute["name"].astype(str).str.slice(0, 200)
                + "|"
                + compute["grid"].astype(str)
                + "|"
                + compute["block"].astype(str)
            ).to_numpy(),
            "dur": compute["dur"].to_numpy(float),
            "beside": beside,
        }
    )
    alone = frame[~frame["beside"]].groupby("kind")["dur"].median()
    steps = frame[in_steps]
    stats = steps.groupby("kind")["dur"].agg(["size", "median", "sum"]).sort_values("sum", ascending=False)
    kept, rest = stats.head(MAX_KINDS), stats.iloc[MAX_KINDS:]
    kinds = {
        str(kind): [
            round(float(row.size) / n_steps, 3),
            round(float(alone[kind]), 3) if kind in alone.index else None,
            round(float(row.median), 3),
        ]
        for kind, row in zip(kept.index, kept.itertuples())
    }
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
    return (
        rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None,
        world if isinstance(world, int) and not isinstance(world, bool) else None,
    )
