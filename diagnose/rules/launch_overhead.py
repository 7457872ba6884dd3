"""launch-overhead: the GPU idles between small kernels while the host is still launching them.

**Signal.** Over the measured steps, every idle gap on the GPU is classified (see *How it
works*). The rule adds up the gaps where the GPU waited for a launch while the host was busy
issuing CUDA calls (*host wait, launch-paced*: the host made a CUDA call at least every
`timeline.host_silence_us`), plus the part of each *kernel wait* gap beyond what a CUDA graph
still pays between kernels. Gaps before kernels that a CUDA graph already replays, and gaps that
opened while the host sat in a synchronisation, are left out (the first is the fix already
applied, the second is the sync-stall rule's). It fires when that recoverable time is at least
`min_recoverable_share` of the step.

**Threshold.** 25 % of the step: below that, graphs buy at most 1.33× and their constraints
(static shapes, static input buffers) can cost more than they save. Measured on the H200: the
fused SwiGLU step (one 142 µs Triton kernel, 20 % of its 215 µs step recoverable on paper) got
*slower* under `torch.compile(mode="reduce-overhead")`, 375 µs, because the graph copies its
non-static inputs into its own buffers on every replay. The eager batch-1 decode sits far above
(≈88 %) and the same model replayed from a CUDA graph at 0 %; the training steps with many small
kernels (sync_item, sync_free) at 34–41 %. The median kernel duration is shown against
`small_kernel_us` (10 µs, the cheat-sheet's "small kernel") as supporting evidence: small kernels
are why the host cannot keep up.

**What is not launch overhead.** Two kinds of idle look launch-paced and are not:

- *Communication.* Gaps that end at a collective (NCCL/RCCL) kernel, the GPU waiting for the
  host to launch an all-reduce when its gradient bucket is ready, are the exposed-comm rule's;
  they are left out of the recoverable time.
- *Host work between large kernels.* When the kernels are not small (median at least
  `small_kernel_us`) and the host spends at least `max_dispatch_us` per kernel launched, the host
  is doing far more than dispatching: eager dispatch under the profiler measured 33–36 µs per
  kernel on the H200 decode and training captures, and a CUDA graph would save those few µs per
  kernel, not the host's other work. The rule stays quiet and says so; the step accounting
  (`summary.accounting`) names where that host time went. On HTA's DDP trace (nccl_data) the
  median kernel is 16 µs and the host spends 247 µs per kernel launched: quiet.

**What the quiet line adds.** The step accounting's *launch / dispatch* bucket holds every launch-paced host
wait; when the rule stays quiet it says how much of that it did not count (before kernels a CUDA graph already
replays, before collectives), so the two add up (compile_graphs: 10.8 % counted, 14.8 % before graph-replayed
kernels, a 25.7 % bucket).

**Time base.** When the capture timed steps without the profiler, the host-side idle measured
in the trace is rescaled to that honest step time (the profiler inflates host work several
times on launch-bound code: 6.5 ms profiled against 2.7 ms unprofiled on the decode capture).

**CUDA graphs requested but skipped.** When the capture holds dynamo's log (compile.json) and
inductor logged "skipping cudagraphs due to …" (`mode="reduce-overhead"` with a CPU tensor input,
a mutated input, dynamic shapes…), the rule adds a note with inductor's reason and the line it
names, found or quiet: the graphs the fix promises were not made, and that reason is what to fix.
The cuda-graphs fix then says so: the mode is already on, and the cause inductor names (an input
updated in place, a CPU tensor input, changing shapes) is the change to make. Where the compiled
code does replay its graphs, the launches left are around them, and the fix is one hand-captured
graph of the whole step, said as such (host-bound prices that graph on such a step).

**Fix.** `cuda-graphs`: `torch.compile(mode="reduce-overhead")`, or `torch.cuda.CUDAGraph`
by hand. Both replay the whole step with one launch.

**A single-tensor optimizer first.** When an optimizer with `foreach=False` (its
`Optimizer.step#` range holds no `_foreach_` or `_fused_` op) launches at least
`optimizer_launch_share` of the step's kernels, the first fix is `fused-optimizer`: those launches
are the optimizer's, `fused=True` removes most of them without graphs, and a CUDA graph cannot
capture such a step anyway (its step counters live on the CPU: `capturable=True` or `fused=True`
first). The estimate stays that of the graphed step, the two changes together ("est. 4.1× faster
with fused-optimizer, then cuda-graphs"); the optimizer-step rule estimates the fused optimizer
alone.

**A capturable optimizer first.** An optimizer built without `capturable=True` keeps its step
counters on the CPU and reads them back to Python each step (`aten::item` inside its
`Optimizer.step#` range); PyTorch refuses to capture such a step in a CUDA graph. Then the first
fix is `fused-optimizer` written as `capturable=True` (or `fused=True, capturable=True`), and the
estimate is for both changes. On sync_free (AdamW with foreach, 48 reads a step) `--verify`'s
plain CUDA graph fails for this reason; its `capturable-cuda-graph` variant makes the optimizers
capturable first.

**Host syncs first.** A CUDA graph cannot hold a host-device synchronisation (`.item()`,
`.tolist()`, `.cpu()`, `nonzero`, a blocking copy): capture fails on it, or the graph must be cut
around it. When the measured steps make at least `max_graph_syncs_per_step` such calls between
their first and last kernel launch (a sync before the first launch or after the last, such as a
harness's `torch.cuda.synchronize()` or one `loss.item()` at the end, stays outside the graph),
the first fix is `remove-sync` and the estimate is for both changes
("remove-sync, then cuda-graphs": the recoverable time then includes the idle after the syncs);
the sync-stall rule prices the syncs alone. Where most of those syncs are the waits of blocking
host-to-device copies (a `cudaStreamSynchronize` at most 50 µs after the call that issued an HtoD
copy, on the same thread: `.to(device)` of a pageable batch), the first fix is `non-blocking-copies`
instead (pinned memory, copied without a wait into the graph's static input); the transfer rule
prices the copies, and its finding is listed before this one (rulebook/engine.py
`prerequisites_first`). On transfer_uint8's trace file alone (H200) this rule fires low at 25.6 %
and its first fix was `remove-sync` with `.item()` advice for a `.to()`.

**Estimate.** graphed step ≈ step − recoverable + kernels × `graph_gap_us` + `graph_launch_us`,
never below the GPU busy time; speedup = step ÷ graphed step. `graph_gap_us` (0.1 µs between
kernels) and `graph_launch_us` (15 µs per replay) come from the decode_graphed H200 capture, a
calibration capture (benchmarks/calibrate.py derives them; median gap between replayed kernels 0.096 µs;
re-recorded 2026-12-02: unprofiled step 234.3 µs against 223.2 µs of
kernel time).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Fix, Offender, Severity
from diagnose.model.fixes import PINNED_LOADER_CODE, capturable_fix, fix, optimizer_code, whole_step_graph_fix
from diagnose.metrics.comm import is_comm
from diagnose.metrics.compiled import cudagraph_skips
from diagnose.memory.details import step_windows
from diagnose.memory.patterns import kv_appends, step_index
from diagnose.metrics import Metrics
from diagnose.metrics.optimizer import SINGLE, OptimizerStep
from diagnose.metrics.budget import StepBudget
from diagnose.vocabulary.units import percent
from diagnose.vocabulary.runtime import COPY_DIRECTION

KV_MAX_APPEND = 16  # positions a decode step appends (speculative decoding adds a few)
KV_MIN_CACHE = 16  # positions a cache holds before it counts as one
LEFT_OUT_SHOWN = 0.005  # launch-paced idle the rule does not count, named in its quiet line from this share of the step


class LaunchOverhead(Rule):
    """CPU kernel-launch overhead → CUDA graphs."""

    id = "launch-overhead"
    order = 10
    title = "CPU launch overhead: the GPU waits for the host between small kernels"
    cheat_sheet = {
        "bottleneck": "CPU kernel launch overhead",
        "signal": "small GPU kernels (< 10 µs) separated by empty gaps in the torch.profiler timeline",
        "fix": 'CUDA Graphs (torch.cuda.CUDAGraph, torch.compile(mode="reduce-overhead"))',
        "impact": "removes CPU dispatch as the bottleneck in low-batch decode",
    }
    needs = ("gpu", "launch-links", "steps", "steady-state")
    thresholds = (
        Threshold(
            "min_recoverable_share",
            0.25,
            "fraction",
            "fire when launch-bound idle time is at least this share of the step",
        ),
        Threshold("small_kernel_us", 10.0, "µs", "kernels shorter than this count as small"),
        Threshold("graph_gap_us", 0.1, "µs", "idle between kernels that a CUDA graph still pays"),
        Threshold("graph_launch_us", 15.0, "µs", "host cost of one graph replay per step"),
        Threshold("high_share", 0.50, "fraction", "recoverable share at which severity is high"),
        Threshold("medium_share", 0.30, "fraction", "recoverable share at which severity is medium (below: low)"),
        Threshold(
            "optimizer_launch_share",
            0.5,
            "fraction",
            "share of the step's kernels launched by a single-tensor optimizer from which fused-optimizer "
            "is the first fix",
        ),
        Threshold(
            "max_graph_syncs_per_step",
            1.0,
            "per step",
            "host syncs inside a step (between its first and last kernel launch) from which remove-sync comes before "
            "cuda-graphs",
        ),
        Threshold(
            "min_kv_appends_per_step",
            1.0,
            "per step",
            "KV-cache appends by torch.cat per step (a cache of at least 16 positions grown by at most 16) "
            "from which static-shapes (a preallocated cache) comes before cuda-graphs",
        ),
        Threshold(
            "max_dispatch_us",
            150.0,
            "µs",
            "host time per kernel launched beyond which, with kernels that are not small, the host is "
            "doing more than dispatch (quiet)",
        ),
    )

    def check(self, ctx, t):
        """Sum the launch-bound idle time and compare it with the step."""
        idle = _measure(ctx, t)
        severity = _decide(idle, t)
        if isinstance(severity, Quiet):
            return severity
        firsts = _measure_firsts(ctx, t)
        recoverable, graphed, speedup = _estimate(idle, firsts, t)
        return _word(self, idle, firsts, severity, recoverable, graphed, speedup, t)


@dataclasses.dataclass(frozen=True)
class _Idle:
    """The launch-bound idle of the measured steps and the kernels around it (what `_measure` found)."""

    metrics: Metrics
    budget: StepBudget
    n: int  # measured steps
    host: pd.DataFrame  # the host-wait gaps counted: launch-paced, not graphed, not comm, not after a sync
    recoverable: float  # µs per step, on the step's time base
    share: float  # `recoverable` as a share of the step
    per_step: float  # kernels per step
    median_us: float  # median kernel duration
    small_share: float  # share of kernels shorter than small_kernel_us
    host_per_launch: float  # µs of step per kernel launched
    skipped: str  # inductor's reason for skipping CUDA graphs, or ""
    graphed_share: float = 0.0  # launch-paced host wait before kernels a CUDA graph replays: not counted
    comm_share: float = 0.0  # launch-paced host wait before collectives (exposed-comm's): not counted


@dataclasses.dataclass(frozen=True)
class _Firsts:
    """What a CUDA graph cannot capture and must be fixed first (what `_measure_firsts` found)."""

    syncs_per_step: float  # host syncs between the step's first and last kernel launch
    sync_op: str  # the op that makes most of them
    syncs_first: bool  # at least max_graph_syncs_per_step: remove-sync comes first
    copy_waits: bool  # most of those syncs wait for a blocking host-to-device copy: non-blocking-copies first
    optimizer: OptimizerStep | None  # a single-tensor optimizer launching many of the kernels
    host_counters: OptimizerStep | None  # an optimizer with its step counters on the CPU
    kv_per_step: float  # KV-cache appends by torch.cat per step


def _measure(ctx, t: dict[str, float]) -> _Idle:
    """The launch-bound idle per step: host waits that were launch-paced (rescaled to the step's time
    base) plus the part of each kernel wait beyond a graph's gap; the kernels' count and sizes."""
    m = ctx.metrics
    budget, gaps, n = m.budget, m.timeline.gaps, m.budget.n_steps
    graph = gaps["graph"].astype(bool).to_numpy()
    comm = is_comm(gaps["next_name"])
    waits = ((gaps["kind"] == "host") & ~gaps["after_sync"].astype(bool)).to_numpy()  # host waits, syncs aside
    paced_us = gaps["paced_us"].to_numpy(float)

    def paced(rows: np.ndarray) -> float:
        """µs per step of launch-paced host wait in the gaps `rows`, on the step's time base."""
        return float(np.nansum(paced_us[waits & rows])) / n * budget.host_scale

    host = gaps[waits & ~graph & ~comm]
    kern = gaps[(gaps["kind"] == "kernel").to_numpy() & ~graph & ~comm]
    host_us = paced(~graph & ~comm)
    kernel_us = float((kern["dur"] - t["graph_gap_us"]).clip(lower=0).sum()) / n
    recoverable = host_us + kernel_us
    kernels = m.step_kernels[m.step_kernels["cat"] == "kernel"]
    per_step = len(kernels) / n
    return _Idle(
        metrics=m,
        budget=budget,
        n=n,
        host=host,
        recoverable=recoverable,
        share=budget.share(recoverable),
        per_step=per_step,
        median_us=float(kernels["dur"].median()) if len(kernels) else 0.0,
        small_share=float((kernels["dur"] < t["small_kernel_us"]).mean()) if len(kernels) else 0.0,
        host_per_launch=budget.step_us / max(per_step, 1),
        skipped=cudagraph_skips(ctx.trace, ctx.warnings),
        graphed_share=budget.share(paced(graph)),
        comm_share=budget.share(paced(comm & ~graph)),
    )


def _left_out(idle: _Idle) -> str:
    """The launch-paced idle the step accounting counts and this rule does not, in words ("" when none is
    LEFT_OUT_SHOWN of the step): before kernels a CUDA graph already replays, before collectives."""
    parts = [
        (idle.graphed_share, "before kernels a CUDA graph already replays"),
        (idle.comm_share, "before collectives (exposed-comm's)"),
    ]
    said = [f"{percent(share)} of the step {where}" for share, where in parts if share >= LEFT_OUT_SHOWN]
    return f"; not counted: {', '.join(said)}" if said else ""


def _decide(idle: _Idle, t: dict[str, float]) -> Severity | Quiet:
    """Quiet when the idle is below `min_recoverable_share` of the step, or when the kernels are not
    small and the host spends `max_dispatch_us` or more per launch (more than dispatch); else the
    severity of the recoverable share."""
    note = f"; {idle.skipped}" if idle.skipped else ""
    if idle.share < t["min_recoverable_share"]:
        return Quiet(
            f"launch-bound idle {percent(idle.share)} of the step < {percent(t['min_recoverable_share'])}"
            f" ({idle.per_step:.0f} kernel{'' if round(idle.per_step) == 1 else 's'} per step, "
            f"median {idle.median_us:.1f} µs{_left_out(idle)}){note}"
        )
    if idle.median_us >= t["small_kernel_us"] and idle.host_per_launch >= t["max_dispatch_us"]:
        return Quiet(
            f"launch-paced idle {percent(idle.share)} of the step, but kernels are not small (median "
            f"{idle.median_us:.1f} µs >= {t['small_kernel_us']:g} µs) and the host spends "
            f"{idle.host_per_launch:,.0f} µs per kernel launched >= {t['max_dispatch_us']:g} µs: the host is "
            f"doing more than dispatch (see the step accounting){note}"
        )
    return severity_ladder(idle.share, t)


def _measure_firsts(ctx, t: dict[str, float]) -> _Firsts:
    """What must change before a graph can capture the step: host syncs between launches, a
    single-tensor optimizer launching most kernels, CPU step counters, a KV cache grown by torch.cat."""
    m = ctx.metrics
    syncs_per_step, sync_op, copy_waits = _syncs_between_launches(ctx.trace, m)
    optimizer = _single_tensor_optimizer(m, t["optimizer_launch_share"])
    host_counters = None if optimizer is not None else _host_counter_optimizer(m)
    return _Firsts(
        syncs_per_step=syncs_per_step,
        sync_op=sync_op,
        syncs_first=syncs_per_step >= t["max_graph_syncs_per_step"],
        copy_waits=copy_waits,
        optimizer=optimizer,
        host_counters=host_counters,
        kv_per_step=_kv_appends_per_step(ctx, m.budget.n_steps),
    )


def _estimate(idle: _Idle, firsts: _Firsts, t: dict[str, float]) -> tuple[float, float, float]:
    """(recoverable µs per step, graphed step µs, speedup): graphed step ≈ step − recoverable +
    kernels × graph_gap_us + graph_launch_us, never below the GPU busy time. Removing the syncs
    first also recovers the idle that follows them."""
    budget = idle.budget
    recoverable = idle.recoverable
    if firsts.syncs_first:  # removing the syncs also recovers the idle that follows them
        recoverable += budget.host_after_sync_us
    graphed = (
        budget.step_us
        - recoverable
        + idle.per_step * t["graph_gap_us"]
        + _replays_per_step(idle) * t["graph_launch_us"]
    )
    graphed = max(graphed, budget.busy_us, 1e-9)
    return recoverable, graphed, budget.step_us / graphed


def _replays_per_step(idle: _Idle) -> float:
    """Graph replays a step pays: one, or where the iteration is unsure (a short pattern repeated edge to
    edge: a step may be a part of one) one for the whole window, so the estimate does not hang on the unit."""
    return 1.0 if idle.metrics.steps.unit_known else 1.0 / max(idle.n, 1)


def _word(
    rule: Rule,
    idle: _Idle,
    firsts: _Firsts,
    severity: Severity,
    recoverable: float,
    graphed: float,
    speedup: float,
    t: dict[str, float],
) -> Finding:
    """The finding: evidence, the fixes (those a graph needs first, then cuda-graphs), the basis."""
    budget = idle.budget
    steps = _first_steps(idle, firsts, t)
    evidence = _evidence(idle, t) + [e for e, _, _ in steps]
    tree = idle.metrics.compiled.replays_graphs
    fixes = [f for _, f, _ in reversed(steps)] + [whole_step_graph_fix(True) if tree else _graph_fix(idle.skipped)]
    basis_note = "".join(note for _, _, note in steps)
    return Finding(
        rule=rule.id,
        severity=severity,
        title=rule.title,
        evidence=evidence,
        offenders=_offenders(idle.metrics, idle.host, idle.n, budget.host_scale),
        fixes=fixes,
        est_speedup=round(speedup, 2),
        recoverable_us=round(recoverable, 2),
        basis=(
            f"graphed step ≈ {budget.step_us:,.0f} − {recoverable:,.0f} recoverable + "
            f"{idle.per_step:.0f} kernels × {t['graph_gap_us']} µs + {_replays_per_step(idle) * t['graph_launch_us']:.3g} µs "
            f"replay = {graphed:,.0f} µs per step; {budget.basis}{basis_note}"
        ),
        why=(
            "Every eager PyTorch op costs the host several microseconds (Python, the dispatcher, "
            "cudaLaunchKernel) before its kernel can start. When kernels finish faster than the host "
            "issues them, the GPU sits idle between them and the step runs at the host's pace. A CUDA "
            "graph records the step's kernels once; replaying it is a single launch, so the per-kernel "
            "host cost disappears and the kernels run back to back."
        ),
    )


def _evidence(idle: _Idle, t: dict[str, float]) -> list[Evidence]:
    """The evidence of the idle itself: its share, the kernels' sizes and count, the host per launch."""
    budget = idle.budget
    evidence = [
        Evidence.share("launch-bound idle per step", idle.share, ">=", t["min_recoverable_share"]),
        Evidence(
            "median kernel duration",
            round(idle.median_us, 2),
            "<" if idle.median_us < t["small_kernel_us"] else ">=",
            t["small_kernel_us"],
            "µs",
        ),
        Evidence.share("kernels shorter than 10 µs", idle.small_share),
        Evidence("kernels per step", round(idle.per_step, 1)),
        Evidence.share("GPU busy per step", budget.share(budget.busy_us)),
        Evidence("host time per kernel launched", round(idle.host_per_launch, 2), unit="µs"),
    ]
    if idle.skipped:
        evidence.append(Evidence("note", idle.skipped))
    return evidence


_FirstStep = tuple[Evidence, Fix, str]  # a fix a graph needs first: its evidence, the fix, its basis note


def _first_steps(idle: _Idle, firsts: _Firsts, t: dict[str, float]) -> list[_FirstStep]:
    """The fixes a graph needs first, in the order their evidence and notes are written (the fixes
    themselves are listed in the reverse order: the last found is the first to do)."""
    steps: list[_FirstStep] = []
    if firsts.optimizer is not None:
        steps.append(_optimizer_first(firsts.optimizer, t))
    if firsts.host_counters is not None:
        steps.append(_counters_first(firsts.host_counters))
    if firsts.syncs_first:
        steps.append(_sync_first(idle, firsts, t))
    if firsts.kv_per_step >= t["min_kv_appends_per_step"]:
        steps.append(_kv_first(firsts.kv_per_step, t))
    return steps


def _optimizer_first(optimizer: OptimizerStep, t: dict[str, float]) -> _FirstStep:
    """fused-optimizer first: a single-tensor optimizer launches most of the kernels."""
    return (
        Evidence.share(
            f"kernels launched by {optimizer.name}.step (single-tensor)",
            optimizer.launch_share,
            ">=",
            t["optimizer_launch_share"],
        ),
        fix("fused-optimizer", code=optimizer_code(optimizer.name), prerequisite=True),
        f"; first fused-optimizer: {optimizer.name} (foreach=False) launches "
        f"{percent(optimizer.launch_share)} of the kernels and a CUDA graph cannot capture its step",
    )


def _counters_first(host_counters: OptimizerStep) -> _FirstStep:
    """capturable=True first: the optimizer keeps its step counters on the CPU."""
    return (
        Evidence(
            f"values read back to Python in {host_counters.name}.step per step (CPU step counters)",
            round(host_counters.host_reads, 1),
        ),
        capturable_fix(host_counters.name),
        f"; first capturable=True: {host_counters.name} ({host_counters.impl}) keeps its step counters "
        f"on the CPU and reads {host_counters.host_reads:.0f} of them back per step, so a CUDA graph "
        "cannot capture its step",
    )


def _sync_first(idle: _Idle, firsts: _Firsts, t: dict[str, float]) -> _FirstStep:
    """remove-sync first: host syncs sit between the step's kernel launches; non-blocking-copies first
    where those syncs are the waits of blocking host-to-device copies (`.to(device)` of a batch)."""
    after = f"the recoverable time includes the {idle.budget.host_after_sync_us:,.0f} µs idle after them"
    if firsts.copy_waits:
        return (
            Evidence(
                "blocking host-to-device copies per step between kernel launches (a graph cannot hold one)",
                round(firsts.syncs_per_step, 1),
                ">=",
                t["max_graph_syncs_per_step"],
            ),
            fix("non-blocking-copies", code=_COPY_CODE, prerequisite=True),
            f"; first non-blocking-copies: {firsts.syncs_per_step:.1f} host syncs per step are the waits of "
            f"blocking host-to-device copies ({firsts.sync_op}) between kernel launches, where a CUDA graph "
            f"cannot hold them (the transfer rule prices the copies); {after}",
        )
    return (
        Evidence(
            "host syncs per step between kernel launches (a graph cannot hold one)",
            round(firsts.syncs_per_step, 1),
            ">=",
            t["max_graph_syncs_per_step"],
        ),
        fix("remove-sync", code=_sync_code(firsts.sync_op), prerequisite=True),
        f"; first remove-sync: {firsts.syncs_per_step:.1f} host syncs per step (most made by "
        f"{firsts.sync_op}) sit between kernel launches, where a CUDA graph cannot hold them; {after}",
    )


_COPY_CODE = (
    "# pinned memory, copied without a wait, into the static input the graph reads\n"
    f"{PINNED_LOADER_CODE}\n"
    "static_x.copy_(x, non_blocking=True)  # outside the graph, before each replay\n"
    "graph.replay()"
)


def _kv_first(kv_per_step: float, t: dict[str, float]) -> _FirstStep:
    """static-shapes first: torch.cat grows a KV cache every step, so no two steps share shapes."""
    return (
        Evidence(
            "KV-cache appends by torch.cat per step (a graph replays fixed shapes)",
            round(kv_per_step, 1),
            ">=",
            t["min_kv_appends_per_step"],
        ),
        fix("static-shapes", code=_static_kv_code(), prerequisite=True),
        f"; first static-shapes: {kv_per_step:.0f} torch.cat appends per step grow the KV cache, "
        "so every step has new shapes and no graph can replay it: preallocate the cache",
    )


def _single_tensor_optimizer(m, min_share: float):
    """The single-tensor optimizer that launches at least `min_share` of the step's kernels, or None."""
    single = [o for o in m.optimizer_steps if o.impl == SINGLE and o.launch_share >= min_share]
    return single[0] if single else None


def _host_counter_optimizer(m):
    """The optimizer whose step keeps its counters on the CPU (not capturable=True), or None."""
    found = [o for o in m.optimizer_steps if o.counters_on_host]
    return found[0] if found else None


def _syncs_between_launches(trace, m) -> tuple[float, str, bool]:
    """(host syncs per step made between the step's first and last kernel launch, the op that makes most
    of them, whether most of them wait for a blocking host-to-device copy)."""
    windows = m.steps.windows
    syncs = m.sync_calls
    if not len(syncs) or not windows:
        return 0.0, "", False
    launches = np.sort(m.step_kernels["launch_ts"].dropna().to_numpy(float))
    starts = np.array([w.cpu_start for w in windows])
    ends = np.array([w.cpu_end for w in windows])
    if not m.steps.unit_known:  # a step may be a part of one iteration: the window is the unit
        starts, ends = starts[:1], ends[-1:]
    if not len(launches):
        return 0.0, "", False
    last = np.searchsorted(launches, ends, side="left") - 1  # the last launch before each step's end
    first = np.searchsorted(launches, starts, side="left")  # the first launch from each step's start
    held_last = (last >= 0) & (launches[np.maximum(last, 0)] >= starts)
    last_ts = np.where(held_last, launches[np.maximum(last, 0)], -np.inf)
    first_ts = np.where(held_last, launches[np.minimum(first, len(launches) - 1)], np.inf)
    ts = syncs["ts"].to_numpy(float)
    step = np.maximum(np.searchsorted(starts, ts, side="right") - 1, 0)
    inside = (ts > first_ts[step]) & (ts < last_ts[step])  # between two launches of its step
    held = syncs[inside]
    if not len(held):
        return 0.0, "", False
    per = len(windows) if m.steps.unit_known else 1  # per step, or per window where the window is the unit
    copy_waits = float(_waits_for_upload(held, m.launches).mean()) > 0.5
    return len(held) / per, str(held["op_name"].mode().iat[0]), copy_waits


COPY_WAIT_US = 50.0  # a sync this soon after a copy call ends, on its thread, waits for that copy


def _waits_for_upload(syncs: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """For each sync call, whether it follows, on its thread and within COPY_WAIT_US, the call that issued
    a host-to-device copy: the wait a blocking `.to(device)` makes after its copy."""
    copies = launches[launches["cat"] == "memcpy"]
    uploads = copies[copies["name"].astype(str).str.extract(COPY_DIRECTION, expand=False) == "HtoD"]
    out = np.zeros(len(syncs), dtype=bool)
    if not len(uploads):
        return out
    up_tid = uploads["launch_tid"].to_numpy(object)
    up_end = (uploads["launch_ts"] + uploads["launch_dur"]).to_numpy(float)
    s_tid, s_ts = syncs["tid"].to_numpy(object), syncs["ts"].to_numpy(float)
    for tid in pd.unique(s_tid):
        ends = np.sort(up_end[up_tid == tid])
        rows = np.nonzero(s_tid == tid)[0]
        if not len(ends):
            continue
        before = np.searchsorted(ends, s_ts[rows] + 1.0, side="right") - 1
        ok = before >= 0
        gap = np.where(ok, s_ts[rows] - ends[np.maximum(before, 0)], np.inf)
        out[rows] = gap <= COPY_WAIT_US
    return out


def _sync_code(op: str) -> str:
    return (
        f"# {op} reads a GPU value on the host inside the step: keep it on the device\n"
        "stats = torch.stack([h.norm() for h in activations])  # no .item() in the step\n"
        "if step % 100 == 0:\n"
        "    print(stats.tolist())                             # one read, outside the graphed step\n"
        'torch.cuda.set_sync_debug_mode("warn")  # names every hidden sync while you fix them'
    )


def _offenders(m, host_gaps: pd.DataFrame, n: int, scale: float) -> list[Offender]:
    """The CPU ops whose kernels most often waited for their launch (idle on the step's time base)."""
    if not len(host_gaps):
        return []
    launches = m.step_kernels[["correlation", "op_name", "name", "dur"]]
    # only the gap columns used: the join copies every column it is given, once per gap
    joined = host_gaps[["next_correlation", "dur"]].merge(
        launches, left_on="next_correlation", right_on="correlation", how="left"
    )
    joined["op_name"] = joined["op_name"].fillna("(no CPU op recorded)")
    grouped = aggregate(
        joined.groupby("op_name"), launches=("dur_x", "size"), waited_us=("dur_x", "sum"), kernel_us=("dur_y", "median")
    )
    grouped = grouped.sort_values("waited_us", ascending=False)
    rows = [
        {
            "op": op,
            "kernels_per_step": round(row.launches / n, 1),
            "idle_before_us_per_step": round(row.waited_us / n * scale, 1),
            "median_kernel_us": round(float(row.kernel_us), 2) if pd.notna(row.kernel_us) else None,
        }
        for op, row in grouped.head(8).iterrows()
    ]
    return top_offenders(rows, "op")


def _kv_appends_per_step(ctx, steps: int) -> float:
    """torch.cat calls per measured step that append a few positions to a cache (diagnose/memory/patterns.py)."""
    ops = ctx.trace.ops
    if not len(ops) or "input_dims" not in ops:
        return 0.0
    windows = step_windows(ctx)
    appends = kv_appends(ops, step_index(ops, windows), KV_MAX_APPEND, KV_MIN_CACHE)
    return sum(1 for a in appends if a.step >= 0) / max(steps, 1)


def _static_kv_code() -> str:
    return (
        "# preallocate the cache once at its full length and write each new position in place\n"
        'k_cache = torch.zeros(batch, heads, max_len, head_dim, device="cuda", dtype=dtype)\n'
        "k_cache.index_copy_(2, pos, k_new)          # instead of torch.cat([k_cache, k_new], dim=2)\n"
        "out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=valid_positions)"
    )


def _graph_fix(skipped: str) -> Fix:
    """cuda-graphs; where inductor logged that it skipped the graphs reduce-overhead asked for, in the form that
    case needs: the mode is already on, so the fix is the cause inductor names, not the mode."""
    if not skipped:
        return fix("cuda-graphs", code=_graph_code())
    return fix(
        "cuda-graphs",
        how=(
            f"{skipped}. The mode is already on: take away that cause and the compiled step replays from one "
            "graph. An input the compiled function updates in place: return the new value, or update it outside "
            "the compiled call; a CPU tensor input: move it to the GPU once, before the loop; shapes that change: "
            "pad them to a few fixed ones."
        ),
        code=_skipped_graph_code(),
    )


def _skipped_graph_code() -> str:
    return (
        '# mode="reduce-overhead" is on, but inductor skipped the graphs: remove the cause it names\n'
        "# an input updated in place inside the compiled function (counter.add_(1)): do it outside\n"
        "out = compiled(x, scale)\n"
        "counter += 1\n"
        "# a CPU tensor input (scale = torch.tensor(0.5)): put it on the GPU once, before the loop\n"
        'scale = scale.to("cuda")'
    )


def _graph_code() -> str:
    return (
        "# simplest: let torch.compile capture and replay CUDA graphs\n"
        "# (inputs that are not parameters are copied into the graph's buffers on each call:\n"
        "#  for large activations, capture by hand with static buffers instead)\n"
        'step = torch.compile(step, mode="reduce-overhead")\n\n'
        "# by hand: static buffers, capture once, replay every step\n"
        "graph = torch.cuda.CUDAGraph()\n"
        "with torch.cuda.graph(graph):\n"
        "    static_out = model(static_in)\n"
        "for batch in batches:\n"
        "    static_in.copy_(batch)\n"
        "    graph.replay()"
    )
