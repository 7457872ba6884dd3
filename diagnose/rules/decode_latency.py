"""decode-latency: every generated token streams all the weights from HBM.

**Signal.** Autoregressive decode multiplies a handful of rows (one token per sequence) by every
weight matrix of the model. Such GEMV-shaped products do about one FLOP per weight byte, two
orders of magnitude below the GPU's ridge point, so each step costs at least *all weight bytes
÷ HBM bandwidth*, however good the kernels are. From the recorded shapes (metrics/work.py) the
rule finds the 2-D matmuls `x @ W` (`mm`, `addmm`, `linear`, `matmul`...) whose activation has
at most `max_rows` rows (tokens × sequences) against a wider weight W (the second operand, as
nn.Linear uses them). It adds up
their kernel time, their weight bytes per step and the bandwidth they reach, and fires when they
take at least `min_weight_share` of the step. Batched products (`bmm`, attention over a KV cache)
are not weights and are left out: quantizing weights does not shrink them (kv-quantization does).
A step replayed from a CUDA graph records no shapes. With Nsight Compute measurements attached
(`--ncu`, `--ncu-csv`), the matmul kernels that Nsight Compute classes memory-bound (or that cuBLAS
names `gemv`) are the weight streaming, and their measured DRAM bytes stand for the weight bytes
(the activations of a few rows are a rounding error); bits per weight come from the kernel names
(fp8/int4 kernels), else 16. Rows per token are then unknown, so the tokens/s evidence is left
out. A capture made by diagnose knows the weights it held (meta.json's census) and weighs those
instead. A trace file alone with neither still shows cuBLAS's own choice: its JIT kernels name their
output tile (`nvjet_sm90_tst_128x8_…`), and a tile at most `max_rows` thin is picked for a product
with that few rows. When such kernels run most of the unshaped matmul time, their median kernel is
at least `min_tile_kernel_us` (shorter ones are paced by latency, not bytes: decode_graphed's 3–4 µs
kernels) and the matmuls take `min_weight_share` of the step, they are the weight streaming; their
bytes are taken as the most they could read (kernel time × achievable bandwidth), so the W4A16
estimate is a floor (gemv_decode_1tok_graphed's trace file alone: 1.43×, measured 1.59×; a fresh
H100 capture of the graphed 8-layer decode, 2026-12-06: 1.46× from its trace file alone, at most
2.94 GB, against 1.49× from the capture folder's 2.82 GB census). Otherwise
the rule is skipped and says that `--ncu` would answer it.

**Thresholds.** `max_rows` 16: at 16 rows a bf16 product does 16 FLOP per weight byte, still
≥ 10× below the H200's bf16 ridge (790 TFLOP/s ÷ 4.3 TB/s ≈ 184 FLOP/B), so weight streaming
dominates and 4-bit weight kernels (Marlin-class) keep close to their 4× gain up to about that
batch. `min_weight_share` 30 %: on the H200 captures the weight-streaming GEMVs take 73 % of the
1-token step (gemv_decode_1tok: 2.82 GB per step at 3.8 TB/s) and 78 % of the 4-token step,
but 3.6 % of the tiny eager decode (decode_eager: 42 MB of fp16 weights in a 2.7 ms launch-bound
step; W4A16 could save at most 3 % there, the launch-overhead rule's CUDA graphs ≈ 10×); the
512-token prefill has no GEMV-shaped product at all (gemv_prefill_512: rows = 512, compute-bound).
Below 30 % the best W4A16 can do is < 1.3×. Severity is high from `high_share` (60 %).

**Fix.** `w4a16`: 4-bit weights with 16-bit activations (AWQ/GPTQ checkpoints run by
Marlin-class kernels, e.g. in vLLM or torchao `int4_weight_only`) cut weight bytes per token
about 3.9× (4 bits + a 16-bit scale per group of 128 = 4.125 bits). `speculative-decoding`: a
small draft model proposes `draft_tokens` tokens and one pass of the big model verifies them all;
the pass reads the same weights, so it costs about one decode step. Measured on the H200:
verifying 4 tokens took 916.7 µs against 1,008.5 µs for one (gemv_decode_4tok vs
gemv_decode_1tok), so the ceiling at full acceptance is 4 × 1,008.5 ÷ 916.7 ≈ 4.4× tokens/s.

**Estimate.** est_speedup is for `w4a16`: step after = step − GEMV time + 4-bit weight bytes ÷
(`w4_bandwidth_share` × achievable bandwidth), the rest of the step unchanged. The share is what
PyTorch's own int4 weight-only kernels (tinygemm, `torch._weight_int4pack_mm`, which torchao's
`int4_weight_only` uses) reach on a batch-1 decode: 39 % of the achievable bandwidth on the H200
(gemv_decode_1tok_w4a16, a calibration capture: 0.727 GB of 4-bit weights in 437 µs of kernels,
1.66 TB/s), far below the 3.8 TB/s of the bf16 GEMVs they replace, so a 3.9× cut in bytes buys
about 1.4× on gemv_decode_1tok. The fix text also gives the ceiling with kernels that stream 4-bit
weights as fast as today's stream 16-bit ones (Marlin-class). GEMV time is the kernels' share of
GPU busy time applied to the unprofiled step, so a graph replay whose profiled kernels run a little
longer than the unprofiled step is not booked above 100 %. Held out: the graphed 7B-width decode
(gemv_decode_1tok_graphed, 345 µs) measured 217 µs with tinygemm int4 weights
(gemv_decode_1tok_w4a16_graphed): 1.59× against the estimate of 1.82×. The tokens/s ceiling at full
bandwidth is tokens per step × achievable bandwidth ÷ weight bytes per step. The
speculative-decoding gain is given in its fix text: at most `draft_tokens`× at full acceptance,
(1 − a^(k+1)) ÷ (1 − a) tokens per pass at acceptance rate a (`acceptance` 0.7 → ≈ 2.8 with
k = 4) before the draft model's own cost.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from diagnose.base.devices import DeviceSpec
from diagnose.rulebook.engine import (
    NO_STEP_WORK,
    Quiet,
    Rule,
    Skip,
    Threshold,
    time_base,
    top_offenders,
    severity_ladder,
)
from diagnose.model.findings import Evidence, Finding, Fix, Offender
from diagnose.model.fixes import fix
from diagnose.metrics.budget import StepBudget
from diagnose.trace.names import name_test
from diagnose.vocabulary.dtypes import dtype_bytes, float_bits
from diagnose.vocabulary.kernels import is_gemv, tile_rows, weight_bits
from diagnose.vocabulary.ops import GEMM_OPS
from diagnose.vocabulary.units import percent

WEIGHT_OPS = GEMM_OPS - {"aten::bmm", "aten::baddbmm", "aten::addbmm"}
W4_BITS = 4.125


class DecodeLatency(Rule):
    """Weight-streaming GEMV decode → W4A16 weights and speculative decoding."""

    id = "decode-latency"
    order = 60
    title = "Decode latency: every token streams all the weights from HBM"
    cheat_sheet = {
        "bottleneck": "autoregressive decode latency",
        "signal": "low tokens/s per user because every token reads all weights",
        "fix": "W4A16 quantization (AWQ / Marlin kernels) + speculative decoding",
        "impact": "2–3× faster generation at the same quality",
    }
    needs = ("gpu", "steps", "device-peaks", "device-bandwidth")
    thresholds = (
        Threshold(
            "min_weight_share",
            0.30,
            "fraction",
            "fire when GEMV-shaped weight matmuls take at least this share of the step",
        ),
        Threshold("max_rows", 16, "rows", "a matmul with at most this many rows against its weight is GEMV-shaped"),
        Threshold("high_share", 0.60, "fraction", "weight-streaming share at which severity is high"),
        Threshold(
            "min_census_bandwidth_share",
            0.5,
            "fraction",
            "without shapes (a graph replay), fire only when the capture's weight bytes ÷ the step time reach "
            "this share of the achievable bandwidth: the step is then paced by reading the weights",
        ),
        Threshold(
            "w4_bandwidth_share",
            0.39,
            "fraction",
            "share of the achievable bandwidth that PyTorch's int4 weight-only kernels (tinygemm) reach on a "
            "batch-1 decode, in the W4A16 estimate (calibrated: gemv_decode_1tok_w4a16)",
        ),
        Threshold(
            "min_tile_kernel_us",
            10.0,
            "µs",
            "without shapes or capture metadata, thin-tile matmuls count as weight streaming only when their median "
            "kernel runs at least this long: shorter ones are paced by latency, not by bytes",
        ),
        Threshold("draft_tokens", 4, "tokens", "draft tokens per verification pass in the speculative estimate"),
        Threshold("acceptance", 0.7, "fraction", "draft-token acceptance rate assumed in the speculative estimate"),
    )

    def check(self, ctx, t):
        """Find the GEMV-shaped weight matmuls and weigh them against the step."""
        work = ctx.step_work()
        if work is None:
            return Quiet(NO_STEP_WORK)
        streaming = _measure(ctx, t, *work)
        if not isinstance(streaming, _Streaming):
            return streaming
        return _decide(streaming, t) or self._finding(streaming, t)

    def _finding(self, s: "_Streaming", t) -> Finding:
        """The finding: weight bytes, bandwidth, tokens/s ceilings and the W4A16 / speculative estimates."""
        e = _estimate(s, t)
        today = "" if s.bytes_bound else f" (today's kernels: {e.tbps:.2f} TB/s)"  # bytes assumed: no bandwidth
        return Finding(
            rule=self.id,
            severity=severity_ladder(s.share, t, medium=None),
            title=self.title,
            evidence=_evidence(s, e, t),
            offenders=_offenders(s.gemv, s.n),
            fixes=_fixes(s, e, t),
            est_speedup=round(e.speedup, 2),
            recoverable_us=round(s.step_us - e.after, 2),
            basis=(
                f"W4A16: step − GEMV time + 4-bit weight bytes ÷ int4 kernel bandwidth = {s.step_us:,.0f} − "
                f"{s.gemv_us:,.0f} + {e.w4_bytes / 1e9:.3f} GB ÷ {e.w4_tbps:.2f} TB/s "
                f"({percent(t['w4_bandwidth_share'])} "
                f"of achievable, what PyTorch's tinygemm int4 kernels reached on the H200) = {e.after:,.0f} µs per "
                f"step{today}; {s.bytes_basis}; "
                f"{time_base(s.budget)}; "
                f"{s.spec.name}: {s.spec.source}"
            ),
            why=_WHY,
        )


_WHY = (
    "Generating a token multiplies one row per sequence by every weight matrix. That is a "
    "matrix-vector product: each weight byte is used for about one multiply-add, so the GPU spends "
    "the step reading weights from HBM while its math units idle. Fewer bytes per weight (4-bit) "
    "or more tokens per read of the weights (speculative decoding, larger batches) are the only ways "
    "to go faster."
)


@dataclasses.dataclass(frozen=True)
class _Estimate:
    """The W4A16 and speculative estimates and today's kernels' bandwidth (what `_estimate` found)."""

    w4_tbps: float  # int4 kernels' bandwidth: w4_bandwidth_share of the achievable
    w4_bytes: float  # weight bytes per step at W4_BITS
    after: float  # µs per step with W4A16 weights at `w4_tbps`
    speedup: float  # step ÷ `after`
    best: float  # the ceiling: 4-bit kernels as efficient as today's, never below `speedup`
    per_pass: float  # tokens accepted per speculative verification pass
    tbps: float  # bandwidth of today's GEMV kernels
    ref: float  # the bandwidth `tbps` is shown against: achievable, else the datasheet peak
    ref_name: str


def _estimate(s: "_Streaming", t) -> _Estimate:
    """W4A16: step − GEMV time + 4-bit weight bytes ÷ int4 kernel bandwidth (never slower than today's
    kernels); the tokens per speculative pass; the bandwidth today's GEMV kernels reach."""
    bw = s.spec.achievable_tbps
    w4_tbps = t["w4_bandwidth_share"] * bw
    w4_bytes = s.weight_bytes * W4_BITS / s.bits
    # never slower than today's kernels (a zero share means no faster int4 kernel: today's time)
    w4_us = min(w4_bytes / w4_tbps / 1e6, s.gemv_us) if w4_tbps > 0 else s.gemv_us
    same_share_us = s.gemv_us * W4_BITS / s.bits  # 4-bit kernels as efficient as today's (Marlin-class)
    after = max(s.step_us - s.gemv_us + w4_us, 1e-9)
    speedup = s.step_us / after
    best = max(s.step_us / max(s.step_us - s.gemv_us + same_share_us, 1e-9), speedup)  # a ceiling, never below
    k, a = t["draft_tokens"], t["acceptance"]
    gemv = s.gemv
    moved = gemv["bytes"] if _known(gemv, "bytes") else gemv["weight_bytes"]
    tbps = moved.sum() / gemv["kernel_us"].sum() / 1e6
    # a kernel can beat the achievable figure (a copy benchmark) but never the datasheet peak
    ref, ref_name = (bw, "achievable") if tbps <= bw else (s.spec.hbm_tbps, "datasheet peak")
    return _Estimate(
        w4_tbps=w4_tbps,
        w4_bytes=w4_bytes,
        after=after,
        speedup=speedup,
        best=best,
        per_pass=(1 - a ** (k + 1)) / (1 - a) if a < 1 else k + 1,
        tbps=tbps,
        ref=ref,
        ref_name=ref_name,
    )


def _evidence(s: "_Streaming", e: _Estimate, t) -> list[Evidence]:
    """The GEMV share against its threshold, the rows (or how the matmuls were recognised), the weight
    bytes and bandwidths, and with rows the tokens/s now and at the ceilings."""
    bw = s.spec.achievable_tbps
    evidence = [
        Evidence.share("time in GEMV-shaped weight matmuls", s.share, ">=", t["min_weight_share"]),
        *(
            [Evidence("rows per weight matmul (tokens × sequences)", s.tokens, "<=", t["max_rows"])]
            if s.tokens
            else [Evidence(s.recognised_by, "kernel names" if s.bytes_bound else "measured")]
        ),
    ]
    if s.bytes_bound:  # the bandwidths would only restate the assumption
        return evidence + [
            Evidence(
                "weight bytes read per step, at most (not recorded: kernel time × achievable bandwidth)",
                round(s.weight_bytes / 1e9, 3),
                unit="GB",
            )
        ]
    evidence += [
        Evidence("weight bytes read per step", round(s.weight_bytes / 1e9, 3), unit="GB"),
        Evidence.share(
            f"weight bytes ÷ step time ({s.weight_bytes / s.step_us / 1e6:.2f} TB/s), share of the achievable "
            f"{bw:.2f} TB/s",
            s.weight_bytes / s.step_us / 1e6 / bw,
        ),
        Evidence.share(f"bandwidth of the GEMV kernels (share of {e.ref_name})", e.tbps / e.ref),
    ]
    if s.tokens:
        ceiling = s.tokens * bw * 1e12 / s.weight_bytes if s.weight_bytes else math.inf
        evidence += [
            Evidence("tokens/s now (rows per step ÷ step time)", round(s.tokens / s.step_us * 1e6, 1)),
            Evidence(f"tokens/s ceiling at full bandwidth ({bw:.3g} TB/s, {s.bits}-bit weights)", round(ceiling, 1)),
            Evidence("tokens/s ceiling with 4-bit weights", round(ceiling * s.bits / W4_BITS, 1)),
        ]
    return evidence


def _fixes(s: "_Streaming", e: _Estimate, t) -> list[Fix]:
    """W4A16 with its estimate and ceiling, then speculative decoding with its tokens per pass."""
    weights_gb = s.weight_bytes / 1e9
    upto = "at most " if s.bytes_bound else ""
    k, a = t["draft_tokens"], t["acceptance"]
    rows = f"k × {s.tokens:.0f} rows" if s.tokens else "k rows per sequence"
    return [
        fix(
            "w4a16",
            code=_w4a16_code(),
            how=(
                f"Store the weights in 4 bits ({W4_BITS} bits with group-128 scales) and run Marlin-class "
                f"W4A16 kernels: {upto}{weights_gb:.2f} GB → {s.weight_bytes * W4_BITS / s.bits / 1e9:.2f} GB "
                f"per step, est. {'at least ' if s.bytes_bound else ''}{e.speedup:.2f}× ({s.step_us:,.0f} → {e.after:,.0f} µs per step) with PyTorch's "
                f"int4 kernels at {e.w4_tbps:.2f} TB/s, up to {e.best:.2f}× with kernels that stream 4-bit weights "
                "as fast as today's kernels stream these; quality close to 16-bit with AWQ/GPTQ calibration."
            ),
        ),
        fix(
            "speculative-decoding",
            code=_speculative_code(),
            how=(
                f"A draft model proposes k = {k:.0f} tokens and one pass of this model verifies them; the pass "
                f"reads the same {upto}{weights_gb:.2f} GB of weights, so while {rows} stay "
                f"GEMV-shaped it costs about one step (measured on the H200: 4 tokens 916.7 µs vs 1 token "
                f"1,008.5 µs). Up to {k:.0f}× tokens/s at full acceptance; ≈ {e.per_pass:.1f} tokens per pass "
                f"at {percent(a)} acceptance, before the draft model's own cost. Combines with W4A16."
            ),
        ),
    ]


@dataclasses.dataclass
class _Streaming:
    """The weight-streaming matmuls of the measured steps (what `_measure` found)."""

    spec: DeviceSpec
    budget: StepBudget
    step_us: float
    n: int
    gemv: pd.DataFrame  # op instances, with `weight_bytes`
    gemv_us: float  # per step
    share: float  # of the step
    weight_bytes: float  # per step
    tokens: float | None  # rows per matmul; None when no shapes were recorded (measured bytes)
    bits: int  # bits per weight now
    bytes_basis: str
    recognised_by: str = ""
    from_census: bool = False  # weight bytes from the capture's census, not from shapes or Nsight Compute
    bytes_bound: bool = False  # weight bytes not recorded: an upper bound from kernel time (`_from_tiles`)


def _measure(ctx, t, ops: pd.DataFrame, step_us: float, n: int) -> "_Streaming | Quiet | Skip":
    """The GEMV-shaped weight matmuls: from recorded shapes, else from Nsight Compute's measured bytes."""
    m = ctx.metrics
    gemm = ops[ops["kind"] == "gemm"]
    weights = gemm[gemm["op_name"].isin(WEIGHT_OPS) & gemm["m"].notna() & gemm["n"].notna()]
    gemm_share = m.per_step(gemm["kernel_us"].sum()) / step_us
    if not len(weights):
        return _unshaped(ctx, t, gemm, gemm_share, step_us, n)
    rows = weights["m"].astype(float)
    gemv = weights[(rows <= t["max_rows"]) & (weights["n"].astype(float) > rows)].copy()
    if not len(gemv):
        return Quiet(
            f"no GEMV-shaped weight matmul: the smallest has {rows.min():.0f} rows > "
            f"{t['max_rows']:.0f} (compute-shaped, e.g. prefill or training)"
        )
    gemv["rows"] = gemv["m"].astype(float)
    gemv["weight_bytes"] = _weight_bytes(gemv)
    return _streaming(
        m,
        step_us,
        n,
        gemv,
        float(gemv["rows"].mode().iloc[0]),
        8 * dtype_bytes(gemv["dtype"].mode().iloc[0], 2),
        "weight bytes estimated from shapes, kernel time measured",
    )


def _unshaped(ctx, t, gemm: pd.DataFrame, gemm_share: float, step_us: float, n: int) -> "_Streaming | Quiet | Skip":
    """No weight matmul with recorded shapes: Nsight Compute's measured weight-streaming kernels, else
    the capture's weight bytes against the matmuls recorded without shapes, else Skip or Quiet."""
    m = ctx.metrics
    measured = _measured_streaming(gemm)
    if len(measured):
        return _streaming(
            m,
            step_us,
            n,
            measured,
            None,
            _bits_from_names(measured),
            "weight bytes = DRAM bytes measured by Nsight Compute (no shapes recorded), kernel time measured",
            f"weight-streaming matmul kernels recognised by Nsight Compute "
            f"({len(measured) / n:.0f} per step: matmul kernels whose DRAM traffic limits them)",
        )
    unshaped = gemm[gemm["flops"].isna()]
    if len(unshaped) and unshaped["bound"].notna().all():
        classes = ", ".join(sorted(set(unshaped["bound"])))
        return Quiet(
            f"matmul kernels take {percent(gemm_share)} of the step, recorded without shapes; Nsight "
            f"Compute measured them ({classes}): none streams weights from DRAM"
        )
    held = _census_weights(ctx)
    if held is not None and len(unshaped):
        return _from_census(ctx, m, step_us, n, unshaped, *held)
    tiles = _tiled(m, t, unshaped, gemm_share, step_us, n)
    if tiles is not None:
        return tiles
    if gemm_share >= t["min_weight_share"]:
        return Skip(
            f"matmul kernels take {percent(gemm_share)} of the step but {_why_no_shapes(gemm)}, "
            "so weight bytes per token cannot be estimated (a capture made by diagnose knows the "
            "model's parameter bytes)"
        )
    return Quiet(f"no weight matmul with recorded shapes (matmul kernels {percent(gemm_share)} of the step)")


def _census_weights(ctx) -> tuple[float, int, str, str] | None:
    """(bytes, bits per weight, dtype, what they are) of the weights the capture child found alive during the
    steps (meta.json `workload`): the models' parameters, else every live GPU tensor; None for a trace from
    elsewhere, a CPU run or integer weights."""
    census = (ctx.trace.capture or {}).get("workload") or {}
    if census.get("device") != "cuda":
        return None
    for total_key, dtypes_key, what in (
        ("parameter_bytes", "dtypes", "parameters the capture's models hold"),
        (
            "tensor_bytes",
            "tensor_dtypes",
            "GPU tensors alive during the steps (no nn.Module holds parameters: "
            "weights and caches together, an upper bound on the weights)",
        ),
    ):
        total, dtypes = census.get(total_key), census.get(dtypes_key) or {}
        if isinstance(total, (int, float)) and total > 0 and dtypes:
            dtype = max(dtypes, key=lambda d: dtypes[d])
            bits = float_bits(dtype)  # torch's dtype names, as the capture's census writes them
            if bits is None:
                return None  # integer weights: already quantized, or not weights
            return float(total), bits, dtype, what
    return None


def _from_census(ctx, m, step_us, n, unshaped: pd.DataFrame, weight_bytes: float, bits: int, dtype: str, what: str):
    """Matmuls recorded without shapes (a CUDA-graph replay) weighed against the bytes of the parameters the
    capture's models hold: when the step reads them all, those matmuls stream the weights."""
    kernel_us = m.per_step(unshaped["kernel_us"].sum())
    spec = m.device_spec
    tbps = weight_bytes / max(kernel_us, 1e-9) / 1e6
    if tbps > spec.hbm_tbps:
        return Quiet(
            f"the {what} come to {weight_bytes / 1e9:.2f} GB of {dtype}, but the step's matmul kernels "
            f"run {kernel_us:,.0f} µs: reading them all would take {tbps:.1f} TB/s, above the "
            f"{spec.hbm_tbps:g} TB/s peak, so the step does not read every weight (not a decode of this model)"
        )
    gemv = unshaped.copy()
    gemv["weight_bytes"] = weight_bytes * n / len(gemv)  # per step: the parameters, read once
    census = (ctx.trace.capture or {}).get("workload") or {}
    models = ", ".join(str(x.get("class")) for x in (census.get("models") or [])[:3])
    return _streaming(
        m,
        step_us,
        n,
        gemv,
        None,
        bits,
        from_census=True,
        bytes_basis=f"weight bytes = the {weight_bytes / 1e9:.3f} GB of {dtype} {what}"
        f"{' (' + models + ')' if models and what.startswith('param') else ''}, each read once per "
        "step (meta.json workload); kernel time measured",
        recognised_by=f"matmul kernels recorded without shapes (CUDA-graph replay: {len(gemv) / n:.0f} "
        "per step), weighed against the capture's weight bytes",
    )


def _tiled(m, t, unshaped: pd.DataFrame, gemm_share: float, step_us: float, n: int) -> "_Streaming | Quiet | None":
    """Matmuls replayed without shapes on thin cuBLAS tiles (`_thin_tiles`) that take `min_weight_share` of
    the step: the weight streaming (`_from_tiles`), or Quiet when their kernels are too short to be paced
    by bytes; None when there are none."""
    thin = _thin_tiles(unshaped, t["max_rows"])
    if thin is None or gemm_share < t["min_weight_share"]:
        return None
    rows, median_us = thin
    if median_us < t["min_tile_kernel_us"]:
        return Quiet(
            f"matmul kernels replayed without shapes take {percent(gemm_share)} of the step on {rows}-row cuBLAS "
            f"tiles, but their median kernel runs {median_us:.1f} µs < {t['min_tile_kernel_us']:g} µs: paced by "
            "latency, not by reading weights (fewer weight bytes would not shorten them)"
        )
    return _from_tiles(m, step_us, n, unshaped, rows)


def _thin_tiles(unshaped: pd.DataFrame, max_rows: float) -> tuple[int, float] | None:
    """(rows, median kernel µs) of the thin cuBLAS tiles (`tile_rows`, at most `max_rows`) when they run most
    of the matmul time recorded without shapes, as a graph-replayed decode step's matrix-vector products do;
    else None."""
    if not len(unshaped):
        return None
    rows = unshaped["kernel"].map(tile_rows)
    thin = rows.notna() & (rows <= max_rows)
    if unshaped.loc[thin, "kernel_us"].sum() < 0.5 * unshaped["kernel_us"].sum():
        return None
    return int(rows[thin].max()), float(unshaped.loc[thin, "kernel_us"].median())


def _from_tiles(m, step_us: float, n: int, unshaped: pd.DataFrame, rows: int) -> _Streaming:
    """Matmuls replayed without shapes whose cuBLAS tiles are `rows` thin, in a trace with no capture metadata:
    GEMV-shaped by cuBLAS's own choice. Their weight bytes were not recorded, so they are taken as the most the
    kernels could read in their time at the achievable bandwidth: the W4A16 estimate is then the least it gives."""
    gemv = unshaped.copy()
    gemv["weight_bytes"] = gemv["kernel_us"].astype(float) * m.device_spec.achievable_tbps * 1e6
    example = next(k for k in gemv["kernel"].astype(str) if tile_rows(k) == rows)
    return _streaming(
        m,
        step_us,
        n,
        gemv,
        None,
        _bits_from_names(gemv),
        bytes_basis=(
            "weight bytes not recorded (a CUDA-graph replay, no capture metadata): at most the kernels' time × "
            f"the achievable {m.device_spec.achievable_tbps:.2f} TB/s, so the W4A16 estimate is the least it gives"
        ),
        recognised_by=(
            f"matmul kernels replayed without shapes on {rows}-row cuBLAS tiles ({example.split('_v_')[0]}…), "
            f"{len(gemv) / n:.0f} per step: GEMV-shaped"
        ),
        bytes_bound=True,
    )


def _streaming(
    m, step_us, n, gemv, tokens, bits, bytes_basis, recognised_by="", from_census=False, bytes_bound=False
) -> _Streaming:
    gemv_us = m.per_step(gemv["kernel_us"].sum())
    busy = m.budget.busy_us
    if busy > 0 and gemv_us > 0:  # profiled kernels can run longer than the unprofiled step holds
        gemv_us = min(gemv_us, step_us * min(1.0, gemv_us / busy))
    return _Streaming(
        spec=m.device_spec,
        budget=m.budget,
        step_us=step_us,
        n=n,
        gemv=gemv,
        gemv_us=gemv_us,
        share=gemv_us / step_us,
        weight_bytes=m.per_step(gemv["weight_bytes"].sum()),
        tokens=tokens,
        bits=bits,
        bytes_basis=bytes_basis,
        recognised_by=recognised_by,
        from_census=from_census,
        bytes_bound=bytes_bound,
    )


def _decide(s: _Streaming, t) -> Quiet | None:
    """Quiet when the weight streaming takes too small a share of the step to be what limits it."""
    bw_share = s.weight_bytes / s.step_us / 1e6 / s.spec.achievable_tbps
    if s.from_census and s.share >= t["min_weight_share"] and bw_share < t["min_census_bandwidth_share"]:
        return Quiet(
            f"matmuls replayed without shapes take {percent(s.share)} of the step, but the "
            f"{s.weight_bytes / 1e6:,.0f} MB the capture's weights come to ÷ the {s.step_us:,.0f} µs step is "
            f"{percent(bw_share)} of the achievable {s.spec.achievable_tbps:.2f} TB/s < "
            f"{percent(t['min_census_bandwidth_share'])}: the step is not paced by reading its weights"
        )
    if s.share >= t["min_weight_share"]:
        return None
    floor_us = s.weight_bytes / s.spec.achievable_tbps / 1e6
    return Quiet(
        f"GEMV-shaped weight matmuls take {percent(s.share)} of the step < {percent(t['min_weight_share'])} "
        f"({s.weight_bytes / 1e6:,.0f} MB of weights per step: {floor_us:,.1f} µs at full bandwidth "
        f"in a {s.step_us:,.0f} µs step); the step is limited elsewhere"
    )


def _measured_streaming(gemm: pd.DataFrame) -> pd.DataFrame:
    """Matmul instances without shapes that Nsight Compute measured streaming DRAM: weight reads.

    A matmul whose measured class is memory-bound moves far more bytes than it does math on: with few
    rows against a large weight, those bytes are the weight itself (the activations are rows × K, a
    rounding error at decode sizes), so its measured DRAM bytes stand for its weight bytes. A
    cuBLAS `gemv` kernel name says the same without a class.
    """
    no_shapes = gemm["flops"].isna() & gemm["dram_bytes"].notna()
    streaming = (gemm["bound"] == "memory-bound") | name_test(gemm["kernel"], is_gemv)
    out = gemm[no_shapes & streaming].copy()
    out["weight_bytes"] = out["dram_bytes"].astype(float)
    out["bytes"] = out["dram_bytes"].astype(float)
    return out


def _bits_from_names(gemv: pd.DataFrame) -> int:
    """Bits per weight the kernels' names tell (fp8 / int4 kernels), else 16 (bf16/fp16, the common case)."""
    said = [b for b in map(weight_bits, pd.unique(gemv["kernel"].astype(str))) if b is not None]
    return min(said, default=16)


def _weight_bytes(gemv: pd.DataFrame) -> np.ndarray:
    """Bytes of each op's weight, the second operand of x @ W (as nn.Linear, mm and addmm are used): K × N,
    the element size worked out once per distinct dtype."""
    dtypes = pd.unique(gemv["dtype"])
    size = gemv["dtype"].map(dict(zip(dtypes, (dtype_bytes(d, 2) for d in dtypes)))).to_numpy(float)
    esize = np.where(gemv["op_name"].isin(["aten::_int_mm", "aten::_scaled_mm"]).to_numpy(bool), 1.0, size)
    return gemv["k"].to_numpy(float) * gemv["n"].to_numpy(float) * esize


def _offenders(gemv: pd.DataFrame, n: int) -> list[Offender]:
    rows = []
    for (op, shapes, kernel), g in gemv.groupby(["op_name", "shapes", "kernel"], dropna=False, sort=False):
        us = float(g["kernel_us"].sum())
        rows.append(
            {
                "op": op,
                "shapes": shapes,
                "kernel": kernel,
                "calls_per_step": round(len(g) / n, 2),
                "us_per_step": round(us / n, 1),
                "weight_mb_per_step": round(float(g["weight_bytes"].sum()) / n / 1e6, 1),
                # bytes moved, where shapes or Nsight Compute say (a graph replay's census or tiles do not)
                "tb_per_s": round(float(g["bytes"].sum()) / us / 1e6, 2) if us and _known(g, "bytes") else None,
            }
        )
    return top_offenders(rows, "op", by="us_per_step")


def _known(frame: pd.DataFrame, column: str) -> bool:
    """True when every row of `frame` has a value in `column`."""
    return column in frame and bool(frame[column].notna().all())


def _w4a16_code() -> str:
    return (
        "# torchao: int4 weight-only (W4A16) on the model's Linear layers\n"
        "from torchao.quantization import quantize_, int4_weight_only\n"
        "quantize_(model, int4_weight_only(group_size=128))\n\n"
        "# serving: load an AWQ/GPTQ checkpoint, vLLM picks Marlin kernels\n"
        '# llm = vllm.LLM(model="...-AWQ", quantization="awq_marlin")'
    )


def _speculative_code() -> str:
    return (
        "# Hugging Face: assisted generation with a small draft model of the same tokenizer\n"
        "out = model.generate(**inputs, assistant_model=draft_model, max_new_tokens=256)\n\n"
        '# vLLM: speculative_config={"model": "draft-model", "num_speculative_tokens": 4}'
    )


def _why_no_shapes(gemm) -> str:
    """Why the matmuls have no usable weight shapes: graph replay, no shapes, or an unmodelled op."""
    ops = sorted({str(o) for o in gemm["op_name"].dropna()} - set(WEIGHT_OPS))
    if ops:
        return f"they come from ops whose weight layout diagnose does not model ({', '.join(ops[:3])})"
    if gemm["op_name"].isna().all():
        return (
            "no CPU op launched them (CUDA-graph replays carry no shapes; `--ncu` measures their DRAM bytes, "
            "which is enough)"
        )
    return "their shapes were not recorded (profile with record_shapes=True)"
