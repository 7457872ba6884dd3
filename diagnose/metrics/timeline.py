"""The GPU timeline of the measured steps: busy time, and every idle gap with its cause.

Every gap between GPU operations (on the main device, all streams merged) inside the step
windows is classified by the operation that ends it:

- host: the call that launched that operation started after the GPU went idle, so the GPU was
  waiting for the host. Its time is split into *paced* (the host was issuing CUDA calls at
  most `host_silence_us` apart: dispatch and launch overhead) and *silent* (stretches longer
  than that with no CUDA call at all: the host was busy elsewhere). `after_sync` marks gaps
  that opened while the host sat in a synchronising call.
- kernel: the launch was already queued when the GPU went idle and the gap is at most
  `kernel_wait_max_us`: the fixed cost between dependent kernels.
- other: queued but longer: waits on events, other streams or copies.

These are HTA's host-wait / kernel-wait / other classes (with its 30 µs threshold read as µs,
which is what its code compares against), refined by what the host was doing.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from diagnose.metrics.launches import lookup
from diagnose.metrics.steps import Steps, launch_time_of_gpu_ops
from diagnose.base.thresholds import Threshold
from diagnose.trace.model import Trace
from diagnose.trace.names import name_search
from diagnose.vocabulary.runtime import GRAPH_LAUNCH, SYNC_CALL


PARAMETERS = (
    Threshold(
        "kernel_wait_max_us",
        30.0,
        "µs",
        "a queued gap up to this long is the fixed cost between dependent kernels (HTA's kernel wait)",
    ),
    Threshold(
        "host_silence_us",
        200.0,
        "µs",
        "a stretch this long with no CUDA call counts as host work elsewhere, not dispatch",
    ),
    Threshold(
        "profiler_overhead",
        1.0,
        "fraction",
        "share of the modelled profiler host time (metrics/overhead.py) taken out of a trace without "
        "unprofiled timing (1, the default: all of it; 0 decides on the profiled step as recorded)",
    ),
)
DEFAULTS = {th.name: th.default for th in PARAMETERS}

GAP_KINDS = np.array(["host", "kernel", "other"], dtype=object)
GAP_COLUMNS = [
    "start",
    "end",
    "dur",
    "step",
    "kind",
    "next_name",
    "next_cat",
    "next_correlation",
    "launch_name",
    "graph",
    "paced_us",
    "silent_us",
    "after_sync",
    "sync_name",
]


@dataclasses.dataclass
class Timeline:
    """GPU busy time and classified gaps over the measured steps of one device."""

    device: int | None
    window_us: float
    busy_us: float
    gaps: pd.DataFrame
    ops: pd.DataFrame
    per_step: pd.DataFrame
    silent: pd.DataFrame = dataclasses.field(default_factory=lambda: pd.DataFrame(columns=["start", "end"]))

    @property
    def idle_us(self) -> float:
        """Window time with no GPU operation running."""
        return self.window_us - self.busy_us

    @property
    def busy_fraction(self) -> float:
        """Share of the window with at least one GPU operation running."""
        return self.busy_us / self.window_us if self.window_us > 0 else 0.0

    def idle_by_kind(self) -> dict[str, float]:
        """Idle µs per gap class (host / kernel / other)."""
        sums = self.gaps.groupby("kind")["dur"].sum() if len(self.gaps) else {}
        return {k: float(sums.get(k, 0.0)) for k in ("host", "kernel", "other")}


def build_timeline(trace: Trace, steps: Steps, params: dict | None = None) -> Timeline:
    """Compute the timeline of the main device over the measured step windows."""
    p = {**DEFAULTS, **(params or {})}
    device = trace.main_device
    start, end = steps.start, steps.end
    gpu = trace.gpu
    if device is None or end <= start:
        empty = pd.DataFrame(columns=GAP_COLUMNS)
        return Timeline(device, max(end - start, 0.0), 0.0, empty, gpu.iloc[0:0], pd.DataFrame())
    ops = gpu[(gpu["device"] == device) & (gpu["end"] > start) & (gpu["ts"] < end)]
    if steps.annotated and len(ops):
        # a step's GPU work is what its own ops launched: work launched after the last step's CPU range (the
        # next iteration, recorded until the profiler stopped) is not counted, though it runs in its window.
        # Only an op that starts after that range can have been launched after it: look those up alone.
        cut = steps.windows[-1].cpu_end
        late = ops[ops["ts"].to_numpy(float) > cut]
        if len(late):
            ops = ops.drop(late.index[launch_time_of_gpu_ops(trace, late) > cut])
    ops = ops.sort_values("ts", kind="stable").reset_index(drop=True)
    ts = np.clip(ops["ts"].to_numpy(float), start, end)
    te = np.clip(ops["end"].to_numpy(float), start, end)
    gaps, busy = _find_gaps(ts, te, start, end)
    syncs = _syncs(trace.runtime)
    gaps = _split_at_waits(gaps, syncs)
    gaps, silent = _classify(trace, ops, gaps, p, syncs)
    gaps["step"] = _step_of(steps, gaps["start"].to_numpy(float))
    per_step = _per_step(steps, ops, gaps)
    return Timeline(device, end - start, busy, gaps[GAP_COLUMNS], ops, per_step, silent)


def _find_gaps(ts: np.ndarray, te: np.ndarray, start: float, end: float):
    """Idle intervals between merged busy intervals; returns (gap frame, busy µs)."""
    if len(ts) == 0:
        return pd.DataFrame({"start": [start], "end": [end], "next": [-1]}), 0.0
    running_end = np.maximum.accumulate(te)
    prev_end = np.concatenate(([start], running_end[:-1]))
    is_gap = ts > prev_end
    g_start, g_end, g_next = prev_end[is_gap], ts[is_gap], np.nonzero(is_gap)[0]
    if running_end[-1] < end:
        g_start = np.append(g_start, running_end[-1])
        g_end = np.append(g_end, end)
        g_next = np.append(g_next, -1)
    idle = float((g_end - g_start).sum())
    return pd.DataFrame({"start": g_start, "end": g_end, "next": g_next}), (end - start) - idle


def _syncs(runtime: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The synchronising host calls (start, end, name), in order of start."""
    syncs = runtime[name_matches(runtime["name"], SYNC_CALL)] if len(runtime) else runtime
    s_ts, s_end = syncs["ts"].to_numpy(float), syncs["end"].to_numpy(float)
    order = np.argsort(s_ts, kind="stable")
    return s_ts[order], s_end[order], syncs["name"].to_numpy(object)[order]


def _split_at_waits(gaps: pd.DataFrame, syncs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> pd.DataFrame:
    """Split each idle gap at the start of a synchronising call that began inside it and ran to its end:
    from there the host sat waiting on the device, not preparing work. With the GPU idle, what it waited
    for is work the trace does not hold (a blocking copy at a window's start waiting on kernels launched
    before the profiler began) or the call's own copy; either way a wait, booked after the sync."""
    s_ts, s_end, _ = syncs
    if not len(s_ts) or not len(gaps):
        return gaps
    starts, ends = gaps["start"].to_numpy(float), gaps["end"].to_numpy(float)
    lo = np.searchsorted(s_ts, starts, side="right")  # the first sync that began inside each gap
    hi = np.searchsorted(s_ts, ends, side="left")
    cut = np.full(len(gaps), np.nan)
    for i in np.nonzero(hi > lo)[0]:
        waits = np.nonzero(s_end[lo[i] : hi[i]] >= ends[i] - 1.0)[0]
        if len(waits):
            cut[i] = s_ts[lo[i] + waits[0]]
    split = np.nonzero(~np.isnan(cut))[0]
    if not len(split):
        return gaps
    before = gaps.iloc[split].assign(end=cut[split])
    after = gaps.iloc[split].assign(start=cut[split])
    kept = gaps.drop(gaps.index[split])
    out = pd.concat([kept, before, after]).sort_values(["start", "end"], kind="stable")
    return out.reset_index(drop=True)


def _classify(trace: Trace, ops: pd.DataFrame, gaps: pd.DataFrame, p: dict, syncs) -> pd.DataFrame:
    runtime = trace.runtime
    gaps = gaps.copy()
    gaps["dur"] = gaps["end"] - gaps["start"]
    nxt = gaps["next"].to_numpy()
    has_next = nxt >= 0
    next_rows = ops[["name", "cat", "correlation"]].iloc[nxt[has_next]]  # the columns read, not all of them
    gaps["next_name"] = None
    gaps["next_cat"] = None
    gaps.loc[has_next, "next_name"] = next_rows["name"].to_numpy()
    gaps.loc[has_next, "next_cat"] = next_rows["cat"].to_numpy()
    launches = trace.launch_calls[["correlation", "ts", "name"]]
    corr = pd.Series(pd.NA, index=gaps.index, dtype="Int64")
    corr[has_next] = next_rows["correlation"].to_numpy()
    del next_rows
    # the launch call of each gap's next op, by a sorted search of the unique ids (no hash tables)
    found = lookup(corr, launches["correlation"])
    known = pd.Series(found >= 0, index=gaps.index)
    launch_ts = pd.Series(np.nan, index=gaps.index)
    launch_name = pd.Series(None, index=gaps.index, dtype=object)
    if known.any():
        rows = found[known.to_numpy()]
        launch_ts[known] = launches["ts"].to_numpy()[rows]
        launch_name[known] = launches["name"].to_numpy()[rows]
    gaps["launch_name"] = launch_name
    gaps["next_correlation"] = corr
    gaps["graph"] = name_matches(launch_name, GRAPH_LAUNCH)
    host = (~has_next) | (known & (launch_ts >= gaps["start"])).to_numpy()
    kernel = ~host & (gaps["dur"] <= p["kernel_wait_max_us"]).to_numpy()
    # one shared string per class: an array of fixed-width strings would become a string object per gap
    gaps["kind"] = GAP_KINDS[np.where(host, 0, np.where(kernel, 1, 2))]
    gaps["paced_us"], gaps["silent_us"], silent = _pacing(runtime, gaps, host, p["host_silence_us"])
    gaps["after_sync"], gaps["sync_name"] = _after_sync(syncs, gaps, host)
    return gaps, silent


def _pacing(runtime: pd.DataFrame, gaps: pd.DataFrame, host: np.ndarray, silence: float):
    """Split each host gap into time the host spent issuing CUDA calls and silent stretches.

    Returns per-gap paced and silent µs, and the silent stretches themselves (start, end).
    """
    calls = np.sort(runtime["ts"].to_numpy(float))
    paced = np.zeros(len(gaps))
    silent = np.zeros(len(gaps))
    stretches: list[tuple[float, float]] = []
    starts, ends = gaps["start"].to_numpy(float), gaps["end"].to_numpy(float)
    lo = np.searchsorted(calls, starts, side="right")
    hi = np.searchsorted(calls, ends, side="left")
    idx = np.nonzero(host)[0]
    paced[idx] = ends[idx] - starts[idx]
    for i in idx[_has_silence(calls, starts, ends, lo, hi, idx, silence)]:
        points = np.concatenate(([starts[i]], calls[lo[i] : hi[i]], [ends[i]]))
        steps = np.diff(points)
        long = steps > silence
        silent[i] = steps[long].sum()
        paced[i] = (ends[i] - starts[i]) - silent[i]
        stretches.extend(zip(points[:-1][long], points[1:][long]))
    return paced, silent, pd.DataFrame(stretches, columns=["start", "end"], dtype=float)


def _has_silence(calls, starts, ends, lo, hi, idx, silence) -> np.ndarray:
    """For the gaps `idx`, whether any stretch between the gap's edges and the calls inside it
    is longer than `silence` (the rest have no silent time: all of it is paced)."""
    lo, hi, s, e = lo[idx], hi[idx], starts[idx], ends[idx]
    some = hi > lo
    first = np.where(some, calls[np.minimum(lo, len(calls) - 1)] if len(calls) else e, e) - s
    last = np.where(some, e - calls[np.maximum(hi - 1, 0)] if len(calls) else 0.0, 0.0)
    long_between = np.concatenate(([0], np.cumsum(np.diff(calls) > silence)))
    inner = (
        np.where(some, long_between[np.maximum(hi - 1, 0)] - long_between[np.minimum(lo, len(calls) - 1)], 0)
        if len(calls)
        else np.zeros(len(idx))
    )
    return (first > silence) | (last > silence) | (inner > 0)


def _after_sync(syncs: tuple[np.ndarray, np.ndarray, np.ndarray], gaps: pd.DataFrame, host: np.ndarray):
    """Whether a synchronising host call (`_syncs`) was in progress when the gap opened."""
    flag = np.zeros(len(gaps), dtype=bool)
    names = np.full(len(gaps), None, dtype=object)
    s_ts, s_end, s_name = syncs
    if not len(s_ts):
        return flag, names
    idx = np.nonzero(host)[0]
    starts = gaps["start"].to_numpy(float)[idx]
    j = np.searchsorted(s_ts, starts, side="right")  # syncs that began before the gap
    found = np.full(len(idx), -1)
    for back in range(1, 9):  # the last of the 8 syncs before the gap that was still running
        k = j - back
        hit = (found < 0) & (k >= 0)
        hit[hit] = s_end[k[hit]] >= starts[hit] - 1.0
        found[hit] = k[hit]
    ok = found >= 0
    flag[idx[ok]] = True
    names[idx[ok]] = s_name[found[ok]]
    return flag, names


def _step_of(steps: Steps, times: np.ndarray) -> np.ndarray:
    starts = np.array([w.start for w in steps.windows])
    return np.clip(np.searchsorted(starts, times, side="right") - 1, 0, max(len(starts) - 1, 0))


def _per_step(steps: Steps, ops: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    step_of_gap = gaps["step"].to_numpy()
    order = np.argsort(step_of_gap, kind="stable")  # each step's gaps together, in time order
    by_step, dur = step_of_gap[order], gaps["dur"].to_numpy(float)[order]
    idle = gaps.groupby(["step", "kind"])["dur"].sum().to_dict() if len(gaps) else {}
    op_ts = np.sort(ops["ts"].to_numpy(float))
    rows = []
    for w in steps.windows:
        lo, hi = np.searchsorted(by_step, w.index, side="left"), np.searchsorted(by_step, w.index, side="right")
        total_idle = float(dur[lo:hi].sum())
        first, stop = np.searchsorted(op_ts, [w.start, w.end], side="left")
        rows.append(
            {
                "step": w.index,
                "label": w.label,
                "start": w.start,
                "duration_us": w.duration,
                "gpu_ops": int(max(stop - first, 0)),
                "busy_us": w.duration - total_idle,
                "host_wait_us": float(idle.get((w.index, "host"), 0.0)),
                "kernel_wait_us": float(idle.get((w.index, "kernel"), 0.0)),
                "other_wait_us": float(idle.get((w.index, "other"), 0.0)),
            }
        )
    return pd.DataFrame(rows)


def name_matches(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """`pattern.search` over a column of names, run once per distinct name (non-strings never match)."""
    return name_search(names, pattern)
