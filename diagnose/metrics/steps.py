"""Step windows: which stretch of the trace is steady state, and how it was found."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from diagnose.metrics.launches import lookup
from diagnose.trace.model import Trace

OUR_STEP = re.compile(r"^diagnose/step (\d+)$")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclasses.dataclass
class StepWindow:
    """One step: its CPU range, and the analysis window it owns on the timeline (µs)."""

    index: int
    label: str
    cpu_start: float
    cpu_end: float
    start: float
    end: float
    n_gpu_ops: int = 0

    @property
    def duration(self) -> float:
        """Length of the window this step owns (its period on the timeline)."""
        return self.end - self.start


@dataclasses.dataclass
class Steps:
    """The measured steps and how they were identified."""

    windows: list[StepWindow]
    how: str
    annotated: bool

    @property
    def start(self) -> float:
        """Start of the first measured step."""
        return self.windows[0].start if self.windows else 0.0

    @property
    def end(self) -> float:
        """End of the last measured step."""
        return self.windows[-1].end if self.windows else 0.0

    def frame(self) -> pd.DataFrame:
        """One row per step."""
        return pd.DataFrame([dataclasses.asdict(w) | {"duration": w.duration} for w in self.windows])


def find_steps(trace: Trace) -> Steps:
    """Measured steps: diagnose's own step ranges, else ProfilerStep#N, else one whole window."""
    ops = trace.ops
    annotations = ops[ops["cat"] == "user_annotation"] if len(ops) else ops
    for pattern, how in ((OUR_STEP, "diagnose step ranges (warm-up steps excluded)"),
                         (PROFILER_STEP, "ProfilerStep#N ranges recorded by torch.profiler")):
        if not len(annotations):
            break
        marked = annotations[annotations["name"].str.match(pattern)]
        if len(marked):
            return Steps(_windows_from_ranges(trace, marked), how, annotated=True)
    return Steps(_whole_window(trace), "no step ranges in the trace: the span of its GPU activity "
                 "is analysed as one window", annotated=False)


def _windows_from_ranges(trace: Trace, marked: pd.DataFrame) -> list[StepWindow]:
    """Step windows on the GPU's clock.

    A step starts when its CPU range starts, or later if the GPU is still busy with work launched
    before it (a GPU-bound loop runs ahead on the host); it ends where the next step starts, the
    last one when its own GPU work is done. So the windows tile the timeline and each holds the
    GPU time of the work its step launched.
    """
    marked = marked.sort_values("ts").drop_duplicates("ts")
    launch_ts = _launch_time_of_gpu_ops(trace)
    order = np.argsort(launch_ts, kind="stable")
    launch_ts, gpu_end = launch_ts[order], trace.gpu["end"].to_numpy(float)[order]
    cpu_start, cpu_end = marked["ts"].to_numpy(float), marked["end"].to_numpy(float)
    first = np.searchsorted(launch_ts, cpu_start, side="left")  # launched before the step: [0, first)
    stop = np.searchsorted(launch_ts, cpu_end, side="right")    # launched inside it: [first, stop)
    backlog = np.where(first > 0, np.maximum.accumulate(gpu_end)[np.maximum(first - 1, 0)] if len(gpu_end) else 0,
                       cpu_start)
    last_gpu = np.where(stop > first, _range_max(gpu_end, first, stop), cpu_end)
    windows = []
    for i, name in enumerate(marked["name"]):
        windows.append(StepWindow(index=i, label=name, cpu_start=float(cpu_start[i]),
                                  cpu_end=float(cpu_end[i]), start=max(float(cpu_start[i]), float(backlog[i])),
                                  end=max(float(cpu_end[i]), float(last_gpu[i])),
                                  n_gpu_ops=int(max(stop[i] - first[i], 0))))
    for current, following in zip(windows, windows[1:]):
        following.start = max(following.start, current.start)
        current.end = following.start
    return windows


def _range_max(values: np.ndarray, first: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """max(values[first[i]:stop[i]]) for each i (NaN where the range is empty)."""
    out = np.full(len(first), np.nan)
    ok = stop > first
    if not ok.any():
        return out
    bounds = np.column_stack((first[ok], stop[ok])).ravel()
    padded = np.append(values, -np.inf)  # reduceat needs every bound to be a valid index
    out[ok] = np.maximum.reduceat(padded, bounds)[::2]
    return out


def _launch_time_of_gpu_ops(trace: Trace) -> np.ndarray:
    """For each GPU op, the host time of the call that launched it (its own start if unknown)."""
    gpu = trace.gpu
    if not len(gpu):
        return np.array([])
    runtime = trace.runtime.dropna(subset=["correlation"]).drop_duplicates("correlation")
    at = lookup(gpu["correlation"], runtime["correlation"])
    return np.where(at >= 0, runtime["ts"].to_numpy(float)[np.maximum(at, 0)] if len(runtime) else 0.0,
                    gpu["ts"].to_numpy(float))


def _whole_window(trace: Trace) -> list[StepWindow]:
    if len(trace.gpu):
        start, end = float(trace.gpu["ts"].min()), float(trace.gpu["end"].max())
        n = len(trace.gpu)
    elif len(trace.ops):
        start, end = float(trace.ops["ts"].min()), float(trace.ops["end"].max())
        n = 0
    else:
        return []
    return [StepWindow(index=0, label="whole trace", cpu_start=start, cpu_end=end,
                       start=start, end=end, n_gpu_ops=n)]
