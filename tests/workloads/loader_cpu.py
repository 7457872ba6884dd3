"""Test workload for --verify's DataLoader fix on a CPU: each sample costs `sample_ms` of waiting in
the process that loads it (as reading it from disk or the network would), so worker processes make
the step faster however busy the machine's cores are (the suite runs a test per core), and the
result depends only on which samples arrive (the same seeded order on both sides).

The step itself then waits `work_ms`, as a training step computes: longer than the workers need per
batch, so the fixed loader keeps up and every fixed step takes about `work_ms`. A step that did no
work made the fixed steps bimodal (prefetched batches at once, then waits), and on a loaded machine
the median's interval reached below 1.

make_step(inline=True) makes its batches in the step itself: no DataLoader to rebuild.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowSquares(Dataset):
    """Sample i is a small tensor made from i, after `sample_ms` of waiting."""

    def __init__(self, size: int = 4096, sample_ms: float = 2.0):
        self.size, self.sample_ms = size, sample_ms

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        time.sleep(self.sample_ms / 1000)
        return torch.full((4,), float(index)) ** 0.5


def make_step(batch: int = 8, sample_ms: float = 2.0, work_ms: float = 10.0, inline: bool = False):
    """One training-like call on the next batch; the running sum it keeps is the output compared."""
    torch.manual_seed(0)
    total = torch.zeros(4)
    data = SlowSquares(sample_ms=sample_ms)
    if inline:

        def step():
            total.add_(torch.stack([data[i] for i in range(batch)]).sum(dim=0))
            time.sleep(work_ms / 1000)
            return total.clone()

        return step
    batches = iter(DataLoader(data, batch_size=batch, shuffle=True))

    def step():
        total.add_(next(batches).sum(dim=0))
        time.sleep(work_ms / 1000)
        return total.clone()

    return step
