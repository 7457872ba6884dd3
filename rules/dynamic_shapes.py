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
when it was measured.
"""

from __future__ import annotations

import math

from diagnose.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.findings import Evidence, Finding
from diagnose.fixes import fix
from diagnose.metrics.compiled import logged_recompiles
from diagnose.metrics.slow_ops import compiled_versions, held_ops, shape_changes, step_shapes
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
        m = ctx.metrics
        budget, windows = m.budget, m.steps.windows
        n = budget.n_steps
        held = held_ops(ctx.trace, windows, m.timeline.silent, t["min_held_us"])
        if len(held) and logged_recompiles(ctx.trace, ctx.warnings):  # compile-breaks prices them (its docstring)
            held = held[~held["compile"].astype(bool)]
            if not len(held):
                return Quiet(
                    "the host time held in the measured steps is torch.compile recompiling, which dynamo "
                    "logged (compile.json): compile-breaks prices it with dynamo's reasons"
                )
        if not len(held):
            return Quiet(f"no kernel-launching op holds ≥ {t['min_held_us']:,.0f} µs of silent host time")
        per_step = budget.host_scale / n
        by_name = held.groupby("name").agg(
            held_us=("held_us", "sum"),
            host_us=("host_us", "sum"),
            kernel_us=("kernel_us", "sum"),
            steps=("step", "nunique"),
        )
        by_name = by_name.sort_values("held_us", ascending=False, kind="stable")
        name, top = by_name.index[0], by_name.iloc[0]
        share = budget.share(top.held_us * per_step)
        ratio = top.host_us / max(top.kernel_us, 1.0)
        needed = max(2, math.ceil(t["min_step_fraction"] * n))
        summary = (
            f"{name} holds {percent(share)} of the step ({top.host_us / top.steps:,.0f} µs host vs "
            f"{top.kernel_us / top.steps:,.0f} µs of kernels in each step it holds) in {int(top.steps)} of {n} steps"
        )
        if share < t["min_share"]:
            return Quiet(f"{summary}: < {percent(t['min_share'])} of the step")
        if ratio < t["min_host_ratio"]:
            return Quiet(f"{summary}: host only {ratio:.1f}× its kernels' time < {t['min_host_ratio']:g}×")
        if top.steps < needed:
            return Quiet(
                f"{summary}: it does not recur (needs {needed} steps); one-time setup such as a first "
                "call's initialisation is not shape churn: profile after warm-up"
            )
        calls = held[held["name"] == name]
        changes = _changes(ctx.trace, windows, calls)
        if changes is None:
            return Quiet(
                f"{summary}, but the trace records no input shapes (record_shapes=False): cannot tell "
                "whether they change between steps"
            )
        if not changes:
            return Quiet(f"{summary}, with the same input shapes every step: not shape-driven")
        work = top.held_us * per_step
        new_step = max(budget.step_us - work, budget.busy_us, 1e-9)
        evidence = [
            Evidence(
                f"host time {name} holds with no CUDA call", round(share * 100, 1), ">=", t["min_share"] * 100, "%"
            ),
            Evidence("its host µs per step", round(top.host_us / top.steps, 1), unit="µs"),
            Evidence("its kernels' µs per step", round(top.kernel_us / top.steps, 1), unit="µs"),
            Evidence("host ÷ kernel time", round(ratio, 1), ">=", t["min_host_ratio"], "×"),
            Evidence("steps where it recurs", int(top.steps), ">=", needed),
            Evidence("shapes that changed between steps", "; ".join(changes[:MAX_SHAPES_SHOWN])),
        ]
        compiled = bool(calls["compile"].any())
        return Finding(
            rule=self.id,
            severity=severity_ladder(share, t),
            title=self.title,
            evidence=evidence,
            offenders=top_offenders(
                [
                    {
                        "op": r.name,
                        "step": int(r.step),
                        "host_us": round(r.host_us, 1),
                        "held_us": round(r.held_us * budget.host_scale, 1),
                        "kernel_us": round(r.kernel_us, 1),
                        "input_shapes": r.shapes or "(not recorded)",
                    }
                    for r in calls.head(8).itertuples()
                ],
                "op",
            ),
            fixes=[fix("static-shapes", code=_static_code(compiled)), fix("shape-bucketing", code=_bucket_code())],
            est_speedup=round(budget.step_us / new_step, 2),
            recoverable_us=round(budget.step_us - new_step, 1),
            basis=(
                f"new step = max({budget.step_us:,.0f} − {work:,.0f} µs held by {name}, "
                f"{budget.busy_us:,.0f} µs GPU busy) = {new_step:,.0f} µs; {budget.basis}"
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


def _changes(trace, windows, calls) -> list[str] | None:
    """Text of the shape changes between the steps where the op recurs; None without any shapes."""
    own = calls.drop_duplicates("step")
    if own["shapes"].astype(bool).all():
        texts = list(dict.fromkeys(own["shapes"]))
        if len(texts) > 1:
            return [f"{own['name'].iat[0]}: " + " → ".join(f"({s})" for s in texts[:MAX_SHAPES_SHOWN])]
    shapes = step_shapes(trace, windows)
    versions = compiled_versions(trace, windows)
    out = []
    steps = sorted(own["step"])
    for a, b in zip(steps, steps[1:]):
        for op, before, after in shape_changes(shapes[a], shapes[b], limit=2):
            out.append(f"{op}: ({before}) → ({after})")
        new = sorted(set(versions[b]) - set(versions[a]))
        if new:
            out.append(f"step {b} runs compiled version(s) {', '.join(new)} (a recompile)")
    if not out and not any(shapes) and not any(versions):
        return None
    return list(dict.fromkeys(out))


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
