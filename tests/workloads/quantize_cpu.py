"""Test workload for --verify's weight quantizers on a CPU: a small inference MLP of nn.Linear modules.

`width` 256 fits the 4-bit kernels (k a multiple of 128, n of 16); `width=100` fits none, and
`train=True` multiplies by weights that need gradients: both leave nothing to quantize.
"""

import torch


def make_step(width: int = 256, layers: int = 3, dtype: str = "float32", train: bool = False):
    """One forward pass per call (with a backward when `train`)."""
    kind = getattr(torch, dtype)
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks).to(kind)
    x = torch.randn(4, width, dtype=kind)

    def step():
        if train:
            loss = model(x).square().mean()
            loss.backward()
            return loss.detach()
        with torch.no_grad():
            return x + model(x)

    return step
