"""Memory analysis: the allocator record of a capture, the memory timeline, what holds the peak,
the patterns of ops that waste memory, and parameter sweeps.

Everything here reads files and frames (memory.json, sweep.json, the trace's memory events);
nothing imports torch.
"""
from diagnose.memory.record import MemoryRecord, load_memory
from diagnose.memory.sweep import Sweep, load_sweep

__all__ = ["MemoryRecord", "load_memory", "Sweep", "load_sweep", "diagnose_sweep", "memory_details"]


def diagnose_sweep(folder, config=None, rules=None):
    """Diagnose a sweep folder (sweep.json + one capture per point): see diagnose.memory.details."""
    from diagnose.memory.details import diagnose_sweep as run

    return run(folder, config, rules)


def memory_details(ctx) -> dict:
    """Diagnosis.details["memory"] for a rules Context: see diagnose.memory.details."""
    from diagnose.memory.details import memory_details as build

    return build(ctx)
