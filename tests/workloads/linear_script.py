"""Test script for --verify in script mode on a CPU: each outermost module call is a step, an
inference MLP whose weights the w4a16 variant can quantize (width 256)."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
x = torch.randn(4, 256)
with torch.no_grad():
    for _ in range(300):
        model(x)
