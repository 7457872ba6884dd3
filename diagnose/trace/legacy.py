"""Traces written by the kineto of PyTorch 1.8–1.12, read like today's.

Those versions name the event families `Operator`, `Runtime`, `Kernel`, `Memcpy` and `Memset`
(today: `cpu_op`/`user_annotation`, `cuda_runtime`, `kernel`, `gpu_memcpy`, `gpu_memset`), spell
the GPU and runtime records' link to their op `external id` (today `External id`), write thread
ids as strings, and put `record_function` ranges (ProfilerStep#N, the DataLoader's `__next__`,
the optimizer's step) under `Operator` with the ops. The decoder maps the categories (the tables
below); `relabel_operators` splits the `Operator` rows into ops and annotations afterwards.
"""
from __future__ import annotations

import re

import pandas as pd

GPU_CATEGORIES = {"Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
RUNTIME_CATEGORIES = {"Runtime", "Driver"}
OP_CATEGORIES = {"Operator"}

# the ranges torch itself opens with record_function; the user's own ranges are told apart by
# having no `Input Dims` where the ops around them have them (record_shapes=True)
ANNOTATION_NAMES = re.compile(r"^(ProfilerStep#\d+|enumerate\(DataLoader\)#|Optimizer\.(step|zero_grad)#)")


def relabel_operators(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops frame with each `Operator` row as `cpu_op` or `user_annotation` (other rows as they were)."""
    if not len(ops):
        return ops
    old = (ops["cat"] == "Operator").to_numpy()
    if not old.any():
        return ops
    names = ops["name"].astype(str)
    annotation = names.str.match(ANNOTATION_NAMES).to_numpy(dtype=bool, copy=True)
    shapes = ops["input_dims"].map(lambda v: isinstance(v, list)).to_numpy()
    if (shapes & old).any():  # recorded with shapes: a range is an Operator row without any
        annotation |= ~shapes & ~names.str.contains("::", regex=False).to_numpy()
    ops = ops.copy()
    ops.loc[old, "cat"] = ["user_annotation" if a else "cpu_op" for a in annotation[old]]
    return ops
