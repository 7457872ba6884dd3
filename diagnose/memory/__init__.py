"""Memory analysis: the allocator record of a capture, the memory timeline, what holds the peak,
the patterns of ops that waste memory, and parameter sweeps.

Everything here reads files and frames (memory.json, sweep.json, the trace's memory events);
nothing imports torch. The names below are imported on first use (PEP 562), so asking whether a
folder is a sweep does not import pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from diagnose.base.lazy import lazy_names

if TYPE_CHECKING:
    from diagnose.memory.record import MemoryRecord, load_memory
    from diagnose.memory.sweep import Sweep, load_sweep

__all__ = ["MemoryRecord", "load_memory", "Sweep", "load_sweep"]
__getattr__ = lazy_names(
    __name__,
    {
        "MemoryRecord": "diagnose.memory.record",
        "load_memory": "diagnose.memory.record",
        "Sweep": "diagnose.memory.sweep",
        "load_sweep": "diagnose.memory.sweep",
    },
)
