"""A script that trains a tiny CPU model for a few iterations and prints the arguments it was given.

Used by the CLI contract tests: what follows the script on diagnose's command line is the script's.
"""

import sys

import torch
from plain_sgd import sgd_step

print("ARGS", sys.argv[1:], flush=True)
model = torch.nn.Linear(8, 8)
for _ in range(int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 12):
    sgd_step(model, model(torch.randn(4, 8)).sum())
