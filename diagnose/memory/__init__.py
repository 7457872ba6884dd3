"""Memory analysis: the allocator record of a capture, the memory timeline, what holds the peak,
the patterns of ops that waste memory, and parameter sweeps.

Everything here reads files and frames (memory.json, sweep.json, the trace's memory events);
nothing imports torch.
"""

from diagnose.memory.record import MemoryRecord, load_memory
from diagnose.memory.sweep import Sweep, load_sweep

__all__ = ["MemoryRecord", "load_memory", "Sweep", "load_sweep"]
