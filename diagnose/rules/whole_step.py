"""The whole training step priced at bf16: what autocast saves beyond the matrix math (compute-bound's
precision finding; no rule of its own).

Matmuls and convolutions in fp32 or TF32 take the time compute-bound's roofline gives them at bf16
(passed in, `matrix_after`); attention kernels in fp32 (which cannot use FlashAttention) and the
bandwidth-bound kernels of the activations (elementwise, reductions, copies) move half the bytes, so
half the time; what autocast keeps in fp32 (norms, softmax and losses, the optimizer's update of fp32
weights, embeddings' gradients, fills and casts) does not move.

Faster kernels shorten the step only while the GPU sets its pace: the step cannot fall below the time the
host takes to launch it (`host_floor`: from the step's first kernel launch to its last, scaled from the
profiled step to the step the estimate starts from). The fp32 conv-net captures show why: conv_channels_last's
host launches for 29.6 ms of its 30.6 ms profiled step, and its bf16 twin measured 1.09× (the GPU's busy time
fell from 22.4 to 15.2 ms, the step from 23.2 to 21.4 ms: the host became the limit).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from diagnose.trace.model import KERNEL_LAUNCH
from diagnose.trace.names import name_search
from diagnose.vocabulary.dtypes import FP32_PRECISIONS, precision
from diagnose.vocabulary.kernels import MATMUL_KINDS, MEMORY_KINDS

# ops autocast runs in fp32, or that update fp32 weights and gradients: their time does not move
KEEPS_FP32 = re.compile(
    r"norm|softmax|loss|nll|cross_entropy|_foreach_|adam|sgd|fused|embedding|copy_|fill_|zero_|_to_copy"
    r"|\bsum\b|mean|clamp|where|nonzero|index",
    re.I,
)


@dataclasses.dataclass(frozen=True)
class WholeStep:
    """The step at bf16, per step in µs: what each part saves and what stays in fp32."""

    step_us: float
    matrix_share: float  # share of the matrix kernels' time that runs in fp32 / TF32
    matrix_saving: float
    attention_saving: float
    bandwidth_saving: float
    kept_us: float  # fp32 kernel time that autocast keeps in fp32
    by_op: pd.Series  # op_name -> saving_us per step, largest first
    floor_us: float = 0.0  # the step cannot fall below the host's launch time (`host_floor`)

    @property
    def gpu_saving(self) -> float:
        """GPU time saved per step, µs."""
        return self.matrix_saving + self.attention_saving + self.bandwidth_saving

    @property
    def saving(self) -> float:
        """µs saved per step: the GPU's saving, as far as the host's launch time lets the step shrink."""
        return max(0.0, min(self.gpu_saving, self.step_us - self.floor_us))

    @property
    def share(self) -> float:
        """The saving as a share of the step."""
        return self.saving / self.step_us if self.step_us > 0 else 0.0

    @property
    def speedup(self) -> float:
        """step ÷ (step − saving)."""
        return self.step_us / max(self.step_us - self.saving, 1e-9)


def price(ops: pd.DataFrame, step_us: float, n: int, matrix_after: pd.Series, floor_us: float = 0.0) -> WholeStep:
    """The measured steps' ops (`ops`, one row per op instance, metrics/work.py) priced at bf16 over `n`
    steps; `matrix_after` holds the time after of the fp32 / TF32 matrix ops compute-bound placed (by index);
    `floor_us` the step the host's launches need (`host_floor`)."""
    fp32 = ops["dtype"].map(lambda d: precision(d) in FP32_PRECISIONS, na_action="ignore").fillna(False).astype(bool)
    matrix = ops["kind"].isin(MATMUL_KINDS)
    saving = pd.Series(0.0, index=ops.index)
    placed = matrix_after.dropna()
    saving[placed.index] = (ops.loc[placed.index, "matrix_us"] - placed).clip(lower=0.0)
    attention = fp32 & (ops["kind"] == "attention")
    saving[attention] = ops.loc[attention, "kernel_us"] / 2
    keeps = ops["op_name"].fillna("").str.contains(KEEPS_FP32)
    bandwidth = fp32 & ops["kind"].isin(MEMORY_KINDS)
    saving[bandwidth & ~keeps] = ops.loc[bandwidth & ~keeps, "kernel_us"] / 2
    matrix_us = float(ops.loc[matrix, "matrix_us"].sum())
    return WholeStep(
        step_us=step_us,
        matrix_share=float(ops.loc[matrix & fp32, "matrix_us"].sum()) / matrix_us if matrix_us > 0 else 0.0,
        matrix_saving=float(saving[matrix].sum()) / n,
        attention_saving=float(saving[attention].sum()) / n,
        bandwidth_saving=float(saving[bandwidth].sum()) / n,
        kept_us=float(ops.loc[bandwidth & keeps, "kernel_us"].sum()) / n,
        by_op=(saving.groupby(ops["op_name"].fillna("(unnamed)")).sum() / n).sort_values(ascending=False),
        floor_us=floor_us,
    )


def host_floor(metrics) -> float:
    """The step the host needs to launch its kernels, µs: the median span from a step's first kernel launch
    to its last, scaled by the step the estimates start from over the profiled step (the profiler's own
    host time out); 0 without launch records."""
    runtime, budget = metrics.trace.runtime, metrics.budget
    if not len(runtime) or budget.profiled_step_us <= 0:
        return 0.0
    launches = runtime[name_search(runtime["name"], KERNEL_LAUNCH)]
    ts, end = launches["ts"].to_numpy(float), launches["end"].to_numpy(float)
    spans = []
    for w in metrics.steps.windows:
        inside = (ts >= w.cpu_start) & (ts < w.cpu_end)
        if inside.any():
            spans.append(end[inside].max() - ts[inside].min())
    if not spans:
        return 0.0
    return float(np.median(spans)) * min(1.0, budget.step_us / budget.profiled_step_us)


def kept_names(ops: pd.DataFrame, top: int = 3) -> list[str]:
    """The fp32 ops autocast would keep in fp32 that take the most time (layer norms, the loss, the optimizer)."""
    keeps = ops[ops["op_name"].fillna("").str.contains(KEEPS_FP32) & ops["kind"].isin(MEMORY_KINDS)]
    order = keeps.groupby("op_name")["kernel_us"].sum().sort_values(ascending=False)
    return [str(name) for name in order.index[:top]]


def fp32_matrix(ops: pd.DataFrame) -> np.ndarray:
    """Which ops are matmuls or convolutions in fp32 data (TF32 or not) with known FLOPs."""
    rung = ops["dtype"].map(precision, na_action="ignore")
    return (ops["kind"].isin(MATMUL_KINDS) & rung.isin(FP32_PRECISIONS) & (ops["flops"].fillna(0) > 0)).to_numpy()
