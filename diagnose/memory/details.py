"""The memory part of a Diagnosis (`Details.memory`, typed: memory/sections.py), and the memory views the memory
rules share."""

from __future__ import annotations

from diagnose.base.typed import typed
from diagnose.memory.breakdown import peak_breakdown
from diagnose.memory.sections import Memory
from diagnose.memory.timeline import levels_in_steps, memory_timeline

SNAPSHOT_KEYS = (
    "reserved_bytes",
    "allocated_bytes",
    "segments",
    "free_in_segments_bytes",
    "largest_free_block_bytes",
    "fragmentation",
    "live_blocks",
)


def step_windows(ctx) -> list:
    """The measured steps of the context's trace ([] for a trace without ops or GPU activity)."""
    trace = ctx.trace
    if not (len(trace.ops) or trace.has_gpu_activity):
        return []
    return ctx.metrics.steps.windows


def breakdown(ctx) -> dict | None:
    """What holds the peak (diagnose/memory/breakdown.py) for a rules Context; None without a record.
    Built once per trace and shared: read it, never change it."""
    record = ctx.memory
    if record is None:
        return None
    m = ctx.metrics
    return m.shared(
        "memory breakdown",
        lambda: peak_breakdown(
            ctx.trace.ops, step_windows(ctx), record.peak_allocated, record.snapshot, lambda: m.attention_calls
        ),
    )


def step_levels(ctx) -> dict | None:
    """The allocated floor and peak over the measured steps (diagnose/memory/timeline.py) for a
    rules Context, built once per trace; None without a record or allocator events."""
    record = ctx.memory
    if record is None:
        return None
    return ctx.metrics.shared("memory levels in steps", lambda: levels_in_steps(record.events, step_windows(ctx)))


def memory_details(ctx) -> Memory | None:
    """Details.memory: limit and peaks, the allocator snapshot's totals, the timeline
    (allocated and reserved over time), the peak breakdown, and the sweep with its fits; None when
    nothing about memory is known."""
    record, sweep = ctx.memory, ctx.sweep
    if record is None and sweep is None:
        return None
    out: dict = {}
    if record is not None:
        limit, limit_source = record.limit
        snapshot = record.snapshot or {}
        out.update(
            {
                "device_total_bytes": record.device_total,
                "limit_bytes": limit,
                "limit_source": limit_source,
                "peak_allocated_bytes": record.peak_allocated,
                "peak_reserved_bytes": record.peak_reserved,
                "alloc_retries": record.alloc_retries,
                "inactive_split_peak_bytes": record.inactive_split_peak,
                "out_of_memory": record.out_of_memory,
                "oom": record.oom,
                "snapshot_taken": record.snapshot_taken,
                "snapshot": {k: snapshot.get(k) for k in SNAPSHOT_KEYS} if snapshot else None,
                "timeline": memory_timeline(record.events, step_windows(ctx)),
                "breakdown": breakdown(ctx),
                "source": record.path or "meta.json / trace allocator events",
            }
        )
    if sweep is not None:
        out["sweep"] = sweep.to_dict()
        point = sweep.representative()
        out["sweep"]["analysed_point"] = None if point is None else {"value": point.value, "folder": point.folder}
    return typed(out, Memory)
