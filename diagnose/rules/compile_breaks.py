"""compile-breaks: torch.compile split the step into graphs with eager code between them, or recompiles.

**Signal.** In any trace, diagnose finds torch.compile's graph calls (inductor's
`## Call CompiledFxGraph ##` ranges, `CompiledFunction` in training; the innermost
`Torch-Compiled Region` ranges for backends that mark no call) and, per measured step on the
thread that ran it, counts the graphs entered and measures the host time *between* graphs of one
compiled call (the outermost `Torch-Compiled Region` around them) that no graph call covers
(diagnose/metrics/compiled.py). The user's code between two calls of a compiled model is not a
break, so a step that holds several calls, or two iterations, reads the same. With one graph per
call that time is zero; every graph break adds an eager stretch (the code dynamo could not
trace, such as a `.item()`, a `print`, a call into an unsupported library) plus the cost of
leaving one graph and entering the next (cache lookup, guards, the AOT wrapper). When diagnose
captured the workload, compile.json adds dynamo's own account: each graph break with its reason
and the user's file:line, each recompile with the guard that failed, and the compile seconds
spent in each capture phase. The rule fires when the time between graphs (steps with a call of two graphs
or more) plus the compile time per step booked to the measured or timed steps is at least
`min_share` of the step. A trace without any compiled region is skipped with that reason.

**Threshold.** 10 % of the step: a break that costs less is rarely worth restructuring code for.
On a CPU capture of fixtures/workloads/compile_breaks.py (2 layers, inductor), the `.item()`
check in each layer splits each step into 4 graphs with 75–90 µs between them out of a
~480 µs profiled step (16–19 %); the fixed model compiles to one graph (0 µs between graphs).

**Dividing the work with dynamic-shapes.** dynamic-shapes prices setup that a new shape repeats
from the trace alone: the silent host time held by launching ops and, in a trace without
dynamo's log, by torch.compile's compile ranges. When compile.json records recompiles during the
timed or measured steps, those recompiles are this rule's: it prices them with dynamo's own
compile seconds and names the guard that failed and the line, and dynamic-shapes leaves compile
ranges out of its count. So each µs is claimed once.

**Fixes.** `fix-graph-break` at the line dynamo named (keep the check on the device, move the
print out, or `capture_scalar_outputs`); `mark-dynamic` when recompiles are on changing sizes;
`fullgraph` (`torch.compile(..., fullgraph=True)` or `torch._dynamo.explain`) to find every
break at once.

**Estimate.** The time between graphs and the per-step compile time go away with one graph and
no recompiles: new step = max(step − (share of the median profiled step between graphs × step +
compile time per step), GPU busy); speedup = step ÷ new step. An upper bound: the eager code
between graphs still runs once compiled, only faster. The share is measured under the profiler
(which inflates host work) and applied to the unprofiled step when the capture timed one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.rulebook.engine import Quiet, Rule, Skip, Threshold, severity_ladder, time_base, top_offenders
from diagnose.base.errors import InputError
from diagnose.model.findings import Evidence, Finding, Fix, Offender, Severity
from diagnose.model.fixes import CODE_COLUMNS, comment, fix
from diagnose.base.format import short_name
from diagnose.metrics.compiled import CompiledSteps, CompileRecord, load_compile_record
from diagnose.metrics.budget import StepBudget
from diagnose.trace import schemas
from diagnose.vocabulary.units import percent

SOURCE_MAX_BYTES = 16 << 20
MAX_LINE_CHARS = 400

MEASURED_PHASES = ("timing", "profile")
MAX_SHOWN = 6


class CompileBreaks(Rule):
    """Graph breaks and recompiles under torch.compile → remove the break, mark dynamic, fullgraph."""

    id = "compile-breaks"
    order = 24
    title = "torch.compile graph breaks or recompiles: eager code and graph entries between compiled graphs"
    cheat_sheet = {
        "bottleneck": "a compiled step split into many graphs by graph breaks, or recompiled as inputs change",
        "signal": "several compiled graphs per step with host time between them; dynamo's graph-break and "
        "recompile reasons with the user's line",
        "fix": "remove the break at the named line, mark the changing dimension dynamic, fullgraph=True",
        "impact": "one graph per step: no eager code or graph entries between graphs, no per-step recompiles",
    }
    needs = ("steps", "steady-state")
    thresholds = (
        Threshold(
            "min_share",
            0.10,
            "fraction",
            "fire when time between graphs plus compile time per step is at least this share of the step",
        ),
        Threshold("high_share", 0.50, "fraction", "share at which severity is high"),
        Threshold("medium_share", 0.25, "fraction", "share at which severity is medium (below: low)"),
    )

    def check(self, ctx, t):
        """Measure the time between compiled graphs and the recompile time, and judge their share."""
        record = load_compile_record(ctx.trace, ctx.warnings)
        if not ctx.metrics.compiled.compiled:
            return Skip(
                "no torch.compile region in the trace (no `Torch-Compiled Region` range, CompiledFxGraph "
                "call or CompiledFunction): nothing compiled to judge"
            )
        b = _measure(ctx, record)
        severity = _decide(b, t)
        if isinstance(severity, Quiet):
            return severity
        return _word(self, b, severity, _estimate(b), t)


_WHY = (
    "torch.compile runs a step as compiled graphs. Where dynamo cannot trace a line (a value read "
    "back to Python with .item(), a print, an unsupported call) it ends the graph, runs that code "
    "eagerly and enters a new graph after it: each break costs the eager code, a guard check and a "
    "graph entry, and splits the fusion inductor could have done across it. A new input size that "
    "the guards reject recompiles the frame, on the host, until the recompile limit makes dynamo "
    "give up and run eagerly."
)


@dataclasses.dataclass(frozen=True)
class _Breaks:
    """The time between compiled graphs and spent recompiling, per step (what `_measure` found)."""

    budget: StepBudget
    cs: CompiledSteps
    record: CompileRecord | None  # dynamo's log (compile.json), None for a trace without it
    graphs: float  # compiled graphs in the median step
    graphs_per_entry: float  # the most graphs one compiled call ran, median over the steps (2+: a break)
    share_between: float  # the median step's share between graphs (steps with at least two graphs)
    between_us: float  # `share_between` of the step, µs
    recompile_us: float  # compile time per step, µs
    recompiles: int
    where: str  # where the recompiles happened
    cost: float  # `between_us` + `recompile_us`
    breaks: pd.DataFrame | None  # the graph-break events of dynamo's log, None without one

    @property
    def share(self) -> float:
        """The cost as a share of the step."""
        return self.budget.share(self.cost)


def _measure(ctx, record: CompileRecord | None) -> _Breaks:
    """The graphs per step, the median step's share between them, and the recompiles' time per step."""
    budget = ctx.metrics.budget
    cs = ctx.metrics.compiled
    steps = cs.steps
    per_step_share = (steps["between_us"] / steps["step_us"].clip(lower=1e-9)).where(
        steps["graphs_per_entry"] >= 2, 0.0
    )
    share_between = float(per_step_share.median())  # the median step: a slow first step does not dilute it
    between_us = share_between * budget.step_us
    recompile_us, recompiles, where = _recompile_cost(record, ctx.trace.capture or {}, steps["step_us"], ctx.warnings)
    return _Breaks(
        budget=budget,
        cs=cs,
        record=record,
        graphs=float(steps["graphs"].median()),
        graphs_per_entry=float(steps["graphs_per_entry"].median()),
        share_between=share_between,
        between_us=between_us,
        recompile_us=recompile_us,
        recompiles=recompiles,
        where=where,
        cost=between_us + recompile_us,
        breaks=record.of("graph_break") if record is not None else None,
    )


def _decide(b: _Breaks, t: dict[str, float]) -> Severity | Quiet:
    """Quiet below `min_share` of the step between graphs and recompiling; else the severity of the share."""
    summary = f"{b.graphs:g} compiled graph(s) per step, {percent(b.share_between)} of the step between them" + (
        f", {b.recompiles} recompile(s) {b.where}" if b.recompiles else ""
    )
    if b.share < t["min_share"]:
        return Quiet(f"{summary}: {percent(b.share)} of the step < {percent(t['min_share'])}")
    return severity_ladder(b.share, t)


def _estimate(b: _Breaks) -> float:
    """The new step: the step less the time between graphs and recompiling, never below the GPU busy time."""
    return max(b.budget.step_us - b.cost, b.budget.busy_us, 1e-9)


def _word(rule: Rule, b: _Breaks, severity: Severity, new_step: float, t: dict[str, float]) -> Finding:
    """The finding: the share and the graphs, recompiles and break lines; the fixes; the basis."""
    budget = b.budget
    named = _lines(b.breaks)
    return Finding(
        rule=rule.id,
        severity=severity,
        title=rule.title,
        evidence=_evidence(b, named, t),
        offenders=_offenders(b.record, b.cs),
        fixes=_fixes(b, named),
        est_speedup=round(budget.step_us / new_step, 2),
        recoverable_us=round(budget.step_us - new_step, 1),
        basis=(
            f"new step = max({budget.step_us:,.0f} − {b.between_us:,.0f} µs between graphs "
            f"({percent(b.share_between)} of the profiled step) − {b.recompile_us:,.0f} µs compiling per step, "
            f"{budget.busy_us:,.0f} µs GPU busy) = {new_step:,.0f} µs; " + _time_base(budget)
        ),
        why=_WHY,
    )


def _evidence(b: _Breaks, named: list[str], t: dict[str, float]) -> list[Evidence]:
    """The share against its threshold, the graphs and what lies between them, the recompiles, the break
    lines (or why they are not known)."""
    cs = b.cs
    evidence = [
        Evidence.share("time between graphs and recompiling", b.share, ">=", t["min_share"]),
        Evidence("compiled graphs per step", b.graphs),
        Evidence("graph regions entered per step", round(cs.per_step("regions"), 1)),
        Evidence("most graphs one compiled call ran", b.graphs_per_entry),
        Evidence("host time between graphs per step (profiled)", round(cs.per_step("between_us"), 1), unit="µs"),
        Evidence("eager ops between graphs per step", round(cs.per_step("eager_ops_between"), 1)),
    ]
    if b.recompiles:
        evidence.append(Evidence(f"recompiles {b.where}", b.recompiles))
        evidence.append(Evidence("compile time per step", round(b.recompile_us, 1), unit="µs"))
    if named:
        evidence.append(Evidence("graph break at", "; ".join(named[:3])))
    elif b.record is None:
        evidence.append(
            Evidence(
                "graph break lines",
                "not recorded (a trace without dynamo's log: capture with "
                "diagnose, or run torch._dynamo.explain, to name them)",
            )
        )
    return evidence


def _fixes(b: _Breaks, named: list[str]) -> list[Fix]:
    """fix-graph-break (several graphs or a named break), mark-dynamic (recompiles), then fullgraph."""
    fixes = []
    if b.graphs_per_entry >= 2 or named:
        fixes.append(fix("fix-graph-break", code=_break_code(b.breaks)))
    if b.recompiles:
        fixes.append(fix("mark-dynamic", code=_dynamic_code(b.record)))
    fixes.append(fix("fullgraph", code=_fullgraph_code()))
    return fixes


def _time_base(budget) -> str:
    """The shared time-base phrase, with where the share between graphs is measured."""
    if budget.unprofiled_step_us:
        return f"{time_base(budget)}; the share between graphs is measured on the median profiled step"
    return f"{time_base(budget)}: host time includes profiler overhead"


def _recompile_cost(record, capture: dict, step_us, warnings: list[str]) -> tuple[float, int, str]:
    """(compile µs per step, recompiles, where) from dynamo's log: the timed steps when they compiled
    (no profiler overhead), else the profiled ones; (0, 0, '') without a log or recompiles.

    Compile time is booked to steps only when it fits in them: the steps' own wall time bounds what
    compiling inside them can have cost. More than that ran between or before the steps (a capture
    made before the warm-up had its own phase booked the warm-up's compiles to the profiled steps):
    it is left out, with a warning."""
    if record is None:
        return 0.0, 0, ""
    timed_us = list((capture.get("timing") or {}).get("unprofiled_step_us") or [])
    # Frames compiled after the warm-up are recompiles even when dynamo's recompile log stayed silent
    # (torch 2.11 logs them only when TORCH_LOGS=recompiles is set): count the larger of the two.
    if timed_us and record.phase_frames("timing"):
        phase, steps, window_us = "timing", len(timed_us), sum(timed_us)
        counted = f"{steps} timed steps"
        where = f"in the {counted}"
    elif record.phase_frames("profile"):
        # the profiled warm-up step (diagnose/warmup 0) runs under the profiler too: one step more
        steps, window_us = len(step_us) + 1, float(step_us.sum() + step_us.max())
        phase, where, counted = "profile", "in the profiled steps", f"{steps} profiled steps"
    else:
        return 0.0, 0, ""
    compile_us = record.phase_compile_s(phase) * 1e6
    frames = max(len(record.of("recompile", (phase,))), record.phase_frames(phase))
    if compile_us > window_us:
        warnings.append(
            f"dynamo compiled {frames} frame(s) for {compile_us / 1e6:,.2f} s in the {phase} phase, longer than "
            f"the {counted} lasted ({window_us / 1e3:,.1f} ms): that "
            "compiling ran outside the steps and is not booked to them"
        )
        return 0.0, 0, ""
    return compile_us / steps, frames, where


def _lines(events) -> list[str]:
    """'file.py:37 (reason)' for each distinct break location, most frequent first."""
    if events is None or not len(events):
        return []
    located = events.dropna(subset=["file"])
    counts = aggregate(located.groupby(["file", "line"], dropna=False), n=("kind", "size"), reason=("reason", "first"))
    counts = counts.sort_values("n", ascending=False)
    return [f"{Path(f).name}:{int(ln)} ({r})" for (f, ln), r in zip(counts.index, counts["reason"])]


def _offenders(record, cs) -> list[Offender]:
    breaks, between = [], []
    if record is not None:
        for kind in ("graph_break", "recompile"):
            ev = record.of(kind)
            if not len(ev):
                continue
            grouped = aggregate(
                ev.fillna({"file": "", "line": 0, "function": ""}).groupby(["file", "line", "reason"], sort=False),
                n=("kind", "size"),
                function=("function", "first"),
            )
            for (file, line, reason), row in grouped.head(MAX_SHOWN).iterrows():
                breaks.append(
                    {
                        "kind": kind,
                        "where": f"{file}:{int(line)}" if file else "(not located)",
                        "reason": reason,
                        "function": row.function or None,
                        "count": int(row.n),
                    }
                )
    for row in cs.between_ops.head(MAX_SHOWN).itertuples():
        between.append(
            {
                "kind": "eager op between graphs",
                "op": row.name,
                "calls_per_step": round(row.calls_per_step, 1),
                "host_us_per_step": round(row.host_us_per_step, 1),
            }
        )
    return top_offenders(breaks, "graph break", n=len(breaks)) + top_offenders(between, "op", n=MAX_SHOWN)


def _source_line(file: str, line: int) -> str:
    """The user's line as written, when the file is readable here (a regular file of at most
    SOURCE_MAX_BYTES: the path comes from the capture, which may name /dev/zero or a FIFO)."""
    try:
        raw = schemas.read_side_bytes(Path(file), "a source file", SOURCE_MAX_BYTES)
        return raw.decode("utf-8", errors="replace").splitlines()[line - 1].strip()[:MAX_LINE_CHARS]
    except (InputError, IndexError, ValueError, TypeError):
        return ""


def _break_code(events) -> str:
    head = ""
    if events is not None and len(events.dropna(subset=["file"])):
        first = events.dropna(subset=["file"]).iloc[0]
        text = _source_line(first["file"], int(first["line"]))
        head = comment(f"{first['file']}:{int(first['line'])} breaks the graph ({first['reason']}):")
        head += f"#     {short_name(text, CODE_COLUMNS - 6)}\n" if text else ""
    return (
        head + "# keep the check on the device instead of reading it back to Python\n"
        "# (not: if h.max().item() > LIMIT):\n"
        "h = torch.where(h.abs().amax() > LIMIT, h.clamp(-LIMIT, LIMIT), h)\n"
        "# or let dynamo trace scalar reads (.item()) into the graph:\n"
        "torch._dynamo.config.capture_scalar_outputs = True\n"
        "# and log outside the compiled function (print/logging break the graph)"
    )


def _dynamic_code(record) -> str:
    ev = record.of("recompile") if record is not None else None
    head = ""
    if ev is not None and len(ev):
        first = ev.iloc[0]
        head = comment(f"dynamo recompiled {first['function'] or 'a frame'} because: {first['reason']}")
    return (
        head + "torch._dynamo.mark_dynamic(x, 1)        # the dimension that changes: one graph for every size\n"
        "model = torch.compile(model)            # or torch.compile(model, dynamic=True)"
    )


def _fullgraph_code() -> str:
    return (
        "model = torch.compile(model, fullgraph=True)   # raises at the first break, with its line\n"
        "print(torch._dynamo.explain(model)(x))          # every break and its reason at once"
    )
