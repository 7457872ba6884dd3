"""Step windows: which stretch of the trace is steady state, and how it was found."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

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
    gpu_end = trace.gpu["end"].to_numpy()
    windows = []
    for i, row in enumerate(marked.itertuples(index=False)):
        inside = (launch_ts >= row.ts) & (launch_ts <= row.end)
        earlier = launch_ts < row.ts
        backlog = float(gpu_end[earlier].max()) if earlier.any() else row.ts
        last_gpu = float(gpu_end[inside].max()) if inside.any() else row.end
        windows.append(StepWindow(index=i, label=row.name, cpu_start=float(row.ts),
                                  cpu_end=float(row.end), start=max(float(row.ts), backlog),
                                  end=max(float(row.end), last_gpu), n_gpu_ops=int(inside.sum())))
    for current, following in zip(windows, windows[1:]):
        following.start = max(following.start, current.start)
        current.end = following.start
    return windows
    return windows


def _launch_time_of_gpu_ops(trace: Trace) -> np.ndarray:
    """For each GPU op, the host time of the call that launched it (its own start if unknown)."""
    gpu = trace.gpu
    if not len(gpu):
        return np.array([])
    runtime = trace.runtime.dropna(subset=["correlation"]).drop_duplicates("correlation")
    launch = gpu[["correlation"]].merge(runtime[["correlation", "ts"]], on="correlation", how="left")
    return launch["ts"].fillna(pd.Series(gpu["ts"].to_numpy())).to_numpy(dtype=float)


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
