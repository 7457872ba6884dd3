"""The rules of diagnose, one file each; ALL_RULES is the explicit list the engine runs.

Installed as `diagnose.rules`. Each rule's module docstring is its documentation; the pages in
docs/rules/ are generated from them (`python -m diagnose.docs`).
"""
from diagnose.rules.host_bound import HostBound
from diagnose.rules.launch_overhead import LaunchOverhead
from diagnose.rules.sync_stall import SyncStall

ALL_RULES = [
    LaunchOverhead,
    HostBound,
    SyncStall,
]

__all__ = ["ALL_RULES"]
