"""The profiler's own host time, taken out of a trace by replaying its steps: an estimated unprofiled step.

torch.profiler (kineto with CUPTI) costs the host time for every event it records: each CPU op, each
tensor whose shape it records, each kernel launch and other runtime call, each compiled region and
inductor kernel call (ranges torch.compile opens only while profiling), each Python function under
`with_stack`, That time lengthens the host's timeline; it lengthens the step
only where the GPU waits for the host. So each step is replayed with that time removed:

- every host event moves earlier by the cost of the events recorded before it in the step;
- every GPU op starts when its launch (moved) has reached the GPU and its stream is free, and keeps
  its duration (the profiler barely touches kernels); the ops of one graph launch keep their gaps;
- a synchronising call that waited for the GPU returns when the GPU work it waited for ends in the
  replay, and the host goes on from there;
- the step ends when both the host and the GPU are done.

So a GPU-bound step keeps its length however many events it records, and a launch-bound one loses
what its events cost. The costs per event are fitted by benchmarks/profiler_overhead.py on the
project's captures, which hold both the profiled trace and the step timed without the profiler; the
fit and its held-out check are in docs/profiler-overhead.md, and tests/test_profiler_overhead.py
keeps COSTS equal to what the fit gives.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.metrics.steps import StepWindow
from diagnose.metrics.timeline import name_matches
from diagnose.trace.model import Trace
from diagnose.trace.names import name_search, name_starts
from diagnose.vocabulary.compiled import REGION_PREFIX, TRITON_PREFIX
from diagnose.vocabulary.runtime import GRAPH_LAUNCH, KERNEL_LAUNCH, SYNC_CALL

# µs of host time per recorded event, fitted by benchmarks/profiler_overhead.py on the NVIDIA H200
# captures of fixtures/captures (torch 2.11, record_shapes=True, profile_memory=True, with_stack=False),
# except python_function: no capture records one, so it is MEASURED on tight loops on the same H200
# (benchmarks/profiler_event_costs.py, benchmarks/results-event-costs-h200.json: with_stack=True added
# 0.02-0.21 µs per Python function event, median over five rounds of two loops, 2026-12-03).
COSTS = {
    "cpu_op": 2.78,
    "shaped_input": 0.12,
    "kernel_launch": 14.44,
    "runtime_call": 3.33,
    "compiled_region": 31.44,
    "inductor_kernel": 55.4,
    "allocator_event": 2.3,
    "python_function": 0.1,
}
MEASURED = ("python_function",)  # measured directly, not fitted
# The profiler's work runs on the same CPU as the workload's: a host whose launch calls take longer
# pays more per event. COSTS hold for the calibration captures' median launch call (the median of
# their medians, benchmarks/profiler_overhead.py); a trace's costs scale with its own median launch
# call against it, within HOST_SPEED_RANGE.
REFERENCE_LAUNCH_US = 8.35
HOST_SPEED_RANGE = (0.25, 4.0)
# The calibration captures are diagnose's own, which record shapes and allocator events and, while
# profiling, the allocator's history with Python stacks and the sampler's Python stacks: host time a plain
# user loop under torch.profiler does not pay. A trace without allocator events (profile_memory off; diagnose
# has it on by default) and without the mark diagnose's capture writes into the trace's top level (since
# 2026-12-06: Trace.diagnose_mark) is not one of diagnose's, so it is charged this fraction of the costs, fitted by
# `benchmarks/profiler_overhead.py --plain` on the plain user loops of fixtures/plain and fixtures/plain_shapes
# (recorded on an NVIDIA H100 with torch.profiler's defaults, the latter with record_shapes=True; each loop
# timed without the profiler) and judged on each loop with the others' fit
# (benchmarks/results-profiler-overhead-plain.json; docs/profiler-overhead.md, "the sign is allocator events"; 0.41 on
# 16 traces, 2026-12-06, 0.37 on 20 with the transfer pair, 2026-12-07: the objective is flat between the two).
PLAIN_SCALE = 0.37
# Since 2026-12-07 diagnose's capture records the allocator's history in its profiled warm-up step only (its trace's
# mark says "allocator_history_steps": "warm-up"); COSTS' allocator cost was fitted on captures that kept it on
# through the measured steps, so such a trace's allocator events are charged this much less each: what the history
# adds per allocator event, MEASURED on a tight allocation loop (benchmarks/profiler_event_costs.py, the `alloc` loop:
# the median over three rounds of 0.87, 0.73 and -0.60 µs, an H100, 2026-12-07; benchmarks/results-event-costs-alloc-
# h100.json), at most the whole fitted cost. The GIL stalls the history causes in a loop with other Python threads are
# not in it: they are why the history no longer runs in measured steps.
ALLOCATOR_HISTORY_US = 0.73
EDGE_US = 0.5  # a window edge this close to an op's start or end is that op's
MAX_STEPS = 32  # steps replayed at most (spread over the trace): the median needs no more
SPREAD_SAID = 1.5  # the slowest replayed step this many times the fastest is said beside the estimate
# the range of the replayed steps leaves out this share at each end once there are ten steps or more, so one
# outlier (a stall, a window cut short) does not set it; from four steps the range is the fastest to the slowest
RANGE_TRIM = 0.1


@dataclasses.dataclass
class OverheadEstimate:
    """The unprofiled step estimated from the trace alone."""

    step_us: float  # the estimated unprofiled step (median over the replayed steps)
    profiled_us: float  # the same steps as profiled (median)
    events: dict  # recorded host events per step by kind (medians over the replayed steps)
    steps_replayed: int
    saving_us: float = 0.0  # what the replay took off a step: the median of (profiled − replayed) per step
    python_tracing_us: float = 0.0  # of that saving, what with_stack's Python function events alone added
    plain: bool = False  # recorded without allocator events: each fitted event cost is PLAIN_SCALE of COSTS
    # the shortest and longest replayed step, the fastest and slowest tenth left out from ten steps on (RANGE_TRIM);
    # 0 when not given
    fastest_us: float = 0.0
    slowest_us: float = 0.0
    trimmed: bool = False  # the range leaves out the fastest and slowest tenth

    def python_text(self) -> str:
        """What with_stack's Python tracing added to a step, in words ("" when the trace has none)."""
        calls = self.events.get("python_function", 0.0)
        if calls < 1:
            return ""
        return (
            f"with_stack's Python tracing ({calls:,.0f} Python function events a step) {self.python_tracing_us:,.0f} µs"
        )

    def text(self) -> str:
        """The estimate in words, for the time basis: what the replay took off a step, and from what."""
        counts = ", ".join(f"{v:,.0f} {_plural(k)}" for k, v in self.events.items() if v >= 1)
        python = self.python_text()
        plain = (
            f"; recorded without profile_memory, so not by diagnose's capture: each event is charged "
            f"{PLAIN_SCALE:g}× what one costs there"
            if self.plain
            else ""
        )
        return (
            f"the profiler's own host time per event taken out by replaying {self.steps_replayed} step(s) "
            f"of {counts or 'no events'} (diagnose/metrics/overhead.py): {self.saving_us:,.0f} µs off a step "
            f"(median step {self.profiled_us:,.0f} µs profiled, {self.step_us:,.0f} µs replayed)"
            + (f", of which {python}" if python else "")
            + self.spread_text()
            + plain
        )

    @property
    def far_apart(self) -> bool:
        """Whether the slowest replayed step is at least SPREAD_SAID times the fastest: the loop's typical step
        is uncertain within that range, and the time basis says so (`spread_text`)."""
        return self.fastest_us > 0 and self.slowest_us >= SPREAD_SAID * self.fastest_us

    def spread_text(self) -> str:
        """ "; the replayed steps range from 14,532 to 33,013 µs, ..." where the slowest is at least SPREAD_SAID
        times the fastest ("" otherwise): a few steps that far apart may not hold the loop's typical one. Over the
        73 captures that timed their steps (docs/profiler-overhead.md), 5 of the 15 so spread missed the measured
        step by more than 25 %, 4 of the other 58."""
        if not self.far_apart:
            return ""
        trimmed = " (the fastest and slowest tenth left out)" if self.trimmed else ""
        return (
            f"; the replayed steps range from {self.fastest_us:,.0f} to {self.slowest_us:,.0f} µs{trimmed}, so the "
            "loop's typical step is uncertain within that range (timing steps without the profiler settles it)"
        )


def _plural(kind: str) -> str:
    """An event kind in words, plural ("kernel_launch" → "kernel launches")."""
    words = kind.replace("_", " ").replace("cpu op", "CPU op").replace("python", "Python")
    return words + ("es" if words.endswith("ch") else "s")


@dataclasses.dataclass
class _HostEvents:
    """The launching threads' recorded events in time order, with the running cost of each kind."""

    ts: np.ndarray
    running: np.ndarray  # (events + 1) × kinds: events of each kind before index i
    launch_call_us: float  # the median kernel-launch call among them, graph replays aside (0 without one)

    def cost_before(self, t, costs: np.ndarray):
        """Modelled profiler time of the events before time(s) `t`."""
        return self.running[np.searchsorted(self.ts, t, side="left")] @ costs


KINDS = tuple(COSTS)  # the kinds of host event


def _inputs_recorded(dims: pd.Series) -> np.ndarray:
    """Inputs whose shape each op records under record_shapes (0 for an op without shapes)."""
    return dims.map(lambda d: len(d) if isinstance(d, list) else 0).to_numpy(float)


def _spans(windows: list[StepWindow]) -> tuple[np.ndarray, np.ndarray]:
    """The replayed windows' time, from each one's host or GPU start (whichever is first) to its end,
    as sorted disjoint (starts, ends): only events in them move a replayed step."""
    bounds = sorted((min(w.cpu_start, w.start), w.end) for w in windows)
    starts, ends = [bounds[0][0]], [bounds[0][1]]
    for lo, hi in bounds[1:]:
        if lo <= ends[-1]:
            ends[-1] = max(ends[-1], hi)
        else:
            starts.append(lo)
            ends.append(hi)
    return np.array(starts), np.array(ends)


def _inside(ts, spans: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Which times fall in one of the spans (each [start, end))."""
    ts = np.asarray(ts, float)
    at = np.searchsorted(spans[0], ts, side="right") - 1
    return (at >= 0) & (ts < spans[1][np.maximum(at, 0)])


def _host_events(trace: Trace, spans: tuple[np.ndarray, np.ndarray]) -> tuple[_HostEvents, dict]:
    """The events of the threads that launch GPU work, recorded in the spans, and their counts."""
    rt = trace.runtime
    rt = rt[_inside(rt["ts"], spans)]
    launch = name_search(rt["name"], KERNEL_LAUNCH) if len(rt) else np.zeros(0, bool)
    tids = set(rt["tid"][launch].tolist())
    ops = trace.cpu_ops
    ops = ops[_inside(ops["ts"], spans) & ops["tid"].isin(tids)]
    names = ops["name"]
    region = name_starts(names, REGION_PREFIX)
    inductor = name_starts(names, TRITON_PREFIX)
    op_ts = ops["ts"].to_numpy(float)
    shapes = _inputs_recorded(ops["input_dims"]) if "input_dims" in ops else np.zeros(len(ops))
    on_tids = rt["tid"].isin(tids).to_numpy() & ~name_matches(rt["name"], SYNC_CALL)  # a sync is a wait
    py = trace.python
    py = py[_inside(py["ts"], spans)] if len(py) else py
    parts = {
        "cpu_op": op_ts[~region & ~inductor],
        "shaped_input": np.repeat(op_ts, shapes.astype(int)),
        "kernel_launch": rt["ts"].to_numpy(float)[launch],
        "runtime_call": rt["ts"].to_numpy(float)[~launch & on_tids],
        "compiled_region": op_ts[region],
        "inductor_kernel": op_ts[inductor],
        "allocator_event": _allocator_events(trace, spans, tids),
        "python_function": py["ts"].to_numpy(float) if len(py) else np.zeros(0),
    }
    ts = np.concatenate([parts.get(k, np.zeros(0)) for k in KINDS])
    kind = np.concatenate([np.full(len(parts.get(k, ())), i) for i, k in enumerate(KINDS)])
    order = np.argsort(ts, kind="stable")
    onehot = np.zeros((len(ts) + 1, len(KINDS)))
    onehot[np.arange(1, len(ts) + 1), kind[order]] = 1.0
    # the host's speed is read from kernel launches alone: a graph replay's call costs what its graph
    # holds (32 µs for a graph tree's replay on an H100), not what the host's speed makes of one call
    plain = launch & ~name_search(rt["name"], GRAPH_LAUNCH) if len(rt) else launch
    calls = rt["dur"].to_numpy(float)[plain]
    median_call = float(np.median(calls)) if len(calls) else 0.0
    return _HostEvents(ts[order], np.cumsum(onehot, axis=0), median_call), {k: len(v) for k, v in parts.items()}


def _allocator_events(trace: Trace, spans: tuple[np.ndarray, np.ndarray], tids: set) -> np.ndarray:
    """When the launching threads' allocator events (profile_memory=True) in the spans were recorded."""
    mem = trace.memory
    if not len(mem):
        return np.zeros(0)
    ts = mem["ts"].to_numpy(float)
    keep = _inside(ts, spans) & mem["tid"].isin(tids).to_numpy()
    return ts[keep]


@dataclasses.dataclass
class _GpuOps:
    """One step's GPU ops in launch order, and its synchronising calls."""

    ts: np.ndarray
    dur: np.ndarray
    stream: np.ndarray
    launch: np.ndarray  # the launch call's start (NaN: no launch call found)
    gap: (
        np.ndarray
    )  # for an op launched by the same call as its stream's previous one (a graph): the gap between them, else NaN
    sync_ts: np.ndarray
    sync_end: np.ndarray


class _ByStart:
    """A frame's rows by start time, for slicing out a window without a pass over every row."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        self.ts = frame["ts"].to_numpy(float)
        self.sorted = bool(len(self.ts) < 2 or (np.diff(self.ts) >= 0).all())
        self.longest = float(frame["dur"].max()) if "dur" in frame and len(frame) else 0.0

    def starting(self, lo: float, hi: float) -> pd.DataFrame:
        """The rows that start in [lo, hi)."""
        if not self.sorted:
            return self.frame[(self.ts >= lo) & (self.ts < hi)]
        return self.frame.iloc[np.searchsorted(self.ts, lo, "left") : np.searchsorted(self.ts, hi, "left")]

    def running(self, lo: float, hi: float) -> pd.DataFrame:
        """The rows that end after `lo` and start before `hi`."""
        rows = self.starting(lo - self.longest, hi) if self.sorted else self.frame[self.ts < hi]
        return rows[rows["end"] > lo]


def _gpu_ops(gpu_rows: _ByStart, runtime: _ByStart, launch_ts: pd.Series, w: StepWindow) -> _GpuOps:
    """The GPU ops that run in `w` or were launched in it, and the step's synchronising calls."""
    gpu = gpu_rows.running(min(w.cpu_start, w.start), w.end)
    launch = gpu["correlation"].map(launch_ts).to_numpy(float) if len(gpu) else np.zeros(0)
    key = np.where(np.isnan(launch), gpu["ts"].to_numpy(float), launch)
    order = np.lexsort((gpu["ts"].to_numpy(float), key))
    gpu, launch = gpu.iloc[order], launch[order]
    stream = gpu["stream"].to_numpy()
    corr = gpu["correlation"].to_numpy()
    ts, end = gpu["ts"].to_numpy(float), gpu["end"].to_numpy(float)
    gap = np.full(len(gpu), np.nan)
    for s in pd.unique(stream):
        idx = np.nonzero(stream == s)[0]
        same = corr[idx[1:]] == corr[idx[:-1]]
        gap[idx[1:][same]] = np.maximum(ts[idx[1:]] - end[idx[:-1]], 0.0)[same]
    syncs = runtime.starting(w.start, w.end)
    syncs = syncs[name_matches(syncs["name"], SYNC_CALL)] if len(syncs) else syncs
    return _GpuOps(
        ts,
        end - ts,
        stream,
        launch,
        gap,
        syncs["ts"].to_numpy(float),
        syncs["end"].to_numpy(float),
    )


def _arrivals(g: _GpuOps, rows: np.ndarray, shift, origin: float) -> np.ndarray:
    """When each op of `rows` could start at the earliest in the replay: its profiled start moved
    earlier by as much as the host was moved at its launch (a launch-paced op then starts that much
    earlier, a queued one waits for its stream all the same); an op launched before the replay's
    origin keeps its start, and the later ops of a graph launch follow their predecessor (-inf here,
    their gap in `g.gap`)."""
    launch, ts = g.launch[rows], g.ts[rows]
    key = np.where(np.isnan(launch), ts, launch)
    at = ts - shift(key)
    at[key < origin] = ts[key < origin]
    at[~np.isnan(g.gap[rows])] = -np.inf
    return at


def _run_streams(g: _GpuOps, rows: np.ndarray, arrive: np.ndarray, free: dict, ends: np.ndarray) -> None:
    """Replay `rows` on their streams: each op starts when it has arrived and its stream is free
    (end_i = max(arrive_i, end_(i-1) + gap_i) + dur_i, solved as a running maximum)."""
    streams = g.stream[rows]
    for s in pd.unique(streams):
        mine = streams == s
        idx = rows[mine]
        d, gap = g.dur[idx], np.nan_to_num(g.gap[idx], nan=0.0)
        total = np.cumsum(d + gap)
        term = arrive[mine] - (total - d - gap) - gap
        out = total + np.maximum(free.get(s, -np.inf), np.maximum.accumulate(term))
        ends[idx] = out
        free[s] = out[-1]


def _replay(host: _HostEvents, costs: np.ndarray, g: _GpuOps, w: StepWindow) -> float:
    """The step's length with the modelled profiler time taken out (module docstring). The replay
    starts where the step's host work or its GPU window starts, whichever is first; a window on the
    GPU's timeline (a host running ahead) is measured from its first op to its last, as profiled."""
    origin = min(w.cpu_start, w.start)
    base = float(host.cost_before(origin, costs))
    catch = [0.0]

    def shift(t):
        return catch[0] + host.cost_before(t, costs) - base

    key = np.where(np.isnan(g.launch), g.ts, g.launch)
    ends, done = np.full(len(g.ts), np.nan), 0
    free: dict = {}
    for s_ts, s_end in [*zip(g.sync_ts, g.sync_end), (np.inf, np.inf)]:
        upto = int(np.searchsorted(key, s_ts, side="right"))
        rows = np.arange(done, upto)
        if len(rows):
            _run_streams(g, rows, _arrivals(g, rows, shift, origin), free, ends)
        done = upto
        if not np.isfinite(s_ts):
            break
        behind = _after_sync(g, ends, done, s_ts, s_end, float(shift(s_ts)))
        catch[0] = behind - (float(host.cost_before(s_end, costs)) - base)
    in_window = (g.ts >= w.start) & (g.ts < w.end)
    gpu_end = float(np.nanmax(ends[in_window])) if in_window.any() else -np.inf
    end = max(w.end - float(shift(w.end)), gpu_end)
    # no synchronising call comes before the step's start (the step's own are read from its start on),
    # so no catching up moves it: only the events before it
    start_shift = float(host.cost_before(w.start, costs)) - base
    return max(end - _replayed_time(g, ends, w.start, start_shift), _busiest_stream(g, in_window))


def _busiest_stream(g: _GpuOps, rows: np.ndarray) -> float:
    """The most GPU time one stream spends on `rows`: no replay of the step can be shorter."""
    if not rows.any():
        return 0.0
    return float(pd.Series(g.dur[rows]).groupby(g.stream[rows]).sum().max())


def _replayed_time(g: _GpuOps, ends: np.ndarray, t: float, host_shift: float) -> float:
    """Where time `t` lands in the replay: on an op's start or end when one starts or ends there
    (a window on the GPU's timeline), else on the host's (moved by `host_shift`)."""
    starts = np.nonzero(np.abs(g.ts - t) <= EDGE_US)[0]
    if len(starts) and not np.isnan(ends[starts[0]]):
        return float(ends[starts[0]] - g.dur[starts[0]])
    stops = np.nonzero(np.abs(g.ts + g.dur - t) <= EDGE_US)[0]
    if len(stops) and not np.isnan(ends[stops[0]]):
        return float(ends[stops[0]])
    return t - host_shift


def _after_sync(g: _GpuOps, ends: np.ndarray, done: int, s_ts: float, s_end: float, shift_at: float) -> float:
    """How far the host is behind its profiled time once a synchronising call returns in the
    replay: the call waits for the GPU work launched before it (as replayed), then spends what it
    spent after that work ended (its own host time, a pageable copy's staging)."""
    waited_for = float(np.max(g.ts[:done] + g.dur[:done])) if done else -np.inf
    replayed_for = float(np.nanmax(ends[:done])) if done else -np.inf
    own = s_end - max(waited_for, s_ts)
    returns = max(s_ts - shift_at, replayed_for) + own
    return s_end - returns


def _chosen(windows: list[StepWindow]) -> list[StepWindow]:
    """At most MAX_STEPS windows, spread evenly over the trace."""
    if len(windows) <= MAX_STEPS:
        return list(windows)
    picks = np.unique(np.linspace(0, len(windows) - 1, MAX_STEPS).round().astype(int))
    return [windows[i] for i in picks]


@dataclasses.dataclass
class Replay:
    """A trace's steps made ready to replay under any costs (what does not depend on them)."""

    windows: list[StepWindow]
    host: _HostEvents
    ops: list[_GpuOps]
    reference_launch_us: float = REFERENCE_LAUNCH_US
    plain: bool = False  # no allocator events (profile_memory off) and no diagnose mark: not diagnose's capture
    history_in_steps: bool = True  # the allocator's history ran through the measured steps (diagnose before 2026-12-07)

    @property
    def host_speed(self) -> float:
        """How much slower this host is per event than the calibration captures' (module constants)."""
        if self.host.launch_call_us <= 0:
            return 1.0
        return float(np.clip(self.host.launch_call_us / self.reference_launch_us, *HOST_SPEED_RANGE))

    def estimate(self, costs: dict | None = None, scale: float = 1.0) -> OverheadEstimate:
        """The unprofiled step under `costs` (µs per event by kind, COSTS by default) × `scale`."""
        costs = COSTS if costs is None else costs
        if not self.history_in_steps and "allocator_event" in costs:
            costs = {**costs, "allocator_event": max(costs["allocator_event"] - ALLOCATOR_HISTORY_US, 0.0)}
        scale *= self.host_speed
        fitted = PLAIN_SCALE if self.plain else 1.0  # what was measured directly needs no such factor
        per_event = np.array([costs.get(k, 0.0) * scale * (1.0 if k in MEASURED else fitted) for k in KINDS])
        replayed = [_replay(self.host, per_event, g, w) for g, w in zip(self.ops, self.windows)]
        python_us = self._python_tracing_us(per_event, replayed)
        profiled = [w.end - w.start for w in self.windows]
        starts = np.searchsorted(self.host.ts, [w.start for w in self.windows], side="left")
        stops = np.searchsorted(self.host.ts, [w.end for w in self.windows], side="left")
        per_step = self.host.running[stops] - self.host.running[starts]
        events = {k: float(np.median(per_step[:, i])) for i, k in enumerate(KINDS)}
        saving = float(np.median(np.subtract(profiled, replayed)))
        return OverheadEstimate(
            float(np.median(replayed)),
            float(np.median(profiled)),
            events,
            len(self.windows),
            max(saving, 0.0),
            min(python_us, max(saving, 0.0)),
            self.plain,
            *_range(replayed),
        )

    def _python_tracing_us(self, per_event: np.ndarray, replayed: list[float]) -> float:
        """What the Python function events alone add to a step: the steps replayed with every other
        kind's cost taken out and theirs kept, against `replayed` (0 without such events)."""
        python = KINDS.index("python_function")
        if per_event[python] <= 0 or self.host.running[-1, python] < 1:
            return 0.0
        kept = per_event.copy()
        kept[python] = 0.0
        with_python = [_replay(self.host, kept, g, w) for g, w in zip(self.ops, self.windows)]
        return max(0.0, float(np.median(np.subtract(with_python, replayed))))


def _range(replayed: list[float]) -> tuple[float, float, bool]:
    """(fastest, slowest, trimmed): the range of the replayed steps, int(n × RANGE_TRIM) left out at each end."""
    ordered = sorted(replayed)
    k = int(len(ordered) * RANGE_TRIM)
    return float(ordered[k]), float(ordered[-1 - k]), k > 0


def prepare(trace: Trace, windows: list[StepWindow]) -> Replay | None:
    """The replay of at most MAX_STEPS of `windows`; None without steps or without GPU activity."""
    if not windows or not len(trace.gpu):
        return None
    chosen = _chosen(windows)
    host, counts = _host_events(trace, _spans(chosen))
    rt = trace.runtime
    launches = rt[name_search(rt["name"], KERNEL_LAUNCH)] if len(rt) else rt
    launch_ts = launches.drop_duplicates("correlation").set_index("correlation")["ts"]
    gpu, runtime = _ByStart(trace.gpu), _ByStart(rt)
    ops = [_gpu_ops(gpu, runtime, launch_ts, w) for w in chosen]
    plain = counts["cpu_op"] > 0 and not len(trace.memory) and trace.diagnose_mark is None
    return Replay(chosen, host, ops, plain=plain, history_in_steps=history_in_measured_steps(trace.diagnose_mark))


def history_in_measured_steps(mark: dict | None) -> bool:
    """Whether a trace's allocator events are charged the cost fitted with the allocator's history on: diagnose's
    captures before 2026-12-07 (a mark without "allocator_history_steps") and traces without diagnose's mark, as
    before; not diagnose's captures since (history in the warm-up step only) nor its captures without CUDA."""
    if not isinstance(mark, dict):
        return True
    return bool(mark.get("allocator_history")) and mark.get("allocator_history_steps") != "warm-up"


def estimate_unprofiled(trace: Trace, windows: list[StepWindow], scale: float = 1.0) -> OverheadEstimate | None:
    """The unprofiled step the trace implies: each step replayed with the modelled profiler time
    taken out (COSTS × `scale`). None without steps, without GPU activity or with `scale` 0."""
    replay = prepare(trace, windows) if scale > 0 else None
    return replay.estimate(scale=scale) if replay is not None else None
