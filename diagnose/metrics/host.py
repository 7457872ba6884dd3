"""What the host did while the GPU waited: CPU work that issued no GPU work, and syncs.

A *launching op* is a CPU op whose span contains at least one CUDA runtime call on its own
thread; its time is dispatch, which CUDA graphs remove. Silent host stretches (no CUDA call for
longer than `timeline.host_silence_us`) that no launching op covers are *host work*: data
loading, preprocessing, Python outside the model. That is what the host-bound rule measures.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.metrics.timeline import SYNC_CALL
from diagnose.trace.model import Trace

STEP_MARKERS = ("diagnose/", "ProfilerStep#")


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Union of intervals as a sorted (n, 2) array."""
    if not len(starts):
        return np.empty((0, 2))
    order = np.argsort(starts)
    s, e = starts[order], ends[order]
    running = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > running[:-1]))
    groups = np.cumsum(new) - 1
    return np.column_stack((s[new], pd.Series(running).groupby(groups).max().to_numpy()))


def overlap_us(a: np.ndarray, b: np.ndarray) -> float:
    """Total overlap between two unions of intervals (each sorted, non-overlapping)."""
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j, 1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k, 0] < end:
            total += min(end, b[k, 1]) - max(start, b[k, 0])
            k += 1
    return total


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection of two unions of intervals (each sorted, non-overlapping)."""
    out, j = [], 0
    for start, end in a:
        while j < len(b) and b[j, 1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k, 0] < end:
            out.append((max(start, b[k, 0]), min(end, b[k, 1])))
            k += 1
    return np.array(out).reshape(-1, 2)


def _launching_mask(trace: Trace, ops: pd.DataFrame) -> np.ndarray:
    """For each op, whether its span contains a CUDA runtime call on its own thread."""
    runtime = trace.runtime
    keep = np.zeros(len(ops), dtype=bool)
    for tid, group in ops.groupby("tid", sort=False):
        calls = np.sort(runtime.loc[runtime["tid"] == tid, "ts"].to_numpy(float))
        if not len(calls):
            continue
        lo = np.searchsorted(calls, group["ts"].to_numpy(float), side="left")
        hi = np.searchsorted(calls, group["end"].to_numpy(float), side="right")
        keep[ops.index.get_indexer(group.index)] = hi > lo
    return keep


def _spans(frame: pd.DataFrame) -> np.ndarray:
    return merge_intervals(frame["ts"].to_numpy(float), frame["end"].to_numpy(float))


def host_work(trace: Trace, silent: pd.DataFrame) -> tuple[float, pd.DataFrame]:
    """Silent host time spent in CPU work that launches nothing (µs over the window), and who did it.

    Work is what non-launching CPU ops and DataLoader ranges cover, minus anything inside a
    launching op (that is dispatch). Silent time covered by no recorded op is not claimed: the
    trace cannot say what the host was doing then. The second value lists the ops and ranges
    overlapping the work, with the overlap in µs (nested ops each count their own).
    """
    empty = pd.DataFrame(columns=["name", "overlap_us"])
    if not len(silent):
        return 0.0, empty
    stretches = merge_intervals(silent["start"].to_numpy(float), silent["end"].to_numpy(float))
    ops = trace.ops
    cpu = ops[ops["cat"] == "cpu_op"].reset_index(drop=True)
    launching = _launching_mask(trace, cpu)
    loader = ops[(ops["cat"] == "user_annotation") & ops["name"].str.contains("DataLoader", regex=False)]
    candidates = pd.concat([cpu[~launching], loader], ignore_index=True)
    covered = intersect(stretches, _spans(candidates))
    dispatch = _spans(cpu[launching])
    work = float((covered[:, 1] - covered[:, 0]).sum()) - overlap_us(covered, dispatch)
    rows = []
    for name, group in candidates.groupby("name", sort=False):
        share = overlap_us(covered, _spans(group))
        if share > 0:
            rows.append((name, share))
    frame = pd.DataFrame(rows, columns=["name", "overlap_us"]) if rows else empty
    return max(work, 0.0), frame.sort_values("overlap_us", ascending=False).reset_index(drop=True)


def sync_calls(trace: Trace, windows) -> pd.DataFrame:
    """Synchronising runtime calls made inside the steps' CPU ranges, each with the op that made it."""
    runtime = trace.runtime
    syncs = runtime[runtime["name"].str.contains(SYNC_CALL)]
    inside = np.zeros(len(syncs), dtype=bool)
    for w in windows:
        inside |= ((syncs["ts"] >= w.cpu_start) & (syncs["ts"] < w.cpu_end)).to_numpy()
    syncs = syncs[inside]
    ops = trace.ops[trace.ops["cat"] == "cpu_op"]
    names = []
    for call in syncs.itertuples():
        around = ops[(ops["tid"] == call.tid) & (ops["ts"] <= call.ts) & (ops["end"] >= call.end)]
        # The outermost enclosing op names the user-level cause (aten::item rather than
        # aten::_local_scalar_dense).
        names.append(around.iloc[0]["name"] if len(around) else "(no CPU op: a direct CUDA call)")
    return syncs.assign(op_name=names)
