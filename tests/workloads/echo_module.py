"""A module run with `diagnose run -m`: a tiny CPU training loop that prints how it was run."""

import sys

import torch
from plain_sgd import sgd_step

print("MODULE", __name__, sys.argv[1:], flush=True)
model = torch.nn.Linear(8, 8)
for _ in range(12):
    sgd_step(model, model(torch.randn(4, 8)).sum())
