"""What the host did while the GPU waited: CPU work that issued no GPU work, and syncs.

A *launching op* is a CPU op whose span contains at least one CUDA runtime call on its own
thread; its time is dispatch, which CUDA graphs remove. Silent host stretches (no CUDA call for
longer than `timeline.host_silence_us`) that no launching op covers are *host work*: data
loading, preprocessing, Python outside the model. That is what the host-bound rule measures.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.metrics.timeline import name_matches
from diagnose.trace.model import Trace
from diagnose.trace.names import name_has, name_search
from diagnose.vocabulary.compiled import COMPILING
from diagnose.vocabulary.runtime import SYNC_CALL


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Union of intervals as a sorted (n, 2) array."""
    if not len(starts):
        return np.empty((0, 2))
    order = np.argsort(starts)
    s, e = starts[order], ends[order]
    running = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > running[:-1]))
    # the running maximum never falls, so each group's end is its value at the group's last interval
    last = np.append(np.flatnonzero(new)[1:] - 1, len(s) - 1)
    return np.column_stack((s[new], running[last]))


def _pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (into a, into b) of every overlapping pair, in order of a then b.

    Both are sorted unions of intervals, so the intervals of b that overlap a[i] are a contiguous
    run: from the first that ends after a[i] starts to the last that starts before a[i] ends.
    """
    if not len(a) or not len(b):
        return np.empty(0, dtype=int), np.empty(0, dtype=int)
    first = np.searchsorted(b[:, 1], a[:, 0], side="right")
    stop = np.maximum(first, np.searchsorted(b[:, 0], a[:, 1], side="left"))
    counts = stop - first
    ia = np.repeat(np.arange(len(a)), counts)
    ib = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    return ia, ib


def overlap_us(a: np.ndarray, b: np.ndarray) -> float:
    """Total overlap between two unions of intervals (each sorted, non-overlapping)."""
    ia, ib = _pairs(a, b)
    if not len(ia):
        return 0.0
    parts = np.minimum(a[ia, 1], b[ib, 1]) - np.maximum(a[ia, 0], b[ib, 0])
    return float(np.add.accumulate(parts)[-1])  # summed in order, as a running total would


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection of two unions of intervals (each sorted, non-overlapping)."""
    ia, ib = _pairs(a, b)
    return np.column_stack((np.maximum(a[ia, 0], b[ib, 0]), np.minimum(a[ia, 1], b[ib, 1]))).reshape(-1, 2)


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


def _touching(starts: np.ndarray, ends: np.ndarray, union: np.ndarray) -> np.ndarray:
    """For each interval [start, end], whether it meets some interval of `union` (sorted and
    non-overlapping, as merge_intervals makes it), touching ends included.

    Only those can overlap the union; filtering on this first keeps the rest of the work to the
    ops near the silent stretches, a small part of a long trace.
    """
    if not len(union):
        return np.zeros(len(starts), dtype=bool)
    k = np.searchsorted(union[:, 1], starts, side="left")  # the first that ends at or after the start
    inside = k < len(union)
    out = np.zeros(len(starts), dtype=bool)
    out[inside] = union[k[inside], 0] <= ends[inside]
    return out


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
    ops = ops[_touching(ops["ts"].to_numpy(float), ops["end"].to_numpy(float), stretches)]
    cpu = ops[ops["cat"] == "cpu_op"].reset_index(drop=True)
    launching = _launching_mask(trace, cpu)
    annotations = ops[ops["cat"] == "user_annotation"]
    loader = annotations[name_has(annotations["name"], "DataLoader")]
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
    return max(work, 0.0), frame.sort_values(
        ["overlap_us", "name"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)


def subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a minus b, for two unions of intervals (each sorted, non-overlapping)."""
    if not len(a) or not len(b):
        return a.reshape(-1, 2)
    outside = np.column_stack((np.concatenate(([-np.inf], b[:, 1])), np.concatenate((b[:, 0], [np.inf]))))
    outside = outside[outside[:, 1] > outside[:, 0]]
    kept = intersect(a, outside)
    return kept[kept[:, 1] > kept[:, 0]]


def length(intervals: np.ndarray) -> float:
    """Total length of a union of intervals."""
    return float((intervals[:, 1] - intervals[:, 0]).sum()) if len(intervals) else 0.0


@dataclasses.dataclass
class SilentSplit:
    """Where the silent host time (GPU idle, no CUDA call for a while) went, in µs over the window.

    named     inside CPU ops that launch nothing, or DataLoader ranges: host work an op names
    unnamed   inside no recorded op at all: Python the trace cannot see (batch building in
              pure Python, tokenisation, sleeps); a stack sampler names it
    setup     inside ops that launch kernels, or inside torch.compile's ranges: not dispatch
              (stretches this long without a CUDA call) but plan building, autotuning,
              compiling, first-call setup
    in_cuda   the part of setup spent inside one long CUDA runtime call (cudaMalloc, cudaFree,
              stream or context creation, module loading)
    `host` holds the silent stretches minus setup, the time host-bound claims, and `unnamed` the
    part of it no op covers (as intervals); `fillers` the ops
    that named part of it; `setup_ops` the ops holding the setup time (the deepest op owns each µs).
    """

    total_us: float
    named_us: float
    unnamed_us: float
    setup_us: float
    in_cuda_us: float
    host: np.ndarray
    fillers: pd.DataFrame
    setup_ops: pd.DataFrame
    unnamed: np.ndarray = dataclasses.field(default_factory=lambda: np.empty((0, 2)))

    @property
    def host_us(self) -> float:
        """Silent time outside setup ops: host work, named or not."""
        return self.named_us + self.unnamed_us


def silent_split(trace: Trace, silent: pd.DataFrame) -> SilentSplit:
    """Split the silent host stretches by what the trace says the host was inside (SilentSplit)."""
    empty = pd.DataFrame(columns=["name", "overlap_us"])
    if not len(silent):
        return SilentSplit(0.0, 0.0, 0.0, 0.0, 0.0, np.empty((0, 2)), empty, empty)
    stretches = merge_intervals(silent["start"].to_numpy(float), silent["end"].to_numpy(float))
    ops = trace.ops
    ops = ops[_touching(ops["ts"].to_numpy(float), ops["end"].to_numpy(float), stretches)]
    cpu = ops[ops["cat"] == "cpu_op"].reset_index(drop=True)
    is_setup = setup_mask(trace, cpu)
    setup = intersect(stretches, _spans(cpu[is_setup]))
    host = subtract(stretches, _spans(cpu[is_setup]))
    annotations = ops[ops["cat"] == "user_annotation"]
    loader = annotations[name_has(annotations["name"], "DataLoader")]
    candidates = pd.concat([cpu[~is_setup], loader], ignore_index=True)
    named = intersect(host, _spans(candidates))
    runtime = trace.runtime
    in_cuda = overlap_us(setup, _spans(runtime)) if len(runtime) else 0.0
    return SilentSplit(
        total_us=length(stretches),
        named_us=length(named),
        unnamed_us=length(host) - length(named),
        setup_us=length(setup),
        in_cuda_us=in_cuda,
        host=host,
        fillers=_overlaps_by_name(candidates, named),
        setup_ops=_self_overlaps(cpu[is_setup], setup),
        unnamed=subtract(host, named),
    )


def _overlaps_by_name(ops: pd.DataFrame, covered: np.ndarray) -> pd.DataFrame:
    """Per op name, µs of `covered` its instances overlap (nested ops each count their own)."""
    rows = []
    for name, group in ops.groupby("name", sort=False):
        share = overlap_us(covered, _spans(group))
        if share > 0:
            rows.append((name, share))
    frame = pd.DataFrame(rows, columns=["name", "overlap_us"]) if rows else pd.DataFrame(columns=["name", "overlap_us"])
    return frame.sort_values(["overlap_us", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _self_overlaps(ops: pd.DataFrame, covered: np.ndarray) -> pd.DataFrame:
    """Per op name, µs of `covered` that its instances hold themselves, outside their child ops
    (the deepest op owns each µs, so nested ops never count the same time twice)."""
    held = self_held(ops, covered)
    frame = pd.DataFrame({"name": ops["name"].to_numpy(object), "overlap_us": held})
    frame = frame[frame["overlap_us"] > 0].groupby("name", as_index=False)["overlap_us"].sum()
    return frame.sort_values(["overlap_us", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def self_held(ops: pd.DataFrame, covered: np.ndarray) -> np.ndarray:
    """For each op (row order kept), the µs of `covered` inside it but outside its child ops on
    the same thread (children: the ops of `ops` nested in it)."""
    out = np.zeros(len(ops))
    if not len(ops) or not len(covered):
        return out
    for _, group in ops.groupby("tid", sort=False):
        group = group.sort_values(["ts", "end"], ascending=[True, False], kind="stable")
        rows = ops.index.get_indexer(group.index)
        ts, end = group["ts"].to_numpy(float), group["end"].to_numpy(float)
        out[rows] = _own_overlaps(ts, end, _parents(ts.tolist(), end.tolist()), covered)
    return out


def _parents(ts: list, end: list) -> np.ndarray:
    """For ops sorted by start (longest first among equal starts), the index of the op each is
    nested in (-1 for none): the innermost op still open when it starts."""
    parent = [-1] * len(ts)
    stack: list[int] = []
    for i, t in enumerate(ts):
        while stack and t >= end[stack[-1]]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return np.array(parent, dtype=int)


def _own_overlaps(ts: np.ndarray, end: np.ndarray, parent: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """Per op, the µs of `covered` inside [ts, end] and outside its children, in column operations.

    An op's own time is the gaps between its children (which never overlap: a sibling starts
    only once the one before it has ended) clipped to the op: [ts, first child's start], [each
    child's end, the next one's start], [last child's end, end]. Each op's overlaps with
    `covered` are summed left to right, as overlap_us sums them."""
    n = len(ts)
    kids = np.flatnonzero(parent >= 0)
    kids = kids[np.argsort(parent[kids], kind="stable")]  # by parent, then by start
    n_kids = np.bincount(parent[kids], minlength=n)
    base = np.arange(n) + np.concatenate(([0], np.cumsum(n_kids)[:-1]))  # first piece of each op
    rank = np.arange(len(kids)) - (base[parent[kids]] - parent[kids])  # a child's place among its siblings
    lo, hi = np.empty(n + len(kids)), np.empty(n + len(kids))
    lo[base], hi[base + n_kids] = ts, end
    slot = base[parent[kids]] + rank
    hi[slot], lo[slot + 1] = ts[kids], end[kids]
    owner = np.repeat(np.arange(n), n_kids + 1)
    lo, hi = np.maximum(lo, ts[owner]), np.minimum(hi, end[owner])
    keep = hi > lo
    pieces, owner = np.column_stack((lo[keep], hi[keep])), owner[keep]
    ip, ic = _pairs(pieces, covered)
    parts = np.minimum(pieces[ip, 1], covered[ic, 1]) - np.maximum(pieces[ip, 0], covered[ic, 0])
    return _sums_in_order(parts, owner[ip], n)


def _sums_in_order(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Per owner (0..n-1, `owner` grouped), the sum of its values added left to right."""
    out = np.zeros(n)
    if not len(values):
        return out
    starts = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
    counts = np.diff(np.append(starts, len(values)))
    total = values[starts].copy()
    for k in range(1, int(counts.max())):
        live = counts > k
        total[live] += values[starts[live] + k]
    out[owner[starts]] = total
    return out


def setup_mask(trace: Trace, cpu: pd.DataFrame) -> np.ndarray:
    """For each CPU op, whether it is setup-capable: it launches GPU work, or it is one of
    torch.compile's compiling ranges."""
    return _launching_mask(trace, cpu) | name_search(cpu["name"], COMPILING)


def sync_calls(trace: Trace, windows) -> pd.DataFrame:
    """Synchronising runtime calls made inside the steps' CPU ranges, each with the op that made it."""
    runtime = trace.runtime
    syncs = runtime[name_matches(runtime["name"], SYNC_CALL)]
    syncs = syncs[_inside_any(syncs["ts"].to_numpy(float), windows)]
    names = np.full(len(syncs), "(no CPU op: a direct CUDA call)", dtype=object)
    ops = trace.cpu_ops
    op_tid = ops["tid"].to_numpy(object)
    call_tid = syncs["tid"].to_numpy(object)
    for tid in pd.unique(call_tid):
        group = ops[op_tid == tid]
        if not len(group):
            continue
        rows = np.nonzero(call_tid == tid)[0]
        names[rows] = _outermost(group, syncs["ts"].to_numpy(float)[rows], syncs["end"].to_numpy(float)[rows])
    return syncs.assign(op_name=list(names))


def _inside_any(times: np.ndarray, windows) -> np.ndarray:
    """For each time, whether some window's CPU range [cpu_start, cpu_end) holds it."""
    if not windows or not len(times):
        return np.zeros(len(times), dtype=bool)
    starts = np.array([w.cpu_start for w in windows], dtype=float)
    ends = np.array([w.cpu_end for w in windows], dtype=float)
    order = np.argsort(starts, kind="stable")
    starts, reach = starts[order], np.maximum.accumulate(ends[order])
    last = np.searchsorted(starts, times, side="right") - 1
    return (last >= 0) & (reach[np.maximum(last, 0)] > times)


def _outermost(ops: pd.DataFrame, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each call [ts, end], the name of the first op (in trace order) of `ops` spanning it,
    or the "no CPU op" text. The op's outermost enclosing op names the user-level cause
    (aten::item rather than aten::_local_scalar_dense)."""
    out = np.full(len(ts), "(no CPU op: a direct CUDA call)", dtype=object)
    op_ts, op_end = ops["ts"].to_numpy(float), ops["end"].to_numpy(float)
    if not len(op_ts):
        return out
    # among ops that start by the call's start, the first whose end reaches the call's end: the
    # running maximum of ends first reaches it at exactly that op
    reach = np.fmax.accumulate(op_end)
    started = np.searchsorted(op_ts, ts, side="right") if _sorted(op_ts) else None
    first = np.searchsorted(reach, end, side="left")
    if started is None:
        return _outermost_slow(ops, ts, end, out)
    ok = first < started
    out[ok] = ops["name"].to_numpy(object)[first[ok]]
    return out


def _sorted(values: np.ndarray) -> bool:
    return bool(len(values) < 2 or (values[1:] >= values[:-1]).all())


def _outermost_slow(ops: pd.DataFrame, ts: np.ndarray, end: np.ndarray, out: np.ndarray) -> np.ndarray:
    for i, (t, e) in enumerate(zip(ts, end)):
        around = ops[(ops["ts"] <= t) & (ops["end"] >= e)]
        if len(around):
            out[i] = around.iloc[0]["name"]
    return out
