"""GPU test script for --verify in script mode: fp32 matmuls inside a module, called in a loop as
__main__ (each outermost call is a step). compute-bound fires with bf16-tensor-cores, whose tf32 and
autocast-bf16 variants act on the whole run."""

import torch


class Matmul(torch.nn.Module):
    """Four fp32 4096³ products per call."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4096, 4096, device="cuda") / 64)

    def forward(self, x):
        for _ in range(4):
            x = x @ self.w
        return x


model, x = Matmul(), torch.randn(4096, 4096, device="cuda")
with torch.no_grad():
    for _ in range(200):
        model(x)
