"""Allocator recording in the child: history during the profiled warm-up steps, a snapshot at the end
or at the moment of an out-of-memory error, summarised into memory.json.gz.

The history records each allocation with its Python stack, which torch gathers under the GIL: in a
loop whose autograd or pin-memory thread allocates while other threads hold the GIL, that stalls the
allocating thread for time the trace records nowhere (docs/profiler-overhead.md, "the loader-loop
benchmark on an H100"). So it runs in the warm-up steps only, which repeat the measured step's
allocations, and stops before the measured steps. Stopping it empties torch's event buffer, so the
events are read out first and joined to the final snapshot; the stacks of blocks still live stay
with the blocks.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
from pathlib import Path

from diagnose.child.memory_summary import summarise_snapshot
from diagnose.base.safe_files import fresh_path

HISTORY_ENTRIES = 20000
MEMORY_FILE = "memory.json.gz"  # gzipped: the snapshot summary is mostly repeated frame text
STAT_KEYS = (
    "allocated_bytes.all.peak",
    "reserved_bytes.all.peak",
    "allocated_bytes.all.current",
    "reserved_bytes.all.current",
    "inactive_split_bytes.all.peak",
    "inactive_split_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
    "num_device_alloc",
    "num_device_free",
)


class MemoryRecorder:
    """Records allocator history on device 0; a no-op without CUDA or on old torch builds."""

    def __init__(self, torch, out_dir: Path):
        self.torch = torch
        self.out = Path(out_dir)
        self.enabled = torch.cuda.is_available()
        self.oom_snapshot: dict | None = None  # torch.cuda.memory._snapshot() at the out-of-memory error
        self.oom_info: dict[str, int] | None = None
        self.recording = False  # the allocation history is on
        self.recorded_traces: list | None = None  # the history's events per device, read out when it stopped

    def watch(self) -> None:
        """Take a snapshot if the workload runs out of memory (from the start, at no cost)."""
        if not self.enabled:
            return
        try:
            self.torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
        except Exception:  # a private API: absent or changed in this build
            pass

    def start_history(self) -> None:
        """Record every allocation with its Python stack (from the profiled warm-up steps until
        `stop_history`, since it slows allocation-heavy code)."""
        if not self.enabled:
            return
        try:
            self.torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES, stacks="python")
            self.recording = True
        except Exception:
            pass

    def stop_history(self) -> None:
        """Stop recording allocations (before the measured steps), keeping the events recorded so far for the
        final snapshot (torch drops them when the history stops)."""
        if not self.recording:
            return
        self.recording = False
        with contextlib.suppress(Exception):
            self.recorded_traces = self.torch.cuda.memory._snapshot().get("device_traces") or []
        with contextlib.suppress(Exception):
            self.torch.cuda.memory._record_memory_history(enabled=None)

    def _on_oom(self, device, alloc, device_allocated, device_free) -> None:
        self.oom_info = {
            "device": device,
            "requested_bytes": alloc,
            "device_allocated_bytes": device_allocated,
            "device_free_bytes": device_free,
        }
        with contextlib.suppress(Exception):
            self.oom_snapshot = self.torch.cuda.memory._snapshot()

    def finish(self) -> dict | None:
        """Write memory.json.gz (stats + snapshot summary) once and return the stats for meta.json."""
        if not self.enabled:
            return None
        self.enabled = False
        torch = self.torch
        stats = {}
        with contextlib.suppress(Exception):
            raw = torch.cuda.memory_stats()
            stats = {k: raw.get(k) for k in STAT_KEYS}
        snapshot = self.oom_snapshot
        if snapshot is None:
            with contextlib.suppress(Exception):
                snapshot = torch.cuda.memory._snapshot()
        with contextlib.suppress(Exception):
            torch.cuda.memory._record_memory_history(enabled=None)
        if snapshot and self.recorded_traces:
            snapshot = with_recorded_events(snapshot, self.recorded_traces)
        doc = {
            "schema": "diagnose.memory/1",
            "device_total_bytes": torch.cuda.get_device_properties(0).total_memory,
            "stats": stats,
            "oom": self.oom_info,
            "snapshot_taken": "at the out-of-memory error"
            if self.oom_snapshot is not None
            else "after the profiled steps",
            "snapshot": summarise_snapshot(snapshot) if snapshot else None,
        }
        fresh = fresh_path(self.out / MEMORY_FILE)
        with gzip.open(fresh, "xt", compresslevel=6) as stream:
            stream.write(json.dumps(doc, default=str))
        os.replace(fresh, self.out / MEMORY_FILE)
        return stats


def with_recorded_events(snapshot: dict, recorded: list) -> dict:
    """`snapshot` with the events read out when the history stopped put before its own (per device)."""
    later = snapshot.get("device_traces") or []
    joined = [list(a) + list(b) for a, b in itertools.zip_longest(recorded, later, fillvalue=())]
    return {**snapshot, "device_traces": joined}
