"""Test workload in script mode: a tiny training loop with an optimizer, run as __main__."""

import sys

import torch

model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 100
for _ in range(iterations):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("finished", iterations)
