"""Test workload for --verify on a CPU: a step whose cost and result the TF32 switch sets, predictably.

With torch.set_float32_matmul_precision("high") (the `tf32` variant) the step sleeps `fast_ms`
instead of `slow_ms`; with `changes=True` its result also moves by `shift`. So the verify plumbing
has a known answer without a GPU: about slow/fast faster, outputs matching (or not).
"""

import time

import torch


def make_step(slow_ms: float = 4.0, fast_ms: float = 1.0, changes: bool = False, shift: float = 1e-2):
    """One call: a small fp32 computation, then a sleep whose length depends on the matmul precision."""
    x = torch.linspace(0, 1, 64).reshape(8, 8)
    state = torch.zeros(8, 8)

    def step():
        fast = torch.get_float32_matmul_precision() != "highest"
        state.copy_(x @ x + (shift if fast and changes else 0.0))
        time.sleep((fast_ms if fast else slow_ms) / 1000)
        return state.sum(dim=0)

    return step
