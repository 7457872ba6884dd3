"""Kernel launches: each GPU op joined to the host call that launched it and the op that asked.

Kernel ↔ launch call on `correlation`; launch call ↔ CPU op on `External id`. Some kinetos (the
one param's et_replay traces came from) write each GPU record's correlation id as its `External
id`: then the launch call's op is the innermost CPU op around it on its thread. The launch delay
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

GPU_COLUMNS = [
    "name",
    "cat",
    "ts",
    "dur",
    "end",
    "device",
    "stream",
    "correlation",
    "external_id",
    "grid",
    "block",
    "blocks",
]


def join_launches(trace: Trace) -> pd.DataFrame:
    """One row per GPU op with `launch_name`, `launch_ts`, `launch_dur`, `launch_delay`, `op_name`, shapes."""
    gpu = trace.gpu
    out = gpu[GPU_COLUMNS]  # copy-on-write: the new columns go on `out`, the gpu frame is shared, not copied
    runtime = trace.launch_calls[["correlation", "name", "ts", "dur", "external_id", "tid"]]
    found = lookup(out["correlation"], runtime["correlation"])
    for src, dst in (
        ("name", "launch_name"),
        ("ts", "launch_ts"),
        ("dur", "launch_dur"),
        ("external_id", "launch_external_id"),
        ("tid", "launch_tid"),
    ):
        out[dst] = _taken(runtime[src], found, out.index)
    out["launch_delay"] = out["ts"] - (out["launch_ts"] + out["launch_dur"])
    cpu_ops = trace.cpu_ops[["ts", "external_id", "name", "input_dims", "input_types"]]
    cpu_ops = cpu_ops.dropna(subset=["external_id"])
    # The innermost op owns the launch: with nested ops sharing an id, keep the latest-starting one.
    cpu_ops = cpu_ops.sort_values("ts").drop_duplicates("external_id", keep="last")
    ext = out["external_id"].fillna(out["launch_external_id"])
    if _ids_are_correlations(out):
        ext = pd.Series(_enclosing_op_ids(trace, out["launch_ts"], out["launch_tid"]), index=out.index)
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
    merge gives a column with missing matches). A column of objects none of whose rows is found (no
    op links: the shapes of a trace without CPU ops) is one missing value seen in every row, read-only."""
    if column.dtype == object and len(positions) and (positions < 0).all():
        missing = take(column.to_numpy(), positions[:1], allow_fill=True)
        return pd.Series(np.broadcast_to(missing, len(positions)), index=index, copy=False)
    return pd.Series(take(column.array, positions, allow_fill=True), index=index)


MIN_LINKS = 10  # GPU records with both ids before their equality says the ids are not op links


def _ids_are_correlations(out: pd.DataFrame) -> bool:
    """True when every GPU record's `External id` is its own correlation id (no link to an op)."""
    both = out["external_id"].notna() & out["correlation"].notna()
    if both.sum() < MIN_LINKS:
        return False
    return bool((out.loc[both, "external_id"] == out.loc[both, "correlation"]).all())


def _enclosing_op_ids(trace: Trace, at: pd.Series, tids: pd.Series) -> np.ndarray:
    """For each launch call (time, thread), the `External id` of the innermost CPU op around it
    on the same thread (NaN where none is)."""
    out = np.full(len(at), np.nan)
    ops = trace.cpu_ops.dropna(subset=["external_id"])
    times = at.to_numpy(float)
    threads = tids.astype(str).to_numpy()
    for tid, group in ops.groupby(ops["tid"].astype(str), sort=False):
        group = group.sort_values("ts", kind="stable")
        starts, ends = group["ts"].to_numpy(float), group["end"].to_numpy(float)
        ids = group["external_id"].to_numpy(dtype=float, na_value=np.nan)
        parent = _parents(starts, ends)
        mine = np.nonzero(threads == tid)[0]
        for row, i in zip(mine, np.searchsorted(starts, times[mine], side="right") - 1):
            while i >= 0 and ends[i] < times[row]:
                i = parent[i]
            if i >= 0:
                out[row] = ids[i]
    return out


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The index of each range's innermost enclosing range (-1 at the top), ranges sorted by start."""
    parent = np.full(len(starts), -1)
    stack: list[int] = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        while stack and ends[stack[-1]] < s:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent
