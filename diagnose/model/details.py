"""The report's supporting sections (`Diagnosis.details`), typed: what findings.json holds beside the findings.

Each section is built once when the Diagnosis is assembled (diagnose/ruleset/assemble.py) and read by
every renderer by field. The Structs encode exactly as the plain rows they replace: fields in the order
the rows had their keys, and a column a row may lack (the Nsight Compute columns of a kernel measured
without ncu, a timing without timed steps) is `UNSET` there and left out of the JSON, as before. A number
that may be an int or a float is `Number`, so an int stays an int in findings.json.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from diagnose.base.step_timing import paid_step_us

Number = int | float


class Row(msgspec.Struct):
    """A Struct shown as a table row: `columns()` is its flat form, unset columns left out."""

    def columns(self) -> dict[str, Any]:
        """The row as {column: value}, in field order, without the columns this row does not have."""
        return {f: v for f in self.__struct_fields__ if (v := getattr(self, f)) is not UNSET}


class TopKernel(Row):
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


class TimelineOp(msgspec.Struct):
    """One GPU op of the median step: start `t` (µs from the step's start), duration, name, kind, stream."""

    t: Number
    dur: Number
    name: str
    cat: str
    stream: int


class TimelineGap(msgspec.Struct):
    """One idle stretch of the median step's GPU, by cause (metrics/timeline.py gaps)."""

    t: Number
    dur: Number
    kind: str
    after_sync: bool


class StepTimeline(msgspec.Struct):
    """The median-length measured step on the GPU, times relative to its start (metrics/views.py)."""

    step: int
    label: str | None
    duration_us: Number
    ops: list[TimelineOp] = msgspec.field(default_factory=list)
    gaps: list[TimelineGap] = msgspec.field(default_factory=list)
    note: str = ""


class StepRow(Row):
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


class InventoryRow(msgspec.Struct):
    """GPU work of the steps by (kernel, launching op, input shapes), per step: what `diagnose diff` matches."""

    name: str
    op: str | None
    input_dims: str | None
    cat: str
    calls_per_step: Number
    us_per_step: Number


class MemorySnapshot(msgspec.Struct):
    """The allocator snapshot's totals (memory/details.py SNAPSHOT_KEYS)."""

    reserved_bytes: Number | None = None
    allocated_bytes: Number | None = None
    segments: int | None = None
    free_in_segments_bytes: Number | None = None
    largest_free_block_bytes: Number | None = None
    fragmentation: Number | None = None
    live_blocks: int | None = None


class StepSpan(msgspec.Struct):
    """A measured step on the memory timeline's clock (µs)."""

    label: str
    start: Number
    end: Number


class MemoryTimeline(msgspec.Struct):
    """Allocated and reserved memory over time, from the trace's allocator events (memory/timeline.py):
    each point is [time, allocated, reserved]."""

    source: str
    time_unit: str
    unit: str
    events: int
    points: list[list[Number]]
    peak_allocated: Number
    peak_reserved: Number
    steps: list[StepSpan] = msgspec.field(default_factory=list)


class PeakPart(msgspec.Struct):
    """One part of the peak (parameters, gradients, optimizer state, the rest...) and how it was counted."""

    part: str
    bytes: Number
    how: str = ""


class AllocationSite(msgspec.Struct):
    """A line of user code by the memory it allocated (or holds live at the snapshot)."""

    where: str
    bytes: Number
    count: int
    largest: Number


class PeakBreakdown(msgspec.Struct):
    """What holds the peak (memory/breakdown.py): parts the ops reveal, else the allocating code."""

    peak_bytes: Number | None
    kind: str
    optimizer: str | None
    parts: list[PeakPart]
    note: str
    top_live: list[AllocationSite]
    top_allocating: list[AllocationSite]
    params: int | UnsetType = UNSET  # a training breakdown: how many parameter tensors, how many values
    param_values: int | UnsetType = UNSET
    basis: str = ""


class OomRecord(msgspec.Struct):
    """The allocation that ran out of memory, as the capture's OOM observer saw it."""

    device: int | str | None = None
    requested_bytes: Number | None = None
    device_allocated_bytes: Number | None = None
    device_free_bytes: Number | None = None


class SweepPoint(msgspec.Struct):
    """One value of a swept parameter and what its capture measured (memory/sweep.py)."""

    value: Any  # the swept value as given (a number or a name)
    status: str
    folder: str
    peak_allocated_bytes: Number | None = None
    peak_reserved_bytes: Number | None = None
    median_step_us: Number | None = None
    error: str | None = None


class Fit(msgspec.Struct):
    """A power-law fit y = coefficient · x^exponent over the sweep's points."""

    exponent: Number
    coefficient: Number
    r2: Number
    points: int
    local_exponents: list[Number] = msgspec.field(default_factory=list)


class SweepFits(msgspec.Struct):
    """The fits of peak memory and step time against the swept parameter (None: too few points)."""

    peak_allocated: Fit | None = None
    peak_reserved: Fit | None = None
    step_time: Fit | None = None


class SweepWall(msgspec.Struct):
    """The first swept value that ran out of memory."""

    value: Any
    error: str | None = None


class AnalysedPoint(msgspec.Struct):
    """The sweep point whose trace the findings are of."""

    value: Any
    folder: str


class Sweep(msgspec.Struct):
    """A parameter sweep (memory/sweep.py Sweep.to_dict); `params` are the other parameters, by the user's names."""

    folder: str
    param: str
    target: str | None
    params: dict[str, Any]
    points: list[SweepPoint]
    fits: SweepFits
    wall: SweepWall | None
    device_total_bytes: Number | None
    predicted_wall: Number | None
    analysed_point: AnalysedPoint | None = None


class Memory(msgspec.Struct):
    """Details.memory (memory/details.py): limit and peaks, the allocator snapshot's totals, the timeline,
    the peak breakdown; the record's fields are unset for a sweep without one, `sweep` for a sweep only."""

    device_total_bytes: Number | None | UnsetType = UNSET
    limit_bytes: Number | None | UnsetType = UNSET
    limit_source: str | None | UnsetType = UNSET
    peak_allocated_bytes: Number | None | UnsetType = UNSET
    peak_reserved_bytes: Number | None | UnsetType = UNSET
    alloc_retries: int | None | UnsetType = UNSET
    inactive_split_peak_bytes: Number | None | UnsetType = UNSET
    out_of_memory: bool | UnsetType = UNSET
    oom: OomRecord | None | UnsetType = UNSET
    snapshot_taken: str | None | UnsetType = UNSET
    snapshot: MemorySnapshot | None | UnsetType = UNSET
    timeline: MemoryTimeline | None | UnsetType = UNSET
    breakdown: PeakBreakdown | None | UnsetType = UNSET
    source: str | UnsetType = UNSET
    sweep: Sweep | UnsetType = UNSET


class RooflinePoint(msgspec.Struct):
    """One op on the roofline (ncu/roofline.py): arithmetic intensity, achieved TFLOP/s, measured or estimated."""

    kernel: str
    op: str | None
    shapes: str | None
    intensity: Number
    tflops: Number
    measured: bool
    bound: str | None
    us_per_step: Number
    share: Number
    rung: str | None
    dram_pct: Number | None = None
    sm_pct: Number | None = None


class ComputeCeiling(msgspec.Struct):
    """One compute roof: its precision rung, the datasheet peak and what is achievable."""

    rung: str
    label: str
    peak_tflops: Number | None
    achievable_tflops: Number | None


class Ceilings(msgspec.Struct):
    """The device's roofs: memory bandwidth (None when unknown) and one compute roof per rung shown."""

    device: str
    hbm_tbps: Number | None
    achievable_tbps: Number | None
    compute: list[ComputeCeiling]
    source: str


class Roofline(msgspec.Struct):
    """Roofline points of the ops with the most kernel time, and the device's ceilings (ncu/roofline.py)."""

    points: list[RooflinePoint]
    ceilings: Ceilings
    measured_points: int


class NcuKernel(Row):
    """One kernel of a step as Nsight Compute measured it (ncu/details.py)."""

    kernel: str
    measured_us: Number | None
    profiled_us: Number | None
    sm_pct: Number | None
    memory_pct: Number | None
    dram_pct: Number | None
    tensor_pct: Number | None
    occupancy_pct: Number | None
    dram_mb: Number | None
    bound: str | None
    why: str | None


class NcuThresholds(msgspec.Struct):
    """The numbers that class a measured kernel (ncu/classify.py THRESHOLDS), as the run used them; None in a
    findings.json written before a threshold existed."""

    LATENCY_PCT: Number | None = None
    LEAD_PCT: Number | None = None
    SATURATED_PCT: Number | None = None
    TENSOR_PCT: Number | None = None
    LOW_OCCUPANCY_PCT: Number | None = None
    TINY_US: Number | None = None
    MANY_LAUNCHES: Number | None = None


class Ncu(msgspec.Struct):
    """The Nsight Compute join (ncu/details.py): what matched, what did not, and the measured kernels."""

    source: str
    summary: str
    matched: int
    ncu_rows: int
    step_kernels: int
    coverage: Number
    steps_joined: int
    range: str  # the steps joined, in words
    unmatched_ncu: list[str]
    unmeasured: list[str]
    unmeasured_count: int
    thresholds: NcuThresholds
    kernels: list[NcuKernel]
    seconds: Number | UnsetType = UNSET  # how long the ncu pass took, when this run made it


class ByName(msgspec.Struct):
    """Part of an accounting bucket, by what names it (an op, a DataLoader range, a file:line)."""

    name: str
    us_per_step: float


class RankBucket(msgspec.Struct):
    """One summed bucket of a rank's step budget (metrics/accounting.py with_rank_wait)."""

    id: str
    label: str
    us_per_step: Number
    share: Number
    detail: str | UnsetType = UNSET
    names: list[str] | UnsetType = UNSET
    in_sum: bool = True
    by_name: list[ByName] | UnsetType = UNSET


class RankBudget(msgspec.Struct, kw_only=True):
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


class FailedRank(msgspec.Struct):
    """A rank of a rank folder that could not be analysed (ranks/analyse.py)."""

    rank: int | None
    source: str
    error: str


class Details(msgspec.Struct, omit_defaults=True):
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


class Device(msgspec.Struct):
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


class CaptureError(msgspec.Struct):
    """How the workload failed: the exception's type and message, and its traceback."""

    type: str | None = None
    message: str | None = None
    traceback: str | None = None


class CaptureSteps(msgspec.Struct):
    """The steps the capture ran: warm-up, profiled, what marked a step; `stopped_early` when a script's
    loop was stopped once enough steps were profiled."""

    warmup: int | None | UnsetType = UNSET
    profiled: int | None | UnsetType = UNSET
    how: str | None | UnsetType = UNSET
    stopped_early: bool | UnsetType = UNSET


class CaptureTiming(msgspec.Struct):
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


class CaptureMemory(msgspec.Struct):
    """torch.cuda.memory_stats' peaks over the capture."""

    max_allocated_bytes: Number | None | UnsetType = UNSET
    max_reserved_bytes: Number | None | UnsetType = UNSET
    num_alloc_retries: int | None | UnsetType = UNSET
    num_ooms: int | None | UnsetType = UNSET


class Capture(msgspec.Struct):
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
