"""The report's supporting sections (`Diagnosis.details`), typed: what findings.json holds beside the findings.

Each section is a msgspec Struct made by the builder that computes it, on that builder's own floor: the
metrics' sections in diagnose/metrics/sections.py (metrics/views.py builds them), memory's in
diagnose/memory/sections.py (memory/details.py), the roofline's and Nsight Compute's in
diagnose/ncu/sections.py (ncu/roofline.py, ncu/details.py). `Details` gathers them in one constructor call
(diagnose/ruleset/assemble.py); here are `Details`, the rank sections, the Device and the Capture. Every
renderer reads them by field. The Structs encode exactly as the plain rows they replaced: fields in the
order the rows had their keys, and a column a row may lack (the Nsight Compute columns of a kernel measured
without ncu, a timing without timed steps) is `UNSET` there and left out of the JSON, as before. A number
that may be an int or a float is `Number`, so an int stays an int in findings.json.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from diagnose.base.step_timing import paid_step_us
from diagnose.base.typed import Number
from diagnose.memory.sections import Memory
from diagnose.metrics.sections import InventoryRow, StepRow, StepTimeline, TopKernel
from diagnose.ncu.sections import Ncu, Roofline


class ByName(msgspec.Struct, frozen=True):
    """Part of an accounting bucket, by what names it (an op, a DataLoader range, a file:line)."""

    name: str
    us_per_step: float


class RankBucket(msgspec.Struct, frozen=True):
    """One summed bucket of a rank's step budget (metrics/accounting.py with_rank_wait)."""

    id: str
    label: str
    us_per_step: Number
    share: Number
    detail: str | UnsetType = UNSET
    names: list[str] | UnsetType = UNSET
    in_sum: bool = True
    by_name: list[ByName] | UnsetType = UNSET


class RankBudget(msgspec.Struct, kw_only=True, frozen=True):
    """One rank's step budget, for the ranks' side-by-side chart (rankset/model.py RankSet.budgets);
    `wait_basis` and `profiled_wait_us` came later (an older findings.json has neither)."""

    rank: int
    step_us: Number | None
    step_basis: str
    wait_us: Number
    wait_basis: str = ""
    profiled_wait_us: Number | None = None
    profiled_step_us: Number | None
    wait_share: Number | None
    buckets: list[RankBucket]


class FailedRank(msgspec.Struct, frozen=True):
    """A rank of a rank folder that could not be analysed (ranks/analyse.py)."""

    rank: int | None
    source: str
    error: str


class Details(msgspec.Struct, omit_defaults=True, frozen=True):
    """The report's supporting data, one named section each; a section the run has nothing for is None.

    Built once by diagnose/ruleset/assemble.py and read by every renderer:
      top_kernels    the GPU ops that take most time per step (metrics/views.py; ncu columns when measured)
      step_timeline  the median step's GPU ops and classified gaps (metrics/views.py)
      steps          the per-step table, profiled time (metrics/views.py)
      memory         allocator peaks, timeline, peak breakdown, sweep fits (memory/details.py)
      roofline       roofline points and ceilings (ncu/roofline.py)
      ncu            the Nsight Compute join and measured kernels (ncu/details.py)
      inventory      every GPU op per step by (kernel, launching op, input shapes), for `diagnose diff`
                     (metrics/views.py)
      ranks          with several ranks: each rank's step budget, side by side (rankset/model.py)
      failed_ranks   the ranks of a rank folder that could not be analysed: a trace missing, truncated or
                     not a trace, or a worker that died each time (ranks/analyse.py); the others were
                     analysed without them
    """

    top_kernels: list[TopKernel] | None = None
    step_timeline: StepTimeline | None = None
    steps: list[StepRow] | None = None
    memory: Memory | None = None
    roofline: Roofline | None = None
    ncu: Ncu | None = None
    inventory: list[InventoryRow] | None = None
    ranks: list[RankBudget] | None = None
    failed_ranks: list[FailedRank] | None = None


class Device(msgspec.Struct, frozen=True):
    """What the trace ran on (trace/model.py Trace.device): from the capture's own record, else the trace's
    deviceProperties; what is not known is None."""

    name: str | None = None
    sm_count: int | None = None
    memory_bytes: Number | None = None
    compute_capability: str | None = None
    gcn_arch: str | None = None
    warp_size: int | None = None
    clock_khz: int | None = None
    memory_clock_khz: int | None = None
    memory_bus_bits: int | None = None
    torch: str | None = None
    cuda: str | None = None
    source: str = "unknown"


class CaptureError(msgspec.Struct, frozen=True):
    """How the workload failed: the exception's type and message, and its traceback."""

    type: str | None = None
    message: str | None = None
    traceback: str | None = None


class CaptureSteps(msgspec.Struct, frozen=True):
    """The steps the capture ran: warm-up, profiled, what marked a step; `stopped_early` when a script's
    loop was stopped once enough steps were profiled."""

    warmup: int | None | UnsetType = UNSET
    profiled: int | None | UnsetType = UNSET
    how: str | None | UnsetType = UNSET
    stopped_early: bool | UnsetType = UNSET


class CaptureTiming(msgspec.Struct, frozen=True):
    """The steps timed without the profiler (base/step_timing.py timing_summary), µs."""

    source: str | None | UnsetType = UNSET
    unprofiled_step_us: list[Number] | UnsetType = UNSET
    median_us: Number | None | UnsetType = UNSET
    min_us: Number | None | UnsetType = UNSET
    mean_us: Number | None | UnsetType = UNSET

    @property
    def paid_step_us(self) -> float | None:
        """The measured unprofiled step a run pays for (base/step_timing.py paid_step_us)."""
        return paid_step_us(msgspec.structs.asdict(self))


class CaptureMemory(msgspec.Struct, frozen=True):
    """torch.cuda.memory_stats' peaks over the capture."""

    max_allocated_bytes: Number | None | UnsetType = UNSET
    max_reserved_bytes: Number | None | UnsetType = UNSET
    num_alloc_retries: int | None | UnsetType = UNSET
    num_ooms: int | None | UnsetType = UNSET


class Capture(msgspec.Struct, frozen=True):
    """What the capture said about itself (meta.json, checked against trace/schemas.py CaptureMeta when
    read), as the report shows it; a key meta.json did not have is unset and stays out of findings.json.
    `params` are the workload's parameters and `distributed` the torchrun launch, both open mappings by their
    own names (the user's parameters; the launch spec's fields)."""

    target: str | None | UnsetType = UNSET
    mode: str | None | UnsetType = UNSET
    status: str | None | UnsetType = UNSET
    error: CaptureError | None | UnsetType = UNSET
    steps: CaptureSteps | None | UnsetType = UNSET
    timing: CaptureTiming | None | UnsetType = UNSET
    memory: CaptureMemory | None | UnsetType = UNSET
    recorded_at: str | None | UnsetType = UNSET
    params: dict[str, Any] | None | UnsetType = UNSET
    rank: int | UnsetType = UNSET  # of several ranks, the one whose workload failed (ranks/analyse.py)
    distributed: dict[str, Any] | UnsetType = UNSET

    @property
    def failed(self) -> bool:
        """True when the captured workload raised, ran out of memory, timed out or crashed."""
        return self.status not in (None, UNSET, "ok")

    def set_aside_us(self, step_basis: str) -> float | None:
        """The capture's measured step when the report's step is the profiled one all the same: the timing,
        synchronised after each step, was longer than the profiled steps (metrics/budget.step_budget)."""
        return self.timing.paid_step_us if step_basis == "profiled" and self.timing else None

    @property
    def error_or_empty(self) -> CaptureError:
        """The workload's error, an empty one when it had none."""
        return self.error or CaptureError()


# what meta.json lends the report
CAPTURE_KEYS = (
    "target",
    "mode",
    "status",
    "error",
    "steps",
    "timing",
    "memory",
    "recorded_at",
    "params",
    "distributed",
)


def capture_of(meta: dict | None, **more: Any) -> Capture:
    """The report's Capture from a meta.json document (its CAPTURE_KEYS that are present) and `more`."""
    meta = meta or {}
    return msgspec.convert({**{k: meta[k] for k in CAPTURE_KEYS if k in meta}, **more}, Capture)
