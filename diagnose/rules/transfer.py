"""transfer: host↔device copies on the step's critical path.

**Signal.** Every host-to-device and device-to-host copy of the measured steps (kineto's
`Memcpy HtoD (Pageable -> Device)`, `Memcpy DtoH (Device -> Pinned)`...) with its bytes, its
direction, whether the host side was pageable or pinned, its stream, and the host call that issued
it (linked by correlation id). A copy is *synchronous* when that call held the host for at least
half of the copy's GPU time: a pageable `.to(device)` (the driver stages the bytes through a pinned
buffer while the host waits), or any copy followed by a wait. Its *critical* time runs from the copy's start
on the GPU to its end, or to the end of the host call for a synchronous copy, less the time a kernel
ran on the GPU at once (a copy that overlaps compute costs nothing); what a host waits before its
copy starts is the queue draining, the sync-stall rule's subject. The rule fires when the critical time of the
copies is at least `min_share` of the step. Pinned, asynchronous copies that compute hides are
named in the quiet detail, not in a finding.

**Threshold.** 5 % of the step. Calibrated on the copy trio (fixtures/captures/transfer_*, H200;
ResNet-18 bf16 training at batch 128, a DataLoader with four workers) and its H100 pair (*_h100):
with `pin_memory=False` and a blocking `.to()` the 77 MB fp32 batch holds the critical path 12.5 ms
of a 39.4 ms mean step on the H200 (32 %; H100: 10.6 of 33.4 ms) and no kernel runs meanwhile;
pinned with `non_blocking=True` on a side stream, the copy runs while the previous batch computes:
2.7 % of the step on the H200 (0.3 % on the H100), quiet; uint8 pixels, pageable and blocking,
still hold it 3.7 ms of a 22.9 ms step (16.3 %), so the rule fires there, lower. On every
other capture in fixtures/captures the copies hold at most 2.4 % of the step (host_loader_inline's
14 MB of pageable copies a step, whose loop is host-bound); the tiny device-to-host reads of
`.item()` cost a drained queue, not bytes, and are left to sync-stall. Severity is low below
`medium_share` (10 %), medium from it, high from `high_share` (25 %).

**Fixes.** `pinned-memory` (pin_memory=True in the DataLoader, or `.pin_memory()`), needed by
`non-blocking-copies` (`.to(device, non_blocking=True)` issued one batch ahead on a side stream, the
compute stream waiting on an event): the copy then runs while the GPU computes. Memory already
pinned is not asked for again. `compact-transfer`: send uint8 pixels or bf16 features and convert
on the GPU, which shrinks what is left.

**Estimate.** Overlapped, the copies leave the critical path: new step = max(step − critical copy
time, GPU busy time without the copies); speedup = step ÷ new step. Measured (median unprofiled
step, 2026-12-06): pinned + `non_blocking` on a side stream with the next batch prefetched 1.85× on
the H200 (39.3 → 21.2 ms) and 1.74× on the H100 (32.7 → 18.8 ms); uint8 pixels 1.74× on the H200.
This estimate gives 1.46× and 1.47× (the whole critical copy time: no larger estimate is possible
from the copies alone), lower because a blocking copy also drains the GPU's queue and exposes host
work after it (on the H200 pair the pinned loop also spends 4 ms less in host setup inside
kernel-launching ops), which the trace does not tie to the copy.
The copies' times are the profiled ones: the profiler adds little to one long copy.

**As a user records it.** The same pair recorded with a bare torch.profiler loop (no markers) and with
`prof.step()` (fixtures/plain/transfer_*, fixtures/record_plain.py; H100, 2026-12-07): the pageable loop's
median unprofiled iteration 32,739 µs, the pinned one's 21,342 µs (1.53×; means 33,078 and 23,421 µs,
1.41×). Both pageable traces lead with this rule, high, est. 1.50× (plain) and 1.46× (marked), with
pinned-memory first as the capture folder does; both pinned traces are quiet. The pageable traces also fire
host-bound, low (its host work is the pageable copies): the transfer finding stays first because
pinned-memory is this rule's own subject (rulebook/engine.py `builds_on`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, time_base, top_offenders
from diagnose.metrics.host import length, merge_intervals, subtract
from diagnose.metrics.budget import StepBudget
from diagnose.metrics.launches import lookup
from diagnose.model.findings import Evidence, Finding, Fix, Offender
from diagnose.model.fixes import PINNED_LOADER_CODE, fix
from diagnose.trace.names import name_search
from diagnose.vocabulary.dtypes import dtype_bytes
from diagnose.vocabulary.runtime import COPY_DIRECTION, HOST_COPY, PAGEABLE, PINNED
from diagnose.vocabulary.units import percent

SYNC_HOLD = 0.5  # a host call held at least this share of its copy's GPU time: the host waited for it
MB = 1e6


class Transfer(Rule):
    """Host↔device copies on the critical path → pinned, non-blocking, fewer bytes."""

    id = "transfer"
    order = 35
    title = "Host↔device copies on the critical path"
    cheat_sheet = {
        "bottleneck": "host↔device copies on the critical path",
        "signal": "pageable or synchronous HtoD/DtoH copies while no kernel runs",
        "fix": "pinned memory, non_blocking copies on a side stream, fewer bytes (uint8 / bf16)",
        "impact": "removes the copy time from the step when compute can hide it",
    }
    needs = ("gpu", "steps")
    thresholds = (
        Threshold("min_share", 0.05, "fraction", "fire when copies hold the critical path this share of the step"),
        Threshold("medium_share", 0.10, "fraction", "critical copy share at which severity is medium (low below)"),
        Threshold("high_share", 0.25, "fraction", "critical copy share at which severity is high"),
    )

    def check(self, ctx, t):
        """Measure the copies of the steps and the part of them nothing hides."""
        c = _measure(ctx)
        share = c.budget.share(c.critical_us)
        if share < t["min_share"]:
            return Quiet(_quiet(c, share, t))
        return _word(self, c, share, t)


@dataclasses.dataclass(frozen=True)
class _Copies:
    """The host↔device copies of the measured steps (what `_measure` found)."""

    budget: StepBudget
    copies: pd.DataFrame  # one row per copy: direction, memory, bytes, stream, synchronous, critical_us
    n: int
    critical_us: float  # per step: copy time on the critical path (no kernel running, or the host held)
    copy_busy_us: float  # per step: GPU time in copies no kernel overlapped

    @property
    def mb_per_step(self) -> float:
        """Megabytes copied per step, both directions."""
        return float(self.copies["bytes"].sum()) / self.n / MB


def _measure(ctx) -> _Copies:
    """The copies inside the measured steps of the main device, each with its host call and critical time, on the
    step budget: what does not depend on the budget is made once and shared with the metrics on another step
    (Metrics.at_step, the step-range check)."""
    return _Copies(ctx.metrics.budget, *ctx.metrics.shared("transfer.copies", lambda: _copies_in_steps(ctx)))


def _copies_in_steps(ctx) -> tuple[pd.DataFrame, int, float, float]:
    """(copies, steps, critical µs per step, exposed copy µs per step): `_Copies` but its budget."""
    m, trace = ctx.metrics, ctx.trace
    n = max(len(m.steps.windows), 1)
    gpu = trace.gpu[(trace.gpu["device"] == trace.main_device)]
    copies = gpu[(gpu["cat"] == "memcpy").to_numpy() & name_search(gpu["name"], HOST_COPY)]
    copies = copies[_in_steps(copies["ts"].to_numpy(float), m.steps.windows)]
    copies = _with_host_calls(copies, trace.runtime, trace.cpu_ops)
    kernels = gpu[gpu["cat"] == "kernel"]
    busy = merge_intervals(kernels["ts"].to_numpy(float), kernels["end"].to_numpy(float))
    spans = np.column_stack((copies["start"].to_numpy(float), copies["stop"].to_numpy(float)))
    on_gpu = np.column_stack((copies["ts"].to_numpy(float), copies["end"].to_numpy(float)))
    copies["critical_us"] = [length(subtract(s.reshape(1, 2), busy)) for s in spans]
    critical = length(subtract(merge_intervals(spans[:, 0], spans[:, 1]), busy)) if len(spans) else 0.0
    exposed = length(subtract(merge_intervals(on_gpu[:, 0], on_gpu[:, 1]), busy)) if len(on_gpu) else 0.0
    return copies, n, critical / n, exposed / n


def _in_steps(ts: np.ndarray, windows) -> np.ndarray:
    """Which times fall inside a measured step."""
    inside = np.zeros(len(ts), dtype=bool)
    for w in windows:
        inside |= (ts >= w.start) & (ts < w.end)
    return inside


def _with_host_calls(copies: pd.DataFrame, runtime: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """The copies with direction, host memory kind, bytes, element size (of the op that copied), whether
    the host call waited for them, and the span they hold the critical path for (`start`, `stop`: the GPU
    copy, to the end of its call when synchronous)."""
    calls = runtime[runtime["correlation"].isin(copies["correlation"].dropna())]  # the calls of these copies
    calls = calls[["correlation", "ts", "end", "external_id"]].drop_duplicates("correlation")
    # a left join on the correlation id (each copy's first call), by position: what copies.merge(calls, how="left",
    # suffixes=("", "_call")) made, without a merge's fixed cost on the few copies of a step
    out = copies.reset_index(drop=True)
    found = lookup(out["correlation"], calls["correlation"])
    for column, name in (("ts", "ts_call"), ("end", "end_call"), ("external_id", "call_external_id")):
        out[name] = pd.Series(calls[column].array.take(found, allow_fill=True), index=out.index)
    size_of = {}
    if len(out):  # the first op of each of the calls' external ids (the rows drop_duplicates keeps of all ops)
        sizes = ops[ops["external_id"].isin(out["call_external_id"].dropna())]
        sizes = sizes[["external_id", "input_types"]].drop_duplicates("external_id")
        size_of = dict(zip(sizes["external_id"].tolist(), map(_element_bytes, sizes["input_types"].tolist())))
    out["element_bytes"] = [size_of.get(e) for e in out["call_external_id"].tolist()]
    names = out["name"].astype(str)
    out["direction"] = names.str.extract(COPY_DIRECTION, expand=False)
    out["memory"] = np.select(
        [names.str.contains(PAGEABLE, regex=False), names.str.contains(PINNED, regex=False)],
        ["pageable", "pinned"],
        "unknown",
    )
    # a foreign trace may write any number of bytes: none below zero
    out["bytes"] = pd.to_numeric(out["bytes"], errors="coerce").fillna(0.0).clip(lower=0.0)
    held = (out["end_call"] - out["ts_call"]).fillna(0.0)
    out["synchronous"] = (held >= SYNC_HOLD * out["dur"]) & (held > 0)
    sync = out["synchronous"].to_numpy(bool)
    out["start"] = out["ts"]  # a host waiting before its copy starts waits for the queue: sync-stall's subject
    out["stop"] = np.where(sync, np.fmax(out["end"], out["end_call"]), out["end"])
    return out


def _element_bytes(types) -> int | None:
    """Bytes per element of the tensor a copy op read (its first input type), None when not recorded."""
    first = types[0] if isinstance(types, list) and types else None
    return dtype_bytes(first) if isinstance(first, str) else None  # a hostile trace may nest anything there


def _quiet(c: _Copies, share: float, t) -> str:
    """Which numbers kept the rule quiet: the copies, and how much of them compute hid."""
    if not len(c.copies):
        return "no host↔device copy inside the measured steps"
    return (
        f"{len(c.copies) / c.n:.1f} host↔device copies per step ({c.mb_per_step:,.1f} MB, {_kinds(c)}) hold the "
        f"critical path {percent(share)} of the step < {percent(t['min_share'])}"
    )


def _kinds(c: _Copies) -> str:
    """'pageable, synchronous' / 'pinned, asynchronous' for the copies that carry the bytes."""
    big = c.copies.sort_values("bytes", ascending=False).iloc[0]
    return f"the largest {big['memory']}, {'synchronous' if big['synchronous'] else 'asynchronous'}"


def _word(rule: Rule, c: _Copies, share: float, t) -> Finding:
    """The finding: the copies' share of the step, their bytes and kind, the fixes, the estimate."""
    budget = c.budget
    floor = max(budget.busy_us - c.copy_busy_us, 1e-9)
    new_step = max(budget.step_us - c.critical_us, floor)
    copies = c.copies
    pageable = copies.loc[copies["memory"] == "pageable", "bytes"].sum() / max(copies["bytes"].sum(), 1.0)
    sync = copies.loc[copies["synchronous"], "critical_us"].sum() / max(copies["critical_us"].sum(), 1e-9)
    return Finding(
        rule=rule.id,
        severity=severity_ladder(share, t),
        title=rule.title,
        evidence=[
            Evidence.share("copies on the critical path", share, ">=", t["min_share"]),
            Evidence("copied per step", round(c.mb_per_step, 1), unit="MB"),
            Evidence.share("bytes from pageable host memory", pageable),
            Evidence.share("critical copy time in synchronous copies", sync),
            Evidence("critical copy time per step", round(c.critical_us, 1), unit="µs"),
        ],
        offenders=_offenders(c),
        fixes=_fixes(copies),
        est_speedup=round(budget.step_us / new_step, 2),
        recoverable_us=round(budget.step_us - new_step, 1),
        basis=(
            f"new step = max({budget.step_us:,.0f} − {c.critical_us:,.0f} µs of copies on the critical path, "
            f"{floor:,.0f} µs of GPU work besides them); {time_base(budget)}"
        ),
        why=_WHY,
    )


_WHY = (
    "A copy from pageable host memory is staged by the driver through a pinned buffer while the host "
    "waits, and a copy on the compute stream runs while no kernel can. From pinned memory, issued "
    "non-blocking on a side stream one batch ahead, the copy runs while the GPU computes the previous "
    "batch, and leaves the step. Fewer bytes (uint8 pixels, bf16 features) shorten whatever stays."
)


def _fixes(copies: pd.DataFrame) -> list[Fix]:
    """pinned-memory (unless the memory is pinned already), then non-blocking-copies, then compact-transfer
    unless the largest copies already move one-byte elements."""
    pinned = bool(len(copies)) and (copies["memory"] != "pageable").all()
    fixes = [] if pinned else [fix("pinned-memory", code=PINNED_LOADER_CODE, prerequisite=True)]
    fixes.append(fix("non-blocking-copies", code=_OVERLAP_CODE))
    largest = copies.sort_values("bytes", ascending=False).head(1)
    if not (largest["element_bytes"] == 1).all():
        fixes.append(fix("compact-transfer", code=_COMPACT_CODE))
    return fixes


_OVERLAP_CODE = (
    "copy_stream = torch.cuda.Stream()\n"
    "def ahead(batch):                      # start the next batch's copy now\n"
    "    with torch.cuda.stream(copy_stream):\n"
    "        return [t.to('cuda', non_blocking=True) for t in batch]\n"
    "nxt = ahead(next(it))\n"
    "for step in range(steps):\n"
    "    torch.cuda.current_stream().wait_stream(copy_stream)\n"
    "    x, y = nxt\n"
    "    nxt = ahead(next(it))              # overlaps this step's compute\n"
    "    train_step(x, y)"
)
_COMPACT_CODE = (
    "# the Dataset returns uint8 pixels (no ToTensor/Normalize on the host)\n"
    "x = x.to('cuda', non_blocking=True).float().div_(255).sub_(mean).div_(std)  # on the GPU"
)


def _offenders(c: _Copies) -> list[Offender]:
    """The copy kinds (name, stream) by critical time per step."""
    rows = aggregate(
        c.copies.groupby(["name", "stream"], dropna=False),
        us=("critical_us", "sum"),
        calls=("bytes", "size"),
        nbytes=("bytes", "sum"),
        sync=("synchronous", "mean"),
    ).reset_index()
    return top_offenders(
        [
            {
                "name": str(r.name),
                "us_per_step": round(r.us / c.n, 1),
                "calls_per_step": round(r.calls / c.n, 1),
                "share_of_step": round(c.budget.share(r.us / c.n), 4),
                "mb_per_step": round(r.nbytes / c.n / MB, 2),
                "stream": str(r.stream),
                "synchronous": bool(r.sync >= 0.5),
            }
            for r in rows.itertuples()
        ],
        "name",
        by="us_per_step",
    )
