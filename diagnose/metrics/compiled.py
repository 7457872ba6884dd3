"""torch.compile in the trace: compiled graphs entered per step and the host time between them.

Works on any kineto trace (no logs needed). torch.compile leaves these marks:

- `Torch-Compiled Region: F/V` (cpu_op): dynamo frame F, compiled version V, entered. A frame
  that breaks its graph holds its eager remainder and the regions of its resume functions
  nested inside it, so regions measure entries, not compiled code;
- `## Call CompiledFxGraph <hash> ##` (user annotation, inductor) and `CompiledFunction` /
  `CompiledFunctionBackward` (AOT autograd, training): one compiled graph running. These are
  the *graph calls*. A trace with regions but none of them (backend="eager"/"aot_eager") falls
  back to the regions that hold no other region;
- inductor's kernels (`triton_…`, `cpp_fused_…`) and CUDA and HIP graph replays (`cudaGraphLaunch`, `hipGraphLaunch`).

Per measured step, on the thread that ran the step: regions entered, graph calls, the most graph
calls one compiled entry made (the outermost region around them: a break's resume functions run
inside the frame that broke), host time inside graph calls, host time *between* graph calls of the
same entry not covered by one (the eager code and the dynamo entry cost that a graph break puts
between graphs: what removing the breaks recovers; the user's code between two calls of a compiled
model is not a break, so the count does not hang on how many calls a step holds), host time outside
graph calls altogether, eager ops and kernel launches between graphs, graph replays, and kernel
launches (graph replays included) made outside every compiled entry: eager work around the compiled call.

`load_compile_record` reads compile.json (schema diagnose.compile/1, written by
diagnose/child/compile_log.py) beside the trace: dynamo's own graph breaks, recompiles and
CUDA-graph skips with the user's file and line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Union

import msgspec
import numpy as np
import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.metrics.host import merge_intervals
from diagnose.metrics.timeline import name_matches
from diagnose.trace import schemas
from diagnose.trace.model import Trace
from diagnose.vocabulary.compiled import COMPILED_REGION, DYNAMO_OWN, GRAPH_CALL, INDUCTOR_KERNEL
from diagnose.vocabulary.runtime import GRAPH_LAUNCH, KERNEL_LAUNCH

COMPILE_FILE = "compile.json"
COMPILE_SCHEMA = "diagnose.compile/1"
STEP_COLUMNS = [
    "step",
    "step_us",
    "regions",
    "graphs",
    "graphs_per_entry",
    "graph_us",
    "between_us",
    "outside_us",
    "eager_ops_between",
    "launches_between",
    "replays",
    "inductor_kernels",
    "launches_outside",
]


@dataclasses.dataclass
class CompiledSteps:
    """Compiled-code accounting of the measured steps (one row per step in `steps`)."""

    steps: pd.DataFrame
    marked: bool  # graph calls are marked in the trace (else inferred from innermost regions)
    between_ops: pd.DataFrame  # name, calls per step, host µs per step of eager ops between graphs
    regions_in_trace: int

    @property
    def compiled(self) -> bool:
        """True when the trace ran any torch.compile'd code."""
        return self.regions_in_trace > 0 or bool(len(self.steps) and self.steps["graphs"].sum())

    @property
    def replays_graphs(self) -> bool:
        """True when the steps run torch.compile'd code that replays CUDA graphs (mode="reduce-overhead":
        inductor's graph tree)."""
        return self.compiled and self.per_step("replays") > 0

    def per_step(self, column: str) -> float:
        """Mean of a column over the measured steps."""
        return float(self.steps[column].mean()) if len(self.steps) else 0.0


def compiled_steps(trace: Trace, windows) -> CompiledSteps:
    """Graphs entered, graph calls and host time between them in each measured step."""
    ops = trace.ops
    is_region, is_call = name_matches(ops["name"], COMPILED_REGION), name_matches(ops["name"], GRAPH_CALL)
    regions, calls = ops[is_region], ops[is_call]
    if not len(regions) and not len(calls):  # nothing compiled: no step to measure
        return CompiledSteps(pd.DataFrame(columns=STEP_COLUMNS), False, _between_ops([], 1), 0)
    marked = bool(len(calls))
    if not marked and len(regions):
        calls = _innermost(regions)
    rows, between = [], []
    gpu, runtime = trace.gpu, trace.runtime
    # what the steps test row by row, once for the whole trace: each step only cuts its rows out of these
    inductor = name_matches(gpu["name"], INDUCTOR_KERNEL)
    gpu_ts = gpu["ts"].to_numpy(float)
    op_tid, op_ts = ops["tid"].to_numpy(), ops["ts"].to_numpy(float)
    eager_op = ~name_matches(ops["name"], DYNAMO_OWN) & (ops["cat"] == "cpu_op").to_numpy()
    rt_tid, rt_ts = runtime["tid"].to_numpy(), runtime["ts"].to_numpy(float)
    rt_launch = name_matches(runtime["name"], KERNEL_LAUNCH)
    rt_replay = name_matches(runtime["name"], GRAPH_LAUNCH)
    outermost: dict = {}  # per thread: its regions held by no other, sorted (the compiled entries)
    for i, w in enumerate(windows):
        tid = _step_thread(ops, w, regions)
        own = _rows_of(op_tid, op_ts, tid, w)
        step_calls = calls[(calls["tid"] == tid) & (calls["ts"] >= w.cpu_start) & (calls["ts"] < w.cpu_end)]
        if tid not in outermost:
            outermost[tid] = _top_level(regions[regions["tid"] == tid]) if len(regions) else regions
        entries = _entries(step_calls, outermost[tid])
        spans, gaps, per_entry = _graph_spans(step_calls, entries, w.cpu_end)
        covered = float((spans[:, 1] - spans[:, 0]).sum()) if len(spans) else 0.0
        eager = _top_level(ops[own & eager_op])
        in_gap = _within(eager["ts"].to_numpy(float), gaps)
        between.append(eager[in_gap].assign(step=i))
        rt = _rows_of(rt_tid, rt_ts, tid, w)
        launches_ts = rt_ts[rt & rt_launch]
        entry_spans = outermost[tid][["ts", "end"]].to_numpy(float) if len(outermost[tid]) else np.empty((0, 2))
        rows.append(
            {
                "step": i,
                "step_us": w.cpu_end - w.cpu_start,
                "regions": int(
                    ((regions["tid"] == tid) & (regions["ts"] >= w.cpu_start) & (regions["ts"] < w.cpu_end)).sum()
                )
                if len(regions)
                else 0,
                "graphs": len(spans),
                "graphs_per_entry": per_entry,
                "graph_us": covered,
                "between_us": float((gaps[:, 1] - gaps[:, 0]).sum()) if len(gaps) else 0.0,
                "outside_us": max((w.cpu_end - w.cpu_start) - covered, 0.0) if len(spans) else 0.0,
                "eager_ops_between": int(in_gap.sum()),
                "launches_between": int(_within(launches_ts, gaps).sum()) if len(launches_ts) else 0,
                "replays": int((rt & rt_replay).sum()),
                "inductor_kernels": int((((gpu_ts >= w.start) & (gpu_ts < w.end)) & inductor).sum()),
                "launches_outside": int((~_within(launches_ts, entry_spans)).sum()),
            }
        )
    frame = pd.DataFrame(rows, columns=STEP_COLUMNS)
    return CompiledSteps(frame, marked, _between_ops(between, max(len(windows), 1)), int(is_region.sum()))


def _rows_of(tids: np.ndarray, ts: np.ndarray, tid, window) -> np.ndarray:
    """Which rows (their thread ids and start times) thread `tid` started inside the step's CPU range; none
    when the step has no thread."""
    if tid is None:
        return np.zeros(len(ts), dtype=bool)
    return (tids == tid) & (ts >= window.cpu_start) & (ts < window.cpu_end)


def _entries(calls: pd.DataFrame, outer: pd.DataFrame) -> np.ndarray:
    """For each graph call (one thread), the compiled entry it ran in: the outermost region that holds it
    (`outer`: the thread's regions held by no other, sorted by start).

    A graph break's resume functions run inside the region of the frame that broke, so the graphs of one
    entry and the eager code between them share that region; graphs of separate entries (a model called
    twice in a step, a step that is two iterations) have the user's own code between them, not a break.
    A call outside every region is an entry of its own; a trace that marks no region at all (older torch)
    has one entry per step, as every call between the first and the last could be a break."""
    if not len(outer):
        return np.zeros(len(calls), dtype=int)
    starts, ends = outer["ts"].to_numpy(float), outer["end"].to_numpy(float)
    ts = calls["ts"].to_numpy(float)
    at = np.searchsorted(starts, ts, side="right") - 1
    inside = (at >= 0) & (ts < ends[np.maximum(at, 0)])
    return np.where(inside, at, len(outer) + np.arange(len(calls)))


def _graph_spans(calls: pd.DataFrame, entries: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray, int]:
    """(the step's graph spans, the gaps between graphs of the same entry, the most graphs one entry ran)."""
    ts, end = calls["ts"].to_numpy(float), calls["end"].to_numpy(float).clip(max=cap)
    spans, gaps, most = [], [], 0
    for entry in np.unique(entries):
        mine = entries == entry
        merged = merge_intervals(ts[mine], end[mine])
        spans.append(merged)
        most = max(most, len(merged))
        if len(merged) > 1:
            gaps.append(np.column_stack((merged[:-1, 1], merged[1:, 0])))
    all_spans = np.concatenate(spans) if spans else np.zeros((0, 2))
    all_gaps = np.concatenate(gaps) if gaps else np.zeros((0, 2))
    all_gaps = all_gaps[np.argsort(all_gaps[:, 0])] if len(all_gaps) else all_gaps
    return all_spans, all_gaps, most


def _between_ops(parts: list[pd.DataFrame], n: int) -> pd.DataFrame:
    """Eager ops between graphs, by name: calls and host µs per step, most time first."""
    cols = ["name", "calls_per_step", "host_us_per_step"]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    ops = pd.concat(parts, ignore_index=True)
    grouped = aggregate(ops.groupby("name"), calls=("dur", "size"), host=("dur", "sum")).sort_values(
        "host", ascending=False
    )
    return pd.DataFrame(
        {
            "name": grouped.index,
            "calls_per_step": grouped["calls"].to_numpy() / n,
            "host_us_per_step": grouped["host"].to_numpy(float) / n,
        }
    ).reset_index(drop=True)


def _step_thread(ops: pd.DataFrame, window, regions: pd.DataFrame):
    """The thread that ran the step: its step range's thread where compiled regions ran on it or none ran
    in the step, else the one with most regions in it (kineto can write a ProfilerStep range under another
    thread id than the ops it holds: HTA's triton_example)."""
    if not len(ops):
        return None
    label = ops[(ops["name"] == window.label) & (ops["ts"] == window.cpu_start)]
    inside = regions[(regions["ts"] >= window.cpu_start) & (regions["ts"] < window.cpu_end)]
    if len(label) and (not len(inside) or (inside["tid"] == label["tid"].iat[0]).any()):
        return label["tid"].iat[0]
    if len(inside):
        return inside["tid"].mode().iat[0]
    return ops["tid"].mode().iat[0]


def _innermost(regions: pd.DataFrame) -> pd.DataFrame:
    """Regions that hold no other region of their thread (backend without graph-call marks)."""
    ts, end, tid = regions["ts"].to_numpy(float), regions["end"].to_numpy(float), regions["tid"].to_numpy(object)
    keep = np.ones(len(regions), dtype=bool)
    for i in range(len(regions)):
        holds = (tid == tid[i]) & (ts >= ts[i]) & (end <= end[i])
        holds[i] = False
        keep[i] = not holds.any()
    return regions[keep]


def _within(ts: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """For each time, whether it falls inside one of the (sorted, disjoint) spans."""
    if not len(spans) or not len(ts):
        return np.zeros(len(ts), dtype=bool)
    idx = np.searchsorted(spans[:, 0], ts, side="right") - 1
    return (idx >= 0) & (ts < spans[np.maximum(idx, 0), 1])


def _top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops (one thread) not nested inside an earlier op of the set."""
    ops = ops.sort_values(["ts", "dur"], ascending=[True, False], kind="stable")
    keep, last_end = [], -np.inf
    for end, ts in zip(ops["end"].to_numpy(float), ops["ts"].to_numpy(float)):
        keep.append(ts >= last_end)
        if ts >= last_end:
            last_end = end
    return ops[np.array(keep, dtype=bool)] if len(ops) else ops


# -- compile.json ------------------------------------------------------------------------------
class CompileEvent(msgspec.Struct):
    """One graph break, recompile or CUDA-graph skip that dynamo/inductor logged."""

    kind: str
    phase: Union[str, None] = None
    file: Union[str, None] = None
    line: Union[schemas.Count, None] = None
    reason: Union[str, None] = None
    function: Union[str, None] = None
    text: Union[str, None] = None


class CompilePhase(msgspec.Struct):
    """Dynamo's compile work booked to one capture phase."""

    frames_compiled: Union[schemas.Count, None] = None
    compile_s: Union[schemas.Amount, None] = None


class CompileDoc(msgspec.Struct):
    """A capture folder's compile.json."""

    schema: Union[str, None] = None
    events: list[CompileEvent] = []
    counters: dict[str, dict[str, schemas.Count]] = {}
    phases: dict[str, CompilePhase] = {}
    compile_s: Union[schemas.Amount, None] = None


@dataclasses.dataclass
class CompileRecord:
    """compile.json, read: events as a frame (kind, phase, file, line, reason, function)."""

    events: pd.DataFrame
    counters: dict
    phases: dict
    compile_s: float | None
    path: str

    def of(self, kind: str, phases: tuple[str, ...] | None = None) -> pd.DataFrame:
        """The events of one kind (graph_break, recompile, cudagraph_skip), optionally of some phases."""
        ev = self.events[self.events["kind"] == kind]
        return ev[ev["phase"].isin(phases)] if phases else ev

    def phase_compile_s(self, phase: str) -> float:
        """Seconds dynamo spent compiling during a capture phase."""
        return float((self.phases.get(phase) or {}).get("compile_s") or 0.0)

    def phase_frames(self, phase: str) -> int:
        """Frames dynamo compiled (first compiles and recompiles) during a capture phase."""
        return int((self.phases.get(phase) or {}).get("frames_compiled") or 0)


def load_compile_record(trace: Trace, warnings: list[str] | None = None) -> CompileRecord | None:
    """compile.json beside the trace (its capture folder), or None; a file that is not JSON or not
    diagnose.compile/1 is skipped with a warning, one that breaks the schema is an InputError."""
    where = Path(trace.source) if trace.source else None
    if where is None or not where.exists():
        return None
    folder = where if where.is_dir() else where.parent
    name = ((trace.capture or {}).get("files") or {}).get("compile") or COMPILE_FILE
    path = folder / name
    if not path.is_file():
        return None
    try:
        doc = schemas.read_json_object(path, "torch.compile record")
    except schemas.NotJson as exc:
        if warnings is not None:
            warnings.append(str(exc))
        return None
    if doc.get("schema") != COMPILE_SCHEMA:
        if warnings is not None:
            warnings.append(f"{path}: not a {COMPILE_SCHEMA} file; ignored")
        return None
    schemas.validate(doc, CompileDoc, path, "torch.compile record")
    cols = ["kind", "phase", "file", "line", "reason", "function"]
    events = pd.DataFrame([{c: e.get(c) for c in cols} for e in doc.get("events") or []], columns=cols)
    return CompileRecord(
        events=events,
        counters=doc.get("counters") or {},
        phases=doc.get("phases") or {},
        compile_s=doc.get("compile_s"),
        path=str(path),
    )


def logged_recompiles(trace: Trace, warnings: list[str] | None = None) -> bool:
    """True when compile.json beside the trace says dynamo compiled frames during the timed or
    profiled steps (recompiles the compile-breaks rule prices)."""
    record = load_compile_record(trace, warnings)
    return record is not None and bool(record.phase_frames("timing") or record.phase_frames("profile"))


def cudagraph_skips(trace: Trace, warnings: list[str] | None = None) -> str:
    """A sentence naming inductor's reason(s) for skipping CUDA graphs (compile.json), or ''."""
    record = load_compile_record(trace, warnings)
    if record is None:
        return ""
    skips = record.of("cudagraph_skip")
    if not len(skips):
        return ""
    reasons = []
    for row in skips.drop_duplicates(["reason", "file", "line"]).head(3).itertuples():
        where = f" ({Path(row.file).name}:{int(row.line)})" if isinstance(row.file, str) and row.line else ""
        reasons.append(f"{row.reason}{where}")
    return (
        f'CUDA graphs were requested (mode="reduce-overhead") but inductor skipped them '
        f"{len(skips)} time(s): " + "; ".join(reasons)
    )
