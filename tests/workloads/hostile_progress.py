"""A workload that writes hostile reports to diagnose's progress pipe, then raises with escape sequences
in its message when asked (tests/test_system_failures.py).

    diagnose hostile_progress.py [raise]
"""

import json
import os
import sys

import torch

HOSTILE = "\x1b[2J\x1b]0;title\x07\x9b31m\u202e\x08"

fd = os.environ.get("DIAGNOSE_PROGRESS_FD")
if fd:
    with os.fdopen(int(fd), "w", closefd=False) as pipe:
        for event in (
            {"phase": f"warmup{HOSTILE}", "done": 1, "total": HOSTILE},
            {"phase": "timing", "done": HOSTILE, "total": 3},
            {"phase": "profile", "done": float("nan"), "total": 10**30},
        ):
            pipe.write(json.dumps(event) + "\n")
        pipe.write(HOSTILE + "\n")  # not JSON at all

x = torch.ones(4)
for _ in range(3):
    x = x * 2
if sys.argv[1:] == ["raise"]:
    raise RuntimeError(f"failed {HOSTILE}")
