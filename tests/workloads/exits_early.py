"""Test workload in script mode: a tiny training loop that ends its process itself.

Arguments: the number of iterations, then how it leaves: `os` (os._exit(CODE), which skips every
`finally` and atexit hook) or `posix` (posix._exit(CODE), which even a patched os._exit does
not see), then CODE.
"""

import os
import posix
import sys

import torch
from plain_sgd import sgd_step

iterations = int(sys.argv[1])
how = sys.argv[2]
code = int(sys.argv[3])
model = torch.nn.Linear(32, 32)
for _ in range(iterations):
    sgd_step(model, model(torch.randn(16, 32)).pow(2).mean())
print(f"leaving with {how}._exit({code}) after {iterations} iterations", flush=True)
(os._exit if how == "os" else posix._exit)(code)
