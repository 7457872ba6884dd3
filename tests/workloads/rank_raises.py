"""A distributed workload whose rank 1 raises while building its step (CPU, gloo)."""

import torch
import torch.distributed as dist


def make_step():
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise RuntimeError("rank one refuses")
    x = torch.ones(4)

    def step():
        dist.all_reduce(x)

    return step
