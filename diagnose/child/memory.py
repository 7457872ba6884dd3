"""Allocator recording in the child: history during the profiled steps, a snapshot at the end
or at the moment of an out-of-memory error, summarised into memory.json.gz.
"""

from __future__ import annotations

import contextlib
import gzip
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

    def watch(self) -> None:
        """Take a snapshot if the workload runs out of memory (from the start, at no cost)."""
        if not self.enabled:
            return
        try:
            self.torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
        except Exception:  # a private API: absent or changed in this build
            pass

    def start_history(self) -> None:
        """Record every allocation with its Python stack (during the profiled steps only, since it
        slows allocation-heavy code)."""
        if not self.enabled:
            return
        try:
            self.torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES, stacks="python")
        except Exception:
            pass

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
