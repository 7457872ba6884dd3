"""Traces written by the kineto of PyTorch 1.8–1.12, read like today's.

Those versions name the event families `Operator`, `Runtime`, `Kernel`, `Memcpy` and `Memset`
(today: `cpu_op`/`user_annotation`, `cuda_runtime`, `kernel`, `gpu_memcpy`, `gpu_memset`), spell
the GPU and runtime records' link to their op `external id` (today `External id`), write thread
ids as strings, and put `record_function` ranges (ProfilerStep#N, the DataLoader's `__next__`,
the optimizer's step) under `Operator` with the ops. The decoder maps the categories (the tables
below); `relabel_operators` splits the `Operator` rows into ops and annotations afterwards.

Their convolution backward ran as two ops inside `aten::cudnn_convolution_backward(self,
grad_output, weight)`: `…_backward_input(self_size, grad_output, weight)` and
`…_backward_weight(weight_size, grad_output, self)`, whose first argument, a list of sizes, was
recorded as an empty `GenericList`. That list is the shape of the enclosing op's tensor (its
`self` or `weight`), so `relabel_operators` writes it in, with its dtype: the FLOPs of the
weight gradient depend on the filter's taps, which nothing else records (metrics/work.py).
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from diagnose.vocabulary.markers import TORCH_RANGES
from diagnose.vocabulary.ops import CONV_BACKWARD_PARENT, CONV_BACKWARD_SIZES

GPU_CATEGORIES = {"Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
RUNTIME_CATEGORIES = {"Runtime", "Driver"}
OP_CATEGORIES = {"Operator"}


def relabel_operators(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops frame with each `Operator` row as `cpu_op` or `user_annotation` (other rows as they were)."""
    if not len(ops):
        return ops
    old = (ops["cat"] == "Operator").to_numpy()
    if not old.any():
        return ops
    names = ops["name"].astype(str)
    # the ranges torch itself opens with record_function; the user's own ranges are told apart by
    # having no `Input Dims` where the ops around them have them (record_shapes=True)
    annotation = names.str.match(TORCH_RANGES).to_numpy(dtype=bool, copy=True)
    shapes = ops["input_dims"].map(lambda v: isinstance(v, list)).to_numpy()
    if (shapes & old).any():  # recorded with shapes: a range is an Operator row without any
        annotation |= ~shapes & ~names.str.contains("::", regex=False).to_numpy()
    ops = ops.copy()
    ops.loc[old, "cat"] = ["user_annotation" if a else "cpu_op" for a in annotation[old]]
    _fill_backward_sizes(ops)
    return ops


def _fill_backward_sizes(ops: pd.DataFrame) -> None:
    """Write the enclosing convolution backward's tensor shape into its children's empty size list."""
    names = ops["name"]
    parents = ops[names == CONV_BACKWARD_PARENT]
    children = ops[names.isin(list(CONV_BACKWARD_SIZES))]
    if not len(parents) or not len(children):
        return
    for tid, group in parents.groupby(parents["tid"].astype(str), sort=False):
        group = group.sort_values("ts", kind="stable")
        starts = group["ts"].to_numpy(float)
        mine = children[children["tid"].astype(str) == tid]
        at = np.searchsorted(starts, mine["ts"].to_numpy(float), side="right") - 1
        for index, row, p in zip(mine.index, mine.itertuples(index=False), at):
            if p < 0 or row.end > group["end"].iloc[p]:
                continue  # not inside a convolution backward
            dims, types = row.input_dims, row.input_types
            parent_dims, parent_types = group["input_dims"].iloc[p], group["input_types"].iloc[p]
            arg = CONV_BACKWARD_SIZES[row.name]
            if not (
                isinstance(dims, list)
                and dims
                and dims[0] == []
                and isinstance(types, list)
                and types
                and isinstance(parent_dims, list)
                and isinstance(parent_types, list)
                and len(parent_dims) > arg
                and len(parent_types) > arg
            ):
                continue
            ops.at[index, "input_dims"] = [parent_dims[arg], *dims[1:]]
            ops.at[index, "input_types"] = [parent_types[arg], *types[1:]]
