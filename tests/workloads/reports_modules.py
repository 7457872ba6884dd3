"""Test workload: a tiny step that writes, at every call, whether torch._inductor is loaded in its process
(to the file named by DIAGNOSE_TEST_MODULES_FILE)."""

import json
import os
import sys

import torch


def make_step():
    """A step that records the loaded state of torch._inductor after it runs."""
    model = torch.nn.Linear(8, 8)
    path = os.environ["DIAGNOSE_TEST_MODULES_FILE"]

    def step():
        out = model(torch.randn(4, 8)).sum()
        with open(path, "w") as f:
            json.dump({"torch._inductor": "torch._inductor" in sys.modules}, f)
        return out

    return step
