"""The rules of diagnose, one file each; ALL_RULES is the explicit list the engine runs.

Installed as `diagnose.rules`. Each rule's module docstring is its documentation; the pages in
docs/rules/ are generated from them (`python -m diagnose.docs`).
"""
from diagnose.rules.attention_memory import AttentionMemory
from diagnose.rules.compute_bound import ComputeBound
from diagnose.rules.decode_latency import DecodeLatency
from diagnose.rules.dynamic_shapes import DynamicShapes
from diagnose.rules.host_bound import HostBound
from diagnose.rules.kv_fragmentation import KVFragmentation
from diagnose.rules.launch_overhead import LaunchOverhead
from diagnose.rules.memory_bound import MemoryBound
from diagnose.rules.sync_stall import SyncStall
from diagnose.rules.vram_limit import VramLimit

ALL_RULES = [
    LaunchOverhead,
    HostBound,
    DynamicShapes,
    SyncStall,
    MemoryBound,
    ComputeBound,
    DecodeLatency,
    AttentionMemory,
    KVFragmentation,
    VramLimit,
]

__all__ = ["ALL_RULES"]
