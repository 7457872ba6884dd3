"""memory-layout: convolutions in NCHW make cuDNN convert layouts around every convolution.

**Signal.** On tensor-core GPUs cuDNN's fastest convolution kernels read and write NHWC (channels
last). Given NCHW tensors (PyTorch's default layout), cuDNN transposes the input, the weights and
the gradients into NHWC and the output back, with kernels named `nchwToNhwc…` / `nhwcToNchw…`
(`nchw2nhwc` / `nhwc2nchw` in some cuDNN versions), launched by the convolution ops themselves. The
rule adds up the GPU time of those kernels in the measured steps and fires when it is at least
`min_share` of the step.

**Threshold.** 5 % of the step: below that, converting the model is at most 1.05× by this count. On
the H200 capture of a ResNet-50-style net trained in fp32 NCHW (batch 64, 224², conv_nchw) the
conversions take well above it; the same net in channels_last (conv_channels_last) runs none, and no
other capture in fixtures/captures has a convolution.

**Fix.** `channels-last`: `model.to(memory_format=torch.channels_last)` and
`x = x.contiguous(memory_format=torch.channels_last)` for the input; convolutions then run on NHWC
kernels directly, and batch norm on its channels-last kernels. With bf16 autocast as well, the
convolutions run at tensor-core bf16 rates.

**Estimate.** step ÷ (step − conversion time): the conversions are what surely disappears. It is a
lower bound: the NHWC convolution and batch-norm kernels are also faster than the NCHW kernels they
replace, which the trace cannot price; docs/measured-fixes.md sets the estimate against the
measured pair.
"""
from __future__ import annotations

import re

from diagnose.engine import Quiet, Rule, Threshold
from diagnose.findings import Evidence, Finding
from diagnose.fixes import fix

LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", re.IGNORECASE)
CONV_OP = re.compile(r"conv", re.IGNORECASE)


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
    )

    def check(self, ctx, t):
        """Sum the layout conversion kernels' time per step and weigh it against the step."""
        m = ctx.metrics
        budget, n = m.budget, max(len(m.steps.windows), 1)
        kernels = m.step_kernels[m.step_kernels["cat"] == "kernel"]
        names = kernels["name"].astype(str)
        layout = kernels[names.str.contains(LAYOUT_KERNEL)]
        convert_us = float(layout["dur"].sum()) / n
        share = budget.share(convert_us)
        busy_share = convert_us / budget.busy_us if budget.busy_us > 0 else 0.0
        if share < t["min_share"]:
            return Quiet(f"layout conversion kernels {share:.1%} of the step < {t['min_share']:.0%} "
                         f"({len(layout) / n:.0f} per step)")
        conv_ops = kernels["op_name"].astype(str).str.contains(CONV_OP)
        fixed = max(budget.step_us - convert_us, 1e-9)
        evidence = [
            Evidence("layout conversion kernels per step", round(share * 100, 1), ">=", t["min_share"] * 100, "%"),
            Evidence("share of GPU busy time", round(busy_share * 100, 1), unit="%"),
            Evidence("conversion kernels per step", round(len(layout) / n, 1)),
            Evidence("conversion time per step", round(convert_us, 1), unit="µs"),
            Evidence("kernels launched by convolution ops per step", round(float(conv_ops.sum()) / n, 1)),
        ]
        return Finding(
            rule=self.id,
            severity="high" if share >= t["high_share"] else "medium",
            title=self.title,
            evidence=evidence,
            offenders=_offenders(layout, n),
            fixes=[fix("channels-last", code=_code())],
            est_speedup=round(budget.step_us / fixed, 2),
            recoverable_us=round(convert_us, 2),
            basis=(f"channels-last step ≥ {budget.step_us:,.0f} − {convert_us:,.0f} µs of layout conversions "
                   f"= {fixed:,.0f} µs (a lower bound: the NHWC kernels are also faster); {budget.basis}"),
            why=("Tensor cores consume tiles of channels, so cuDNN's fast convolution kernels want the channels "
                 "of each pixel next to each other in memory (NHWC). PyTorch's default NCHW layout stores each "
                 "channel as a separate plane, so around every convolution cuDNN transposes the activations, "
                 "weights and gradients to NHWC and the result back: extra passes over HBM that do no math. "
                 "In channels_last the tensors already have the kernels' layout."),
        )


def _offenders(layout, n: int) -> list[dict]:
    """The ops that launched the conversions, most time first."""
    if not len(layout):
        return []
    by = layout.assign(op=layout["op_name"].fillna("(no CPU op recorded)")).groupby("op")
    rows = by.agg(kernels=("dur", "size"), us=("dur", "sum")).sort_values("us", ascending=False).head(8)
    return [{"op": op, "conversion_kernels_per_step": round(r.kernels / n, 1),
             "conversion_us_per_step": round(float(r.us) / n, 1)} for op, r in rows.iterrows()]


def _code() -> str:
    return ("model = model.to(memory_format=torch.channels_last)\n"
            "for x, y in loader:\n"
            "    x = x.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last)\n"
            "    with torch.autocast(\"cuda\", dtype=torch.bfloat16):  # optional: bf16 tensor cores as well\n"
            "        loss = criterion(model(x), y)")
