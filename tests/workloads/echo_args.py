"""A script that trains a tiny CPU model for a few iterations and prints the arguments it was given.

Used by the CLI contract tests: what follows the script on diagnose's command line is the script's.
"""

import sys

import torch

print("ARGS", sys.argv[1:], flush=True)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 12):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
