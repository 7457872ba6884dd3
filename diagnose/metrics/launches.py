"""Kernel launches: each GPU op joined to the host call that launched it and the op that asked.

Kernel ↔ launch call on `correlation`; launch call ↔ CPU op on `External id`. The launch delay
is the time from the end of the launch call to the kernel's start (queueing on the GPU).

Both joins are lookups of unique keys, done with a sorted search on plain int64 arrays: a general
merge on nullable integer keys costs several times more on a trace of millions of events. Missing
matches come out as pandas' left merge would give them (NaN, <NA>, ints widened to float).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.extensions import take

from diagnose.trace.model import Trace

GPU_COLUMNS = ["name", "cat", "ts", "dur", "end", "device", "stream", "correlation", "external_id",
               "grid", "block", "blocks", "registers", "occupancy", "bytes"]


def join_launches(trace: Trace) -> pd.DataFrame:
    """One row per GPU op with `launch_name`, `launch_ts`, `launch_dur`, `launch_delay`, `op_name`, shapes."""
    gpu = trace.gpu
    out = gpu[GPU_COLUMNS].copy()
    runtime = trace.runtime[["correlation", "name", "ts", "dur", "external_id", "tid"]]
    runtime = runtime.dropna(subset=["correlation"]).drop_duplicates("correlation")
    found = lookup(out["correlation"], runtime["correlation"])
    for src, dst in (("name", "launch_name"), ("ts", "launch_ts"), ("dur", "launch_dur"),
                     ("external_id", "launch_external_id"), ("tid", "launch_tid")):
        out[dst] = _taken(runtime[src], found, out.index)
    out["launch_delay"] = out["ts"] - (out["launch_ts"] + out["launch_dur"])
    cpu_ops = trace.cpu_ops[["ts", "external_id", "name", "input_dims", "input_types"]]
    cpu_ops = cpu_ops.dropna(subset=["external_id"])
    # The innermost op owns the launch: with nested ops sharing an id, keep the latest-starting one.
    cpu_ops = cpu_ops.sort_values("ts").drop_duplicates("external_id", keep="last")
    ext = out["external_id"].fillna(out["launch_external_id"])
    out["op_external_id"] = ext.astype("Int64")
    found = lookup(out["op_external_id"], cpu_ops["external_id"].astype("Int64"))
    out["op_name"] = _taken(cpu_ops["name"], found, out.index)
    out["input_dims"] = _taken(cpu_ops["input_dims"], found, out.index)
    out["input_types"] = _taken(cpu_ops["input_types"], found, out.index)
    return out


def lookup(keys: pd.Series, table: pd.Series) -> np.ndarray:
    """For each key, the position in `table` (unique, no missing values) holding it; -1 where none does."""
    present = keys.notna().to_numpy()
    if not len(table) or not present.any():
        return np.full(len(keys), -1, dtype=np.int64)
    wanted = keys.to_numpy(dtype=np.int64, na_value=0)
    values = table.to_numpy(dtype=np.int64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    at = np.minimum(np.searchsorted(ordered, wanted), len(ordered) - 1)
    return np.where(present & (ordered[at] == wanted), order[at], -1)


def _taken(column: pd.Series, positions: np.ndarray, index: pd.Index) -> pd.Series:
    """column[positions] as a new column, missing where the position is -1 (with the dtype a left
    merge gives a column with missing matches)."""
    return pd.Series(take(column.array, positions, allow_fill=True), index=index)
