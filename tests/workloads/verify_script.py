"""Test script for --verify in script mode on a CPU: each outermost module call is a step that sleeps
4 ms, or 1 ms under torch.set_float32_matmul_precision("high") (the `tf32` variant)."""

import time

import torch


class Step(torch.nn.Module):
    """One step: a small matmul, then a sleep set by the matmul precision."""

    def forward(self, x):
        fast = torch.get_float32_matmul_precision() != "highest"
        y = x @ x
        time.sleep((1.0 if fast else 4.0) / 1000)
        return y


model, x = Step(), torch.ones(8, 8)
for _ in range(400):
    model(x)
