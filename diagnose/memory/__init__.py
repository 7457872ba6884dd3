"""Memory analysis: the allocator record of a capture, the memory timeline, what holds the peak,
the patterns of ops that waste memory, and parameter sweeps.

Everything here reads files and frames (memory.json, sweep.json, the trace's memory events);
nothing imports torch. The names below are imported on first use (PEP 562), so asking whether a
folder is a sweep does not import pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnose.memory.record import MemoryRecord, load_memory
    from diagnose.memory.sweep import Sweep, load_sweep

__all__ = ["MemoryRecord", "load_memory", "Sweep", "load_sweep"]
_HOMES = {
    "MemoryRecord": "diagnose.memory.record",
    "load_memory": "diagnose.memory.record",
    "Sweep": "diagnose.memory.sweep",
    "load_sweep": "diagnose.memory.sweep",
}


def __getattr__(name: str) -> object:
    """The package's public names, imported when first asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
