"""The memory section of the report (`Details.memory`), typed: memory/details.py builds it. A key the
record or the sweep does not have is `UNSET` and left out of findings.json."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from diagnose.base.typed import Number


class MemorySnapshot(msgspec.Struct, frozen=True):
    """The allocator snapshot's totals (memory/details.py SNAPSHOT_KEYS)."""

    reserved_bytes: Number | None = None
    allocated_bytes: Number | None = None
    segments: int | None = None
    free_in_segments_bytes: Number | None = None
    largest_free_block_bytes: Number | None = None
    fragmentation: Number | None = None
    live_blocks: int | None = None


class StepSpan(msgspec.Struct, frozen=True):
    """A measured step on the memory timeline's clock (µs)."""

    label: str
    start: Number
    end: Number


class MemoryTimeline(msgspec.Struct, frozen=True):
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


class PeakPart(msgspec.Struct, frozen=True):
    """One part of the peak (parameters, gradients, optimizer state, the rest...) and how it was counted."""

    part: str
    bytes: Number
    how: str = ""


class AllocationSite(msgspec.Struct, frozen=True):
    """A line of user code by the memory it allocated (or holds live at the snapshot)."""

    where: str
    bytes: Number
    count: int
    largest: Number


class PeakBreakdown(msgspec.Struct, frozen=True):
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


class OomRecord(msgspec.Struct, frozen=True):
    """The allocation that ran out of memory, as the capture's OOM observer saw it."""

    device: int | str | None = None
    requested_bytes: Number | None = None
    device_allocated_bytes: Number | None = None
    device_free_bytes: Number | None = None


class SweepPoint(msgspec.Struct, frozen=True):
    """One value of a swept parameter and what its capture measured (memory/sweep.py)."""

    value: Any  # the swept value as given (a number or a name)
    status: str
    folder: str
    peak_allocated_bytes: Number | None = None
    peak_reserved_bytes: Number | None = None
    median_step_us: Number | None = None
    error: str | None = None


class Fit(msgspec.Struct, frozen=True):
    """A power-law fit y = coefficient · x^exponent over the sweep's points."""

    exponent: Number
    coefficient: Number
    r2: Number
    points: int
    local_exponents: list[Number] = msgspec.field(default_factory=list)


class SweepFits(msgspec.Struct, frozen=True):
    """The fits of peak memory and step time against the swept parameter (None: too few points)."""

    peak_allocated: Fit | None = None
    peak_reserved: Fit | None = None
    step_time: Fit | None = None


class SweepWall(msgspec.Struct, frozen=True):
    """The first swept value that ran out of memory."""

    value: Any
    error: str | None = None


class AnalysedPoint(msgspec.Struct, frozen=True):
    """The sweep point whose trace the findings are of."""

    value: Any
    folder: str


class Sweep(msgspec.Struct, frozen=True):
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


class Memory(msgspec.Struct, frozen=True):
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
