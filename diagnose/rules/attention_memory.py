"""attention-memory: attention materialises its T×T score matrix, so memory grows with the square of the sequence.

**Signal.** Any of three, from the recorded shapes and the allocator:
(1) *materialised scores*: a softmax over `[..., Tq, Tk]` whose shape a batched matmul of the
trace produces (`q @ kᵀ`), with Tq and Tk ≥ `min_tokens`: attention written by hand, or SDPA
fallen back to its math path (`aten::_scaled_dot_product_attention_math` around the softmax);
each intermediate (scores, scaled, masked, upcast, probabilities) is a full `B·H·Tq·Tk` tensor
in HBM; a smaller tensor ending in `[Tq, Tk]` added to them is reported as a *dense mask*;
(2) *a dense mask passed to SDPA*: `attn_mask` of `[..., Tq, Tk]` with Tq, Tk ≥ `min_tokens`
(the fused kernels then read T² mask values, and flash cannot run it);
(3) *quadratic growth across a sweep* (`diagnose SWEEP_FOLDER`): peak memory fitted against the
swept parameter grows with exponent ≥ `quadratic_exponent` over at least three points; points
that ran out of memory are the wall. Fused attention (SDPA's flash, cuDNN or efficient backends,
FlexAttention) stays quiet: it never writes the scores.

**Thresholds.** `min_tokens` 1,024: measured on the H200 with 16 heads × 64, the naive causal
attention was already 12× slower than cuDNN SDPA at 2,048 tokens (836 vs 70 µs) and held 43×
more memory (0.73 GB vs 17 MB); 1,024 leaves a margin below the smallest measured point, and
decode (one query against a cache of any length) never qualifies because its Tq is 1.
`long_tokens` 8,192 makes the finding high severity (the cheat-sheet's "long sequences"; at 8K
the naive step held 10.96 GB against 67 MB for SDPA). `quadratic_exponent` 1.5, halfway
between linear and quadratic: the naive sweep (2K–16K) fits 1.97, the SDPA sweep (2K–64K) 1.00.
`flash_efficiency` 0.40: the cuDNN SDPA kernel did the causal 8K case (137 GFLOP, counting only
the unmasked half) in 422 µs, 326 TFLOP/s = 41 % of the H200's achievable 790 bf16 TFLOP/s
(16K–64K reached 56–60 %: 0.40 is the conservative end).

**Fix.** `flash-attention`: `F.scaled_dot_product_attention(q, k, v, is_causal=True)` with the
flash or cuDNN backend (`sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION])`
makes a silent fallback to the math path an error). `flex-attention`: masks that are not plain
causal (sliding window, document packing, ALiBi) as a `block_mask` / `score_mod`, which skips
fully masked 128×128 tiles instead of reading a dense `[T, T]` mask.

**Estimate.** Memory: the transient the attention holds at the peak, measured from the allocator
events (peak − the floor over the measured steps), minus what a fused kernel keeps (the output
and a float log-sum-exp per row); without allocator events, two copies of the score matrix (the
least any hand-written attention holds at once). The score matrix is `B·H·Tq·Tk × bytes`. Time:
the kernels of the ops that read or write `[..., Tq, Tk]` tensors (matmuls, scale, mask, casts,
softmax) are replaced by one fused kernel doing `2·B·H·Tq·Tk·(D + Dv)` FLOPs — halved when a
square `[T, T]` mask is added (taken as causal: fused kernels skip the masked half) — at
`flash_efficiency` × the device's achievable bf16 rate; speedup = step ÷ (step − chain + fused).
On the H200 pair this predicts 14,729 → ≈ 470 µs (≈ 31×); measured with SDPA: 422 µs (34.9×).
"""

from __future__ import annotations

import dataclasses
import math

from diagnose.rulebook.engine import Quiet, Rule, Skip, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.memory.details import breakdown, step_levels
from diagnose.memory.patterns import SCORE_MATMULS, ScoreMatrix, has_shapes, score_matrices, shapes
from diagnose.memory.units import gb, in_gb
from diagnose.vocabulary.units import percent


class AttentionMemory(Rule):
    """Materialised T×T attention scores → fused attention (FlashAttention / cuDNN) or FlexAttention."""

    id = "attention-memory"
    order = 70
    title = "Attention materialises its T×T score matrix: memory grows with the square of the sequence"
    cheat_sheet = {
        "bottleneck": "quadratic attention memory",
        "signal": "out-of-memory or slow prefill on long sequences (> 8K tokens)",
        "fix": "FlashAttention-2/3 (SDPA flash/cuDNN backends) or FlexAttention",
        "impact": "memory O(N²) → O(N); 2–4× faster prefill",
    }
    needs = ()
    thresholds = (
        Threshold("min_tokens", 1024, "tokens", "query and key lengths from which a materialised score matrix counts"),
        Threshold("long_tokens", 8192, "tokens", "key length at which severity is high"),
        Threshold(
            "quadratic_exponent",
            1.5,
            "exponent",
            "sweep growth exponent of peak memory at or above which growth is called quadratic",
        ),
        Threshold(
            "flash_efficiency",
            0.40,
            "fraction",
            "share of the device's achievable bf16 matmul rate a fused attention kernel reaches",
        ),
    )

    def check(self, ctx, t):
        """Look for score matrices, dense SDPA masks and quadratic sweep growth."""
        ops = ctx.trace.ops
        sweep = _quadratic(ctx.sweep, t)
        if not has_shapes(ops) and sweep is None:
            status = (ctx.trace.capture or {}).get("status")
            if status not in (None, "ok") and not len(ops):
                return Skip(
                    f"the workload stopped ({status}) before the profiler recorded any op: no attention "
                    "shapes to read (a sweep of the sequence length shows the growth instead)"
                )
            if not len(ops) or not (ops["cat"] == "cpu_op").any():
                return Skip(
                    "the trace records no CPU ops, only annotations (a CUDA-graph replay launches none): "
                    "attention shapes are unknown"
                )
            return Skip("no op shapes in the trace (record_shapes=False): attention score shapes are unknown")
        min_tokens = int(t["min_tokens"])
        calls = ctx.metrics.attention_calls
        scores = score_matrices(ops, min_tokens, calls)
        masked = [c for c in calls if c.mask is not None and min(c.mask.dims[-2:]) >= min_tokens]
        if not scores and not masked and sweep is None:
            return Quiet(_quiet_detail(calls, ctx.sweep, min_tokens))
        return self._finding(ctx, t, scores, masked, sweep)

    def _finding(self, ctx, t, scores: list[ScoreMatrix], masked: list, sweep) -> Finding:
        """The finding: the largest score matrix (the memory and time a fused kernel saves), a dense mask
        passed to SDPA, the sweep's quadratic growth; severity from the last of them that sets one."""
        parts = [_score_part(ctx, t, scores[0])] if scores else []
        parts += [_mask_part(c) for c in masked[:1]]
        if sweep is not None:
            parts.append(_Part(_sweep_evidence(ctx.sweep, t), [_sweep_basis(ctx.sweep)], "high"))
        severities = [p.severity for p in parts if p.severity is not None]
        est_speedup = next((p.est_speedup for p in parts if p.est_speedup is not None), None)
        recoverable = next((p.recoverable for p in parts if p.recoverable is not None), None)
        return Finding(
            rule=self.id,
            severity=severities[-1] if severities else "low",
            title=self.title,
            evidence=[e for p in parts for e in p.evidence],
            fixes=[fix("flash-attention", code=_flash_code()), fix("flex-attention", code=_flex_code())],
            offenders=_offenders(ctx, scores),
            est_speedup=None if est_speedup is None else round(est_speedup, 2),
            recoverable_us=None if recoverable is None else round(recoverable, 1),
            basis="; ".join(b for p in parts for b in p.basis),
            why=(
                "Written by hand, attention computes softmax(QKᵀ/√d)·V one op at a time: every step of it reads "
                "and writes a full [batch, heads, Tq, Tk] tensor in HBM, so memory and traffic grow with the "
                "square of the sequence. A fused kernel (FlashAttention, cuDNN) streams K and V through on-chip "
                "memory tile by tile with an online softmax: the scores never reach HBM, memory grows "
                "linearly, and the kernel does only the matmul FLOPs (half of them when causal)."
            ),
        )


@dataclasses.dataclass(frozen=True)
class _Part:
    """One thing the finding reports: its evidence and basis, the severity it sets (None: none) and, for
    the score matrix, the estimate."""

    evidence: list[Evidence]
    basis: list[str]
    severity: Severity | None = None
    est_speedup: float | None = None
    recoverable: float | None = None


def _score_part(ctx, t, s: ScoreMatrix) -> _Part:
    """The largest score matrix: its size, the memory a fused kernel saves, its dense mask, and the time
    saved when the chain's kernels ran in the measured steps on a GPU with figures."""
    evidence = [
        Evidence("keys per query (Tk)", s.tk, ">=", t["min_tokens"], "tokens"),
        Evidence(f"score matrix {list(s.dims)}: values (batch × heads × Tq × Tk)", float(math.prod(s.dims))),
        Evidence(f"one copy in {s.dtype} (the softmax's dtype)", in_gb(s.nbytes), unit="GB"),
    ]
    ev, text = _memory_saved(ctx, s)
    evidence += ev
    basis = [text]
    if s.mask is not None:
        evidence.append(
            Evidence(f"dense mask {list(s.mask.dims)} added to the scores", in_gb(s.mask.nbytes), unit="GB")
        )
    est_speedup = recoverable = None
    timing = _time_saved(ctx, t, s)
    if timing:
        est_speedup, recoverable, ev, text = timing
        evidence += ev
        basis.append(text)
    else:
        basis.append(
            "time not estimated (no kernels of the chain in the measured steps, or a GPU without "
            "figures in diagnose/base/devices.py)"
        )
    return _Part(evidence, basis, severity_ladder(s.tk, t, "long_tokens", None), est_speedup, recoverable)


def _mask_part(c) -> _Part:
    """A dense attn_mask passed to SDPA: its size, and that a block_mask or is_causal removes it."""
    return _Part(
        [
            Evidence(
                f"dense attn_mask {list(c.mask.dims)} passed to SDPA ({c.backend} backend)",
                in_gb(c.mask.nbytes),
                unit="GB",
            )
        ],
        ["a dense mask costs Tq·Tk values read per call; a block_mask or is_causal removes it"],
    )


def _offenders(ctx, scores: list[ScoreMatrix]) -> list[Offender]:
    """The score matrices, then the three places that allocated the most memory."""
    offenders = top_offenders(
        [
            {
                "score_matrix": list(s.dims),
                "dtype": s.dtype,
                "one_copy_bytes": s.nbytes,
                "how": s.how,
                "dense_mask": list(s.mask.dims) if s.mask else None,
            }
            for s in scores
        ],
        "score matrix",
        n=len(scores),
    )
    allocating = [
        {
            "allocated_by": a["where"],
            "bytes_allocated": a["bytes"],
            "allocations": a["count"],
            "largest_bytes": a["largest"],
        }
        for a in (breakdown(ctx) or {}).get("top_allocating") or []
    ]
    return offenders + top_offenders(allocating, "allocation", n=3)


def _quadratic(sweep, t):
    """The sweep's memory fit when it is quadratic enough over ≥ 3 points, else None."""
    fit = getattr(sweep, "memory_fit", None)
    if fit is None or fit.n < 3 or fit.exponent < t["quadratic_exponent"]:
        return None
    return fit


def _quiet_detail(calls, sweep, min_tokens: int) -> str:
    fused = [c for c in calls if c.backend != "math"]
    parts = []
    if fused:
        longest = max(fused, key=lambda c: c.k.dims[-2])
        backends = ", ".join(sorted({c.backend for c in fused}))
        parts.append(
            f"{len(fused)} attention calls run in fused SDPA kernels ({backends}), the longest with "
            f"Tq {longest.q.dims[-2]:,} × Tk {longest.k.dims[-2]:,}: no score matrix materialised"
        )
    else:
        parts.append(f"no softmax over a [..., Tq, Tk] matmul product with Tq and Tk ≥ {min_tokens:,}")
    fit = getattr(sweep, "memory_fit", None)
    if fit is not None:
        parts.append(f"peak memory grows as {sweep.param}^{fit.exponent:.2f} over {fit.n} points (linear)")
    return "; ".join(parts)


def _memory_saved(ctx, s: ScoreMatrix) -> tuple[list[Evidence], str]:
    """Evidence and basis for the memory a fused kernel would save."""
    d, dv = _head_dims(ctx.trace.ops, s)
    fused = s.batch_heads * s.tq * (dv * 2 + 4)
    levels = step_levels(ctx)
    if levels and levels["peak"] > levels["floor"]:
        transient = levels["peak"] - levels["floor"]
        saved = max(transient - fused, 0.0)
        copies = transient / s.nbytes
        ev = [
            Evidence("peak allocated in the measured steps", in_gb(levels["peak"]), unit="GB"),
            Evidence("held by the attention transients at the peak", in_gb(transient), unit="GB"),
            Evidence(f"score-matrix copies ({s.dtype}) live at the peak", round(copies, 1)),
            Evidence("memory a fused kernel saves", in_gb(saved), unit="GB"),
        ]
        return ev, (
            f"memory: {gb(levels['peak'])} peak − {gb(levels['floor'])} floor = {gb(transient)} of attention "
            f"transients (≈ {copies:.1f} copies of the {gb(s.nbytes)} score matrix), a fused kernel keeping "
            f"{gb(fused)} (output + log-sum-exp): ≈ {gb(saved)} saved"
        )
    saved = 2 * s.nbytes
    return (
        [Evidence("memory a fused kernel saves (at least)", in_gb(saved), unit="GB")],
        f"memory: no allocator events, so at least the scores and the probabilities, 2 × {gb(s.nbytes)}",
    )


def _head_dims(ops, s: ScoreMatrix) -> tuple[int, int]:
    """D (q @ kᵀ inner dim) and Dv (probabilities @ v output dim) from the matmuls around the scores."""
    d = dv = 0
    mm = ops[ops["name"].isin(SCORE_MATMULS)]
    for name, dims_raw, types in zip(mm["name"], mm["input_dims"], mm["input_types"]):
        args = [a for a in shapes(dims_raw, types) if a is not None]
        if name == "aten::baddbmm":
            args = args[1:]
        if len(args) < 2 or len(args[0].dims) < 2 or len(args[1].dims) < 2:
            continue
        a, b = args[0].dims, args[1].dims
        if (a[-2], b[-1]) == (s.tq, s.tk):
            d = d or a[-1]
        elif a[-2:] == (s.tq, s.tk):
            dv = dv or b[-1]
    return d or dv or 64, dv or d or 64


def _time_saved(ctx, t, s: ScoreMatrix):
    """(speedup, recoverable µs, evidence, basis) for replacing the score chain by a fused kernel, or None."""
    m = ctx.metrics
    spec = m.device_spec
    if spec is None or not ctx.trace.has_gpu_activity:
        return None
    work = m.op_work
    if not len(work):
        return None
    chain = work[[_in_chain(w, s) for w in work["work"]]]
    n = max(len(m.steps.windows), 1)
    chain_us = float(chain["kernel_us"].sum()) / n
    step_us = m.budget.step_us
    if chain_us <= 0 or step_us <= 0:
        return None
    d, dv = _head_dims(ctx.trace.ops, s)
    causal = s.mask is not None and s.tq == s.tk
    flops = 2.0 * s.batch_heads * s.tq * s.tk * (d + dv) * (0.5 if causal else 1.0)
    rate = t["flash_efficiency"] * (spec.achievable_tflops.get("bf16") or spec.achievable_tflops.get("fp16") or 0)
    if rate <= 0:
        return None
    # two matmuls per attention call, counted over the window and not rounded per step, so the estimate
    # does not hang on the unit (a step cut shorter than one iteration holds half a call)
    calls = max(len(chain[chain["kind"] == "gemm"]) / 2, 1) / n
    fused_us = calls * flops / (rate * 1e12) * 1e6
    after = max(step_us - chain_us + fused_us, fused_us, 1e-9)
    ev = [
        Evidence("attention chain kernel time per step", round(chain_us, 1), unit="µs"),
        Evidence.share("attention chain share of the step", min(chain_us / step_us, 1.0)),
        Evidence("fused kernel estimate per step", round(fused_us, 1), unit="µs"),
    ]
    half = " (causal half)" if causal else ""
    basis = (
        f"time: the chain's kernels take {chain_us:,.0f} µs per step; a fused kernel does "
        f"{flops / 1e9:,.1f} GFLOP{half} per call × {calls:g} at {percent(t['flash_efficiency'])} × "
        f"{rate / t['flash_efficiency']:,.0f} TFLOP/s = {fused_us:,.0f} µs; "
        f"step {step_us:,.0f} → {after:,.0f} µs ({m.budget.basis})"
    )
    return step_us / after, max(chain_us - fused_us, 0.0), ev, basis


def _in_chain(work, s: ScoreMatrix) -> bool:
    """True for an op instance that reads or writes a [..., Tq, Tk] tensor (or a matmul producing one)."""
    if work is None:
        return False
    if work.kind == "gemm" and (work.m, work.n) == (s.tq, s.tk):
        return True
    return any(len(x.shape) >= 2 and tuple(x.shape[-2:]) == (s.tq, s.tk) for x in work.inputs + work.outputs)


def _sweep_evidence(sweep, t) -> list[Evidence]:
    fit, time_fit, wall = sweep.memory_fit, sweep.time_fit, sweep.wall
    ev = [
        Evidence(
            f"peak memory growth exponent over {sweep.param} ({fit.n} points)",
            round(fit.exponent, 2),
            ">=",
            t["quadratic_exponent"],
        )
    ]
    if time_fit is not None:
        ev.append(Evidence(f"step time growth exponent over {sweep.param}", round(time_fit.exponent, 2)))
    if wall is not None:
        ev.append(Evidence(f"out of memory from {sweep.param}", str(wall.value)))
    reach = sweep.predicted_wall()
    if reach is not None and sweep.device_total:
        ev.append(Evidence(f"{sweep.param} at which the fit reaches the {gb(sweep.device_total)} device", round(reach)))
    return ev


def _sweep_basis(sweep) -> str:
    fit = sweep.memory_fit
    ok = sweep.ok_points
    largest = max(ok, key=lambda p: p.x or 0) if ok else None
    text = (
        f"sweep: peak allocated ≈ {fit.coefficient:.3g} × {sweep.param}^{fit.exponent:.2f} "
        f"(log-log least squares over {fit.n} points, r² {fit.r2:.3f})"
    )
    if largest is not None and largest.peak_allocated:
        smallest = min((p for p in ok if p.x and p.peak_allocated), key=lambda p: p.x)
        linear = smallest.peak_allocated * largest.x / smallest.x
        text += (
            f"; at {sweep.param}={largest.value} the peak was {gb(largest.peak_allocated)}, where linear growth "
            f"from the smallest point would give ≈ {gb(linear)}"
        )
    return text


def _flash_code() -> str:
    return (
        "import torch.nn.functional as F\n"
        "from torch.nn.attention import SDPBackend, sdpa_kernel\n\n"
        "# instead of softmax(q @ k.transpose(-2, -1) / sqrt(d) + mask) @ v:\n"
        "# only the fused kernels: no silent fallback to the math path\n"
        "with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]):\n"
        "    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # no [T, T] mask tensor either"
    )


def _flex_code() -> str:
    return (
        "from torch.nn.attention.flex_attention import create_block_mask, flex_attention\n\n"
        "def sliding_causal(b, h, q_idx, kv_idx):  # any mask rule, evaluated per tile\n"
        "    return (q_idx >= kv_idx) & (q_idx - kv_idx < 4096)\n\n"
        "block_mask = create_block_mask(sliding_causal, B=None, H=None, Q_LEN=T, KV_LEN=T)\n"
        "# fully masked tiles are skipped\n"
        "out = torch.compile(flex_attention)(q, k, v, block_mask=block_mask)"
    )
