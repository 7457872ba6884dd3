"""Test workload: a tiny training loop that ends in a chosen way during its profiled steps.

Script or module mode: `ending.py END`; function mode: `ending.py:make_step --param end=END`.
END is one of: clean, raise, exit7, exit0, osexit0, osexit5, segfault, killpg.
"""

import ctypes
import os
import signal
import sys

import torch
from plain_sgd import sgd_step

AT_STEP = 5  # inside the profiled steps with --warmup 1 --steps 4 --timed-steps 2


def end_now(end: str) -> None:
    """End the process the way `end` names (nothing for `clean`)."""
    if end == "raise":
        raise ValueError("bad batch")
    if end == "exit7":
        sys.exit(7)
    if end == "exit0":
        sys.exit(0)
    if end == "osexit0":
        os._exit(0)
    if end == "osexit5":
        os._exit(5)
    if end == "segfault":
        ctypes.string_at(0)
    if end == "killpg":
        os.killpg(0, signal.SIGKILL)


def make_step(end="clean"):
    """A step that ends the process at its AT_STEP-th call."""
    model = torch.nn.Linear(16, 16)
    calls = {"n": 0}

    def step():
        calls["n"] += 1
        if calls["n"] == AT_STEP:
            end_now(end)
        return model(torch.randn(4, 16)).sum()

    return step


if __name__ == "__main__":
    how = sys.argv[1] if len(sys.argv) > 1 else "clean"
    model = torch.nn.Linear(16, 16)
    for i in range(40):
        sgd_step(model, model(torch.randn(4, 16)).pow(2).mean())
        if i + 1 == AT_STEP:
            end_now(how)
