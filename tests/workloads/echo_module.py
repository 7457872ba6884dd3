"""A module run with `diagnose run -m`: a tiny CPU training loop that prints how it was run."""

import sys

import torch

print("MODULE", __name__, sys.argv[1:], flush=True)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
