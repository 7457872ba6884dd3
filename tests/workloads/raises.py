"""Test workload: the step raises on its third call, after a couple of good ones."""

import torch


def make_step():
    """Raises ValueError on the third call."""
    calls = {"n": 0}

    def step():
        calls["n"] += 1
        if calls["n"] == 3:
            raise ValueError("bad batch at step 3")
        return torch.ones(4).sum()

    return step
