"""The allocator record of one capture, behind one object the memory rules read.

Three sources, each optional: memory.json.gz (or an older plain memory.json) beside the trace
(schema diagnose.memory/1, written by diagnose/child/memory.py: allocator statistics, OOM details, a snapshot summary), the `memory`
block of meta.json (peaks, retries, OOM count: older captures have only this), and the trace's
own allocator events (`profile_memory=True`, any kineto trace).

memory.json is checked against its schema (diagnose/trace/schemas.py, MemoryDoc) before any field
is read: a file that is not JSON, or names another schema, is ignored with a warning; JSON of the
wrong shape or types, or nested too deeply, is an InputError naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pandas as pd

from diagnose.trace import allocator, schemas

MEMORY_FILES = ("memory.json.gz", "memory.json")  # what captures write now (gzipped), and before
SCHEMA = "diagnose.memory/1"
CUDA_DEVICE_TYPE = 1
_ALLOWED = re.compile(r"([\d.]+)\s*GiB allowed")
_GIB = 1024**3
RESERVED_FROM_START = 0.99  # the reserved level at the trace's first allocator event, as a share of its peak


@dataclasses.dataclass
class MemoryRecord:
    """What is known about one run's GPU memory."""

    doc: dict | None
    capture: dict
    events: pd.DataFrame
    path: str | None = None
    trace_device_bytes: float | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def stats(self) -> dict:
        """memory.json's allocator statistics (torch.cuda.memory_stats keys), or {}."""
        return (self.doc or {}).get("stats") or {}

    @property
    def snapshot(self) -> dict | None:
        """memory.json's snapshot summary (memory_summary.py), taken at the OOM or after the steps."""
        return (self.doc or {}).get("snapshot") or None

    @property
    def snapshot_taken(self) -> str | None:
        """When the snapshot was taken, as memory.json says."""
        return (self.doc or {}).get("snapshot_taken")

    @property
    def oom(self) -> dict | None:
        """The OOM observer's record (requested, device allocated and free bytes), or None."""
        return (self.doc or {}).get("oom") or None

    @property
    def meta(self) -> dict:
        """meta.json's memory block."""
        return self.capture.get("memory") or {}

    @property
    def out_of_memory(self) -> bool:
        """True when the run hit an out-of-memory error."""
        return (
            self.capture.get("status") == "oom"
            or bool(self.oom)
            or bool(self.stats.get("num_ooms") or self.meta.get("num_ooms"))
        )

    @property
    def error(self) -> dict:
        """meta.json's error block (type, message, traceback), or {}."""
        return self.capture.get("error") or {}

    @property
    def peak_allocated(self) -> float | None:
        """Peak bytes held by tensors over the run."""
        return self._first(
            self.stats.get("allocated_bytes.all.peak"),
            self.meta.get("max_allocated_bytes"),
            _max(self.events, "total_allocated"),
        )

    @property
    def peak_reserved(self) -> float | None:
        """Peak bytes the caching allocator held from the driver over the run."""
        return self._first(
            self.stats.get("reserved_bytes.all.peak"),
            self.meta.get("max_reserved_bytes"),
            _max(self.events, "total_reserved"),
        )

    @property
    def reserved_before_trace(self) -> bool:
        """True when the peaks come from the trace's allocator events alone and the reserved level is at
        its peak from the first event on: the memory was reserved before the trace began, by a peak the
        trace does not show, so its unallocated part cannot be told from fragmentation."""
        if self.stats.get("reserved_bytes.all.peak") is not None or self.meta.get("max_reserved_bytes") is not None:
            return False
        peak = _max(self.events, "total_reserved")
        if not peak:
            return False
        first = float(self.events["total_reserved"].to_numpy(float)[self.events["ts"].to_numpy(float).argmin()])
        return math.isfinite(first) and first >= RESERVED_FROM_START * peak

    @property
    def alloc_retries(self) -> int:
        """cudaMalloc failures the allocator recovered from by freeing its cache."""
        return int(self._first(self.stats.get("num_alloc_retries"), self.meta.get("num_alloc_retries")) or 0)

    @property
    def inactive_split_peak(self) -> float | None:
        """Peak bytes in free pieces of split blocks (unusable for larger requests)."""
        return self.stats.get("inactive_split_bytes.all.peak")

    @property
    def device_total(self) -> float | None:
        """The GPU's memory in bytes."""
        device = self.capture.get("device") or {}
        return self._first(
            (self.doc or {}).get("device_total_bytes"), device.get("total_memory_bytes"), self.trace_device_bytes
        )

    @property
    def limit(self) -> tuple[float | None, str]:
        """The memory this process could use, and where that figure comes from.

        A per-process cap (torch.cuda.set_per_process_memory_fraction) shows in the OOM message as
        "N GiB allowed"; otherwise the device's total.
        """
        found = _ALLOWED.search(self.error.get("message") or "")
        if found:
            return float(found.group(1)) * _GIB, f"the per-process cap in the OOM message ({found.group(0)})"
        total = self.device_total
        return total, "the device's total memory" if total else "unknown"

    @staticmethod
    def _first(*values):
        return next((v for v in values if v is not None), None)


def _max(events: pd.DataFrame, column: str) -> float | None:
    peak = events[column].max() if len(events) else None
    return float(peak) if peak is not None and math.isfinite(peak) else None


def load_memory(trace) -> MemoryRecord | None:
    """The MemoryRecord of a Trace, or None when it holds nothing about memory.

    memory.json is looked up in the capture folder (`trace.source` when it is a folder, else the
    trace file's folder; never for standard input); a file that is not JSON or not
    diagnose.memory/1 is reported in `warnings`, one that breaks the schema raises InputError.
    """
    capture = trace.capture or {}
    warnings: list[str] = []
    doc, path = _read_memory_json(trace.source, capture, warnings)
    events = cuda_events(trace.memory)
    if doc is None and not capture.get("memory") and not len(events):
        return None
    return MemoryRecord(
        doc=doc,
        capture=capture,
        events=events,
        path=path,
        trace_device_bytes=(trace.device or {}).get("memory_bytes"),
        warnings=warnings,
    )


def _read_memory_json(source: str, capture: dict, warnings: list[str]) -> tuple[dict | None, str | None]:
    if not source:
        return None, None
    where = Path(source)
    if not where.exists():  # standard input, or a trace since moved: no folder to look in
        return None, None
    folder = where if where.is_dir() else where.parent
    named = (capture.get("files") or {}).get("memory")
    candidates = [folder / n for n in ([named] if named else []) + [n for n in MEMORY_FILES if n != named]]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        return None, None
    try:
        doc = schemas.read_json_object(path, "memory record")
    except schemas.NotJson as exc:
        warnings.append(str(exc))
        return None, None
    if doc.get("schema") != SCHEMA:
        warnings.append(f"{path}: not a {SCHEMA} file; ignored")
        return None, None
    return schemas.validate(doc, schemas.MemoryDoc, path, "memory record"), str(path)


def cuda_events(memory: pd.DataFrame) -> pd.DataFrame:
    """The allocator events of the busiest CUDA device, numeric, in time order (the trace loader
    has dropped those without usable numbers: trace/allocator.py)."""
    cols = ["ts", "bytes", "total_allocated", "total_reserved", "device_id"]
    if memory is None or not len(memory):
        return pd.DataFrame(columns=cols, dtype=float)
    frame = pd.DataFrame({c: allocator.numbers(memory[c]) for c in cols + ["device_type"]})
    frame = frame[
        (frame["device_type"] == CUDA_DEVICE_TYPE)
        & frame["total_allocated"].notna()
        & frame["total_reserved"].notna()
        & frame["device_id"].notna()
    ]
    if not len(frame):
        return pd.DataFrame(columns=cols, dtype=float)
    device = frame["device_id"].mode().iloc[0]
    frame = frame[frame["device_id"] == device][cols]
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)
