"""The rules of diagnose, one file each; ALL_RULES is the explicit list the engine runs.

Installed as `diagnose.rules`. Each rule's module docstring is its documentation; the pages in
docs/rules/ are generated from them (`python -m diagnose.docs`).
"""
from diagnose.rules.compute_bound import ComputeBound
from diagnose.rules.decode_latency import DecodeLatency
from diagnose.rules.host_bound import HostBound
from diagnose.rules.launch_overhead import LaunchOverhead
from diagnose.rules.memory_bound import MemoryBound
from diagnose.rules.sync_stall import SyncStall

ALL_RULES = [
    LaunchOverhead,
    HostBound,
    SyncStall,
    MemoryBound,
    ComputeBound,
    DecodeLatency,
]

__all__ = ["ALL_RULES"]
