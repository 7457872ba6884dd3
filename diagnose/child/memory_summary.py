"""Summarise a CUDA caching-allocator snapshot (`torch.cuda.memory._snapshot()`) into plain data.

Pure Python over the snapshot dict, so it is tested without a GPU. The summary is what the
memory rules and the report read from a capture folder's memory.json: totals, fragmentation,
the largest live allocations with the user code that made them, and a bounded event trace.
"""

from __future__ import annotations

MAX_TOP = 20
MAX_EVENTS = 4000
SKIP_FRAMES = ("torch/", "diagnose/capture/", "<frozen", "runpy.py", "contextlib.py")


def user_frame(frames: list | None) -> str | None:
    """The innermost stack frame outside torch and diagnose, as 'file:line in function'."""
    for frame in frames or []:
        name = str(frame.get("filename", ""))
        if not any(part in name for part in SKIP_FRAMES):
            return f"{name}:{frame.get('line')} in {frame.get('name')}"
    return None


def summarise_snapshot(snapshot: dict) -> dict:
    """Totals, fragmentation, top live blocks and the recent alloc/free/oom events of a snapshot."""
    segments = snapshot.get("segments") or []
    reserved = sum(s.get("total_size", 0) for s in segments)
    allocated = sum(s.get("allocated_size", 0) for s in segments)
    free_blocks = [b.get("size", 0) for s in segments for b in s.get("blocks", []) if b.get("state") == "inactive"]
    live = [b for s in segments for b in s.get("blocks", []) if str(b.get("state", "")).startswith("active")]
    free_total = sum(free_blocks)
    largest_free = max(free_blocks, default=0)
    top = sorted(live, key=lambda b: b.get("size", 0), reverse=True)[:MAX_TOP]
    events = [e for trace in snapshot.get("device_traces") or [] for e in trace]
    return {
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "segments": len(segments),
        "free_in_segments_bytes": free_total,
        "largest_free_block_bytes": largest_free,
        "fragmentation": round(1 - largest_free / free_total, 4) if free_total else 0.0,
        "live_blocks": len(live),
        "top_blocks": [
            {
                "bytes": b.get("size", 0),
                "requested_bytes": b.get("requested_size"),
                "state": b.get("state"),
                "where": user_frame(b.get("frames")),
            }
            for b in top
        ],
        "events": [
            {
                "action": e.get("action"),
                "bytes": e.get("size", 0),
                "addr": e.get("addr"),
                "time_us": e.get("time_us"),
                "where": user_frame(e.get("frames")),
            }
            for e in events[-MAX_EVENTS:]
        ],
        "events_dropped": max(0, len(events) - MAX_EVENTS),
        "oom_events": sum(1 for e in events if e.get("action") == "oom"),
    }
