"""The optimizer's step inside the measured steps: which implementation ran, what it launched, how long.

torch.optim wraps every `Optimizer.step` in a profiler range named `Optimizer.step#CLASS.step`.
Kernels whose launch call lies inside that range on the same host thread are the optimizer's. The
implementation is read off the ops inside the range: `aten::_fused_*` ops are a fused optimizer
(`fused=True`), `aten::_foreach_*` ops a multi-tensor one (`foreach=True`), neither a single-tensor
one (`foreach=False`: a few elementwise ops per parameter tensor, each its own launch).

An optimizer built without `capturable=True` keeps its step counters on the CPU and reads them
back to Python every step (`aten::item` inside the range: Adam's bias corrections); a CUDA graph
cannot capture such a step (PyTorch refuses: "capturable is False"). A fused step shows no such
read, though it too needs the flag to be captured: the trace cannot tell that.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from diagnose.trace.names import name_starts

PREFIX = "Optimizer.step#"
SINGLE, FOREACH, FUSED = "single-tensor", "foreach", "fused"
HOST_READS = ("aten::item",)


@dataclasses.dataclass
class OptimizerStep:
    """One optimizer class's steps, per measured step (profiled time base)."""

    name: str  # the optimizer class, "AdamW"
    impl: str  # SINGLE, FOREACH or FUSED
    calls: float  # Optimizer.step calls per step
    host_us: float  # time inside its ranges per step
    kernels: float  # kernels it launched per step
    gpu_us: float  # GPU time of those kernels per step
    step_kernels: float  # all kernels of the step, per step
    profiled_step_us: float
    host_reads: float = 0.0  # values read back to Python inside its ranges per step (`aten::item`)

    @property
    def launch_share(self) -> float:
        """Its kernels as a share of the step's kernels."""
        return self.kernels / self.step_kernels if self.step_kernels else 0.0

    @property
    def time_share(self) -> float:
        """Its range as a share of the profiled step."""
        return min(1.0, self.host_us / self.profiled_step_us) if self.profiled_step_us else 0.0

    @property
    def counters_on_host(self) -> bool:
        """True when its step reads values back to Python (CPU step counters: not capturable=True)."""
        return self.impl != FUSED and self.host_reads > 0


def optimizer_steps(metrics) -> list[OptimizerStep]:
    """Every optimizer class stepped inside the measured steps, most launches first (none: no
    `Optimizer.step#` range there)."""
    trace, steps = metrics.trace, metrics.steps
    if not steps.windows:
        return []
    n = len(steps.windows)
    ops = trace.ops
    ranges = ops[
        (ops["cat"] == "user_annotation")
        & name_starts(ops["name"], PREFIX)
        & (ops["ts"] >= steps.start)
        & (ops["ts"] < steps.end)
        & ops["dur"].notna()
    ]
    if not len(ranges):
        return []
    kernels = metrics.step_kernels[metrics.step_kernels["cat"] == "kernel"]
    cpu = trace.cpu_ops
    profiled = metrics.budget.profiled_step_us
    found = []
    for name, group in ranges.groupby("name"):
        picked = np.zeros(len(kernels), dtype=bool)
        inner = np.zeros(len(cpu), dtype=bool)
        for row in group.itertuples():
            lo, hi = row.ts, row.ts + row.dur
            picked |= (
                (kernels["launch_ts"] >= lo) & (kernels["launch_ts"] < hi) & (kernels["launch_tid"] == row.tid)
            ).to_numpy()
            inner |= ((cpu["ts"] >= lo) & (cpu["ts"] < hi) & (cpu["tid"] == row.tid)).to_numpy()
        names = cpu.loc[inner, "name"]
        impl = (
            FUSED
            if name_starts(names, "aten::_fused_").any()
            else FOREACH
            if name_starts(names, "aten::_foreach_").any()
            else SINGLE
        )
        mine = kernels[picked]
        found.append(
            OptimizerStep(
                name=str(name)[len(PREFIX) :].split(".")[0],
                impl=impl,
                calls=len(group) / n,
                host_us=float(group["dur"].sum()) / n,
                kernels=len(mine) / n,
                gpu_us=float(mine["dur"].sum()) / n,
                step_kernels=len(kernels) / n,
                profiled_step_us=profiled,
                host_reads=float(names.isin(HOST_READS).sum()) / n,
            )
        )
    return sorted(found, key=lambda o: o.kernels, reverse=True)
