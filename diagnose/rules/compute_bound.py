"""compute-bound: matrix math dominates the step; how close is it to the tensor-core roofline?

**Signal.** Every matmul and convolution of the measured steps is placed on the roofline from
its recorded shapes (metrics/work.py): FLOPs, bytes, arithmetic intensity (FLOP/byte) and the
achieved TFLOP/s (FLOPs ÷ kernel time), next to the datasheet peak of the precision it actually
ran in. That precision comes from the dtypes and the kernel's name (diagnose/vocabulary/kernels.py): fp32
data on a tensor-core kernel (`sm90_xmma_gemm_…tf32…`, cuDNN `tensor16x8x8`) is TF32; on an
`ffma` / `sgemm` / `scudnn` kernel it is plain FP32 on CUDA cores; `nvjet`, `wgmma`/`gmma`,
`hmma`, `tensorop`, `s1688`/`16816` and AMD `_MI16x16x1` kernels are tensor (matrix) cores.
An op is *compute-bound* when its intensity is at least `min_ridge_share` of the ridge point of
that precision (achievable FLOP/s ÷ achievable bytes/s); GEMV-shaped products (a few rows
against large weights) fall far below it and are left to the decode-latency rule. The rule fires
when compute-bound matrix ops take at least `min_share` of the GPU's busy time, moving them saves at
least `min_saving_share` of the step, and one of these holds, in
order:

1. *tensor cores unused*: fp32 without TF32, or 16-bit data on a CUDA-core kernel →
   `bf16-tensor-cores` (autocast to bf16, or fp16 with a GradScaler on Volta and Turing, which
   have neither bf16 nor TF32; TF32 as the one-line alternative where there is one; 16-bit data
   already on CUDA cores gets layout advice instead: channels_last, dimensions multiples of 8);
2. *misaligned dimensions*: K or N (the leading dimensions in the usual layouts; output
   channels for convolutions: an RGB first layer's 3 input channels are padded by cuDNN itself)
   not a multiple of `align_bytes` (16) bytes' worth of elements (8 for 16-bit types, 4 for
   fp32, 16 for fp8), which sends cuBLAS to slow unaligned kernels → `pad-dims`, naming the
   shapes;
3. *healthy tensor-core kernels near their peak* (≥ `near_peak_share` of the datasheet) with a
   faster precision left on this GPU → the next rung: `bf16-tensor-cores` after TF32, `fp8` after
   bf16/fp16 (Hopper, MI300). It never recommends a precision the ops already use.

Already in FP8 (the top rung on Hopper), or on tensor cores but slow for another reason (small
or oddly shaped matrices), the rule stays quiet and says so: nothing this rule knows would help.

**Thresholds.** `min_share` 0.5 (the GPU's work is *dominated* by matrix math): the matmul captures
sit at 91–100 % and the 512-token prefill near 82 %, while batch-1 decode is 4 % of the step
(decode_eager) and the GEMV decode steps have 0 % compute-bound matmuls (intensity ≈ 1–4 FLOP/byte
against a ridge of 184); in the fp32 conv-net training capture (host_loader_workers) the convolution
kernels take 42 % of the GPU's busy time and 8 % of the 26.9 ms mean step its DataLoader sets
(cuDNN's NCHW↔NHWC transposes inside the same ops are memory traffic, not matrix math, and are not
counted). The share is of the GPU's busy time, not of the step: idle time is the host rules' to
explain, and how much of it the profiler added is estimated from a trace alone but measured in a
capture folder. On the step, regress_base and its ten re-runs of the same code sat at 49–51 % and
got two different first findings, and four trace files disagreed with their folders; on the busy time
all eleven say 51–52 % and name compute-bound, folder and trace file alike.
`min_saving_share` 0.1: a change of precision that gains under 1.11× is not worth a finding, as for
memory-bound. Compiled BERT at batch 1 (fixtures/heldout) would save 7 % of the step from tensor
cores on its folder and 8 % on its trace file (`--verify` measured TF32 at 1.08×), the small-MLP
training captures (sync_item, sync_free) 4.5–4.9 %: their fp32 matmuls are 62 % of the GPU's busy
time, but their grids are too small to gain much.
`min_defect_saving` 0.3: below `min_share`, missing tensor cores or misaligned dimensions still
fire when fixing them would save at least 30 % of the step, a 1.4× gain no one should miss: the
TensorBoard tutorial's fp32 ResNet-50 on a V100 (fixtures/peer/kineto, num_workers 4) has its
convolutions on CUDA cores for 47 % of the step and fp16 would save 39 %, while
host_loader_workers' convolutions would save 2 %.
`min_ridge_share` 1.0: right of the ridge is the definition of compute-bound.
`near_peak_share` 0.5 of the datasheet peak: the healthy H200 kernels run at 71–86 % (bf16
809 TFLOP/s = 82 %, TF32 423 = 86 %, FP8 1,487 = 75 %, prefill 706–825 = 71–83 %), the
misaligned K = 8191 kernel at 15 %. FP8 is the top rung on this GPU, so matmul_fp8 is a quiet
case by design: there is no precision left to recommend, and telling the user to move to bf16
or FP8 again would be wrong.

**The whole training step in fp32.** Where the gates above leave the rule quiet, a training step (one
with a backward pass) whose matrix time is at least `min_fp32_matrix_share` (0.9) fp32 or TF32 is priced
whole at bf16 (rules/whole_step.py): its fp32/TF32 matmuls and convolutions at the roofline time of bf16
tensor cores (below), fp32 attention kernels (no FlashAttention in fp32) and the activations'
elementwise, reduction and copy kernels at half the bytes, and unchanged what autocast keeps in fp32 (norms,
softmax and the loss, the optimizer's update of fp32 weights, embedding gradients, fills and casts). The
step cannot fall below the host's launch time, the span from a step's first kernel launch to its last,
scaled from the profiled to the estimated step. The finding (`bf16-tensor-cores`, in the framework's API
where one is found: `bf16=True` for transformers' Trainer, `precision="bf16-mixed"` for Lightning) fires
when that saves at least `min_whole_saving_share` (0.2) of the step, a whole change of precision being a
larger change than a flag. regress_no_autocast (H200): its matmuls are 46.9 % of the GPU's busy time, under
`min_share`, yet bf16 saves 15.2 ms on matmuls, 7.9 ms on fp32 attention and 1.1 ms on activations of a
55.6 ms step, 43 %: est. 1.77× against the measured 1.69× (regress_base, the same step under autocast;
folder and trace file alike). The fp32 conv nets stay quiet: their host launches the step for nearly its
whole length (conv_channels_last: 29.6 of 30.6 ms profiled; its bf16 twin measured 1.09×), so 3.5–4 % is
left. python_batch_workers would save 15 % on its folder and 7.8 % on its trace file (not measured): under
0.2, quiet. The fp32 twins of hf_trainer and lightning already fire through the gates above (3.02× and
3.75× against the measured 2.64× and 5.19× of their bf16 twins). The share is 100 % on every fp32 capture;
under autocast, regress_base and its variants keep 59–73 % of their matrix time in TF32 (their largest
products run outside autocast), so 90 % tells a step that trains in fp32 from one that already autocasts.

**Measured.** With Nsight Compute rows attached (`--ncu`, `--ncu-csv`: diagnose/ncu/), the
measurements only add: an op is compute-bound when its shapes put it right of the ridge (by the
estimated or the measured DRAM bytes) *or* its speed-of-light class says compute-bound (SM
throughput ≥ 60 % and more than 10 points above memory throughput, or within 10 points with the
tensor pipe ≥ 50 % active: diagnose/ncu/classify.py). A measured latency- or memory-bound class
does not take an op out: it says what limits that kernel, not that the product is small. The
misaligned K = 8191 matmul falls back to an `align1` CUTLASS kernel that reads SM 30 %, memory
47 % (L1/shared traffic leading), DRAM 4 %: latency-bound by class, and still the `pad-dims`
finding (fixtures/ncu/matmul_bf16_k8191.synthetic.ncu.csv.gz, a SYNTHETIC CSV made from the real
matmul_bf16 one). Its intensity uses the measured DRAM bytes, a measured tensor pipe settles
tensor-core use the kernel's name left open, and the evidence adds the measured SM throughput,
tensor-pipe activity, DRAM throughput and the share of matrix time ncu classes otherwise
(matmul_bf16 on the H200: SM 93 %, tensor pipe 97 %, DRAM 21 %).

**Fix.** `bf16-tensor-cores` (autocast / `allow_tf32` when the trace runs a backward pass; for
inference the weights and inputs put in bf16 once, since autocast casts each fp32 weight again at
every call: on BERT-base at batch 1 the H200 measured autocast 0.86× against TF32 1.05×), `pad-dims` (pad to a multiple of 8,
better 64/128), `fp8` (`torch._scaled_mm`, torchao `float8`, Transformer Engine).

**Estimate.** time after the fix, per op = max(FLOPs ÷ achievable TFLOP/s of the target
precision, bytes in the target precision ÷ achievable HBM bandwidth), bounded for products too
small to fill the GPU: a grid of fewer 128 × 128 output tiles than the GPU has SMs runs one partial
wave whose length one tile's K loop sets, so the op gains only the share of SMs its grid fills, and
no GEMM takes less than 2 µs (the shortest of 16,258 GEMM kernels in the H200 captures: 2.08 µs).
BERT-base at batch 1 (held out, fixtures/heldout/hf_bert_infer_b1): 6–24 tiles on 132 SMs, where
the roofline alone promised 1.45× and `--verify` on the H200 measured TF32 1.05× and bf16 autocast
0.86× (benchmarks/results-heldout-verify-h200.json); the rule now stays quiet there. The step keeps
everything else: est. step = step − Σ op time + Σ time after. Achievable figures are the ones measured on
the H200 (devices.py: bf16 790, FP8 1,490, TF32 423 TFLOP/s, 4.3 TB/s). Measured on the H200
captures: FP32 → bf16 15.17× (this estimate: ≈ 12.8×), bf16 → FP8 1.83× (≈ 1.76×), K 8191 →
8192 5.33× (≈ 5.2×), TF32 → bf16 1.99× (≈ 1.73×); FP32 → TF32 was 7.62×. The estimate keeps
the non-matmul part of the measured step (77–306 µs on these captures), so it errs low. FLOPs
and bytes are estimated from shapes unless Nsight Compute measured them; the kernel time is
measured.
"""

from __future__ import annotations

import dataclasses
import math
import re

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
    severity_from,
    severity_ladder,
)
from diagnose.model.findings import Evidence, Finding, Fix, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.metrics import Metrics
from diagnose.vocabulary.dtypes import (
    HALF_PRECISIONS,
    NARROW_PRECISIONS,
    dtype_bytes,
    precision,
    precision_bytes,
    rung_name,
)
from diagnose.vocabulary.kernels import MATMUL_KINDS
from diagnose.ncu.classify import LATENCY_PCT
from diagnose.vocabulary.units import fraction_of, percent, shown_share
from diagnose.trace.names import name_search
from diagnose.rules import whole_step

FIX_OF_ISSUE = {"tensor-cores-unused": "bf16-tensor-cores", "misaligned": "pad-dims"}
MEASURED_TENSOR_PCT = 1.0  # a measured tensor pipe at least this active means tensor cores ran
MIN_SHAPE_COVER = 0.5  # below this share of matrix time with known FLOPs, the roofline cannot be drawn
TILE = 128  # output rows and columns one thread block of a tensor-core GEMM computes (cuBLAS's usual tile)
BACKWARD = re.compile(r"Backward|AccumulateGrad|autograd::engine")
MIN_GEMM_US = 2.0  # no GEMM runs faster: the shortest of 16,258 GEMM kernels in the H200 captures took 2.08 µs


class ComputeBound(Rule):
    """Compute-bound matrix math → tensor cores, padded dimensions, the next precision rung."""

    id = "compute-bound"
    order = 50
    title = "Compute-bound matrix math"
    cheat_sheet = {
        "bottleneck": "compute-bound matrix math",
        "signal": "high SM throughput (> 75%), low HBM throughput (< 50%)",
        "fix": "BF16 / FP8 / NVFP4 tensor cores; pad matrix dims to multiples of 64/128",
        "impact": "2–4× FLOP throughput per clock",
    }
    needs = ("gpu", "steps", "device-peaks", "device-bandwidth")
    thresholds = (
        Threshold(
            "min_share",
            0.5,
            "fraction",
            "fire when compute-bound matmuls/convolutions take at least this share of the GPU's busy time",
        ),
        Threshold(
            "min_saving_share",
            0.1,
            "fraction",
            "and moving them to the fix saves at least this share of the step",
        ),
        Threshold(
            "min_ridge_share",
            1.0,
            "fraction",
            "an op is compute-bound when its FLOP/byte is at least this share of the ridge point",
        ),
        Threshold(
            "near_peak_share",
            0.5,
            "fraction",
            "tensor-core kernels at or above this share of the datasheet peak count as healthy",
        ),
        Threshold(
            "min_defect_saving",
            0.3,
            "fraction",
            "below min_share, still fire for missing tensor cores or misaligned dimensions when "
            "fixing them would save at least this share of the step",
        ),
        Threshold(
            "min_fp32_matrix_share",
            0.9,
            "fraction",
            "a training step whose matrix time is at least this share fp32 / TF32 is priced whole at bf16 "
            "where the matrix rules above stay quiet",
        ),
        Threshold(
            "min_whole_saving_share",
            0.2,
            "fraction",
            "and fire when the whole step priced at bf16 saves at least this share of it",
        ),
        Threshold("align_bytes", 16, "bytes", "K and N must be multiples of this many bytes of elements"),
        Threshold("high_speedup", 2.0, "×", "estimated speedup at which a defect is high severity"),
    )

    def check(self, ctx, t):
        """Place the matrix ops on the roofline and pick the fix for the ones that dominate."""
        work = ctx.step_work()
        if work is None:
            return Quiet(NO_STEP_WORK)
        placed = _measure(ctx, t, *work)
        result = (_decide(placed, t) or self._finding(placed, t)) if isinstance(placed, _Placed) else placed
        if isinstance(result, Quiet) and _trains(ctx.metrics):
            return self._whole_step(ctx.metrics, t, work, result)
        return result

    def _whole_step(self, m: Metrics, t, work: tuple, quiet: Quiet) -> "Finding | Quiet":
        """A training step whose matrix math is mostly fp32 / TF32, priced whole at bf16 (rules/whole_step.py):
        the finding when autocast would save at least `min_whole_saving_share` of the step, else `quiet`, which says so."""
        ops, step_us, n = work
        spec = m.device_spec
        assert spec is not None  # the rule needs "device-peaks", so it runs only with a known device
        target = spec.half_rung()
        if not target or not spec.achievable(target):
            return quiet
        after = _half_after(ops, spec, target, m.trace.device.get("sm_count"))
        ws = whole_step.price(ops, step_us, n, after, whole_step.host_floor(m))
        if ws.matrix_share < t["min_fp32_matrix_share"]:
            return quiet
        if ws.share < t["min_whole_saving_share"]:
            return Quiet(
                f"{quiet.detail}; the whole step at {target} would save {percent(ws.share)} "
                f"< {percent(t['min_whole_saving_share'])}"
            )
        return _whole_step_finding(self, ws, ops, target, m, t)

    def _finding(self, p: "_Placed", t) -> Finding:
        """The finding for the compute-bound ops that have an issue: evidence, fixes, estimate."""
        spec, n, step_us, acting = p.spec, p.n, p.step_us, p.acting
        saving, after, speedup = _estimate(p)
        groups = _groups(acting)
        training = _trains(p.metrics)
        issues = [issue for issue, _ in groups]
        return Finding(
            rule=self.id,
            severity=_severity(issues, speedup, t),
            title=_title(*groups[0]),
            evidence=_evidence(p, groups, t),
            offenders=_offenders(p.cb, n),
            fixes=_unique_fixes(_fix_for(issue, part, spec, n, training) for issue, part in groups),
            est_speedup=round(speedup, 2),
            recoverable_us=round(saving, 2),
            basis=(
                f"{_measured_basis(p.cb)}; per op, time after = "
                f"max(FLOPs ÷ achievable TFLOP/s of the target precision, bytes ÷ {spec.achievable_tbps:.3g} TB/s); "
                f"step {step_us:,.0f} − {saving:,.0f} µs saved = {after:,.0f} µs; {time_base(p.metrics.budget)}; "
                f"{spec.name}: {spec.source}"
            ),
            why=_WHY,
        )


_WHY = (
    "Matrix multiplications do many FLOPs per byte, so once they are large their speed is set by "
    "the math units. Tensor cores do matrix math 8–16× faster than the regular CUDA cores, and "
    "every halving of the precision (TF32 → bf16 → FP8) doubles their rate again. They also want "
    "operands aligned to 16 bytes: a dimension of 8191 forces an unvectorised fallback kernel "
    "several times slower than 8192."
)


def _groups(acting: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The acting ops by issue, largest saving first; the next rung split by its target precision, since
    TF32 ops go to bf16 and bf16 ops to FP8, two fixes with two titles."""
    key = np.where(
        acting["issue"].to_numpy(object) == "next-rung",
        "next-rung:" + acting["target"].astype(str).to_numpy(object),
        acting["issue"].to_numpy(object),
    )
    saving = acting["saving_us"].groupby(key).sum().sort_values(ascending=False, kind="stable")
    return [(str(k).split(":")[0], acting[key == k]) for k in saving.index]


def _unique_fixes(fixes) -> list[Fix]:
    """Each fix once, where it first comes (two issues can both call for bf16 tensor cores)."""
    unique: dict[str, Fix] = {}
    for f in fixes:
        unique.setdefault(f.id, f)
    return list(unique.values())


def _estimate(p: "_Placed") -> tuple[float, float, float]:
    """(µs saved per step, the step after, speedup): the acting ops' savings off the step."""
    saving = p.metrics.per_step(p.acting["saving_us"].sum())
    after = max(p.step_us - saving, 1e-9)
    return saving, after, p.step_us / after


def _severity(issues: list[str], speedup: float, t) -> Severity:
    """high or medium (from `high_speedup`) for a defect (tensor cores unused, misaligned dims), else low."""
    defect = any(i in FIX_OF_ISSUE for i in issues)
    return severity_from(defect and speedup >= t["high_speedup"], medium=defect)


def _evidence(p: "_Placed", groups: list[tuple[str, pd.DataFrame]], t) -> list[Evidence]:
    """The gate, the throughput against the peak, the intensity against the ridge, what Nsight Compute
    measured, then each issue's share of the step."""
    assert p.main_rung is not None  # the acting ops are compute-bound, so one precision leads
    rung_label = rung_name(p.main_rung)
    cb = p.cb
    evidence = [
        _gate(p, t),
        Evidence(f"achieved throughput ({rung_label})", round(p.achieved, 1), unit="TFLOP/s"),
        Evidence.share(
            f"share of the {rung_label} datasheet peak ({p.main_peak:,.0f} TFLOP/s)",
            p.achieved / p.main_peak,
            ">=" if p.achieved / p.main_peak >= t["near_peak_share"] else "<",
            t["near_peak_share"],
        ),
        Evidence(
            "arithmetic intensity (median)",
            round(float(cb["intensity"].median()), 1),
            ">=",
            round(float(cb["ridge"].median()) * t["min_ridge_share"], 1),
            "FLOP/B",
        ),
        *_measured_evidence(cb),
    ]
    for issue, part in groups:
        share_of_step = p.metrics.per_step(part["matrix_us"].sum()) / p.step_us
        evidence.append(Evidence.share(_issue_label(issue, part), share_of_step, unit="% of step"))
    return evidence


def _gate(p: "_Placed", t) -> Evidence:
    """What let the rule fire: compute-bound math at least `min_share` of the step, else the defect's saving."""
    if p.cb_busy_share >= t["min_share"]:
        return Evidence.share(
            "compute-bound matrix math, share of the GPU's busy time", p.cb_busy_share, ">=", t["min_share"]
        )
    return Evidence.share(
        f"step saved by fixing it (matrix math {percent(p.cb_busy_share)} of the GPU's busy time "
        f"< {percent(t['min_share'])})",
        p.defect_saving,
        ">=",
        t["min_defect_saving"],
    )


@dataclasses.dataclass
class _Placed:
    """The matrix ops of the measured steps placed on the roofline (what `_measure` found)."""

    metrics: Metrics
    spec: DeviceSpec
    step_us: float
    busy_us: float  # the GPU's busy time per step, which the gate compares matrix time with
    n: int
    matrix_share: float
    rows: pd.DataFrame  # every matrix op with known FLOPs, placed (`_place`)
    cb: pd.DataFrame  # the compute-bound ones
    cb_share: float
    cb_busy_share: float
    acting: pd.DataFrame  # compute-bound ops with an issue whose fix saves time
    achieved: float  # TFLOP/s of the compute-bound ops of the main precision (main_rung)
    main_rung: str | None  # None when no op is compute-bound
    main_peak: float
    defect_saving: float = 0.0  # share of the step that fixing missing tensor cores / misalignment saves
    fp32_note: str = ""  # the share of the step in fp32 matrix math on CUDA cores, for a quiet detail (_fp32_note)


def _measure(ctx, t, ops: pd.DataFrame, step_us: float, n: int) -> "_Placed | Quiet | Skip":
    """Place every matrix op of the steps on the roofline; Quiet or Skip when there is too little to place."""
    m = ctx.metrics
    spec = m.device_spec
    matrix = ops[ops["kind"].isin(MATMUL_KINDS)]
    matrix_share = m.per_step(matrix["matrix_us"].sum()) / step_us
    busy_us = _busy_us(m, step_us)
    matrix_busy_share = m.per_step(matrix["matrix_us"].sum()) / busy_us
    fp32_note = _fp32_note(matrix, step_us, n)
    small = Quiet(
        f"matmul/convolution kernels take {percent(matrix_busy_share)} of the GPU's busy time "
        f"< {percent(t['min_share'])}{fp32_note}"
    )
    known = matrix[matrix["flops"].notna() & (matrix["flops"] > 0)]
    if not len(matrix):  # (only with min_share 0)
        return Quiet("no matmul/convolution kernels in the measured steps")
    if not len(known) or known["matrix_us"].sum() < MIN_SHAPE_COVER * matrix["matrix_us"].sum():
        if matrix_busy_share < t["min_share"]:
            return small
        return Skip(
            f"matmul/convolution kernels take {percent(matrix_busy_share)} of the GPU's busy time but their ops' shapes "
            f"were not recorded ({_no_shapes_reason(matrix)}), so their FLOPs and roofline position "
            "are unknown"
        )
    rows = _place_all(known, spec, t, m.trace.device.get("sm_count"))
    cb = rows[rows["compute_bound"]]
    defects = cb[cb["issue"].isin(list(FIX_OF_ISSUE)) & (cb["saving_us"] > 0)]
    defect_saving = m.per_step(defects["saving_us"].sum()) / step_us
    if matrix_busy_share < t["min_share"] and not _defect_pays(defect_saving, t):
        return small
    return _placed(m, spec, step_us, busy_us, n, matrix_share, rows, defect_saving, fp32_note)


def _defect_pays(defect_saving: float, t) -> bool:
    """True when fixing missing tensor cores or misaligned dimensions saves something, and at least
    `min_defect_saving` of the step (at 0, any saving: no saving at all is no defect to report)."""
    return defect_saving > 0 and defect_saving >= t["min_defect_saving"]


def _busy_us(m: Metrics, step_us: float) -> float:
    """The GPU's busy time per step, at most the step (the whole step where nothing was busy)."""
    busy = m.budget.busy_us
    return min(busy, step_us) if busy > 0 else step_us


def _placed(
    m: Metrics,
    spec: DeviceSpec,
    step_us: float,
    busy_us: float,
    n: int,
    matrix_share: float,
    rows: pd.DataFrame,
    defect_saving: float,
    fp32_note: str,
) -> "_Placed":
    """The placed ops with their compute-bound ones, those with an issue that saves time, and the
    throughput of the precision that leads among the compute-bound ones."""
    cb = rows[rows["compute_bound"]]
    main_rung = cb.groupby("rung")["matrix_us"].sum().idxmax() if len(cb) else None
    main = cb[cb["rung"] == main_rung]  # a share of a peak is of one precision's ops only
    return _Placed(
        metrics=m,
        spec=spec,
        step_us=step_us,
        busy_us=busy_us,
        n=n,
        matrix_share=matrix_share,
        rows=rows,
        cb=cb,
        cb_share=m.per_step(cb["matrix_us"].sum()) / step_us,
        cb_busy_share=m.per_step(cb["matrix_us"].sum()) / busy_us,
        acting=cb[cb["issue"].notna() & (cb["saving_us"] > 0)],
        achieved=main["flops"].sum() / main["matrix_us"].sum() / 1e6 if len(main) else 0.0,
        main_rung=main_rung,
        main_peak=(spec.peak(main_rung) or math.nan) if main_rung else math.nan,
        defect_saving=defect_saving,
        fp32_note=fp32_note,
    )


def _decide(p: _Placed, t) -> Quiet | None:
    """Quiet when the compute-bound ops do not dominate the GPU's work, nothing this rule knows would help
    them, or what it would save is under `min_saving_share` of the step."""
    if p.cb_busy_share < t["min_share"] and _defect_pays(p.defect_saving, t):
        p.acting = p.acting[p.acting["issue"].isin(list(FIX_OF_ISSUE))]  # the defect, not the next rung
        return None
    if p.cb_busy_share < t["min_share"]:
        return Quiet(
            f"matrix math is {percent(p.matrix_share)} of the step but only {percent(p.cb_busy_share)} of the GPU's "
            f"busy time is compute-bound < {percent(t['min_share'])}{_why_not_compute_bound(p.rows)}{p.fp32_note}"
        )
    if not len(p.acting):
        return Quiet(_quiet_detail(p.cb, p.spec, p.achieved, p.main_rung, p.main_peak, p.cb_share))
    saving = p.metrics.per_step(p.acting["saving_us"].sum()) / p.step_us
    if saving < t["min_saving_share"]:
        return Quiet(
            f"compute-bound matrix math is {percent(p.cb_busy_share)} of the GPU's busy time, but moving it to "
            f"{_target_names(p.acting)} would save {percent(saving)} of the step < {percent(t['min_saving_share'])}"
        )
    return None


_DEFECT_FIX_WORDS = {"tensor-cores-unused": "tensor cores", "misaligned": "padded dimensions"}


def _target_names(acting: pd.DataFrame) -> str:
    """The precisions or changes the acting ops would move to, in words."""
    names = []
    pairs = acting[["issue", "target"]].drop_duplicates()
    for issue, target in zip(pairs["issue"], pairs["target"].astype(str)):
        name = rung_name(target) if issue == "next-rung" else _DEFECT_FIX_WORDS.get(issue, issue)
        if name not in names:
            names.append(name)
    return " / ".join(names)


def _why_not_compute_bound(rows: pd.DataFrame) -> str:
    """Why placed matrix math is not compute-bound: ops left off for impossible speeds, else low intensity."""
    impossible = _impossible_note(rows)
    placed = rows[~rows["impossible"]]
    if impossible and (not len(placed) or placed["intensity"].median() >= placed["ridge"].median()):
        return impossible
    return (
        f" (median intensity {rows['intensity'].median():.1f} FLOP/B against a ridge of {rows['ridge'].median():.0f}: "
        f"memory-bound products, e.g. GEMV-shaped decode, are the decode-latency rule's){impossible}"
    )


def _impossible_note(rows: pd.DataFrame) -> str:
    """Ops that ran above the peak of their precision cannot be placed: say so, and that they were left off."""
    bad = rows[rows["impossible"]]
    if not len(bad):
        return ""
    return (
        f"; {len(bad)} op(s) (e.g. {bad['op_name'].iloc[0]}) ran faster than the peak of the units they ran "
        "on, so their FLOPs or their times are wrong, and were left off the roofline"
    )


def _no_shapes_reason(matrix: pd.DataFrame) -> str:
    """Why the matrix ops have no FLOPs, and what would give them: shapes, or Nsight Compute."""
    if matrix["op_name"].isna().all():
        return (
            "CUDA-graph replays carry none; profile one step eagerly with record_shapes=True: "
            "`--ncu` measures bytes and classes but not FLOPs"
        )
    return "profile with record_shapes=True"


def _per_distinct(values: pd.Series, f) -> np.ndarray:
    """f of each row's value, called once per distinct value (missing values as NaN), as an object array."""
    codes, distinct = pd.factorize(values, use_na_sentinel=True)
    out = np.empty(len(distinct) + 1, dtype=object)
    out[:-1] = [f(v) for v in distinct]
    out[-1] = f(math.nan)  # code -1: a missing value, which the row read as NaN
    return out[codes]


def _tensor_cores(flag, pct) -> int:
    """Tensor-core use as recorded, else as measured: 1 yes, 0 no, -1 unknown."""
    tc = None if flag is pd.NA or (isinstance(flag, float) and math.isnan(flag)) else bool(flag)
    if tc is None and not pd.isna(pct):
        tc = pct >= MEASURED_TENSOR_PCT
    return -1 if tc is None else int(tc)


def _place_all(known: pd.DataFrame, spec, t, sms: int | None = None) -> pd.DataFrame:
    """Roofline position, precision as run, issue and estimated time after the fix of every op, one row
    each (the index of `known`), in column operations: precision, ceilings and alignment are worked out
    once per distinct dtype, rung or shape, the rest over whole columns. With the GPU's SM count `sms`,
    the time after is bounded for grids too small to fill it (`_small_grid`)."""
    flops = known["flops"].to_numpy(float)
    us = known["matrix_us"].to_numpy(float)
    nbytes = known["bytes"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where(us > 0, flops / us / 1e6, 0.0)
    esize = _per_distinct(known["dtype"], lambda d: dtype_bytes(d, 4))
    run, tc = _precision_as_run(known, spec, achieved)
    roof = _roofline(known, spec, t, run, achieved)
    bad_dims = _all_bad_dims(known, esize, t)
    issue, target = _issues(spec, t, run, tc, achieved, roof, bad_dims)
    after = _after(spec, flops, nbytes, esize, issue, target)
    filled = _filled(known, sms) if sms else None
    if filled is not None:
        after = _small_grid(after, us, filled)
    left = us - after
    saving = np.where(np.isnan(after) | ~(left > 0.0), 0.0, left)
    placed = _columns(known, run, achieved, roof, issue, target, after, saving, bad_dims)
    if filled is not None:
        placed["filled"] = filled
    return placed


def _precision_as_run(known: pd.DataFrame, spec, achieved: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the precision each op ran in, its tensor-core use: 1 yes, 0 no, -1 unknown): fp32 on tensor cores
    is TF32 where the GPU has it, and 16-bit data on CUDA cores runs at the fp32 rate."""
    rung = _per_distinct(known["dtype"], precision)
    tc = np.fromiter(
        map(_tensor_cores, known["tensor_core"].tolist(), known["tensor_pct"].tolist()), np.int8, len(known)
    )
    fp32 = rung == "fp32"
    tc = np.where(fp32 & (tc == -1), achieved > (spec.peak("fp32") or math.inf), tc).astype(np.int8)
    half = np.isin(rung, NARROW_PRECISIONS)
    run = np.where(rung == None, "fp32", rung).astype(object)  # noqa: E711 - elementwise
    run[fp32] = "tf32" if spec.peak("tf32") else "fp32"
    run[fp32 & (tc != 1)] = "fp32"
    run[half & (tc == 0)] = "fp32"
    return run, tc


@dataclasses.dataclass(frozen=True)
class _Roof:
    """Each op's place on the roofline, one array entry per op (what `_roofline` found)."""

    ridge: np.ndarray  # FLOP/B where the precision it ran in turns compute-bound
    peak: np.ndarray  # TFLOP/s of that precision
    measured: np.ndarray  # Nsight Compute measured the op
    intensity: np.ndarray  # FLOP/B, on the DRAM bytes measured where they were
    compute_bound: np.ndarray
    impossible: np.ndarray  # it ran above its peak: left off the roofline


def _roofline(known: pd.DataFrame, spec, t, run: np.ndarray, achieved: np.ndarray) -> _Roof:
    """The ridge and peak of the precision each op ran in, its arithmetic intensity, whether it is
    compute-bound (its intensity, or the shapes', past `min_ridge_share` of the ridge, or Nsight Compute
    said so) and whether it ran faster than its peak (impossible, never compute-bound)."""
    flops = known["flops"].to_numpy(float)
    nbytes = known["bytes"].to_numpy(float)
    dram = pd.to_numeric(known["dram_bytes"], errors="coerce").to_numpy(float)
    bound = known["bound"].tolist()
    distinct_runs = set(run.tolist())
    ridge_of = {r: spec.ridge(r) or spec.ridge("fp32") or math.inf for r in distinct_runs}
    peak_of = {r: spec.peak(r) or math.nan for r in distinct_runs}
    ridge = np.array([ridge_of[r] for r in run.tolist()], dtype=float)
    peak = np.array([peak_of[r] for r in run.tolist()], dtype=float)
    measured = np.array([isinstance(b, str) for b in bound], dtype=bool)
    moved = np.where(measured & (dram > 0), dram, nbytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(moved > 0, flops / moved, math.inf)
        shaped = np.where(nbytes > 0, flops / nbytes, math.inf)
    said_compute = np.array([b == "compute-bound" for b in bound], dtype=bool)
    compute_bound = (np.where(shaped > intensity, shaped, intensity) >= t["min_ridge_share"] * ridge) | said_compute
    impossible = achieved > peak
    compute_bound &= ~impossible
    return _Roof(ridge, peak, measured, intensity, compute_bound, impossible)


def _all_bad_dims(known: pd.DataFrame, esize: np.ndarray, t) -> list[str | None]:
    """`_bad_dims` of every op (its dimensions not a multiple of `align_bytes`), once per distinct shape."""
    align = [max(1, int(t["align_bytes"] // e)) for e in esize.tolist()]
    memo: dict = {}
    return [
        memo[key] if key in memo else memo.setdefault(key, _bad_dims(*key))
        for key in zip(known["kind"].tolist(), known["k"].tolist(), known["n"].tolist(), align)
    ]


def _issues(spec, t, run, tc, achieved, roof: _Roof, bad_dims: list) -> tuple[np.ndarray, np.ndarray]:
    """(issue, target precision) of each compute-bound op, the first that holds: fp32 on matrix cores
    without TF32, tensor cores unused, misaligned dimensions, near the peak with a faster precision next."""
    issue = np.full(len(run), None, dtype=object)
    target = np.full(len(run), None, dtype=object)
    open_ = roof.compute_bound.copy()
    pick = open_ & (run == "fp32") & (tc == 1)  # fp32 on matrix cores without TF32 (AMD MFMA)
    issue[pick], target[pick], open_ = "next-rung", spec.half_rung(), open_ & ~pick
    pick = open_ & ((tc == 0) | (run == "fp32"))
    issue[pick], target[pick], open_ = "tensor-cores-unused", spec.half_rung(), open_ & ~pick
    pick = open_ & np.array([b is not None for b in bad_dims], dtype=bool)
    issue[pick], target[pick], open_ = "misaligned", run[pick], open_ & ~pick
    next_of = {r: spec.next_rung(r) for r in set(run.tolist())}
    nxt = np.array([next_of[r] for r in run.tolist()], dtype=object)
    pick = open_ & (achieved >= t["near_peak_share"] * roof.peak) & (nxt != None)  # noqa: E711 - elementwise
    issue[pick], target[pick] = "next-rung", nxt[pick]
    return issue, target


def _after(spec, flops, nbytes, esize, issue, target) -> np.ndarray:
    """µs each op would take at its target precision: max(FLOPs ÷ achievable TFLOP/s, bytes at the target's
    size ÷ achievable TB/s); NaN without a target or without a figure for it."""
    after = np.full(len(issue), math.nan)
    for goal in {g for g in target.tolist() if g}:
        tflops = spec.achievable(goal)
        if not tflops:
            continue
        rows = target == goal
        e, b = esize[rows].astype(float), nbytes[rows]
        factor = precision_bytes(goal) or e
        new_bytes = np.where(issue[rows] != "misaligned", b * factor / e, b)
        compute_us = flops[rows] / tflops / 1e6
        memory_us = new_bytes / spec.achievable_tbps / 1e6
        after[rows] = np.where(memory_us > compute_us, memory_us, compute_us)
    return after


def _filled(known: pd.DataFrame, sms: int) -> np.ndarray:
    """The share of the GPU's SMs each product's grid of TILE × TILE output tiles can fill (1 where its
    dimensions are unknown)."""
    m = pd.to_numeric(known["m"], errors="coerce").to_numpy(float)
    n = pd.to_numeric(known["n"], errors="coerce").to_numpy(float)
    batch = pd.to_numeric(known["batch"], errors="coerce").fillna(1).to_numpy(float)
    tiles = batch * np.ceil(m / TILE) * np.ceil(n / TILE)
    return np.where(np.isfinite(tiles) & (tiles > 0), np.minimum(1.0, tiles / sms), 1.0)


def _small_grid(after: np.ndarray, us: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """The time after the fix of GEMMs too small to fill the GPU. A product of fewer output tiles
    (TILE × TILE) than the GPU has SMs runs one partial wave, whose length the K loop of one tile sets:
    a faster precision or layout gains only the share of SMs the grid fills (`filled`; BERT-base at
    batch 1 on the H200: 6 tiles of 128 × 768 on 132 SMs, TF32 measured 1.05–1.08× on the step where
    the roofline promised 1.45–2.1×). And no GEMM kernel takes less than MIN_GEMM_US."""
    gains = after < us
    bounded = np.where(gains, us - (us - after) * filled, after)
    return np.where(np.isnan(after), after, np.maximum(bounded, np.minimum(MIN_GEMM_US, us)))


def _columns(known, run, achieved, roof: _Roof, issue, target, after, saving, bad_dims) -> pd.DataFrame:
    """The placed ops as one frame on the index of `known`."""
    columns = {
        "op_name": known["op_name"].tolist(),
        "shapes": known["shapes"].tolist(),
        "kernel": known["kernel"].tolist(),
        "matrix_us": known["matrix_us"].tolist(),
        "flops": known["flops"].tolist(),
        "bytes": known["bytes"].tolist(),
        "dtype": known["dtype"].tolist(),
        "rung": run.tolist(),
        "achieved": achieved.tolist(),
        "peak": roof.peak.tolist(),
        "intensity": roof.intensity.tolist(),
        "ridge": roof.ridge.tolist(),
        "compute_bound": roof.compute_bound.tolist(),
        "issue": issue.tolist(),
        "target": target.tolist(),
        "after_us": after.tolist(),
        "saving_us": saving.tolist(),
        "bad_dims": bad_dims,
        "impossible": roof.impossible.tolist(),
        "m": known["m"].tolist(),
        "n": known["n"].tolist(),
        "k": known["k"].tolist(),
        "kind": known["kind"].tolist(),
        "measured": roof.measured.tolist(),
        "sm_pct": known["sm_pct"].tolist(),
        "tensor_pct": known["tensor_pct"].tolist(),
        "dram_pct": known["dram_pct"].tolist(),
        "bound": known["bound"].tolist(),
    }
    return pd.DataFrame(columns, index=known.index)


def _bad_dims(kind, k, n, align: int) -> str | None:
    """'K = 8191' etc. when a leading dimension is not a multiple of `align` elements."""
    names = (("K", k), ("N", n)) if kind == "gemm" else (("output channels", n),)
    bad = [f"{name} = {int(v)}" for name, v in names if v is not None and not pd.isna(v) and int(v) % align]
    return ", ".join(bad) or None


def _measured_evidence(cb: pd.DataFrame) -> list[Evidence]:
    """Nsight Compute's SM throughput and tensor-pipe activity of the measured ops, weighted by time
    (Nsight Compute gives percents; the evidence holds them as fractions)."""
    m = cb[cb["measured"]]
    if not len(m):
        return []
    w = m["matrix_us"]

    def weighted(column: str) -> float:
        return fraction_of(float((m[column] * w).sum() / w.sum()))

    sm, latency = shown_share(weighted("sm_pct")), fraction_of(LATENCY_PCT)  # the op as the percents read
    out = [
        Evidence.share(
            "SM throughput (share of peak), measured by Nsight Compute", sm, ">=" if sm >= latency else "<", latency
        )
    ]
    classes = m.groupby("bound")["matrix_us"].sum()
    if (classes.index != "compute-bound").any():
        share = classes.drop("compute-bound", errors="ignore").sum() / w.sum()
        top = classes.drop("compute-bound", errors="ignore").idxmax()
        out.append(
            Evidence.share(
                f"matrix time Nsight Compute calls {top} (kept: the shapes put it right of the ridge)", float(share)
            )
        )
    if m["tensor_pct"].notna().all():
        out.append(Evidence.share("tensor pipe active, measured", weighted("tensor_pct")))
    if m["dram_pct"].notna().all():
        out.append(Evidence.share("DRAM throughput (share of peak), measured", weighted("dram_pct")))
    return out


def _measured_basis(cb: pd.DataFrame) -> str:
    n = int(cb["measured"].sum())
    if not n:
        return "FLOPs and bytes estimated from shapes, kernel time measured"
    which = "all" if n == len(cb) else f"{n} of {len(cb)}"
    kept = int((cb["measured"] & (cb["bound"] != "compute-bound")).sum())
    also = (
        (
            f"; {kept} measured op instances that Nsight Compute classes otherwise stay compute-bound, their "
            "shapes putting them right of the ridge (the class says what limits the kernel, e.g. a misaligned "
            "fallback, not that the math is small)"
        )
        if kept
        else ""
    )
    return (
        f"FLOPs estimated from shapes, kernel time measured; SM throughput, tensor-pipe activity and DRAM "
        f"bytes measured by Nsight Compute for {which} compute-bound ops (their class from its "
        f"speed-of-light numbers){also}"
    )


def _issue_label(issue: str, part: pd.DataFrame) -> str:
    if issue == "tensor-cores-unused":
        return "matrix time on CUDA cores (tensor cores unused)"
    if issue == "misaligned":
        return f"matrix time in misaligned GEMMs ({part['bad_dims'].iloc[0]}, not a multiple of 8/16 bytes)"
    rung, target = rung_name(_lead_rung(part)), part["target"].iloc[0].upper()
    return f"matrix time near the {rung} peak with {target} available"


def _lead_rung(part: pd.DataFrame) -> str:
    """The precision that holds most of these ops' matrix time."""
    return str(part.groupby("rung")["matrix_us"].sum().idxmax())


def _title(issue: str, part: pd.DataFrame) -> str:
    if issue == "tensor-cores-unused":
        return "Compute-bound matrix math on CUDA cores: tensor cores unused"
    if issue == "misaligned":
        first = part.sort_values("saving_us", ascending=False).iloc[0]
        return (
            f"Compute-bound matmul with misaligned dimensions ({first['bad_dims']} in "
            f"{first['op_name']} {first['shapes']}): a slow fallback kernel"
        )
    rung = _lead_rung(part)
    return (
        f"Compute-bound matrix math near the {rung_name(rung)} peak: {part['target'].iloc[0].upper()} is the next step"
    )


def _trains(m: Metrics) -> bool:
    """Whether the trace runs a backward pass (autograd's engine or gradient accumulation ops)."""
    ops = m.trace.cpu_ops
    return bool(len(ops)) and bool(name_search(ops["name"], BACKWARD).any())


def _fix_for(issue: str, part: pd.DataFrame, spec: DeviceSpec, n: int, training: bool = True) -> Fix:
    """The fix for the ops of one issue: tensor cores, padding, or the next precision."""
    if issue == "tensor-cores-unused":
        return _tensor_core_fix(part, spec, n, training)
    if issue == "misaligned":
        shapes = "; ".join(sorted({f"{r.op_name} {r.shapes}: {r.bad_dims}" for r in part.itertuples()}))
        how = (
            f"{shapes} — not a multiple of 8 elements (16 bytes), so cuBLAS falls back to an unaligned kernel "
            f"({part['kernel'].iloc[0][:60]}…). Pad the dimension up to a multiple of 8 (better 64 or 128) with "
            f"zeros: the product is unchanged. Estimated {part['saving_us'].sum() / max(len(part), 1):,.0f} µs "
            "saved per call."
        )
        return fix("pad-dims", how=how, code=_pad_code(part.iloc[0]))
    target = part["target"].iloc[0]
    if target == "fp8":
        how = (
            "These matmuls already run on bf16/fp16 tensor cores near their peak; the next step is FP8 "
            f"(e4m3), which doubles the tensor-core rate on this GPU (achievable ≈ {spec.achievable('fp8'):,.0f} "
            "TFLOP/s). Scale per tensor or per row, and check accuracy on your evaluation set."
        )
        return fix("fp8", how=how, code=_fp8_code())
    how = (
        f"These matmuls run on {rung_name(_lead_rung(part))} near their peak; {target} autocast doubles "
        f"the tensor-core rate again and halves the bytes."
    )
    return fix("bf16-tensor-cores", how=how, code=_autocast_code(target))


def _tensor_core_fix(part: pd.DataFrame, spec: DeviceSpec, n: int, training: bool = True) -> Fix:
    """bf16-tensor-cores for ops on the CUDA cores: autocast fp32 data (fp16 without bf16) when training,
    the model's weights in 16 bits for inference, or, for data already 16-bit, the layout and sizes
    cuBLAS/cuDNN need for a tensor-core kernel."""
    half = spec.half_rung() or "bf16"
    what = "convolutions" if (part["kind"] == "conv").all() else "matmuls"
    kernel = part["kernel"].iloc[0][:60]
    dtypes = {precision(d) for d in part["dtype"]}
    if dtypes <= set(HALF_PRECISIONS):  # already 16-bit: autocast would change nothing
        how = (
            f"These {what} already have {'/'.join(sorted(r for r in dtypes if r))} data but run on CUDA-core kernels "
            f"({kernel}…): cuBLAS/cuDNN found no tensor-core kernel for their layout or sizes. Make the "
            "channel and feature dimensions multiples of 8, and use channels_last for convolutions."
        )
        return fix("bf16-tensor-cores", how=how, code=_layout_code())
    if training:
        how = (
            f"These {what} run in fp32 on the CUDA cores ({kernel}…). Autocast them to {half} so they run on "
            f"tensor cores.{_tf32_note(part, spec, half, n)}"
        )
    else:
        how = (
            f"These {what} run in fp32 on the CUDA cores ({kernel}…) and the trace runs no backward pass: put "
            f"the model's weights and inputs in {half} (`model.to(torch.{_TORCH_DTYPE[half]})`) so they run "
            "on tensor cores and read half the bytes; autocast would instead cast every fp32 weight again at "
            f"every call.{_tf32_note(part, spec, half, n, half)}"
        )
    if half == "fp16":
        how += (
            " This GPU has no bf16 or TF32 tensor cores: autocast to fp16, with a GradScaler in "
            "training (fp16 gradients underflow without one)."
        )
    if not training:
        return fix("bf16-tensor-cores", how=how, code=_inference_code(half))
    return fix("bf16-tensor-cores", how=how, code=_autocast_code(half, bool(spec.achievable("tf32"))))


def _tf32_note(part: pd.DataFrame, spec: DeviceSpec, half: str, n: int, by: str = "") -> str:
    """Where the GPU has TF32: what allowing it would bring these ops to, against `half` autocast, or `by` ("" without TF32)."""
    if not spec.achievable("tf32"):
        return ""
    roof = np.maximum(
        part["flops"].to_numpy(float) / spec.achievable("tf32") / 1e6,
        part["bytes"].to_numpy(float) / spec.achievable_tbps / 1e6,
    )
    us = part["matrix_us"].to_numpy(float)
    if "filled" in part:
        roof = _small_grid(roof, us, part["filled"].to_numpy(float))
    tf32_after = float(np.minimum(roof, us).sum()) / n
    return (
        f" Keeping fp32 data but allowing TF32 "
        f"(torch.backends.cuda.matmul.allow_tf32 = True) would bring these ops to about "
        f"{tf32_after:,.0f} µs per step instead of {by or half + ' autocast'}'s {part['after_us'].sum() / n:,.0f} µs "
        f"(now {part['matrix_us'].sum() / n:,.0f} µs)."
    )


def _quiet_detail(cb, spec, achieved, rung, peak, share) -> str:
    top = spec.next_rung(rung)
    where = f"{achieved:,.0f} TFLOP/s = {percent(achieved / peak)} of the {rung_name(rung)} peak"
    if top is None:
        return (
            f"compute-bound matrix math {percent(share)} of the step on {rung_name(rung)} at {where}: "
            f"already the fastest precision of this GPU's tensor cores ({spec.name})"
        )
    return (
        f"compute-bound matrix math {percent(share)} of the step at {where}: below the healthy range, but no "
        "missing tensor cores or misaligned dimensions to blame (small or oddly shaped matrices?)"
    )


def _fp32_note(matrix: pd.DataFrame, step_us: float, n: int) -> str:
    slow = matrix[(matrix["tensor_core"] == False) & (matrix["dtype"] == "float")]  # noqa: E712
    if not len(slow):
        return ""
    return (
        f"; note: {percent(slow['matrix_us'].sum() / n / step_us)} of the step is fp32 matrix math on CUDA cores "
        "(tensor cores unused), not enough to dominate it"
    )


def _offenders(cb: pd.DataFrame, n: int) -> list[Offender]:
    grouped = cb.groupby(["op_name", "shapes", "kernel"], dropna=False, sort=False)
    rows = []
    for (op, shapes, kernel), g in grouped:
        us = g["matrix_us"].sum()
        rows.append(
            {
                "op": op,
                "shapes": shapes,
                "kernel": kernel,
                "calls_per_step": round(len(g) / n, 2),
                "us_per_step": round(float(us) / n, 1),
                "precision": g["rung"].iloc[0],
                "tflops": round(float(g["flops"].sum()) / us / 1e6, 1) if us else None,
                "share_of_peak": round(float(g["flops"].sum()) / us / 1e6 / g["peak"].iloc[0], 3) if us else None,
                "flop_per_byte": round(float(g["intensity"].median()), 1),
                "issue": _plain(g["issue"].iloc[0]),
                "target": _plain(g["target"].iloc[0]),
                "est_us_per_step_after": (
                    round(float(g["after_us"].sum()) / n, 1) if g["issue"].notna().any() else None
                ),
            }
        )
    return top_offenders(rows, "op", by="us_per_step")


def _plain(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _layout_code() -> str:
    return (
        "# convolutions: channels_last lets cuDNN pick its tensor-core kernels\n"
        "model = model.to(memory_format=torch.channels_last)\n"
        "x = x.to(memory_format=torch.channels_last)\n"
        "# matmuls: pad features to a multiple of 8 (better 64), e.g. nn.Linear(1000, 4096) -> nn.Linear(1024, 4096)"
    )


_TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


def _inference_code(rung: str) -> str:
    dtype = _TORCH_DTYPE.get(rung, "bfloat16")
    return (
        f"# inference: weights and inputs in 16 bits, once (no per-call casts as under autocast)\n"
        f"model = model.to(torch.{dtype}).eval()\n"
        "with torch.inference_mode():\n"
        f"    out = model(x.to(torch.{dtype}))\n\n"
        "# or, keeping fp32 weights: TF32 tensor cores (Ampere and later)\n"
        'torch.set_float32_matmul_precision("high")'
    )


def _autocast_code(rung: str, tf32: bool = True) -> str:
    dtype = f"torch.{_TORCH_DTYPE.get(rung, 'bfloat16')}"
    if rung == "fp16" and not tf32:  # Volta / Turing: fp16 needs loss scaling, and there is no TF32
        return (
            "# fp16 on tensor cores, with a GradScaler (fp16 gradients underflow without one)\n"
            'scaler = torch.cuda.amp.GradScaler()  # torch.amp.GradScaler("cuda") on torch >= 2.3\n'
            'with torch.autocast("cuda", dtype=torch.float16):\n'
            "    loss = loss_fn(model(x), y)\n"
            "scaler.scale(loss).backward()\n"
            "scaler.step(optimizer)\n"
            "scaler.update()"
        )
    return (
        "# run the matmuls in 16-bit on tensor cores (weights stay fp32 for the optimizer)\n"
        f'with torch.autocast("cuda", dtype={dtype}):\n'
        "    out = model(x)\n\n"
        "# or, keeping fp32 data: TF32 tensor cores (Ampere and later)\n"
        "torch.backends.cuda.matmul.allow_tf32 = True\n"
        "torch.backends.cudnn.allow_tf32 = True"
    )


def _pad_code(row) -> str:
    k = int(row["k"]) if row["k"] is not None and not pd.isna(row["k"]) else 8191
    padded = -(-k // 64) * 64
    return (
        "import torch.nn.functional as F\n"
        f"# K = {k} → {padded}: zero padding leaves a @ b unchanged\n"
        f"pad = {padded} - a.shape[-1]\n"
        "a = F.pad(a, (0, pad))          # (M, K) -> (M, K + pad)\n"
        "b = F.pad(b, (0, 0, 0, pad))    # (K, N) -> (K + pad, N)\n"
        "out = a @ b\n"
        "# for nn.Linear: pad in_features/out_features (and the vocabulary) to multiples of 64 once, at init"
    )


def _fp8_code() -> str:
    return (
        "# FP8 (e4m3) matmul with per-tensor scales, bf16 output (Hopper / Ada / MI300)\n"
        "a8 = (a / sa).to(torch.float8_e4m3fn)                 # sa = a.abs().max() / 448\n"
        "b8 = (b / sb).to(torch.float8_e4m3fn).t().contiguous().t()  # column-major\n"
        "out = torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)\n"
        "# whole models: torchao.float8.convert_to_float8_training(model) or Transformer Engine"
    )


def _half_after(ops: pd.DataFrame, spec: DeviceSpec, target: str, sms: int | None) -> pd.Series:
    """µs each fp32 / TF32 matmul or convolution with known FLOPs would take at `target` (the roofline time,
    bounded for grids too small to fill the GPU), by the index of `ops`; ops whose recorded FLOPs put them
    above the peak of the units they ran on are left out (they save nothing)."""
    known = ops[whole_step.fp32_matrix(ops)]
    if len(known):  # ops that ran faster than the peak of their units have wrong FLOPs: left off, as on the roofline
        us = known["matrix_us"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            achieved = np.where(us > 0, known["flops"].to_numpy(float) / us / 1e6, 0.0)
        run, _ = _precision_as_run(known, spec, achieved)
        peak = np.array([spec.peak(r) or math.inf for r in run.tolist()], dtype=float)
        known = known[achieved <= peak]
    if not len(known):
        return pd.Series(dtype=float)
    esize = _per_distinct(known["dtype"], lambda d: dtype_bytes(d, 4))
    goal = np.full(len(known), target, dtype=object)
    after = _after(spec, known["flops"].to_numpy(float), known["bytes"].to_numpy(float), esize, goal, goal)
    if sms:
        after = _small_grid(after, known["matrix_us"].to_numpy(float), _filled(known, sms))
    return pd.Series(after, index=known.index)


_WHOLE_WHY = (
    "Training in fp32 pays twice: the matmuls run at the TF32 (or CUDA-core) rate instead of bf16 tensor cores, and "
    "every activation moves 4 bytes per element where 2 would do, so the elementwise kernels, the reductions and "
    "attention (which cannot use FlashAttention in fp32) take twice as long as they need to. Autocast keeps in fp32 "
    "what needs the range: norms, softmax and the loss, and the optimizer's fp32 weights."
)


def _whole_step_finding(rule: Rule, ws: "whole_step.WholeStep", ops: pd.DataFrame, target: str, m: Metrics, t):
    """The precision finding for a training step priced whole at `target`."""
    after = ws.step_us - ws.saving
    kept = ", ".join(whole_step.kept_names(ops)) or "norms, the loss, the optimizer"
    how = (
        f"Autocast to {target}: the matmuls move to {target} tensor cores and the activations to 2 bytes; it keeps "
        f"in fp32 what needs the range ({kept}) and the optimizer updates fp32 weights."
    )
    return Finding(
        rule=rule.id,
        severity=severity_ladder(ws.speedup, t, "high_speedup", None),
        title=f"The training step runs in fp32: {target} autocast would speed up the whole step",
        evidence=_whole_step_evidence(ws, target, t),
        offenders=top_offenders(
            [{"op": op, "us_saved_per_step": round(float(us), 1)} for op, us in ws.by_op.head(8).items() if us > 0],
            "op",
        ),
        fixes=[fix("bf16-tensor-cores", how=how, code=_autocast_code(target))],
        est_speedup=round(ws.speedup, 2),
        recoverable_us=round(ws.saving, 1),
        basis=(
            f"step {ws.step_us:,.0f} − {ws.saving:,.0f} µs = {after:,.0f} µs: fp32/TF32 matmuls at the roofline time of "
            f"{target} tensor cores, fp32 attention and activation kernels at half the bytes, the rest unchanged "
            f"({ws.gpu_saving:,.0f} µs of GPU time), never below the host's launch time ({ws.floor_us:,.0f} µs); "
            f"{time_base(m.budget)}"
        ),
        why=_WHOLE_WHY,
    )


def _whole_step_evidence(ws: "whole_step.WholeStep", target: str, t) -> list[Evidence]:
    """The saving against its floor, the fp32 share against its gate, then what each part saves and what stays."""
    return [
        Evidence.share(f"step saved at {target}", ws.share, ">=", t["min_whole_saving_share"]),
        Evidence.share("matrix time in fp32 / TF32", ws.matrix_share, ">=", t["min_fp32_matrix_share"]),
        Evidence("saved on matmuls and convolutions", round(ws.matrix_saving, 1), unit="µs per step"),
        Evidence("saved on attention (half the bytes)", round(ws.attention_saving, 1), unit="µs per step"),
        Evidence(
            "saved on bandwidth-bound kernels (half the bytes)", round(ws.bandwidth_saving, 1), unit="µs per step"
        ),
        Evidence("kept in fp32 (norms, softmax, loss, optimizer)", round(ws.kept_us, 1), unit="µs per step"),
    ]
