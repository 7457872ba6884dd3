"""The report sections the metrics give (`Details.top_kernels`, `step_timeline`, `steps`, `inventory`), typed:
metrics/views.py builds them. They encode exactly as the plain rows they replace: fields in the order the
rows had their keys; a column a row may lack is `UNSET` there and left out of findings.json."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from diagnose.base.typed import Number, Row


class TopKernel(Row, frozen=True):
    """A GPU op that takes much of the step (metrics/views.py top_kernels); the last four columns only
    when Nsight Compute measured it (ncu/details.py enrich_top_kernels)."""

    name: str
    cat: str
    calls_per_step: Number
    us_per_step: Number
    median_us: Number
    share_of_gpu_time: Number
    op: str | None = None
    input_dims: str | None = None
    sm_pct: Number | None | UnsetType = UNSET
    dram_pct: Number | None | UnsetType = UNSET
    tensor_pct: Number | None | UnsetType = UNSET
    bound: str | None | UnsetType = UNSET


class TimelineOp(msgspec.Struct, frozen=True):
    """One GPU op of the median step: start `t` (µs from the step's start), duration, name, kind, stream."""

    t: Number
    dur: Number
    name: str
    cat: str
    stream: int


class TimelineGap(msgspec.Struct, frozen=True):
    """One idle stretch of the median step's GPU, by cause (metrics/timeline.py gaps)."""

    t: Number
    dur: Number
    kind: str
    after_sync: bool


class StepTimeline(msgspec.Struct, frozen=True):
    """The median-length measured step on the GPU, times relative to its start (metrics/views.py)."""

    step: int
    label: str | None
    duration_us: Number
    ops: list[TimelineOp] = msgspec.field(default_factory=list)
    gaps: list[TimelineGap] = msgspec.field(default_factory=list)
    note: str = ""


class StepRow(Row, frozen=True):
    """One measured step in profiled time (metrics/timeline.py per_step)."""

    step: int
    label: str | None
    start: Number
    duration_us: Number
    gpu_ops: int
    busy_us: Number
    host_wait_us: Number
    kernel_wait_us: Number
    other_wait_us: Number


class InventoryRow(msgspec.Struct, frozen=True):
    """GPU work of the steps by (kernel, launching op, input shapes), per step: what `diagnose diff` matches."""

    name: str
    op: str | None
    input_dims: str | None
    cat: str
    calls_per_step: Number
    us_per_step: Number
