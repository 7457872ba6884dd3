"""host-bound: the GPU idles while the host does work that launches nothing.

**Signal.** Host-wait gaps (the GPU finished and the next launch had not been issued) are split
into stretches where the host made CUDA calls at most `timeline.host_silence_us` (200 µs) apart,
which is dispatch (the launch-overhead rule), and *silent* stretches longer than that. Silent
time is then split by what the host was inside (diagnose/metrics/host.py): CPU ops that launch
nothing and DataLoader ranges (*host work named by an op*: decoding, augmentation, CPU-side
preprocessing), no recorded op at all (*unnamed*: pure-Python work such as tokenising and
collating lists, or a `time.sleep`), or an op that launches kernels or a torch.compile range
(*setup*: plan building, autotuning, compiling, cudaMalloc, first-call initialisation; not host
work, and the dynamic-shapes rule's subject when it recurs as shapes change). Host work is the
named plus the unnamed part; the rule fires when it is at least `min_host_share` of the step.

**Naming the code.** In capture modes, a sampler reads the main thread's Python stack every
millisecond while the profiled steps run (diagnose/child/sampler.py); each silent stretch is
shared among the samples inside it, each labelled with its innermost frame in the user's own
code (not torch, the standard library or diagnose), so the offenders are the user's
`file:line function`. A trace recorded with `with_stack=True` names them the same way from its
`python_function` events (the innermost frame that is not torch's own or a builtin: for the
TimeSformer pipeline of TraceLens's H100 traces, transformers' image `normalize`). A trace from
elsewhere without them has no samples: when the ops name at least
`min_host_share` of the step the finding stands as before; when it needs the unnamed time to
reach the threshold it fires one severity lower, says that the trace cannot name the code, and
gives the command that would (`diagnose train.py -- ARGS`). When host work stays below the
threshold the rule is quiet and says where the silent time went instead.

**Threshold.** 20 % of the step. Calibrated on the H200 captures: the DataLoader loop that
augments its images in the main process spends 93 % of its step there; the same loop with four
workers and pinned memory 4 % (after rescaling to the unprofiled step); the training loops with
and without per-layer `.item()` logging 13–15 %, the batch-1 decodes 2–3 % and the matmuls 0 %.
Among the peer traces, the alexnet benchmark's 99.5 % of silent host time sits inside
kernel-launching ops (a first cuDNN convolution, 95 % of it inside CUDA calls: context, streams,
cudaMalloc, module loading), so it is setup, not host work, and the rule says so.

**Why not CUDA graphs.** A graph removes launch cost, not host work: the batch still has to be
made before the graph can run. Here the fix is to move that work off the critical path. The
exception is a step that runs torch.compile'd code and reads from no DataLoader: its host work is
then the compiled call's own Python (dynamo's guards, the wrappers, the CUDA-graph tree's
bookkeeping), which one `torch.cuda.CUDAGraph` of the whole step skips, so `cuda-graphs` comes
first. Measured on the H200 (`--verify`, 2026-11-30): the compiled compile_fullgraph step ran
10.2× faster as one whole-step graph, 3.27× with `mode="reduce-overhead"`, which keeps that Python.

**A compiled step that already replays its graph tree.** With `mode="reduce-overhead"` the kernels
run from inductor's CUDA graphs, and what the GPU waits for is the compiled call's host side around
each replay: guards, wrappers, the tree's bookkeeping and input copies, partly silent and partly
interleaved with CUDA calls (dispatch that launch-overhead leaves out before a replay). When the
step launches no kernel outside its compiled entries and reads from no DataLoader, all of that is
what one hand-captured graph of the whole step removes, so the rule counts every wait of the GPU for
the host (the step accounting's host-paced buckets, syncs aside) and the fix says the mode is
already on. Measured on an H100 (2026-12-06, benchmarks/whole_step_graph.py): compile_graphs'
reduce-overhead step 170.7 µs, the whole-step graph 81.5 µs (2.09×, medians of three rounds of 200
steps); the capture of the same step on that machine (fixtures/captures/compile_graphs_h100)
estimates 2.16×, where counting its silent host time alone left the rule quiet (4.6 %) and
launch-overhead named 1.25×. A loop that launches eager kernels around the compiled call
(hf_generate_static's sampling) keeps the silent-work measure: that waiting is not the compiled
call's own.

**Fixes.** `dataloader-workers` (num_workers > 0, persistent workers, prefetching; move the
Python that builds the batch into the Dataset or collate_fn) and `pinned-memory`
(pin_memory=True with non_blocking copies), the latter named first when pageable host-to-device copies
explain the host work: no DataLoader range or code line does, and the copies take at least half of it
(`PAGEABLE_EXPLAINS`). python_batch_inline builds its batches in Python with no DataLoader: its folder
names the code line and dataloader-workers (measured 18.5× with 12 workers, python_batch_workers); its
trace file alone, without Python samples, named pinned-memory first until the copies' share was asked
for (they are under 1 % of its host work). Copies on the critical path are the transfer rule's subject.

**A DataLoader in the main process.** With `num_workers=0` the loading runs on the host between one
step's launches and the next; while the GPU still has queued work it hides there and leaves no idle gap to
measure. When the gap test stays under `min_host_share`, the rule still fires (low unless the estimate
reaches 1.1×) when the main-process loader (`_SingleProcessDataLoaderIter.__next__`) takes at least
`min_host_share` of the step: new step = max(step − loading, GPU busy). The basis adds what a loop that
syncs once a step pays, where the capture timed its steps with a sync after each: step ÷ max(step −
loading, the free-running profiled step). regress_workers0 (H200) loads for 13.0 ms of its 33.5 ms
free-running step (39 %): est. 1.06× free-running (1.02× from the trace file alone), and 1.24× for the
synchronised step, against the measured 1.23× (41.3 ms against regress_base's 33.5 ms, median).

**Estimate.** With the host work overlapped with GPU execution, the step shrinks by that work,
but not below the GPU busy time: new step = max(step − host work, GPU busy); speedup =
step ÷ new step. Host-side time is rescaled to the unprofiled step time when it was measured.
"""

from __future__ import annotations

import dataclasses
import shlex

import numpy as np
import pandas as pd

from diagnose.rulebook.engine import Quiet, Rule, Threshold, milder, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Fix, Offender, Severity
from diagnose.model.fixes import comment, fix, whole_step_graph_fix
from diagnose.metrics import Metrics
from diagnose.metrics.accounting import HOST_PACED
from diagnose.metrics.host import SilentSplit
from diagnose.metrics.pyframes import NO_SAMPLE, PySamples
from diagnose.metrics.budget import StepBudget
from diagnose.trace.names import name_has
from diagnose.vocabulary.compiled import REGION_PREFIX
from diagnose.vocabulary.runtime import PAGEABLE
from diagnose.vocabulary.units import percent

MAX_OFFENDERS = 8
PAGEABLE_EXPLAINS = 0.5  # pageable copies taking this share of the host work explain it: pinned memory first


class HostBound(Rule):
    """Host work that launches nothing starves the GPU → workers, pinned memory."""

    id = "host-bound"
    order = 20
    title = "Host-bound: the GPU waits while the host prepares data"
    cheat_sheet = {
        "bottleneck": "the host is busy with something other than launching kernels",
        "signal": "GPU idle while the host runs CPU work that issues no CUDA calls (data loading, "
        "preprocessing, Python that builds the batch, pageable copies)",
        "fix": "DataLoader workers, pinned memory with non-blocking copies",
        "impact": "the step shrinks to the GPU's own time once input preparation overlaps it",
    }
    needs = ("gpu", "launch-links", "steps", "steady-state")
    thresholds = (
        Threshold("min_host_share", 0.20, "fraction", "fire when host work is at least this share of the step"),
        Threshold("high_share", 0.50, "fraction", "host-work share at which severity is high"),
        Threshold("medium_share", 0.30, "fraction", "host-work share at which severity is medium (below: low)"),
    )

    def check(self, ctx, t):
        """Measure host work inside the GPU's idle time and name what filled it."""
        work = _measure(ctx)
        if work.share < t["min_host_share"]:
            loader = _main_loader_us(ctx.metrics)
            if work.budget.share(loader) >= t["min_host_share"]:
                return _main_loader_finding(self, work.budget, loader, t)
            if work.tree:
                return Quiet(
                    f"the GPU waits for the compiled call's host side (it replays its CUDA graph tree) "
                    f"{percent(work.share)} of the step < {percent(t['min_host_share'])}"
                )
            return Quiet(
                f"host work in GPU idle time {percent(work.share)} of the step < {percent(t['min_host_share'])}"
                + _where_silent_went(work.split, work.budget, work.per_step)
            )
        named = _measure_named(ctx.metrics, work)
        severity = _decide(work, named, t)
        new_step, estimate = _estimate(work, named, t)
        return _word(self, ctx, work, named, severity, new_step, estimate, t)


@dataclasses.dataclass(frozen=True)
class _HostWork:
    """The host work inside the GPU's idle time, per step (what `_measure` found)."""

    budget: StepBudget
    n: int  # measured steps
    split: SilentSplit
    per_step: float  # µs over the window -> µs of an (unprofiled) step
    work: float  # host work per step, µs
    share: float  # `work` as a share of the step
    named_share: float  # the part CPU ops or DataLoader ranges name, as a share of the step
    tree: bool = False  # compiled code replaying its graph tree: `work` is every host wait (`_graph_tree`)


@dataclasses.dataclass(frozen=True)
class _Named:
    """What names the host work and what feeds the step (what `_measure_named` found, once the rule fires)."""

    samples: PySamples | None  # the capture's Python stack samples
    lines: pd.DataFrame | None  # the host work attributed to code lines by the samples
    pageable: dict  # pageable host-to-device copies per step: count, us
    loader: bool  # a DataLoader range fills some of the host work
    compiled: bool  # no DataLoader, and the step runs torch.compile'd code
    replays: bool = False  # ... which already replays CUDA graphs (mode="reduce-overhead")


def _measure(ctx) -> _HostWork:
    """The silent host time of the measured steps minus setup, on the step's time base; on a step whose
    compiled code replays its graph tree (`_graph_tree`), every wait of the GPU for the host, syncs aside."""
    m = ctx.metrics
    budget = m.budget
    n = budget.n_steps
    split = m.silent
    per_step = budget.host_scale / n  # µs over the window -> µs of an (unprofiled) step
    work = split.host_us * per_step
    named = split.named_us * per_step
    tree = _graph_tree(m, split)
    if tree:
        waits = {b.id: b.us for b in m.accounting.buckets if b.id in HOST_PACED}
        work = sum(waits.values())
        named = work - waits.get("unexplained", 0.0)
    return _HostWork(
        budget=budget,
        n=n,
        split=split,
        per_step=per_step,
        work=work,
        share=budget.share(work),
        named_share=budget.share(named),
        tree=tree,
    )


def _graph_tree(m: Metrics, split: SilentSplit) -> bool:
    """True when the step runs torch.compile'd code that replays CUDA graphs (mode="reduce-overhead": inductor's
    graph tree), launches no kernel outside its compiled entries and reads from no DataLoader. Then all the host
    does while the GPU waits, dispatch included, is the compiled call's own Python around the replay (guards,
    wrappers, the tree's bookkeeping and input copies), which one graph of the whole step removes: on an H100,
    compile_graphs ran 2.09× faster that way (benchmarks/whole_step_graph.py)."""
    if not m.compiled.replays_graphs or m.compiled.per_step("launches_outside") > 0:
        return False  # eager work around the compiled call (a generate loop's sampling): not its own Python
    return not _reads_loader(split)


def _reads_loader(split: SilentSplit) -> bool:
    """Whether a DataLoader range fills some of the silent host time."""
    fillers = split.fillers
    return bool(name_has(fillers["name"], "DataLoader").any()) if len(fillers) else False


def _measure_named(m: Metrics, work: _HostWork) -> _Named:
    """The Python samples and the code lines they name, the pageable copies, and whether a DataLoader
    or compiled code sits in the step."""
    samples = m.python_samples
    pageable = _pageable_copies(m.step_kernels, work.n)
    lines = samples.attribute(work.split.host) if samples is not None else None
    loader = _reads_loader(work.split)
    return _Named(
        samples=samples,
        lines=lines,
        pageable=pageable,
        loader=loader,
        compiled=bool(not loader and m.compiled.compiled),
        replays=m.compiled.replays_graphs,
    )


def _decide(work: _HostWork, named: _Named, t: dict[str, float]) -> Severity:
    """The severity of the host-work share, a step lower when there are no Python samples and less
    than `min_host_share` of the step is named by any op (the finding rests on unnamed time)."""
    severity = severity_ladder(work.share, t)
    if named.samples is None and work.named_share < t["min_host_share"]:
        severity = milder(severity)  # the finding rests on time nothing in the trace names
    return severity


def _estimate(work: _HostWork, named: _Named, t: dict[str, float]) -> tuple[float, float | None]:
    """(new step µs, speedup): new step = max(step − host work, GPU busy). No speedup for one step whose
    host time nothing names: it may be one-time work (JIT compiling, loading), not a per-step cost."""
    budget = work.budget
    new_step = max(budget.step_us - work.work, budget.busy_us, 1e-9)
    if work.n < 2 and named.samples is None and work.named_share < t["min_host_share"]:
        return new_step, None
    return new_step, round(budget.step_us / new_step, 2)


def _word(
    rule: Rule,
    ctx,
    work: _HostWork,
    named: _Named,
    severity: Severity,
    new_step: float,
    estimate: float | None,
    t: dict[str, float],
) -> Finding:
    """The finding: evidence, the code and ops that did the host work, the fixes, the basis."""
    offenders = _offenders(work, named)
    fixes, compiled_note = _fixes(named, offenders, work.work)
    return Finding(
        rule=rule.id,
        severity=severity,
        title=COMPILED_TITLE if named.compiled else rule.title,
        evidence=_evidence(ctx, work, named, t),
        offenders=offenders[:MAX_OFFENDERS],
        fixes=fixes,
        est_speedup=estimate,
        recoverable_us=round(work.budget.step_us - new_step, 1) if estimate else None,
        basis=_basis(work, new_step, estimate) + compiled_note + _unnamed_note(ctx, work, named),
        why=COMPILED_WHY if named.compiled else LOADER_WHY,
    )


TREE_WAIT = "GPU waiting for the compiled call's host side (dispatch, guards, graph-tree bookkeeping)"
COMPILED_TITLE = "Host-bound: the GPU waits while the compiled call's own Python runs"
LOADER_WHY = (
    "The GPU can only run what the host has queued. When the main process spends its time "
    "decoding, augmenting, tokenising or copying the next batch, nothing is queued and the GPU "
    "idles. CUDA graphs do not help here: the batch still has to be made. Doing that work in "
    "DataLoader worker processes, ahead of time, and copying from pinned memory without "
    "blocking, lets it overlap with the GPU's work on the current batch."
)
COMPILED_WHY = (
    "The GPU can only run what the host has queued. A torch.compile'd call runs Python of its own "
    'every time: dynamo\'s guard checks, the AOT wrapper and, with mode="reduce-overhead", the CUDA-graph '
    "tree's bookkeeping. Here that host work, not data loading, is what the GPU waits for. One CUDA "
    "graph of the whole step replays its kernels without running any of it."
)


def _evidence(ctx, work: _HostWork, named: _Named, t: dict[str, float]) -> list[Evidence]:
    """The host-work share and size, how much of it ops or samples name, and the pageable copies."""
    budget, split, per_step = work.budget, work.split, work.per_step
    if work.tree:
        evidence = [
            Evidence.share(TREE_WAIT, work.share, ">=", t["min_host_share"]),
            Evidence("the compiled call's host side per step (GPU idle)", round(work.work, 1), unit="µs"),
            Evidence("CUDA graph replays per step", round(ctx.metrics.compiled.per_step("replays"), 1)),
        ]
    else:
        evidence = [
            Evidence.share("host work while the GPU idles", work.share, ">=", t["min_host_share"]),
            Evidence("host work per step", round(work.work, 1), unit="µs"),
        ]
    evidence += [
        Evidence.share("GPU busy per step", budget.share(budget.busy_us)),
        Evidence.share("of it named by CPU ops or DataLoader ranges", work.named_share),
    ]
    if named.samples is not None and named.lines is not None:
        lines = named.lines
        if named.samples.from_trace:
            in_lines = lines.loc[lines["where"] != NO_SAMPLE, "us"].sum() * per_step
            evidence.append(
                Evidence.share("of it named by the trace's python_function events (with_stack)", budget.share(in_lines))
            )
        else:
            sampled = lines.loc[lines["where"] != NO_SAMPLE, "samples"].sum()
            evidence.append(Evidence("Python stack samples inside the host work", int(sampled)))
    else:
        unnamed = budget.share(split.unnamed_us * per_step)
        evidence.append(Evidence.share("of it in no recorded op (Python the trace cannot name)", unnamed))
        evidence.append(Evidence("command that would name the code", command_for(ctx.trace)))
    if named.pageable["count"]:
        evidence.append(Evidence("pageable host-to-device copies per step", named.pageable["count"]))
        evidence.append(Evidence("time in pageable copies per step", round(named.pageable["us"], 1), unit="µs"))
    return evidence


def _offenders(work: _HostWork, named: _Named) -> list[Offender]:
    """The code lines the samples name (when there are samples), then the ops that filled the host work."""
    budget, per_step = work.budget, work.per_step
    offenders = []
    if named.lines is not None:
        offenders = top_offenders(
            [
                {
                    "code": row.where,
                    "us_per_step": round(row.us * per_step, 1),
                    "share_of_step": round(budget.share(row.us * per_step), 4),
                }
                for row in named.lines.head(MAX_OFFENDERS).itertuples()
            ],
            "code",
        )
    return offenders + top_offenders(
        [
            {"host work": row.name, "us_per_step": round(row.overlap_us * per_step, 1)}
            for row in work.split.fillers.head(MAX_OFFENDERS).itertuples()
        ],
        "host work",
    )


def _fixes(named: _Named, offenders: list[Offender], work_us: float) -> tuple[list[Fix], str]:
    """(the fixes, the basis note for compiled code): DataLoader workers and pinned memory (pinned memory
    first when pageable copies explain it: neither a DataLoader nor a code line does, and the copies take at
    least half of the host work `work_us`, so that a trace file without Python samples names the same fix as its
    capture folder); for compiled code that reads from no DataLoader, one CUDA graph of the whole step, then
    pinned memory only where pageable copies are there to pin."""
    name = offenders[0].name if offenders and offenders[0].label == "code" else None
    top_code = name if isinstance(name, str) else None  # a code line's name is its "file:line function"
    fixes = [fix("dataloader-workers", code=_loader_code(top_code)), fix("pinned-memory", code=_pinned_code())]
    copies = named.pageable["count"] and named.pageable["us"] >= PAGEABLE_EXPLAINS * work_us
    if copies and not named.loader and top_code is None:
        fixes.reverse()
    if not named.compiled:
        return fixes, ""
    # no DataLoader to give workers; pinned memory only where pageable copies are there to pin
    fixes = [whole_step_graph_fix(named.replays)] + [
        f for f in fixes if f.id == "pinned-memory" and named.pageable["count"]
    ]
    return fixes, (
        "; the step runs torch.compile'd code and reads from no DataLoader, so its host work is "
        "the compiled call's own Python, which one CUDA graph of the whole step skips"
    )


def _basis(work: _HostWork, new_step: float, estimate: float | None) -> str:
    """How the estimate was made, or why there is none."""
    budget = work.budget
    if estimate is None:
        return (
            f"no estimate: one analysed step whose host time no op names may be one-time work "
            f"(compiling, loading); profile several steps after warm-up; {budget.basis}"
        )
    return (
        f"new step = max({budget.step_us:,.0f} − {work.work:,.0f} µs of "
        f"{'GPU waits for the host (dispatch, guards, graph-tree bookkeeping)' if work.tree else 'host work'}, "
        f"{budget.busy_us:,.0f} µs GPU busy) = {new_step:,.0f} µs; {budget.basis}"
    )


def _unnamed_note(ctx, work: _HostWork, named: _Named) -> str:
    """Without samples, the share of the step whose code the trace does not name and the command that would."""
    unnamed = work.budget.share(work.split.unnamed_us * work.per_step)
    if named.samples is not None or unnamed < 0.01:
        return ""
    return (
        f"; the code behind {percent(unnamed)} of the step is not in "
        f"the trace: `{command_for(ctx.trace)}` samples the Python stack and names it"
    )


def command_for(trace) -> str:
    """The diagnose command that would capture this workload with its Python stack sampled."""
    meta = trace.capture or {}
    target = meta.get("target")
    if not target:
        return "diagnose YOUR_SCRIPT.py -- ITS_ARGS"
    words = ["diagnose", target]
    for key, value in (meta.get("params") or {}).items():
        words += ["--param", f"{key}={value}"]
    if meta.get("argv"):
        words += ["--", *map(str, meta["argv"])]
    return shlex.join(words)


def _where_silent_went(split, budget, per_step: float) -> str:
    """The rest of the quiet line: how the silent host time splits, so that a GPU starving for
    reasons other than host work is never reported as "host work 0 %" alone."""
    if split.total_us <= 0:
        return ""
    pct = lambda us: f"{percent(budget.share(us * per_step))}"  # noqa: E731
    text = (
        f"; silent host time {pct(split.total_us)} of the step: named by CPU ops {pct(split.named_us)}, "
        f"in no recorded op {pct(split.unnamed_us)}, inside kernel-launching or compiling ops "
        f"{pct(split.setup_us)}"
    )
    if split.setup_us > 0 and len(split.setup_ops):
        top = split.setup_ops.iloc[0]
        text += (
            f" ({pct(split.in_cuda_us)} inside CUDA calls; most in {top['name']}, "
            f"{top['overlap_us'] * per_step:,.0f} µs per step: {_setup_kind(str(top['name']))})"
        )
    return text


def _setup_kind(name: str) -> str:
    """What silent time inside the op `name` is: a compiled region's own host side in a steady step (its guards,
    its CUDA-graph bookkeeping; compiling only when it recompiles, which compile-breaks and dynamic-shapes judge),
    else an op's setup."""
    if name.startswith(REGION_PREFIX):
        return (
            "the compiled code's own host side (guard checks, CUDA-graph bookkeeping, or recompiling), not the user's"
        )
    return "plan building, compiling or first-call setup, not host work"


def _pageable_copies(ops, n: int) -> dict:
    copies = ops[(ops["cat"] == "memcpy") & name_has(ops["name"], PAGEABLE)]
    return {"count": round(len(copies) / n, 1), "us": float(copies["dur"].sum()) / n}


def _loader_code(code: str | None = None) -> str:
    moved = ""
    if code:
        moved = (
            comment(f"build the batch where {code.split(' ')[0]} builds it today, but in the Dataset:")
            + "class Batches(torch.utils.data.IterableDataset):\n"
            "    def __iter__(self):\n"
            "        while True:\n"
            "            yield make_batch()        # the Python that runs in the step today\n\n"
        )
    return (
        moved + "loader = DataLoader(dataset, batch_size=..., num_workers=8,\n"
        "                    persistent_workers=True, prefetch_factor=4, pin_memory=True)"
    )


def _pinned_code() -> str:
    return (
        "batch = batch.pin_memory()          # or DataLoader(..., pin_memory=True)\n"
        'batch = batch.to("cuda", non_blocking=True)'
    )


MAIN_LOADER = "_SingleProcessDataLoaderIter.__next__"
MAIN_LOADER_TITLE = "Host-bound: the DataLoader loads in the main process, on the step's host time"
MAIN_LOADER_WHY = (
    "With num_workers=0 the DataLoader builds every batch in the training process, between the launches of "
    "one step and the next. While the GPU still has queued work the loading hides behind it; any sync "
    "(loss.item(), logging) or a faster GPU puts it back on the step. Worker processes build the next "
    "batches while this one trains."
)


def _main_loader_us(m: Metrics) -> float:
    """Host time per step inside a DataLoader that loads in the main process (num_workers=0), µs (profiled)."""
    ops = m.trace.ops
    if not len(ops) or not m.steps.windows:
        return 0.0
    loads = ops[ops["name"].str.contains(MAIN_LOADER, regex=False, na=False)]
    ts = loads["ts"].to_numpy(float)
    inside = np.zeros(len(loads), dtype=bool)
    for w in m.steps.windows:
        inside |= (ts >= w.cpu_start) & (ts < w.cpu_end)
    return float(loads.loc[inside, "dur"].sum()) / len(m.steps.windows)


def _main_loader_finding(rule: Rule, budget: StepBudget, loader: float, t) -> Finding:
    """A DataLoader in the main process whose loading the GPU's queue hides today: named, with what it costs a
    loop that syncs once a step (the capture's timing did) and the little it costs this free-running one."""
    new_step = max(budget.step_us - loader, budget.busy_us, 1e-9)
    synced = budget.synced_step_us
    serial = (
        f"; stepped with a sync after each (the capture's timing, as a loop that reads loss.item() every step), "
        f"the loading runs in series: {synced:,.0f} µs a step, {synced / max(synced - loader, budget.profiled_step_us):.2f}× "
        "faster with workers"
        if synced
        else ""
    )
    return Finding(
        rule=rule.id,
        severity=severity_ladder(budget.share(loader), t) if budget.step_us / new_step >= 1.1 else "low",
        title=MAIN_LOADER_TITLE,
        evidence=[
            Evidence.share("DataLoader loading in the main process", budget.share(loader), ">=", t["min_host_share"]),
            Evidence("loading per step", round(loader, 1), unit="µs"),
            Evidence("GPU busy per step", round(budget.busy_us, 1), unit="µs"),
        ],
        fixes=[fix("dataloader-workers", code=_loader_code())],
        est_speedup=round(budget.step_us / new_step, 2),
        recoverable_us=round(budget.step_us - new_step, 1),
        basis=(
            f"new step = max({budget.step_us:,.0f} − {loader:,.0f} µs of loading, {budget.busy_us:,.0f} µs GPU busy): "
            f"the GPU's queue hides most of the loading while the host runs ahead{serial}; {budget.basis}"
        ),
        why=MAIN_LOADER_WHY,
    )
