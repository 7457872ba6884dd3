"""dynamic-shapes: setup work that a new input shape repeats holds the host every step.

**Signal.** A kernel-launching op should spend its host time dispatching: a few CUDA calls, a few
µs each. When the same op sits for milliseconds without any CUDA call while the GPU idles, and
its kernels take a fraction of that, the host is building something for the shapes it was given:
a cuDNN or cuBLAS execution plan for a new sequence length, an autotuning sweep, a torch.compile
recompile (its `dynamo` / `(dynamo_timed)` ranges), or fresh allocations. (When the capture holds
dynamo's own log, compile.json, with recompiles in the timed or measured steps, the compile
ranges are left to compile-breaks, which prices them with dynamo's compile time and names the
failed guard and line; so no µs is counted by both.) Those are cached per
shape, so a fixed shape pays once; a shape that changes every step pays every step. The rule
takes the silent host stretches of the timeline (no CUDA call for longer than
`timeline.host_silence_us`), gives each µs to the deepest kernel-launching op around it (or to
the outermost compile range), and, per op name, measures the time it holds per step, its host
µs against its kernels' µs, and in how many steps it recurs. It fires when that op holds at
least `min_share` of the step, its host time is at least `min_host_ratio` × its kernels', it
recurs in at least `min_step_fraction` of the measured steps (and in two or more), and the shapes
changed between steps: the op's own input shapes, else the shapes of the step's other ops, or a
new `Torch-Compiled Region` version. Setup that recurs with unchanged shapes, or that happens
once (first-call initialisation), is left alone with the numbers that decided it.

**Threshold.** 10 % of the step and a 10× host-to-kernel ratio. On the H200 KV-cache captures,
the first `aten::_cudnn_attention_forward` of each decode step holds 38–50 ms of host time for
77 µs of kernels (over 500×) as the KV length grows by one token per step (1061 → 1064): 92–96 %
of the step. The fixed-shape captures have no op holding more than 1 % of their step this way
(the largest: `aten::_foreach_sqrt` in the training loops, 0.25 ms of a 20 ms step, same shapes
each step).

**Fixes.** `static-shapes`: give the op one shape (a preallocated, maximum-length KV cache with a
length mask; fixed-length padded batches; for torch.compile, mark the varying dimension dynamic
instead of recompiling per shape). `shape-bucketing`: round the varying length up to a few
buckets (multiples of 64 or 128) and pad, so one plan or graph per bucket is built once and
reused.

**Estimate.** The held time disappears once the plan, graph or tuning result is reused:
new step = max(step − held time, GPU busy); speedup = step ÷ new step. It is an upper bound:
padding to a bucket adds some GPU work. Host-side time is rescaled to the unprofiled step time
when it was measured. The held time is most of such a step, so what is left is small and one
unlike step moves its mean a lot; where the remainder (step − held time) at its median step is
longer than at the mean one, the remainder is scaled by median ÷ mean of the steps' own remainders,
so one unusually short step does not inflate the estimate. The other way round is not taken: the
new step is never shorter than the step less the held time, because removing the held time saves at
most what it holds. kv_concat's trace with its markers stripped keeps diagnose's warm-up iteration
(within 4 % of the others' length, so not a cold start, but its remainder is 7.4 % of it against
3.3–3.9 % for the loop's own): 22.7× stripped against 27.3× marked (analysed on the 2-core CPU
machine, 2026-12-06). Taking its remainder at the median step gave 27.9×, a saving 548 µs larger than
the 63,354 µs held per step: a number the trace cannot support.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.metrics import Metrics
from diagnose.metrics.compiled import logged_recompiles
from diagnose.metrics.slow_ops import compiled_versions, held_ops, shape_changes, step_shapes
from diagnose.metrics.budget import StepBudget
from diagnose.vocabulary.units import percent

MAX_SHAPES_SHOWN = 4


class DynamicShapes(Rule):
    """Plan building / recompiles repeated for every new input shape → static shapes, buckets."""

    id = "dynamic-shapes"
    order = 25
    title = "Dynamic shapes: the host rebuilds plans or recompiles for every new input shape"
    cheat_sheet = {
        "bottleneck": "per-shape setup (cuDNN/cuBLAS plans, autotuning, torch.compile recompiles) repeated "
        "because shapes change every step",
        "signal": "a kernel-launching op holds the host for ms with no CUDA call while its kernels take µs, "
        "every step, and the input shapes differ from step to step",
        "fix": "static shapes (max-length caches, padded batches, dynamic dims for torch.compile) or shape buckets",
        "impact": "the setup is paid once per shape or bucket instead of every step",
    }
    needs = ("gpu", "launch-links", "steps", "steady-state")
    thresholds = (
        Threshold("min_share", 0.10, "fraction", "fire when one op holds at least this share of the step"),
        Threshold("min_host_ratio", 10.0, "ratio", "the op's host µs must be at least this multiple of its kernels'"),
        Threshold("min_step_fraction", 0.5, "fraction", "the op must hold the host in at least this share of steps"),
        Threshold("min_held_us", 200.0, "µs", "ignore op calls holding less silent host time than this"),
        Threshold("high_share", 0.50, "fraction", "held share at which severity is high"),
        Threshold("medium_share", 0.25, "fraction", "held share at which severity is medium (below: low)"),
    )

    def check(self, ctx, t):
        """Find the op that holds the most silent host time per step and judge whether shapes drive it."""
        held = _held(ctx, t)
        if isinstance(held, Quiet):
            return held
        top = _measure(ctx.metrics, held, t)
        quiet = _decide(top, t)
        if quiet is not None:
            return quiet
        changes = _changes(ctx.trace, ctx.metrics.steps.windows, top.calls)
        severity = _decide_shapes(top, changes, t)
        if isinstance(severity, Quiet):
            return severity
        assert changes is not None  # _decide_shapes is quiet without shapes
        return _word(self, top, changes, severity, _estimate(top, ctx.metrics.steps.windows), t)


@dataclasses.dataclass(frozen=True)
class _Top:
    """The op holding the most silent host time, and its calls (what `_measure` found)."""

    budget: StepBudget
    n: int  # measured steps
    per_step: float  # µs over the window -> µs of a step
    name: str
    top: pd.Series  # its held_us, host_us, kernel_us summed over the steps, and steps (how many it holds)
    share: float  # of the step it holds
    ratio: float  # host ÷ kernel time
    needed: int  # steps it must recur in
    calls: pd.DataFrame  # its held calls


def _held(ctx, t: dict[str, float]) -> pd.DataFrame | Quiet:
    """The kernel-launching op calls holding at least `min_held_us` of silent host time, less dynamo's
    logged recompiles (compile-breaks prices them); Quiet when none are left."""
    m = ctx.metrics
    held = m.shared(
        f"held_ops:{t['min_held_us']!r}",
        lambda: held_ops(ctx.trace, m.steps.windows, m.timeline.silent, t["min_held_us"]),
    )
    if len(held) and logged_recompiles(ctx.trace, ctx.warnings):  # compile-breaks prices them (its docstring)
        held = held[~held["compile"].astype(bool)]
        if not len(held):
            return Quiet(
                "the host time held in the measured steps is torch.compile recompiling, which dynamo "
                "logged (compile.json): compile-breaks prices it with dynamo's reasons"
            )
    if not len(held):
        return Quiet(f"no kernel-launching op holds ≥ {t['min_held_us']:,.0f} µs of silent host time")
    return held


def _measure(m: Metrics, held: pd.DataFrame, t: dict[str, float]) -> _Top:
    """Sum the held calls by op and take the op holding the most."""
    budget = m.budget
    n = budget.n_steps
    per_step = budget.host_scale / n
    by_name = aggregate(
        held.groupby("name"),
        held_us=("held_us", "sum"),
        host_us=("host_us", "sum"),
        kernel_us=("kernel_us", "sum"),
        steps=("step", "nunique"),
    )
    by_name = by_name.sort_values("held_us", ascending=False, kind="stable")
    name, top = by_name.index[0], by_name.iloc[0]
    return _Top(
        budget=budget,
        n=n,
        per_step=per_step,
        name=name,
        top=top,
        share=budget.share(top.held_us * per_step),
        ratio=top.host_us / max(top.kernel_us, 1.0),
        needed=max(2, math.ceil(t["min_step_fraction"] * n)),
        calls=held[held["name"] == name],
    )


def _profiled(x: _Top) -> str:
    """ " under the profiler" where the step is not the profiled one: the op's host time is as recorded, the share
    and the step are on the unprofiled base, so 490 µs of host time can sit in a 304 µs step (compile_graphs)."""
    return " under the profiler" if x.budget.step_us < x.budget.profiled_step_us else ""


def _summary(x: _Top) -> str:
    """The top op's share of the step, host and kernel time, and the steps it holds, as one line."""
    top = x.top
    return (
        f"{x.name} holds {percent(x.share)} of the step ({top.host_us / top.steps:,.0f} µs host{_profiled(x)} vs "
        f"{top.kernel_us / top.steps:,.0f} µs of kernels in each step it holds) in {int(top.steps)} of {x.n} steps"
    )


def _decide(x: _Top, t: dict[str, float]) -> Quiet | None:
    """Quiet when the op holds less than `min_share` of the step, its host time is under `min_host_ratio`
    times its kernels', or it does not recur in `needed` steps; None to go on to the shapes."""
    if x.share < t["min_share"]:
        return Quiet(f"{_summary(x)}: < {percent(t['min_share'])} of the step")
    if x.ratio < t["min_host_ratio"]:
        return Quiet(f"{_summary(x)}: host only {x.ratio:.1f}× its kernels' time < {t['min_host_ratio']:g}×")
    if x.top.steps < x.needed:
        return Quiet(
            f"{_summary(x)}: it does not recur (needs {x.needed} steps); one-time setup such as a first "
            "call's initialisation is not shape churn: profile after warm-up"
        )
    return None


def _decide_shapes(x: _Top, changes: list[str] | None, t: dict[str, float]) -> Severity | Quiet:
    """Quiet without recorded shapes, or when they never change; else the severity of the held share."""
    if changes is None:
        return Quiet(
            f"{_summary(x)}, but the trace records no input shapes (record_shapes=False): cannot tell "
            "whether they change between steps"
        )
    if not changes:
        return Quiet(f"{_summary(x)}, with the same input shapes every step: not shape-driven")
    return severity_ladder(x.share, t)


def _estimate(x: _Top, windows) -> float:
    """The new step, µs: max(step − the op's held time, GPU busy), the remainder taken at its median step where
    that is longer. Never shorter than the step less the held time: removing the op saves at most what it holds."""
    return max(_left(x) * max(_typical_remainder(x, windows), 1.0), x.budget.busy_us, 1e-9)


def _left(x: _Top) -> float:
    """µs of the mean step left once the op's held time goes."""
    return x.budget.step_us - x.top.held_us * x.per_step


def _median_note(x: _Top, new_step: float) -> str:
    """ ", the remainder at its median step (×0.82)" where that moved it by at least 1 %, else ""."""
    left = _left(x)
    if new_step <= x.budget.busy_us or left <= 0 or abs(new_step / left - 1) < 0.01:
        return ""
    return f", the remainder at its median step (×{new_step / left:.2f})"


def _typical_remainder(x: _Top, windows) -> float:
    """What is left of a step once the op's held time goes, at the median step against the mean one (1.0
    for steps alike). The held time is most of the step here, so the remainder is small and one unlike
    step moves its mean by a fifth (_estimate takes it only where it lengthens the new step)."""
    held = x.calls.groupby("step")["held_us"].sum()
    left = np.array([max((w.end - w.start) - float(held.get(w.index, 0.0)), 0.0) for w in windows])
    if len(left) < 3 or left.mean() <= 0:
        return 1.0
    return float(np.median(left) / left.mean())


def _word(rule: Rule, x: _Top, changes: list[str], severity: Severity, new_step: float, t: dict[str, float]) -> Finding:
    """The finding: evidence, the op's held calls, the fixes, the basis."""
    budget = x.budget
    return Finding(
        rule=rule.id,
        severity=severity,
        title=rule.title,
        evidence=_evidence(x, changes, t),
        offenders=_offenders(x),
        fixes=[
            fix("static-shapes", code=_static_code(bool(x.calls["compile"].any()))),
            fix("shape-bucketing", code=_bucket_code()),
        ],
        est_speedup=round(budget.step_us / new_step, 2),
        recoverable_us=round(budget.step_us - new_step, 1),
        basis=(
            f"new step = max({budget.step_us:,.0f} − {x.top.held_us * x.per_step:,.0f} µs held by {x.name}"
            f"{_median_note(x, new_step)}, {budget.busy_us:,.0f} µs GPU busy) = {new_step:,.0f} µs; {budget.basis}"
        ),
        why=(
            "cuDNN and cuBLAS pick and build an execution plan per input shape, autotuners benchmark "
            "per shape, and torch.compile specialises its graph to the shapes it saw; all of that is "
            "cached, so a fixed shape pays once. A length that grows every step (a KV cache that is "
            "concatenated onto, variable-length batches) pays every step, on the host, while the GPU "
            "waits. Keeping the shape fixed, or rounding it to a few buckets, turns the per-step cost "
            "into a one-time one."
        ),
    )


def _evidence(x: _Top, changes: list[str], t: dict[str, float]) -> list[Evidence]:
    """The held share, host and kernel time, their ratio, the steps it recurs in, the shape changes."""
    top = x.top
    return [
        Evidence.share(f"host time {x.name} holds with no CUDA call", x.share, ">=", t["min_share"]),
        Evidence("its host µs per step", round(top.host_us / top.steps, 1), unit="µs"),
        Evidence("its kernels' µs per step", round(top.kernel_us / top.steps, 1), unit="µs"),
        Evidence("host ÷ kernel time", round(x.ratio, 1), ">=", t["min_host_ratio"], "×"),
        Evidence("steps where it recurs", int(top.steps), ">=", x.needed),
        Evidence("shapes that changed between steps", "; ".join(changes[:MAX_SHAPES_SHOWN])),
    ]


def _offenders(x: _Top) -> list[Offender]:
    """The op's held calls, one row each."""
    return top_offenders(
        [
            {
                "op": r.name,
                "step": int(r.step),
                "host_us": round(r.host_us, 1),
                "held_us": round(r.held_us * x.budget.host_scale, 1),
                "kernel_us": round(r.kernel_us, 1),
                "input_shapes": r.shapes or "(not recorded)",
            }
            for r in x.calls.head(8).itertuples()
        ],
        "op",
    )


def _changes(trace, windows, calls) -> list[str] | None:
    """Text of the shape changes between the steps where the op recurs; None without any shapes. A
    change is the k-th call of an op taking other shapes than its k-th call in the step before: the held
    calls of different steps may be different calls (transfer_pageable's first convolution after each
    blocking copy is another layer's each step), whose shapes differ with nothing changing."""
    own = calls.drop_duplicates("step")
    shapes = step_shapes(trace, windows)
    steps = sorted(own["step"])
    name = own["name"].iat[0]
    if own["shapes"].astype(bool).all() and any(
        shape_changes(_calls_of(shapes[a], name), _calls_of(shapes[b], name), limit=1) for a, b in zip(steps, steps[1:])
    ):
        texts = list(dict.fromkeys(own["shapes"]))
        if len(texts) > 1:
            return [f"{name}: " + " → ".join(f"({s})" for s in texts[:MAX_SHAPES_SHOWN])]
    versions = compiled_versions(trace, windows)
    out = []
    for a, b in zip(steps, steps[1:]):
        for op, before, after in shape_changes(shapes[a], shapes[b], limit=2):
            out.append(f"{op}: ({before}) → ({after})")
        new = sorted(set(versions[b]) - set(versions[a]))
        if new:
            out.append(f"step {b} runs compiled version(s) {', '.join(new)} (a recompile)")
    if not out and not any(shapes) and not any(versions):
        return None
    return list(dict.fromkeys(out))


def _calls_of(step: list[tuple[str, str]], name: str) -> list[tuple[str, str]]:
    """The (name, shapes) of one op's calls in a step, in order."""
    return [call for call in step if call[0] == name]


def _static_code(compiled: bool) -> str:
    if compiled:
        return (
            "x = F.pad(x, (0, 0, 0, MAX_LEN - x.shape[1]))    # one shape: compiled once\n"
            "# or let one graph take every length instead of recompiling per length:\n"
            "torch._dynamo.mark_dynamic(x, 1)\n"
            "model = torch.compile(model)                   # not dynamic=False"
        )
    return (
        "# preallocate at the maximum length and pass a mask or a length, not a growing tensor\n"
        'k_cache = torch.empty(B, H, MAX_LEN, D, device="cuda", dtype=torch.bfloat16)\n'
        "k_cache[:, :, pos] = k_new                        # no torch.cat: the shape never changes\n"
        "out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)"
    )


def _bucket_code() -> str:
    return (
        "def bucket(n, step=128):\n"
        "    return (n + step - 1) // step * step\n\n"
        "x = F.pad(x, (0, 0, 0, bucket(x.shape[1]) - x.shape[1]))   # a handful of shapes, each built once"
    )
