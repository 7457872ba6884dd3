"""Step windows: which stretch of the trace is steady state, and how it was found.

In order: diagnose's own step ranges; torch.profiler's `ProfilerStep#N`; else the iteration marks
a training loop leaves without them (the ends of `Optimizer.step#…`, the starts of the DataLoader's
`__next__` or of `Optimizer.zero_grad#…`); else a `record_function` range of the user's that
repeats; else the repeating pattern of the top-level ops (whole iterations only: what precedes the
first repetition and follows the last must be made of the same ops, which one forward's layers,
between an embedding and a head, are not). A step between two marks runs from one
mark to the next, so N marks give N − 1 whole steps. A first step at least COLD_FACTOR × the median
of the others, and longer than the second, is a cold start (lazy loading, autotuning, first-call
allocations) and is left out. That holds for diagnose's own ranges too: they start after its warm-up
steps, but the profiler's own start-up can spill into the first of them (compile_graphs: 1,543 µs,
then 781, 535 and 483 µs with the same events). A first stall followed by a longer one is the
loop's own (host_loader_workers' DataLoader: 36 ms, then 87 ms) and is kept.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.metrics.launches import lookup
from diagnose.metrics.periods import Period, find_period
from diagnose.trace.model import Trace
from diagnose.trace.names import name_match
from diagnose.vocabulary.markers import (
    ITERATION_MARKS,
    LIBRARY_RANGES,
    ONE_STEP,
    OUR_STEP,
    PROFILER_STEP,
    SESSION_CUT,
    STEP_MARKERS,
)
from diagnose.vocabulary.runtime import GRAPH_LAUNCH
from diagnose.vocabulary.units import percent

MIN_MARKS = 3  # marks that make a step (two whole steps at least)
COLD_FACTOR = 2.0
# steps not marked by diagnose (ProfilerStep#N, iteration marks, patterns): the profiler's own start-up always
# lands in the first iteration (no absorbing warm-up step takes it, as diagnose's capture has), so a smaller
# excess marks it as a cold start
COLD_FACTOR_UNMARKED = 1.5
UNMARKED_FIRST_MIN_STEPS = 4  # ... which is left out when it is the longest of at least this many steps
UNMARKED_FIRST_FACTOR = 1.25  # ... and at least this much longer than their median,
APART_SPREADS = 2.0  # ... or longer than all of them by this many times their own range
APART_MIN_EXCESS = 0.05  # ... and by at least this share of their median
MIN_PATTERN_COVER = 0.8  # a repeating op pattern must span this share of the top-level ops
SESSION_SLACK_US = 1_000.0  # a range ending this much after the profiling session's end was left open


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
    cold_start_us: float | None = None  # the first step(s), left out as a cold start
    # whether the iteration is known: marked, or found by a pattern with something to tell its iterations
    # apart; False when the trace is one window, or a short pattern repeated edge to edge (the iteration
    # may be any multiple of it, and per-step counts are then per repetition of the pattern)
    unit_known: bool = True
    # how they were found, one word for tools (diff matches units by it): "step-ranges" (diagnose's or
    # ProfilerStep#N), "iteration-marks", "user-range", "pattern" (of top-level activity) or "window"
    method: str = "step-ranges"

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
    """Measured steps: diagnose's own step ranges, else ProfilerStep#N, else iteration marks, else
    a repeating user range or op pattern, else one whole window (module docstring)."""
    ops = trace.ops
    annotations = ops[ops["cat"] == "user_annotation"] if len(ops) else ops
    for pattern, how in (
        (OUR_STEP, "diagnose step ranges (warm-up steps excluded)"),
        (PROFILER_STEP, "ProfilerStep#N ranges recorded by torch.profiler"),
    ):
        if not len(annotations):
            break
        marked = annotations[name_match(annotations["name"], pattern)]
        if len(marked):
            marked, cut = _within_session(trace, marked)
            steps = Steps(_windows_from_ranges(trace, marked), how + cut, annotated=True)
            # ProfilerStep#0 holds the profiler's start-up as an unmarked first iteration does; diagnose's
            # own ranges start after a warm-up step that absorbs it
            return _one_step_said(
                _without_cold_start(steps, COLD_FACTOR if pattern is OUR_STEP else COLD_FACTOR_UNMARKED)
            )
    for method, find in (
        ("iteration-marks", lambda: _iteration_marks(trace, annotations)),
        ("user-range", lambda: _repeated_range(annotations)),
        ("pattern", lambda: _activity_pattern(trace)),
    ):
        found = find()
        if found is not None:
            cuts, how, known = found
            windows = _windows_from_ranges(trace, _between(cuts))
            steps = Steps(windows, how, annotated=True, unit_known=known, method=method)
            return _one_step_said(_without_cold_start(steps, COLD_FACTOR_UNMARKED))
    return Steps(
        _whole_window(trace),
        "no step ranges in the trace and no repeating activity: the span of its GPU activity is analysed as one "
        "window (the window is the unit of every per-step number)",
        annotated=False,
        unit_known=False,
        method="window",
    )


def _one_step_said(steps: Steps) -> Steps:
    """`steps`, saying so when they are one step: every per-step number then rests on one iteration, which
    nothing in the trace can show to be a typical one (the tutorial's schedule(wait=1, warmup=1, active=1)
    records one)."""
    if len(steps.windows) != 1:
        return steps
    said = f"{ONE_STEP}: nothing to tell a typical iteration from a slow one (record several, e.g. active=3)"
    return dataclasses.replace(steps, how=f"{steps.how}; {said}")


def _within_session(trace: Trace, marked: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """`marked` with every range cut at the end of the profiling session, and a note saying so ("" when
    none outlived it). A step still open when the profiler stopped is written with the time it closed,
    which can be long after: nothing in that tail was recorded, or could have been."""
    end = trace.session_end_us
    if end is None or not len(marked):
        return marked, ""
    over = marked["end"].to_numpy(float) > end + SESSION_SLACK_US
    if not over.any():
        return marked, ""
    first = marked[over].iloc[0]
    marked = marked.copy()
    marked.loc[over, "end"] = np.maximum(marked.loc[over, "ts"].to_numpy(float), end)
    marked["dur"] = marked["end"] - marked["ts"]
    return marked, (
        f"; {first['name']} is recorded as ending {(float(first['end']) - end) / 1e6:,.3g} s after the profiling "
        f"session did (a step left open when the profiler stopped): {SESSION_CUT}"
    )


def _between(cuts: np.ndarray) -> pd.DataFrame:
    """Ranges from each cut to the next (N cuts, N − 1 ranges), named like steps."""
    cuts = np.unique(cuts)
    return pd.DataFrame(
        {"name": [f"iteration {i + 1}" for i in range(len(cuts) - 1)], "ts": cuts[:-1], "end": cuts[1:]}
    )


def _outermost(frame: pd.DataFrame) -> pd.DataFrame:
    """The ranges not inside an earlier one (a nested call of the same name would mark twice)."""
    frame = frame.sort_values("ts", kind="stable")
    ends = frame["end"].to_numpy(float)
    reach = np.maximum.accumulate(np.concatenate(([-np.inf], ends[:-1])))
    return frame[frame["ts"].to_numpy(float) >= reach]


def _iteration_marks(trace: Trace, annotations: pd.DataFrame) -> tuple[np.ndarray, str, bool] | None:
    """Cut points from the ranges a training loop opens once per iteration. A mark still open when the
    profiler stopped (an optimizer step recorded as ending long after the session did) is left out: its
    edge is not where the iteration ended."""
    if not len(annotations):
        return None
    names = annotations["name"]
    for pattern, edge, how in ITERATION_MARKS:
        marks = _outermost(annotations[name_match(names, pattern)])
        if trace.session_end_us is not None:
            marks = marks[marks["end"].to_numpy(float) <= trace.session_end_us + SESSION_SLACK_US]
        if len(marks) >= MIN_MARKS:
            cuts = marks["end" if edge == "end" else "ts"].to_numpy(float)
            how = f"{how}: {len(marks)} marks, {len(marks) - 1} whole steps (no ProfilerStep ranges)"
            return cuts, how, True
    return None


def _repeated_range(annotations: pd.DataFrame) -> tuple[np.ndarray, str, bool] | None:
    """The starts of the user's own range that repeats most often at the top level, when there is one.
    Ranges that libraries open for themselves (inductor, dynamo, the optimizer, Lightning, ...) are not
    the user's."""
    if not len(annotations):
        return None
    own = annotations[~name_match(annotations["name"].astype(str), LIBRARY_RANGES)]
    if not len(own):
        return None
    top = _outermost(own)
    counts = top["name"].value_counts()
    counts = counts[counts >= MIN_MARKS]
    if not len(counts) or len(counts) > 1 and counts.iloc[0] == counts.iloc[1]:
        return None  # none repeats, or two repeat as often: which one is the step is not clear
    name = counts.index[0]
    cuts = top.loc[top["name"] == name, "ts"].to_numpy(float)
    cuts = np.append(cuts, float(top.loc[top["name"] == name, "end"].max()))
    how = f"the user's own range '{name}' (record_function), repeated {len(cuts) - 1} times (no ProfilerStep ranges)"
    return cuts, how, True


def _activity_pattern(trace: Trace) -> tuple[np.ndarray, str, bool] | None:
    """Cut points where the loop's top-level activity starts over (metrics/periods.py)."""
    activity = top_level_activity(trace)
    if len(activity) < MIN_MARKS:
        return None
    names = activity["name"].astype(str).tolist()
    starts, ends = activity["ts"].to_numpy(float), activity["end"].to_numpy(float)
    period = find_period(names, starts, ends)
    if period is None:
        return None
    cuts = starts[period.cuts[:-1]]
    last = period.cuts[-1]
    how = _period_how(period, len(cuts))
    if last < len(starts):
        return np.append(cuts, starts[last]), how, not period.ambiguous
    activity_end = float(ends[:last].max())
    end = activity_end + _last_pause(period.cuts, starts, ends)
    if trace.session_end_us is not None:
        end = min(end, max(trace.session_end_us, activity_end))
    if end - activity_end >= 1.0:
        how += (
            f"; the last step given the {end - activity_end:,.0f} µs pause the one before it left after its last "
            "activity"
        )
    return np.append(cuts, end), how, not period.ambiguous


def _last_pause(cuts: list[int], starts: np.ndarray, ends: np.ndarray) -> float:
    """The pause between the last activity of the last iteration but one and the last iteration's start: the
    loop's code between iterations, which each earlier step holds up to the next one's start and the last
    one is given too. The latest pause, as a loop's pauses shrink over its first iterations (a compiled
    call's do); 0 without an iteration before the last."""
    if len(cuts) < 3:
        return 0.0
    a, b = cuts[-3], cuts[-2]
    return max(float(starts[b]) - float(ends[a:b].max()), 0.0)


def _period_how(period: Period, whole: int) -> str:
    """How a pattern's steps were found, and how sure that is."""
    head = period.head if len(period.head) <= 60 else period.head[:57] + "..."
    how = f"the repeating pattern of top-level activity ({period.length} from '{head}'), {whole} whole steps"
    if period.by_gaps > 1:
        how += (
            f"; each step is {period.by_gaps} repetitions of a shorter pattern, told apart by the host's longer "
            "pause between them"
        )
    if period.ambiguous:
        how += (
            "; unsure: the trace is one short pattern repeated edge to edge and nothing tells the loop's iterations "
            "apart, so a step here is one repetition (the iteration may be several): per-step numbers are per "
            "repetition, shares are of the whole window"
        )
    elif period.score < 0.95:
        how += f"; the steps differ ({percent(period.score, 0)} of their activity in common)"
    return how + " (no step ranges or iteration marks)"


def top_level_activity(trace: Trace) -> pd.DataFrame:
    """The loop's top-level host activity in time order (name, ts, end): the outermost ops of the thread that
    drives it (the one with the most, autograd's backward calls aside), the outermost ops of the autograd
    threads, and graph launches made outside any op. diagnose's own ranges are left out."""
    ops = trace.ops
    ops = ops[~ops["name"].astype(str).str.startswith(STEP_MARKERS)] if len(ops) else ops
    parts = []
    main_ops = ops.iloc[0:0]
    if len(ops):
        thread = ops["tid"].astype(str)
        backward = ops["name"].astype(str).str.startswith("autograd::engine::evaluate_function")
        outer = {tid: _outermost(group) for tid, group in ops.groupby(thread, sort=False)}
        counts = {tid: int((~backward.loc[frame.index]).sum()) for tid, frame in outer.items()}
        main = max(counts, key=lambda tid: counts[tid])
        main_ops = outer[main]
        parts.append(main_ops)
        for tid, frame in outer.items():
            if tid != main and len(frame) and backward.loc[frame.index].mean() > 0.5:
                parts.append(frame)
    runtime = trace.runtime
    graph = runtime[runtime["name"].astype(str).str.contains(GRAPH_LAUNCH)] if len(runtime) else runtime
    if len(graph):
        inside = _inside_any(
            graph["ts"].to_numpy(float), main_ops["ts"].to_numpy(float), main_ops["end"].to_numpy(float)
        )
        parts.append(graph[~inside])
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=["name", "ts", "end"])
    frame = pd.concat([p[["name", "ts", "end"]] for p in parts], ignore_index=True)
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)


def _inside_any(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each time lies inside one of the (non-overlapping, outermost) ranges."""
    if not len(starts):
        return np.zeros(len(times), dtype=bool)
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    at = np.searchsorted(starts, times, side="right") - 1
    return (at >= 0) & (times <= ends[np.maximum(at, 0)])


def _without_cold_start(steps: Steps, factor: float = COLD_FACTOR) -> Steps:
    """`steps` without the cold start at its head: the first step while it is at least `factor` × the
    median of the steps after it and longer than the next (a start that decays: lazy loading, autotuning,
    the profiler's own start-up), so marked and unmarked recordings of a loop lose the same iterations. A
    first stall followed by a longer one is the loop's own, as a DataLoader that falls behind every few
    steps, and is kept; at least two steps are kept."""
    windows = list(steps.windows)
    dropped: list[float] = []
    while len(windows) >= 3:
        first = windows[0].duration
        rest = [w.duration for w in windows[1:]]
        if not dropped and factor < COLD_FACTOR:
            # the very first unmarked iteration holds the profiler's start-up: left out when it is the longest of
            # several, or a cold start by the lower bar
            longest = (
                len(windows) >= UNMARKED_FIRST_MIN_STEPS
                and first > max(rest)
                and (first >= UNMARKED_FIRST_FACTOR * float(np.median(rest)) or _stands_apart(first, rest))
            )
            if not longest and (first < factor * float(np.median(rest)) or first <= windows[1].duration):
                break
        elif first < COLD_FACTOR * float(np.median(rest)) or first <= windows[1].duration:
            break
        dropped.append(first)
        windows = windows[1:]
    if not dropped:
        return steps
    for i, w in enumerate(windows):
        w.index = i
    if len(dropped) == 1:
        said = f"the first step ({dropped[0]:,.0f} µs, the longest) left out as a cold start"
    else:
        listed = ", ".join(f"{d:,.0f}" for d in dropped)
        said = f"the first {len(dropped)} steps ({listed} µs) left out as a cold start"
    return dataclasses.replace(steps, windows=windows, how=f"{steps.how}; {said}", cold_start_us=round(sum(dropped), 3))


def _stands_apart(first: float, rest: list[float]) -> bool:
    """Whether a first iteration is longer than all the others by more than they differ among themselves
    (APART_SPREADS × their range) and by at least APART_MIN_EXCESS of their median: the profiler's start-up in an
    otherwise even loop (matmul_fp32 stripped: 23,869 µs, then 21,497 to 21,489), not a loop whose iterations
    vary (kv_concat: 68,925, then 64,350 to 67,810, is kept)."""
    excess = first - max(rest)
    return excess >= APART_SPREADS * (max(rest) - min(rest)) and excess >= APART_MIN_EXCESS * float(np.median(rest))


def _windows_from_ranges(trace: Trace, marked: pd.DataFrame) -> list[StepWindow]:
    """Step windows on the GPU's clock.

    A step starts when its CPU range starts, or later if the GPU is still busy with work launched
    before it (a GPU-bound loop runs ahead on the host); it ends where the next step starts, the
    last one when its own GPU work is done. So the windows tile the timeline and each holds the
    GPU time of the work its step launched.
    """
    marked = marked.sort_values("ts").drop_duplicates("ts")
    launch_ts = launch_time_of_gpu_ops(trace)
    order = np.argsort(launch_ts, kind="stable")
    launch_ts, gpu_end = launch_ts[order], trace.gpu["end"].to_numpy(float)[order]
    cpu_start, cpu_end = marked["ts"].to_numpy(float), marked["end"].to_numpy(float)
    first = np.searchsorted(launch_ts, cpu_start, side="left")  # launched before the step: [0, first)
    stop = np.searchsorted(launch_ts, cpu_end, side="right")  # launched inside it: [first, stop)
    backlog = np.where(
        first > 0, np.maximum.accumulate(gpu_end)[np.maximum(first - 1, 0)] if len(gpu_end) else 0, cpu_start
    )
    last_gpu = np.where(stop > first, _range_max(gpu_end, first, stop), cpu_end)
    windows = []
    for i, name in enumerate(marked["name"]):
        windows.append(
            StepWindow(
                index=i,
                label=name,
                cpu_start=float(cpu_start[i]),
                cpu_end=float(cpu_end[i]),
                start=max(float(cpu_start[i]), float(backlog[i])),
                end=max(float(cpu_end[i]), float(last_gpu[i])),
                n_gpu_ops=int(max(stop[i] - first[i], 0)),
            )
        )
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


def launch_time_of_gpu_ops(trace: Trace, gpu: pd.DataFrame | None = None) -> np.ndarray:
    """For each GPU op (of the trace, or the rows `gpu` of it), the host time of the CUDA call that launched it
    (its own start if unknown)."""
    gpu = trace.gpu if gpu is None else gpu
    if not len(gpu):
        return np.array([])
    runtime = trace.launch_calls
    at = lookup(gpu["correlation"], runtime["correlation"])
    return np.where(
        at >= 0, runtime["ts"].to_numpy(float)[np.maximum(at, 0)] if len(runtime) else 0.0, gpu["ts"].to_numpy(float)
    )


def _whole_window(trace: Trace) -> list[StepWindow]:
    if len(trace.gpu):
        start, end = float(trace.gpu["ts"].min()), float(trace.gpu["end"].max())
        n = len(trace.gpu)
    elif len(trace.ops):
        start, end = float(trace.ops["ts"].min()), float(trace.ops["end"].max())
        if trace.session_end_us is not None:
            end = max(start, min(end, trace.session_end_us + SESSION_SLACK_US))
        n = 0
    else:
        return []
    return [StepWindow(index=0, label="whole trace", cpu_start=start, cpu_end=end, start=start, end=end, n_gpu_ops=n)]
