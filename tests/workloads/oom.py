"""Test workload: raises torch.cuda.OutOfMemoryError the way a real allocation failure does.

It is raised by hand so the test runs on machines without a GPU; on the H200 the GPU-marked test
in tests/test_capture_gpu.py allocates for real.
"""

import torch


def make_step(real: bool = False):
    """Runs one good step, then runs out of memory."""
    calls = {"n": 0}

    def step():
        calls["n"] += 1
        if calls["n"] < 2:
            return torch.ones(4).sum()
        if real:
            return torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # 1 PiB
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 PiB")

    return step
