"""memory-layout: convolutions in NCHW make cuDNN convert layouts around every convolution.

**Signal.** On tensor-core GPUs cuDNN's fastest convolution kernels read and write NHWC (channels
last). Given NCHW tensors (PyTorch's default layout), cuDNN transposes the input, the weights and
the gradients into NHWC and the output back, with kernels named `nchwToNhwc…` / `nhwcToNchw…`
(`nchw2nhwc` / `nhwc2nchw` in some cuDNN versions), launched by the convolution ops themselves. The
rule adds up the GPU time of those kernels in the measured steps and fires when it is at least
`min_share` of the step.

**Threshold.** 5 % of the step: below that, converting the model is at most 1.05× by this count. On
the H200 capture of a ResNet-50-style net trained in fp32 NCHW (batch 64, 224², conv_nchw) the
conversions take 10.6 % of the step (200 kernels, 3.4 ms of 32.3 ms); the same net in channels_last
(conv_channels_last, also with bf16 autocast) runs none. The DataLoader fixture's small NCHW conv
net would fire once its loader kept up (its conversions are 18 % of the 5.5 ms the GPU needs), and stays
quiet while the step waits for its input: 0.9 % of a 111 ms step with the loading in the main process
(host_loader_inline), under 4 % of the 26.9 ms mean step with four workers that fall behind
(host_loader_workers).

**Fix.** `channels-last`: `model.to(memory_format=torch.channels_last)` and
`x = x.contiguous(memory_format=torch.channels_last)` for the input; convolutions then run on NHWC
kernels directly, and batch norm on its channels-last kernels. With bf16 autocast as well, the
convolutions run at tensor-core bf16 rates.

**Estimate.** step after = step − conversion time − batch-norm kernel time × (1 −
`nhwc_batch_norm_ratio`) − convolution kernel time × (1 − `nhwc_conv_ratio`): the conversions
disappear, and cuDNN's NHWC batch-norm and convolution kernels take a fraction of the NCHW ones'
time. Both ratios come from a calibration pair, conv_nchw against conv_channels_last (H200,
benchmarks/calibrate.py derives them): batch norm 10,805 → 6,521 µs per step (0.60), convolutions
10,664 → 9,864 µs (0.93), conversions 3,429 → 0 µs. Held out: torchvision's own ResNet-50
(tv_resnet50_nchw → tv_resnet50_channels_last, measured 1.30×) — docs/measured-fixes.md.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.metrics import Metrics
from diagnose.metrics.budget import StepBudget
from diagnose.trace.names import name_search, name_test
from diagnose.vocabulary.kernels import is_layout_conversion
from diagnose.vocabulary.ops import BATCH_NORM_OP, CONV_OP
from diagnose.vocabulary.units import percent


class MemoryLayout(Rule):
    """NCHW convolutions with cuDNN layout conversions → channels_last."""

    id = "memory-layout"
    order = 45
    title = "NCHW convolutions: cuDNN converts layouts around every convolution"
    cheat_sheet = {
        "bottleneck": "convolutions in NCHW on tensor-core GPUs",
        "signal": "GPU time in cuDNN's nchwToNhwc / nhwcToNchw layout conversion kernels",
        "fix": "model and input in torch.channels_last",
        "impact": "removes the conversions; NHWC convolution and batch-norm kernels are faster",
    }
    needs = ("gpu", "steps")
    thresholds = (
        Threshold("min_share", 0.05, "fraction", "fire when layout conversions take at least this share of the step"),
        Threshold("high_share", 0.15, "fraction", "conversion share at which severity is high"),
        Threshold(
            "nhwc_batch_norm_ratio",
            0.60,
            "fraction",
            "time of cuDNN's NHWC batch-norm kernels ÷ the NCHW ones (calibrated on conv_nchw)",
        ),
        Threshold(
            "nhwc_conv_ratio",
            0.93,
            "fraction",
            "time of cuDNN's NHWC convolution kernels ÷ the NCHW ones (calibrated on conv_nchw)",
        ),
    )

    def check(self, ctx, t):
        """Sum the layout conversion kernels' time per step and weigh it against the step."""
        x = _measure(ctx.metrics)
        severity = _decide(x, t)
        if isinstance(severity, Quiet):
            return severity
        return _word(self, x, severity, _estimate(x, t), t)


_WHY = (
    "Tensor cores consume tiles of channels, so cuDNN's fast convolution kernels want the channels "
    "of each pixel next to each other in memory (NHWC). PyTorch's default NCHW layout stores each "
    "channel as a separate plane, so around every convolution cuDNN transposes the activations, "
    "weights and gradients to NHWC and the result back: extra passes over HBM that do no math. "
    "In channels_last the tensors already have the kernels' layout."
)


@dataclasses.dataclass(frozen=True)
class _Conversions:
    """The layout conversion kernels of the measured steps (what `_measure` found)."""

    budget: StepBudget
    n: int  # measured steps
    kernels: pd.DataFrame  # every kernel of the measured steps
    layout: pd.DataFrame  # the layout conversion kernels
    convert_us: float  # their time per step, never more than the GPU's busy time

    @property
    def share(self) -> float:
        """The conversions' time as a share of the step."""
        return self.budget.share(self.convert_us)


@dataclasses.dataclass(frozen=True)
class _Saving:
    """What channels_last saves per step (what `_estimate` found)."""

    norm_us: float  # NCHW batch-norm kernel time
    conv_us: float  # NCHW convolution kernel time
    saved: float  # the conversions, plus what NHWC batch norm and convolutions save
    fixed: float  # the step in channels_last


def _measure(m: Metrics) -> _Conversions:
    """The layout conversion kernels and their time per step."""
    budget, n = m.budget, max(len(m.steps.windows), 1)
    kernels = m.step_kernels[m.step_kernels["cat"] == "kernel"]
    layout = kernels[name_test(kernels["name"], is_layout_conversion)]
    # never more than the GPU's busy time: conversions overlapping other work save only their own span
    convert_us = min(float(layout["dur"].sum()) / n, budget.busy_us)
    return _Conversions(budget=budget, n=n, kernels=kernels, layout=layout, convert_us=convert_us)


def _decide(x: _Conversions, t) -> Severity | Quiet:
    """Quiet below `min_share` of the step; else high from `high_share`, medium below."""
    if x.share < t["min_share"]:
        return Quiet(
            f"layout conversion kernels {percent(x.share)} of the step < {percent(t['min_share'])} "
            f"({len(x.layout) / x.n:.0f} per step)"
        )
    return severity_ladder(x.share, t, medium=None)


def _estimate(x: _Conversions, t) -> _Saving:
    """channels-last step ≈ step − conversions − batch norm × (1 − its NHWC ratio) − convolutions × (1 − theirs),
    never saving more than the GPU's busy time."""
    norm_us, conv_us = layout_parts(x.kernels, x.n)
    saved = x.convert_us + norm_us * (1 - t["nhwc_batch_norm_ratio"]) + conv_us * (1 - t["nhwc_conv_ratio"])
    saved = min(saved, x.budget.busy_us)  # never more than the GPU's busy time
    return _Saving(norm_us=norm_us, conv_us=conv_us, saved=saved, fixed=max(x.budget.step_us - saved, 1e-9))


def _word(rule: Rule, x: _Conversions, severity: Severity, e: _Saving, t) -> Finding:
    """The finding: the conversions' share and count, the NCHW kernels' time, channels-last."""
    budget, n = x.budget, x.n
    conv_ops = name_search(x.kernels["op_name"].astype(str), CONV_OP)
    busy_share = x.convert_us / budget.busy_us if budget.busy_us > 0 else 0.0
    return Finding(
        rule=rule.id,
        severity=severity,
        title=rule.title,
        evidence=[
            Evidence.share("layout conversion kernels per step", x.share, ">=", t["min_share"]),
            Evidence.share("share of GPU busy time", busy_share),
            Evidence("conversion kernels per step", round(len(x.layout) / n, 1)),
            Evidence("conversion time per step", round(x.convert_us, 1), unit="µs"),
            Evidence("kernels launched by convolution ops per step", round(float(conv_ops.sum()) / n, 1)),
            Evidence("NCHW batch-norm kernel time per step", round(e.norm_us, 1), unit="µs"),
            Evidence("NCHW convolution kernel time per step", round(e.conv_us, 1), unit="µs"),
        ],
        offenders=_offenders(x.layout, n),
        fixes=[fix("channels-last", code=_code())],
        est_speedup=round(budget.step_us / e.fixed, 2),
        recoverable_us=round(e.saved, 2),
        basis=(
            f"channels-last step ≈ {budget.step_us:,.0f} − {x.convert_us:,.0f} µs of layout conversions − "
            f"{e.norm_us:,.0f} µs of batch norm × (1 − {t['nhwc_batch_norm_ratio']:g}) − {e.conv_us:,.0f} µs of "
            f"convolutions × (1 − {t['nhwc_conv_ratio']:g}) = {e.fixed:,.0f} µs (the NHWC kernels' time "
            f"ratios measured on the conv_nchw/conv_channels_last H200 pair); {budget.basis}"
        ),
        why=_WHY,
    )


def layout_parts(kernels, n: int) -> tuple[float, float]:
    """(batch-norm, convolution) kernel µs per step, conversions left out: what NHWC kernels replace."""
    ops = kernels["op_name"].astype(str)
    convert = name_test(kernels["name"], is_layout_conversion)
    norm = name_search(ops, BATCH_NORM_OP) & ~convert
    conv = name_search(ops, CONV_OP) & ~convert & ~norm
    return float(kernels[norm]["dur"].sum()) / n, float(kernels[conv]["dur"].sum()) / n


def _offenders(layout, n: int) -> list[Offender]:
    """The ops that launched the conversions, most time first."""
    if not len(layout):
        return []
    by = layout.assign(op=layout["op_name"].fillna("(no CPU op recorded)")).groupby("op")
    rows = aggregate(by, kernels=("dur", "size"), us=("dur", "sum")).sort_values("us", ascending=False).head(8)
    rows = [
        {
            "op": op,
            "conversion_kernels_per_step": round(r.kernels / n, 1),
            "conversion_us_per_step": round(float(r.us) / n, 1),
        }
        for op, r in rows.iterrows()
    ]
    return top_offenders(rows, "op")


def _code() -> str:
    return (
        "model = model.to(memory_format=torch.channels_last)\n"
        "for x, y in loader:\n"
        "    x = x.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last)\n"
        '    with torch.autocast("cuda", dtype=torch.bfloat16):  # optional: bf16 tensor cores as well\n'
        "        loss = criterion(model(x), y)"
    )
