"""Test workload: a tiny MLP forward, small enough to profile quickly on a CPU."""

import torch


def make_step(width: int = 64, scale: float = 1.0):
    """One forward pass per call."""
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
    x = torch.randn(8, width) * scale
    return lambda: model(x)
