"""memory-bound: chains of unfused elementwise and reduction kernels stream HBM back and forth.

**Signal.** Eager PyTorch runs every pointwise op and reduction as its own kernel, and each one
reads its inputs from HBM and writes its result back. The rule walks the measured steps in GPU
order and collects *chains*: runs of consecutive elementwise / reduction / copy kernels of the
same stream that a compiler has not already fused (Inductor's `triton_*` kernels and
multi-tensor `_foreach` kernels break chains and are never counted). For each chain it estimates
the bytes every kernel moved and the FLOPs it did from the shapes recorded with the launching op
(metrics/work.py), and the *single-pass* bytes: the chain's true inputs and outputs, which is all
a fused kernel has to move. A chain qualifies when it has at least `min_chain_ops` kernels, its
achieved bandwidth (bytes ÷ kernel time) is at least `min_bw_share` of the GPU's achievable HBM
bandwidth, and its arithmetic intensity is below `max_intensity_share` of the FP32 ridge point
(the kernels wait on memory, not on math). It fires when fusing the qualifying chains would save
at least `min_saving_share` of the step. This is the trace-only stand-in for Nsight Compute's
"DRAM throughput > 75 %, SM throughput < 25 %" reading. With Nsight Compute measurements attached
(`--ncu`, `--ncu-csv`: diagnose/ncu/), a chain whose kernels were all measured uses them instead:
its bytes are the measured DRAM bytes and its bandwidth share is the measured DRAM throughput
(`dram__throughput`, weighted by kernel time, × the datasheet HBM peak ÷ achievable); the
evidence and the basis say which numbers were measured. A CUDA-graph replay records no shapes:
without measurements the rule is skipped (saying `--ncu` would measure the bytes); with them, the
single pass is taken as the measured bytes of each chain's first and last kernels (what a fused
kernel must read and write). On swiglu_eager with its kernel-to-op links removed (as a replay
records them) that predicts 5.3× against 4.4× from the shapes and 4.28× measured: it errs high
when the chain reads external inputs in the middle (a weight).

**Thresholds.** `min_bw_share` 0.5: on the H200 swiglu_eager capture the ten-kernel
SwiGLU + RMSNorm chain moves ≈ 2.7 GB per step at 2.98 TB/s (69 % of the 4.3 TB/s achievable),
its kernels between 1.6 and 4.3 TB/s, while the best chains of the small-kernel captures reach
0 % (decode_eager: batch-1 vectors, latency-bound, the launch-overhead rule's case) to 19 %
(sync_item: a 256×1024 fp32 training MLP), so half of the achievable bandwidth separates
"streaming HBM" from "waiting on latency" with a wide margin on both sides.
`max_intensity_share` 0.25 of the FP32 ridge (≈ 3 FLOP/byte on the H200): pointwise chains sit
at 0.1–0.5 FLOP/byte. `min_saving_share` 10 %: below that the change is hardly worth a compile
step; the eager SwiGLU chain (77 % of its step) is far above, the fp32 conv-net training
capture's chains (bias-add → ReLU → pool and their backward at 3.1–3.8 TB/s) are 14 % of the
5.5 ms its GPU needs but below 10 % of the steps its DataLoader sets (host_loader_workers, 26.9 ms
a step on average; host_loader_inline, 0.7 % of a 110 ms step). `min_chain_ops` 2: one kernel has
nothing to fuse with. Severity is low below `medium_share` (a saving of 25 %, 1.33×), medium from
it, high from `high_share` (50 %, 2×): swiglu_eager (77 %) is high, tv_resnet50_channels_last low.

**Fix.** `torch-compile`: `torch.compile` (Inductor) fuses the chain into one or two Triton
kernels that read the inputs and write the outputs once; `triton-kernel`: a hand-written Triton
kernel can also keep a whole row on chip so that a reduction followed by a broadcast (RMSNorm,
softmax) reads its inputs only once. `bf16-tensor-cores` (bf16 autocast) comes third when at least
`min_fp32_chain_share` of the chains' time is in fp32 ops and the step's matmuls are not already in
bf16/fp16 (then its fp32 ops are what autocast keeps in fp32): the same kernels move half the bytes,
est. step ÷ (step − fp32 chain time ÷ 2), given in its text (conv_nchw: 1.17×).

**Estimate.** fused chain time = single-pass bytes ÷ achievable HBM bandwidth, where single-pass
bytes = the chain's external inputs (inputs no earlier kernel of the chain produced, matched by
shape and dtype) + its final outputs (outputs no later kernel consumes) + one more read of the
inputs when a reduction's result is broadcast back over them (what Inductor's looped reductions
do: by this count the fused swiglu_compiled kernel moves 587 MB in 141.6 µs, 4.1 TB/s = 96 % of
achievable).
Estimated step = step − Σ chain time + Σ fused time + `fused_call_us` (the host cost, once per
step, of entering compiled code: 215.0 µs unprofiled step − 141.6 µs kernel − 13.8 µs that the
eager step spends outside kernels: 73 µs on swiglu_compiled, a calibration capture, rounded to 70 µs by
benchmarks/calibrate.py). On swiglu_eager this predicts
≈ 4.4× against the 4.28× measured (919.8 → 215.0 µs). Bytes and FLOPs are estimated from
shapes unless Nsight Compute measured the bytes (its rows for swiglu_eager: 61.5 % DRAM
throughput over the chain, i.e. 2.95 TB/s = 69 % of achievable, the same as the estimate).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from itertools import repeat

import numpy as np
import pandas as pd

from diagnose.base.devices import DeviceSpec
from diagnose.rulebook.engine import (
    NO_STEP_WORK,
    Quiet,
    Rule,
    Skip,
    Threshold,
    severity_ladder,
    time_base,
    top_offenders,
)
from diagnose.model.findings import Evidence, Finding, Fix, Offender
from diagnose.model.fixes import comment, fix
from diagnose.vocabulary.dtypes import HALF_PRECISIONS, precision
from diagnose.vocabulary.kernels import MEMORY_KINDS
from diagnose.metrics.budget import StepBudget
from diagnose.metrics.work import best_bytes
from diagnose.vocabulary.units import percent


class MemoryBound(Rule):
    """Unfused pointwise/reduction chains at HBM bandwidth → torch.compile / Triton fusion."""

    id = "memory-bound"
    order = 40
    title = "Memory-bound chains: unfused elementwise and reduction kernels round-trip through HBM"
    cheat_sheet = {
        "bottleneck": "memory-bandwidth-bound ops",
        "signal": "low SM throughput (< 25%) with high HBM throughput (> 75%) in Nsight Compute",
        "fix": "fuse pointwise/reduction ops with torch.compile or a Triton kernel",
        "impact": "2–4× on those ops by removing intermediate round-trips to HBM",
    }
    needs = ("gpu", "steps", "device-peaks", "device-bandwidth")
    thresholds = (
        Threshold(
            "min_saving_share",
            0.10,
            "fraction",
            "fire when fusing the chains would save at least this share of the step",
        ),
        Threshold(
            "min_bw_share",
            0.5,
            "fraction",
            "a chain counts when its achieved bandwidth is at least this share of achievable HBM",
        ),
        Threshold(
            "max_intensity_share",
            0.25,
            "fraction",
            "a chain counts when its FLOP/byte is below this share of the FP32 ridge point",
        ),
        Threshold("min_chain_ops", 2, "kernels", "fewest unfused kernels in a chain"),
        Threshold("fused_call_us", 70.0, "µs", "host cost per step of entering compiled (fused) code"),
        Threshold(
            "min_fp32_chain_share",
            0.5,
            "fraction",
            "share of the chains' time in fp32 ops from which bf16 (half the bytes) is named as a fix",
        ),
        Threshold("medium_share", 0.25, "fraction", "saving share at which severity is medium (low below)"),
        Threshold("high_share", 0.5, "fraction", "saving share at which severity is high"),
    )

    def check(self, ctx, t):
        """Find the chains, estimate their single-pass time, and compare the saving with the step."""
        good = _measure(ctx, t)
        if not isinstance(good, list):
            return good
        fusion = _fusion(ctx, t, good)
        return _decide(fusion, t) or self._finding(fusion, t)

    def _finding(self, f: "_Fusion", t) -> Finding:
        """The finding: bandwidth, intensity and saving of the qualifying chains, and the fusion fixes."""
        spec, step_us, bw, after = f.spec, f.step_us, f.bw, f.after
        offenders = _offenders(f.good, f.n)
        return Finding(
            rule=self.id,
            severity=severity_ladder(f.saving, t),
            title=self.title,
            evidence=_evidence(f, t),
            offenders=offenders,
            fixes=_fixes(f, offenders, t),
            est_speedup=round(step_us / after, 2),
            recoverable_us=round(step_us - after, 2),
            basis=(
                f"{_bytes_basis(f.good)}; fused step ≈ {step_us:,.0f} − "
                f"{f.chain_us:,.0f} µs in the chains + {f.fused_bytes / f.n / 1e6:,.0f} MB single-pass ÷ "
                f"{bw:.3g} TB/s achievable = {f.fused_us:,.0f} µs + {t['fused_call_us']:.0f} µs to enter "
                f"compiled code = {after:,.0f} µs per step; {time_base(f.budget)}; "
                f"{spec.name}: {spec.source}"
            ),
            why=_WHY,
        )


_WHY = (
    "Each eager elementwise or reduction kernel reads its inputs from HBM and writes its result "
    "back, and the next kernel reads that result again. These kernels do almost no math per "
    "byte, so their time is set by HBM bandwidth: a chain of ten kernels moves its data about "
    "ten times. A fused kernel keeps the intermediates in registers and moves only the chain's "
    "real inputs and outputs, so the chain runs in the time of one or two passes over memory."
)


def _evidence(f: "_Fusion", t) -> list[Evidence]:
    """The chains' bandwidth, intensity and saving against their thresholds; their bytes, kernels and time."""
    bw, tbps = f.bw, f.tbps
    return [
        Evidence.share(
            f"{'measured DRAM' if f.measured else 'HBM'} bandwidth of the chains, share of the achievable "
            f"{bw:.3g} TB/s ({tbps:.2f} TB/s{_measured_pct(tbps, f.spec) if f.measured else ''}{_over(f)})",
            min(tbps / bw, 1.0),
            ">=",
            t["min_bw_share"],
        ),
        Evidence("arithmetic intensity", round(f.intensity, 3), "<=", round(f.max_intensity, 2), "FLOP/B"),
        Evidence.share("estimated saving from fusion", f.saving, ">=", t["min_saving_share"]),
        Evidence("bytes moved ÷ single-pass bytes", round(f.moved / max(f.fused_bytes, 1.0), 2), unit="×"),
        Evidence("unfused kernels in the chains per step", round(f.kernels, 1)),
        Evidence.share("time in the chains per step", f.chain_us / f.step_us),
    ]


def _over(f: "_Fusion") -> str:
    """Why a bandwidth above the achievable figure is shown as all of it ("" when it is not above)."""
    if f.tbps <= f.bw:
        return ""
    if f.measured:
        return ": above the achievable figure, which a copy benchmark sets; shown as all of it"
    return ": more than HBM moves, so part of the bytes counted from shapes stayed in L2; shown as all of it"


def _fixes(f: "_Fusion", offenders: list[Offender], t) -> list[Fix]:
    """torch.compile, a hand-fused Triton kernel with its single-pass estimate, and bf16 for fp32 chains
    (unless the step's matmuls already run in 16 bits)."""
    step_us = f.step_us
    single_after = max(step_us - f.chain_us + f.single_us + t["fused_call_us"], 1e-9)
    looped = f.fused_us - f.single_us >= 0.5  # shown to the µs: a second read that rounds away is none
    how = (
        "Hand-fuse the chain into one autotuned Triton kernel; keeping each row on chip also removes the second "
        f"read a looped reduction does: est. {max(step_us / single_after, 1.0):.2f}× for the step "
        f"({f.single_us:,.0f} µs of single-pass HBM traffic instead of {f.fused_us:,.0f} µs)."
        if looped
        else "Hand-fuse the chain into one autotuned Triton kernel that reads its inputs and writes its output "
        f"once: est. {max(step_us / single_after, 1.0):.2f}× for the step ({f.single_us:,.0f} µs of HBM traffic)."
    )
    return [
        fix("torch-compile", code=_compile_code()),
        fix(
            "triton-kernel",
            code=_triton_code(str(offenders[0].name) if offenders else ""),
            how=how,
        ),
        *([] if f.half_matmuls else _bf16_fix(f.good, f.n, step_us, t)),
    ]


def _measure(ctx, t) -> "list[dict] | Quiet | Skip":
    """The unfused chains that qualify (bandwidth-bound, low intensity); Quiet or Skip when none does."""
    m = ctx.metrics
    spec = m.device_spec
    work = ctx.step_work()
    if work is None:
        return Quiet(NO_STEP_WORK)
    ops, step_us, n = work
    bw = spec.achievable_tbps  # TB/s = bytes per µs / 1e6
    sm_count = ctx.trace.device.get("sm_count") or 0
    max_intensity = t["max_intensity_share"] * (spec.ridge("fp32") or 0.0)
    chains = _chains(ops, max(int(math.ceil(t["min_chain_ops"])), 1), bw, sm_count, spec.hbm_tbps)
    fused_kernels = ops[ops["kind"].isin(MEMORY_KINDS) & ops["fused"].astype(bool)]
    if not chains:
        return Quiet(_no_chain_detail(ops, fused_kernels, n, bw))
    known = [c for c in chains if c["known"]]
    unknown = [c for c in chains if not c["known"] and c["full_wave"]]
    if not known and sum(c["time_us"] for c in unknown) / n >= t["min_saving_share"] * step_us:
        return Skip(
            "unfused elementwise chains take "
            f"{percent(sum(c['time_us'] for c in unknown) / n / step_us)} of the step but their ops' "
            "shapes were not recorded (profile with record_shapes=True; kernels replayed from "
            "a CUDA graph carry none, and `--ncu` measures their bytes instead), so their bytes "
            "cannot be estimated"
        )
    good = [c for c in known if c["bw_share"] >= t["min_bw_share"] and c["intensity"] <= max_intensity]
    if not good:
        best = max(known, key=lambda c: c["bw_share"], default=None)
        where = (
            f"best chain at {_rate(best['tbps'])} = {percent(best['bw_share'])} of achievable < {percent(t['min_bw_share'])}"
            if best
            else "no chain with recorded shapes"
        )
        return Quiet(
            f"no bandwidth-bound unfused chain: {len(chains)} chain{'' if len(chains) == 1 else 's'} of "
            f"≥ {t['min_chain_ops']:.0f} kernels, {where}"
        )
    return good


def _rate(tbps: float) -> str:
    """A bandwidth with the unit that keeps its digits: "3.85 TB/s", or "0.61 GB/s" for a tiny chain."""
    return f"{tbps:.2f} TB/s" if tbps >= 0.1 else f"{tbps * 1000:.3g} GB/s"


@dataclasses.dataclass
class _Fusion:
    """What fusing the qualifying chains would save (what `_fusion` worked out)."""

    spec: DeviceSpec
    budget: StepBudget
    good: list
    n: int
    step_us: float
    bw: float
    max_intensity: float
    chain_us: float
    fused_us: float
    single_us: float
    after: float
    saving: float
    moved: float
    fused_bytes: float
    tbps: float
    measured: bool
    intensity: float
    kernels: float
    half_matmuls: bool = False  # the step's matmuls already run in bf16/fp16: its fp32 ops are autocast's choice


def _fusion(ctx, t, good: list[dict]) -> _Fusion:
    """Per-step time of the chains, their fused time, and the step after fusion."""
    m = ctx.metrics
    spec = m.device_spec
    n = max(len(m.steps.windows), 1)
    step_us = m.budget.step_us
    chain_us = sum(c["time_us"] for c in good) / n
    # a chain whose single-pass estimate exceeds its measured time is left as it runs: fusing never costs
    fused_us = sum(min(c["fused_us"], c["time_us"]) for c in good) / n
    after = max(step_us - chain_us + fused_us + t["fused_call_us"], 1e-9)
    moved = sum(c["bytes"] for c in good)
    return _Fusion(
        half_matmuls=_half_matmuls(ctx),
        spec=spec,
        budget=m.budget,
        good=good,
        n=n,
        step_us=step_us,
        bw=spec.achievable_tbps,
        max_intensity=t["max_intensity_share"] * (spec.ridge("fp32") or 0.0),
        chain_us=chain_us,
        fused_us=fused_us,
        single_us=sum(c["single_us"] for c in good) / n,
        after=after,
        saving=(step_us - after) / step_us,
        moved=moved,
        fused_bytes=sum(c["fused_bytes"] for c in good),
        tbps=sum(c["tbps"] * c["time_us"] for c in good) / max(sum(c["time_us"] for c in good), 1e-9),
        measured=all(c["measured"] for c in good),
        intensity=sum(c["flops"] for c in good) / max(moved, 1.0),
        kernels=sum(c["ops"] for c in good) / n,
    )


def _half_matmuls(ctx) -> bool:
    """Whether the step's matmuls run in bf16 or fp16 (then its fp32 ops are autocast's choice)."""
    work = ctx.step_work()
    ops = work[0] if work is not None else None
    gemm_dtypes = ops[ops["kind"] == "gemm"]["dtype"].dropna().unique() if ops is not None else []
    return any(precision(d) in HALF_PRECISIONS for d in gemm_dtypes)


def _bf16_fix(good: list[dict], n: int, step_us: float, t) -> list:
    """bf16 for chains that run in fp32: the same kernels move half the bytes (none when they do not)."""
    fp32_us = sum(c["fp32_us"] for c in good) / n
    chain_us = sum(c["time_us"] for c in good) / n
    if chain_us <= 0 or fp32_us < t["min_fp32_chain_share"] * chain_us:
        return []
    after = max(step_us - fp32_us / 2, 1e-9)
    return [
        fix(
            "bf16-tensor-cores",
            code=_bf16_chain_code(),
            how=(
                f"{percent(fp32_us / chain_us)} of the chains' time is fp32 elementwise and normalisation work: in bf16 the "
                f"same kernels move half the bytes, est. {step_us / after:.2f}× for the step without fusing "
                f"({fp32_us:,.0f} µs → {fp32_us / 2:,.0f} µs per step); with fusion the two gains multiply."
            ),
        )
    ]


def _bf16_chain_code() -> str:
    return (
        "# bf16 activations: normalisation and elementwise kernels read and write half the bytes\n"
        'with torch.autocast("cuda", dtype=torch.bfloat16):\n'
        "    loss = criterion(model(x), y)\n"
        "# (autocast keeps softmax, norms' statistics and the loss in fp32 where it matters)"
    )


def _decide(f: _Fusion, t) -> Quiet | None:
    """Quiet when fusing the chains would save too small a share of the step."""
    good, n, saving, chain_us, fused_us = f.good, f.n, f.saving, f.chain_us, f.fused_us
    if saving <= 0:
        return Quiet(
            f"fusing {len(good) / n:.0f} bandwidth-bound chain(s) per step would save nothing: "
            f"{chain_us:,.0f} µs → {fused_us:,.0f} µs fused + {t['fused_call_us']:.0f} µs to enter "
            "compiled code is no shorter"
        )
    if saving < t["min_saving_share"]:
        return Quiet(
            f"fusing {len(good) / n:.0f} bandwidth-bound chain(s) per step would save "
            f"{percent(max(saving, 0.0))} of the step < {percent(t['min_saving_share'])} "
            f"({chain_us:,.0f} µs → {fused_us:,.0f} µs + {t['fused_call_us']:.0f} µs call)"
        )
    return None


def _chains(ops: pd.DataFrame, min_ops: int, bw: float, sm_count: int, peak_tbps: float) -> list[dict]:
    """Runs of at least `min_ops` consecutive unfused memory-class op instances, per step and
    stream in GPU order, each summarised as a dict (time, bytes, bandwidth, single-pass bytes...).

    Sums over the runs are vectorised (missing values count as zero, as pandas sums them); the
    single-pass bytes of a sequence of works are worked out once per distinct sequence.
    """
    found = _lanes(ops)
    if found is None:
        return []
    runs = _runs(*found, peak_tbps)
    picked = np.flatnonzero(runs.lengths >= min_ops)
    if not len(picked):
        return []
    single: dict = {}  # single-pass bytes per distinct sequence of works
    passes = [
        _pass_bytes(runs, i, a, a + n, single)
        for i, a, n in zip(picked.tolist(), runs.starts[picked].tolist(), runs.lengths[picked].tolist())
    ]
    return _chain_rows(runs, picked, passes, bw, sm_count)


def _lanes(ops: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray] | None:
    """(the unfused memory-class op instances in GPU order per step and stream, where each run of them
    starts, its length); None without any."""
    needed = [
        "step",
        "stream",
        "ts",
        "kind",
        "fused",
        "kernel_us",
        "flops",
        "dram_pct",
        "dram_bytes",
        "blocks",
        "work",
        "op_name",
        "shapes",
        "dtype",
    ]
    frame = ops[needed].assign(bytes=best_bytes(ops)).sort_values(["step", "stream", "ts"], kind="stable")
    member = (frame["kind"].isin(MEMORY_KINDS) & ~frame["fused"].astype(bool)).to_numpy()
    step, stream = frame["step"].to_numpy(), frame["stream"].to_numpy()
    new_lane = np.concatenate(([True], (step[1:] != step[:-1]) | (stream[1:] != stream[:-1])))
    chain_id = np.cumsum(~member | new_lane)[member]
    frame = frame[member]
    if not len(frame):
        return None
    starts = np.flatnonzero(np.concatenate(([True], chain_id[1:] != chain_id[:-1])))
    return frame, starts, np.diff(np.append(starts, len(chain_id)))


@dataclasses.dataclass(frozen=True)
class _Runs:
    """The runs of unfused memory-class ops: per op instance, what a chain's summary reads; per run, the
    sums over its ops (what `_runs` found)."""

    starts: np.ndarray  # each run's first op instance
    lengths: np.ndarray  # op instances per run
    dram_bytes: np.ndarray  # per op instance: DRAM bytes Nsight Compute measured (NaN: none)
    works: np.ndarray  # per op instance: its work (inputs and outputs), or None
    op_names: np.ndarray
    shapes: np.ndarray
    steps: np.ndarray
    time_us: np.ndarray  # per run from here on
    fp32_us: np.ndarray
    moved: np.ndarray  # bytes
    flops: np.ndarray
    tbps: np.ndarray  # measured DRAM bandwidth where every op was measured, else bytes ÷ time
    known: np.ndarray  # bytes known for at least 95 % of the run's time
    measured: np.ndarray  # every op has a measured DRAM share
    n_measured: np.ndarray  # ops with measured DRAM bytes
    blocks: np.ndarray  # the largest grid of the run


def _runs(frame: pd.DataFrame, starts: np.ndarray, lengths: np.ndarray, peak_tbps: float) -> _Runs:
    """The sums over each run of `frame` (from `starts`, `lengths` long), missing values as zero."""
    number = {c: frame[c].to_numpy(float) for c in ("kernel_us", "bytes", "flops", "dram_pct", "dram_bytes", "blocks")}

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.where(np.isnan(values), 0.0, values), starts)

    kernel_us = np.where(np.isnan(number["kernel_us"]), 0.0, number["kernel_us"])
    time_us = np.add.reduceat(kernel_us, starts)
    unknown_us = np.add.reduceat(np.where(np.isnan(number["bytes"]), kernel_us, 0.0), starts)
    moved = total(number["bytes"])
    dram_time = total(number["dram_pct"] * number["kernel_us"])
    pct_missing = np.add.reduceat(np.isnan(number["dram_pct"]).astype(np.int64), starts)
    measured = (time_us != 0) & (pct_missing == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tbps = np.where(
            measured, dram_time / time_us / 100 * peak_tbps, np.where(time_us != 0, moved / time_us / 1e6, 0.0)
        )
    dtypes = frame["dtype"].to_numpy(object).tolist()
    fp32 = {d: isinstance(d, str) and precision(d) == "fp32" for d in set(dtypes)}
    is_fp32 = np.fromiter(map(fp32.__getitem__, dtypes), bool, len(dtypes))
    return _Runs(
        starts=starts,
        lengths=lengths,
        dram_bytes=number["dram_bytes"],
        works=frame["work"].to_numpy(object),
        op_names=frame["op_name"].to_numpy(object),
        shapes=frame["shapes"].to_numpy(object),
        steps=frame["step"].to_numpy(),
        time_us=time_us,
        fp32_us=np.add.reduceat(np.where(is_fp32, kernel_us, 0.0), starts),
        moved=moved,
        flops=total(number["flops"]),
        tbps=tbps,
        known=(time_us > 0) & (unknown_us <= 0.05 * time_us),
        measured=measured,
        n_measured=np.add.reduceat((~np.isnan(number["dram_bytes"])).astype(np.int64), starts),
        blocks=np.fmax.reduceat(number["blocks"], starts),
    )


def _pass_bytes(runs: _Runs, i: int, a: int, b: int, single: dict) -> tuple[bool, float, float]:
    """(shapeless, fused bytes, single-pass bytes) of run `i` (op instances a to b): from the works' shapes
    (once per distinct sequence, cached in `single`), else from the measured bytes of its ends; zero when
    its bytes are not known."""
    ws = [w for w in runs.works[a:b] if w is not None and w.inputs]
    shapeless = bool(runs.known[i] and not ws and runs.measured[i])
    if shapeless:
        # no shapes (a CUDA-graph replay): a fused kernel reads what the first kernel read and writes what
        # the last one wrote, so their measured bytes stand in for the single pass
        ends = runs.dram_bytes[[a, b - 1]]
        return shapeless, float(np.nansum(ends)), float(np.nansum(ends))
    if runs.known[i]:
        key = tuple(map(id, ws))
        if key not in single:
            single[key] = _single_pass_bytes(ws)
        return (shapeless, *single[key])
    return shapeless, 0.0, 0.0


def _chain_rows(runs: _Runs, picked: np.ndarray, passes: list, bw: float, sm_count: int) -> list[dict]:
    """The runs `picked` summarised, a dict each: time, bytes, bandwidth, what a fused kernel would take.
    The arithmetic is done a column at a time; each value is the same float the row-by-row sum gave."""
    starts = runs.starts[picked]
    ends = starts + runs.lengths[picked]
    time_us, moved, flops, blocks = runs.time_us[picked], runs.moved[picked], runs.flops[picked], runs.blocks[picked]
    shapeless, fused_bytes, single_bytes = (np.array(column) for column in zip(*passes))
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(moved != 0, flops / moved, math.inf)
    columns = {
        "ops": (ends - starts).tolist(),
        "time_us": time_us.tolist(),
        "fp32_us": runs.fp32_us[picked].tolist(),
        "known": runs.known[picked].tolist(),
        "bytes": moved.tolist(),
        "flops": flops.tolist(),
        "tbps": runs.tbps[picked].tolist(),
        "bw_share": (runs.tbps[picked] / bw).tolist(),
        "measured": runs.measured[picked].tolist(),
        "n_measured": runs.n_measured[picked].tolist(),
        "shapeless": shapeless.astype(bool).tolist(),
        "intensity": intensity.tolist(),
        "fused_bytes": fused_bytes.astype(float).tolist(),
        "single_bytes": single_bytes.astype(float).tolist(),
        # a fused chain is never priced above what it measured (its bytes may be overcounted)
        "fused_us": np.minimum(fused_bytes / bw / 1e6, time_us).tolist(),
        "single_us": np.minimum(single_bytes / bw / 1e6, time_us).tolist(),
        "full_wave": (bool(sm_count) & ~np.isnan(blocks) & (blocks >= sm_count)).tolist(),
        "names": _chain_names(runs.op_names, starts, ends),
        "shapes": _first_shapes(runs.shapes, starts, ends),
        "step": runs.steps[starts].astype(int).tolist(),
    }
    return [dict(zip(columns, row)) for row in zip(*columns.values())]


def _chain_names(op_names: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
    """Each run's op names joined by arrows, without the `aten::` prefix ("?" for an unnamed op)."""
    short = [o.replace("aten::", "") if isinstance(o, str) else "?" for o in op_names.tolist()]
    return [" → ".join(short[a:b]) for a, b in zip(starts.tolist(), ends.tolist())]


def _first_shapes(shapes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list:
    """Each run's first recorded shapes (a string), or None when none of its ops has any."""
    has = np.fromiter(map(isinstance, shapes.tolist(), repeat(str)), bool, len(shapes))
    at = np.append(np.flatnonzero(has), len(shapes))  # the ops with shapes, then one past the last op
    first = at[np.searchsorted(at, starts)]  # the first op with shapes at or after each run's start
    return [shapes[w] if w < b else None for w, b in zip(first.tolist(), ends.tolist())]


def _measured_pct(tbps: float, spec) -> str:
    return f" = {percent(tbps / spec.hbm_tbps)} of the {spec.hbm_tbps:g} TB/s peak, Nsight Compute"


def _bytes_basis(chains: list[dict]) -> str:
    measured = sum(c["n_measured"] for c in chains)
    kernels = sum(c["ops"] for c in chains)
    if any(c["shapeless"] for c in chains):
        return (
            "DRAM bytes and throughput measured by Nsight Compute (one step, joined to the trace's kernels); "
            "no shapes recorded (a CUDA-graph replay), so the single pass is taken as the measured bytes of "
            "each chain's first and last kernels (what a fused kernel reads and writes) and FLOPs are unknown"
        )
    if measured and measured == kernels:
        return (
            "DRAM bytes and throughput measured by Nsight Compute (one step, joined to the trace's "
            "kernels), FLOPs and single-pass bytes estimated from shapes"
        )
    if measured:
        return (
            f"DRAM bytes measured by Nsight Compute for {measured} of {kernels} kernels, the rest and "
            "FLOPs estimated from shapes"
        )
    return "bytes and FLOPs estimated from shapes (not measured)"


def _single_pass_bytes(works: list) -> tuple[float, float]:
    """(fused bytes with a re-read after broadcast reductions, strictly single-pass bytes)."""
    produced: collections.Counter = collections.Counter()
    external = 0.0
    external_before_reduction = 0.0
    reread = 0.0
    pending_reduction = None
    later_inputs = [collections.Counter((x.shape, x.dtype) for x in w.inputs) for w in works]
    outputs = 0.0
    for i, w in enumerate(works):
        available = collections.Counter(produced)
        for x in w.inputs:
            sig = (x.shape, x.dtype)
            if available[sig] > 0:
                available[sig] -= 1
                continue
            external += x.nbytes
        if pending_reduction is not None and any(x.numel >= pending_reduction for x in w.inputs):
            reread += external_before_reduction
            pending_reduction = None
        if w.reduces and w.inputs:
            pending_reduction = w.inputs[0].numel
            external_before_reduction = external
        for out in w.outputs:
            produced[(out.shape, out.dtype)] += 1
            consumed = any(lat[(out.shape, out.dtype)] for lat in later_inputs[i + 1 :])
            if not consumed:
                outputs += out.nbytes
    return external + outputs + reread, external + outputs


def _no_chain_detail(ops: pd.DataFrame, fused: pd.DataFrame, n: int, bw: float) -> str:
    if len(fused):
        moved = best_bytes(fused).sum()
        us = float(fused["kernel_us"].sum())
        rate = f", {moved / us / 1e6:.2f} TB/s = {percent(moved / us / 1e6 / bw)} of achievable" if us and moved else ""
        return (
            f"no chain of unfused elementwise/reduction kernels; {len(fused) / n:.0f} already-fused "
            f"kernel(s) per step ({fused['kernel'].iloc[0][:40]}…{rate})"
        )
    return "no chain of unfused elementwise/reduction kernels in the measured steps"


def _offenders(chains: list[dict], n: int) -> list[Offender]:
    grouped: dict = {}
    for c in chains:
        key = (c["names"], c["shapes"])
        g = grouped.setdefault(
            key,
            {
                "chain": c["names"],
                "first_shapes": c["shapes"],
                "count": 0,
                "time_us": 0.0,
                "bytes": 0.0,
                "fused_bytes": 0.0,
                "fused_us": 0.0,
                "kernels": c["ops"],
            },
        )
        g["count"] += 1
        for k in ("time_us", "bytes", "fused_bytes", "fused_us"):
            g[k] += c[k]
    rows = sorted(grouped.values(), key=lambda g: g["time_us"] - g["fused_us"], reverse=True)
    rows = [
        {
            "chain": g["chain"],
            "first_op_shapes": g["first_shapes"],
            "kernels": g["kernels"],
            "chains_per_step": round(g["count"] / n, 2),
            "us_per_step": round(g["time_us"] / n, 1),
            "mb_moved_per_step": round(g["bytes"] / n / 1e6, 1),
            "mb_single_pass_per_step": round(g["fused_bytes"] / n / 1e6, 1),
            "tb_per_s": round(g["bytes"] / g["time_us"] / 1e6, 2) if g["time_us"] else None,
            "fused_us_per_step": round(g["fused_us"] / n, 1),
        }
        for g in rows
    ]
    return top_offenders(rows, "chain")


def _compile_code() -> str:
    return (
        "# fuse the pointwise/reduction chain (Inductor generates Triton kernels)\n"
        "block = torch.compile(block)            # or model = torch.compile(model)\n"
        "# max-autotune also autotunes the generated kernels' tile sizes\n"
        'block = torch.compile(block, mode="max-autotune")'
    )


def _triton_code(chain: str) -> str:
    """A row-wise fused Triton kernel skeleton for the top chain (its ops named in the comment)."""
    return (
        comment(
            f"one kernel for the chain {chain or '(see offenders)'}: each row is read once, every "
            "intermediate stays in registers, the result is written once"
        )
        + "@triton.jit\n"
        "def fused_row(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):\n"
        "    row = tl.program_id(0)\n"
        "    cols = tl.arange(0, BLOCK)\n"
        "    mask = cols < n_cols\n"
        "    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)\n"
        "    y = x  # ... the chain's elementwise ops and row reductions (tl.sum, tl.max) here ...\n"
        "    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)\n\n"
        "fused_row[(n_rows,)](x, out, n_cols, BLOCK=triton.next_power_of_2(n_cols))"
    )
