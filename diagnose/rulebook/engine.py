"""The rules engine: what a rule is, and how a trace becomes a Diagnosis.

A rule declares its id, the cheat-sheet row it encodes, its named thresholds and the inputs it
needs. The engine skips (with the reason) every rule whose inputs the trace lacks, runs the
rest against shared metrics, and sorts the findings by estimated impact.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from collections.abc import Mapping
from typing import Callable, ClassVar, cast

import msgspec

from diagnose.model.config import Config
from diagnose.model.findings import (
    LABEL_KEYS,
    Bucket,
    CheatSheet,
    Checked,
    Diagnosis,
    Finding,
    Offender,
    OffenderLabel,
    QUIET,
    Severity,
    Skipped,
    SEVERITIES,
    severity_rank,
)
from diagnose.vocabulary.units import fmt, percent
from diagnose.model.frameworks import detect_frameworks, in_framework_api
from diagnose.model.fixes import SUBJECT_OF
from diagnose.rulebook.in_place import all_in_place, in_place, pass_over
from diagnose.memory.patterns import attention_calls
from diagnose.memory.record import load_memory
from diagnose.metrics import Metrics
from diagnose.metrics.timeline import PARAMETERS as TIMELINE_PARAMETERS
from diagnose.base.thresholds import Threshold
from diagnose.trace.model import Trace

_SEVERITIES = cast(tuple[Severity, ...], SEVERITIES)  # the one order, most serious first (model/findings.py)

__all__ = [
    "Context",
    "NEEDS",
    "Need",
    "Quiet",
    "Rule",
    "RuleResults",
    "Skip",
    "Threshold",
    "impact",
    "known_thresholds",
    "run_rules",
    "time_base",
    "top_offenders",
    "verdict",
]


@dataclasses.dataclass
class Quiet:
    """A rule ran and found nothing; `detail` says which numbers decided it."""

    detail: str


@dataclasses.dataclass
class Skip:
    """A rule decided at run time that it cannot judge this input."""

    reason: str


@dataclasses.dataclass
class RuleResults:
    """What the rules concluded: findings (sorted by impact), quiet rules, skipped rules."""

    findings: list[Finding]
    checked: list[Checked]
    skipped: list[Skipped]


class Rule:
    """Base class of every rule in rules/. The module docstring is the rule's documentation."""

    id: ClassVar[str]
    order: ClassVar[int] = 50  # where it stands in reports: time rules first, memory rules last
    title: ClassVar[str]
    cheat_sheet: ClassVar[dict]  # bottleneck, signal, fix, impact
    # each entry a need (NEEDS key), or a tuple of alternatives of which one suffices ("ops or an allocator record")
    needs: ClassVar[tuple[str | tuple[str, ...], ...]] = ()
    thresholds: ClassVar[tuple[Threshold, ...]] = ()

    def check(self, ctx: "Context", t: dict[str, float]) -> Finding | Quiet | Skip:
        """Judge the trace; `t` maps threshold names to their values in force."""
        raise NotImplementedError

    @classmethod
    def needs_text(cls) -> str:
        """The needs as one line: "gpu, steps, ops or memory"."""
        return ", ".join(n if isinstance(n, str) else " or ".join(n) for n in cls.needs)

    @classmethod
    def doc(cls) -> str:
        """The rule's documentation: its module docstring."""
        return inspect.getdoc(sys.modules[cls.__module__]) or ""


@dataclasses.dataclass(frozen=True)
class Need:
    """An input a rule can declare in `needs`: what it is, and how to tell that a trace lacks it."""

    description: str
    missing: Callable[["Context"], str | None]


def _missing_gpu(ctx: "Context") -> str | None:
    if ctx.trace.has_gpu_activity:
        return None
    status = (ctx.trace.capture or {}).get("status")
    if status not in (None, "ok"):
        return f"the workload stopped ({status}) before the profiler recorded GPU activity: no timeline to judge"
    launches = ctx.trace.unrecorded_launches
    if launches:
        return f"{lost_gpu_text(launches)}: no GPU timeline to judge"
    return "no GPU activity in the trace (a CPU-only run): nothing to judge on the GPU side"


def lost_gpu_text(launches: int) -> str:
    """What a trace with kernel launches and no GPU record is: not a CPU-only run."""
    return f"GPU activity was not recorded ({launches:,} launches, 0 kernels)"


def _missing_memory(ctx: "Context") -> str | None:
    if ctx.memory is not None:
        return None
    if ctx.trace.older_allocator_events:
        return (
            f"no allocator record to read a peak from: the trace's {ctx.trace.older_allocator_events:,} allocator "
            "events record Bytes only, without Total Allocated or Total Reserved (an older kineto's format), and "
            "there is no memory.json beside it or memory block in meta.json"
        )
    return (
        "no allocator record: no memory.json beside the trace, no memory block in meta.json and no "
        "allocator events in it (a trace from elsewhere recorded without profile_memory=True, or a CPU-only run)"
    )


def _missing_launch_links(ctx: "Context") -> str | None:
    trace = ctx.trace
    if len(trace.runtime) and not trace.gpu["correlation"].isna().all():
        return None
    return "the trace does not link kernels to their host launch calls (no CUDA runtime events)"


def _missing_device_peaks(ctx: "Context") -> str | None:
    from diagnose.base.devices import describe_unknown

    return None if ctx.metrics.device_spec is not None else describe_unknown(ctx.trace.device)


def _missing_device_bandwidth(ctx: "Context") -> str | None:
    spec = ctx.metrics.device_spec
    if spec is None:
        return _missing_device_peaks(ctx)
    return None if spec.has_bandwidth else spec.bandwidth_missing or "the device's memory bandwidth is unknown"


def _missing_steps(ctx: "Context") -> str | None:
    return None if ctx.metrics.steps.windows else "no measured step could be found in the trace"


def _missing_steady_state(ctx: "Context") -> str | None:
    capture = ctx.metrics.graph_capture
    if capture is None or not capture.dominates:
        return None
    return (
        f"graph capture, not a steady state: {capture.text()}; captured kernels run on replay, "
        "so the host time here is set-up, not the workload's"
    )


def _missing_timed_arrivals(ctx: "Context") -> str | None:
    if ctx.ranks is not None and getattr(ctx.ranks, "timed", None) is not None:
        return None
    return "no arrivals timed without the profiler (arrivals.json of every rank, written by `--nproc-per-node`)"


def _missing_ops(ctx: "Context") -> str | None:
    return None if len(ctx.trace.ops) else "no CPU ops in the trace"


def _missing_ranks(ctx: "Context") -> str | None:
    if ctx.ranks is not None and len(ctx.ranks) >= 2:
        return None
    return "one rank's trace: comparing ranks needs the traces of every rank (`diagnose DIR` on a folder of them)"


NEEDS: dict[str, Need] = {
    "gpu": Need("GPU activity (kernels or copies)", _missing_gpu),
    "launch-links": Need("kernels linked to their host launch calls (CUDA runtime events)", _missing_launch_links),
    "steps": Need("at least one measured step", _missing_steps),
    "device-peaks": Need(
        "the device's FLOP/s ceilings (a named GPU, or one whose architecture and SM count were recorded)",
        _missing_device_peaks,
    ),
    "device-bandwidth": Need(
        "the device's memory bandwidth (a named GPU, an HBM part told by its memory size, or a recorded "
        "memory clock and bus width)",
        _missing_device_bandwidth,
    ),
    "ranks": Need("the traces of at least two ranks of one job", _missing_ranks),
    "timed-arrivals": Need(
        "every rank's collective arrivals timed without the profiler (arrivals.json)", _missing_timed_arrivals
    ),
    "ops": Need("CPU ops (the host side of the trace)", _missing_ops),
    "steady-state": Need("steps that run the workload (not a CUDA/HIP graph being captured)", _missing_steady_state),
    "memory": Need(
        "an allocator record (memory.json beside the trace, meta.json's memory block, or allocator "
        "events from profile_memory=True)",
        _missing_memory,
    ),
}


NO_STEP_WORK = "no kernels in the measured steps"


def _ncu_join(table) -> Callable | None:
    """The join of an Nsight Compute table (diagnose.ncu.NcuTable) to a trace's step kernels, as Metrics
    takes it (diagnose/ncu/join.py); None without a table or with an empty one."""
    if table is None or not len(table.kernels):
        return None
    from diagnose.ncu.join import join

    return functools.partial(join, table)


class Context:
    """What a rule sees: the trace, its shared metrics (with Nsight Compute measurements when given),
    the configuration, the allocator record (`memory`, read on first use), for a parameter
    sweep the Sweep (diagnose/memory/sweep.py) and, for one rank of several, the RankSet of all of
    them (`ranks`, diagnose/rankset/model.py; None for a single trace). The trace is only read; what reading it taught
    (the allocator record's warnings) collects in `warnings`."""

    def __init__(self, trace: Trace, config: Config, sweep=None, ncu=None, ranks=None):
        self.trace = trace
        self.ranks = ranks
        self.config = config
        self.metrics = Metrics(trace, config.section("timeline"), _ncu_join(ncu), find_attention_calls=attention_calls)
        self.sweep = sweep
        self.warnings: list[str] = []

    @functools.cached_property
    def memory(self):
        """The MemoryRecord of this trace (diagnose/memory/record.py), or None when nothing about
        memory was recorded."""
        record = load_memory(self.trace)
        if record is not None:
            self.warnings.extend(w for w in record.warnings if w not in self.warnings)
        return record

    def step_work(self) -> tuple | None:
        """(op instances, step µs, number of steps) of the measured steps, for the rules that weigh
        kernel work against the step; None when the steps ran no kernel (the rule is then quiet,
        with NO_STEP_WORK)."""
        m = self.metrics
        ops, step_us = m.op_work, m.budget.step_us
        if not len(ops) or step_us <= 0:
            return None
        return ops, step_us, max(len(m.steps.windows), 1)

    def missing(self, need: str | tuple[str, ...]) -> str | None:
        """Why `need` is not available in this trace, or None when it is; for alternatives, None when
        one of them is, else every reason joined ("no CPU ops in the trace, and no allocator record…")."""
        if isinstance(need, str):
            return NEEDS[need].missing(self)
        reasons = [NEEDS[n].missing(self) for n in need]
        if not all(reasons):
            return None
        return ", and ".join(r for r in reasons if r)


def severity_ladder(
    value: float, t: Mapping[str, float], high: str = "high_share", medium: str | None = "medium_share"
) -> Severity:
    """How serious a finding is from the value it rests on: high from the rule's `high` threshold, medium
    from its `medium` one, else low; with `medium=None` medium below `high` (a rule whose firing gate is
    its medium floor). The cut-offs are declared thresholds, so `--set` moves them and the docs list them."""
    return severity_from(value >= t[high], medium is None or value >= t[medium])


def severity_from(high: bool, medium: bool = True) -> Severity:
    """The ladder's rungs for a finding whose severity rests on conditions rather than one value (an
    out-of-memory error): the most serious of SEVERITIES whose condition holds, the least when none does."""
    return next((s for s, met in zip(_SEVERITIES, (high, medium)) if met), _SEVERITIES[-1])


def milder(severity: Severity) -> Severity:
    """One rung less serious (low stays low)."""
    return _SEVERITIES[min(_SEVERITIES.index(severity) + 1, len(_SEVERITIES) - 1)]


def known_thresholds(rules) -> dict[str, Threshold]:
    """Every overridable key ("rule-id.name" and "timeline.name") of `rules` with its Threshold."""
    keys = {f"timeline.{th.name}": th for th in TIMELINE_PARAMETERS}
    for rule in rules:
        for th in rule.thresholds:
            keys[f"{rule.id}.{th.name}"] = th
    return keys


def run_rules(ctx: Context, rules) -> RuleResults:
    """Run `rules` (rule classes, rules/__init__.py's ALL_RULES for all of them) on the context: skip, with the reason, each rule whose inputs the
    trace lacks; sort the findings by estimated impact."""
    findings, skipped, checked = [], [], []
    for rule_cls in rules:
        rule = rule_cls()
        reason = next((r for r in map(ctx.missing, rule.needs) if r), None)
        if reason:
            skipped.append(Skipped(rule.id, reason))
            continue
        values = {th.name: ctx.config.threshold(rule.id, th) for th in rule.thresholds}
        result = rule.check(ctx, values)
        if isinstance(result, Skip):
            skipped.append(Skipped(rule.id, result.reason))
        elif isinstance(result, Quiet):
            checked.append(Checked(rule.id, result.detail))
        else:
            findings.append(finished(result, rule, ctx))
    return RuleResults(ordered(findings), checked, skipped)


def ordered(findings: list[Finding]) -> list[Finding]:
    """The report's order of findings, the one place it is decided: by impact, then each finding whose
    first fix is another finding's subject just after that finding."""
    return prerequisites_first(sorted(findings, key=impact, reverse=True))


def prerequisites_first(findings: list[Finding]) -> list[Finding]:
    """`findings` (in impact order) with each finding whose own subject is another finding's first,
    prerequisite fix moved just before that finding: launch-overhead's "non-blocking-copies, then
    cuda-graphs" comes after the transfer finding that prices those copies, whatever the estimates."""
    out = list(findings)
    for later in range(1, len(out)):
        at = next((i for i in range(later) if builds_on(out[later], out[i])), None)
        if at is not None:
            out.insert(at, out.pop(later))
    return out


def builds_on(first: Finding, then: Finding) -> bool:
    """Whether `then` starts with a prerequisite fix that is `first`'s own subject (one of its first two
    fixes) and not `then`'s (model/fixes.py SUBJECT_OF): `then`'s estimate is for that change and its own
    together. The transfer finding, whose "pinned-memory, then non-blocking-copies" is its own subject, is not
    put after a host-bound finding that also leads with pinned memory."""
    lead = then.fixes[0] if then.fixes else None
    if lead is None or not lead.prerequisite or then.rule == first.rule or all_in_place(first):
        return False  # a finding whose fixes are all in place already is not put first for another's sake
    if SUBJECT_OF.get(lead.id) == then.rule:
        return False
    return lead.id in {x.id for x in first.fixes[:2]}


def finished(result: Finding, rule: Rule, ctx: Context) -> Finding:
    """The Finding a rule returned, made whole as a new Finding (the rule's one is not edited): the rule's
    cheat-sheet row unless it named one of its own, each fix in the API of the framework the step runs
    under (model/frameworks.py), then the fixes the code already has passed over (rulebook/in_place.py)."""
    if result.sheet is None:
        result = msgspec.structs.replace(result, sheet=CheatSheet(**rule.cheat_sheet))
    frameworks = ctx.metrics.shared(
        "frameworks",
        lambda: detect_frameworks(ctx.trace, ctx.metrics.python_samples, compiled=bool(ctx.metrics.compiled.compiled)),
    )
    return pass_over(in_framework_api(result, frameworks), in_place(ctx))


def top_offenders(rows, label: OffenderLabel, *, by: str | None = None, n: int = 8) -> list[Offender]:
    """The first `n` rows of `rows` (a DataFrame whose index or `LABEL_KEYS[label]` column names each
    row, its other columns the offender's; or a list of such dicts), most `by` first when given, as
    Offenders: numpy numbers become Python ones, NaN None (the order of ties is kept)."""
    import pandas as pd

    key = LABEL_KEYS[label]
    if isinstance(rows, pd.DataFrame):
        frame = rows if key in rows.columns else rows.rename_axis(key).reset_index()
        records = frame.to_dict("records")
    else:
        records = list(rows)
    if by is not None:
        records = sorted(records, key=lambda r: r[by], reverse=True)
    out = []
    for record in records[:n]:
        out.append(Offender.of(label, record[key], **{k: v for k, v in record.items() if k != key}))
    return out


def time_base(budget) -> str:
    """The phrase an estimate's basis uses to say which step time it starts from: the capture's
    unprofiled step where it timed steps without the profiler (base/step_timing.paid_step_us), else the
    unprofiled step estimated from the trace, else the profiled step."""
    if getattr(budget, "synced_step_us", None):
        return (
            f"step time = profiled {budget.profiled_step_us:,.1f} µs (the unprofiled timing, "
            f"{budget.synced_step_us:,.1f} µs, synchronised after each step, is longer)"
        )
    if budget.unprofiled_step_us:
        return f"step time = unprofiled {budget.unprofiled_step_us:,.1f} µs"
    if getattr(budget, "estimated_step_us", None):
        return (
            f"step time = estimated unprofiled step {budget.estimated_step_us:,.1f} µs (no unprofiled timing: "
            f"the profiler's own host time taken out by replaying the trace, diagnose/metrics/overhead.py)"
        )
    return "step time = profiled step (no unprofiled timing in the capture)"


def impact(finding: Finding) -> tuple:
    """Findings with a fix left to apply first (rulebook/in_place.py), then by estimate and severity."""
    return (not all_in_place(finding), finding.est_speedup or 1.0, severity_rank(finding.severity))


NO_TORCH_WARNING = "the workload ran no PyTorch operation"  # trace/load.py's warning for such a capture
UNEXPLAINED_NAMED_SHARE = 0.10  # unexplained time at least this share of the step is named in the verdict
LOSS_NAMED_SHARE = 0.25  # a non-compute bucket this large, not covered by the top finding, is named too
COLD_SETUP_SHARE = 0.5  # host setup inside launching ops this large, nothing fired: the window is a cold start
EXPLAIN_UNEXPLAINED = (
    "a capture in script or function mode (`diagnose model.py`) samples the Python stack, "
    "or record the trace with torch.profiler(with_stack=True), to name the code"
)


def verdict(d: Diagnosis) -> str:
    """One sentence: what limits this workload, and where the rest of the step went (step accounting)."""
    if d.workload_failed:
        err = d.capture.error_or_empty
        what = {"oom": "ran out of memory", "timeout": "timed out", "crashed": "crashed"}.get(
            d.capture.status or "", "failed"
        )
        return f"The workload {what}: {err.type or ''}: {err.message or ''}".strip().rstrip(":")
    s = d.summary
    buckets = {b.id: b for b in (s.accounting.buckets if s.accounting else []) if b.in_sum}
    largest = buckets.get((s.accounting.largest_non_compute if s.accounting else None) or "")
    capture = s.graph_capture
    if capture and not d.findings:
        return (
            f"Graph capture, not a steady state: {capture}. The kernels run when the graph is replayed; "
            "profile steps after the capture (the replay) for a verdict on the workload."
        )
    if d.findings:
        top = d.findings[0]
        gain = (
            f" (est. {fmt(top.est_speedup)}× faster with {top.fix_phrase()})" if top.est_speedup and top.fixes else ""
        )
        if all_in_place(top):
            gain = f" (its fixes are in place already: {top.fixes[0].passed_over})"
        elif gain and len(d.findings) > 1 and builds_on(top, d.findings[1]) and d.findings[1].est_speedup:
            then = d.findings[1]
            gain = f"{gain[:-1]}; {fmt(then.est_speedup)}× with {then.fix_phrase()})"
        extra, named = "", None
        if largest and largest.share >= LOSS_NAMED_SHARE and (top.recoverable_us or 0) < 0.5 * largest.us_per_step:
            extra, named = f" Meanwhile {_bucket_text(largest)}.", largest
        if top.step_range and not top.step_range.holds:
            extra = f" Uncertain on this estimated step: {top.step_range.quiet_text()}.{extra}"
        return f"{top.title}{gain}.{extra}{_unexplained_note(buckets, named)}"
    busy = s.gpu_busy_fraction
    ran = len(d.checked)
    if not s.gpu_ops_per_step:
        if any(w.startswith(NO_TORCH_WARNING) for w in d.warnings):
            return "The workload ran no PyTorch operation while it was profiled: there is nothing to diagnose."
        launches = s.unrecorded_launches
        if launches:
            return (
                f"{lost_gpu_text(launches)}: the host launched kernels but the trace kept no GPU record "
                "(CUPTI's buffers were dropped or CUDA activity was not profiled), so nothing can be said "
                "about the GPU; record again with ProfilerActivity.CUDA and check the profiler's warnings."
            )
        return f"No GPU activity in this trace (a CPU-only run): {len(d.skipped)} GPU rules skipped, {ran} ran."
    if busy is None:
        return f"No bottleneck found; {len(d.skipped)} rules could not run on this trace."
    compute = buckets["compute"].share if "compute" in buckets else busy
    if busy < 0.5:
        where = f" The largest part of the rest is {_bucket_text(largest)}." if largest else ""
        if largest and largest.id == "host_in_ops" and largest.share >= COLD_SETUP_SHARE:
            where += (
                " That is first-call setup (module loading, kernel and algorithm selection): the window is "
                "a cold start, not a steady state; profile steps after a warm-up."
            )
        return (
            f"No rule fired; the GPU computes only {percent(compute)} of the step.{where}"
            f"{_unexplained_note(buckets, largest)}{_quiet_on_the_estimate(d)}"
        )
    where = ""
    if largest and largest.share >= UNEXPLAINED_NAMED_SHARE:
        where = f"; the largest other part is {_bucket_text(largest)}"
    return (
        f"No bottleneck found by the {ran} rules that ran; the GPU is busy {percent(busy)} of each step"
        f"{where}.{_unexplained_note(buckets, largest)}{_quiet_on_the_estimate(d)}"
    )


def _quiet_on_the_estimate(d: Diagnosis) -> str:
    """ " Uncertain on this estimated step: launch-overhead would fire, low if the step is 27,787 µs (the slowest
    replayed)." for the quiet rules that would fire at an end of an uncertain estimated step, else ""."""
    said = [f"{c.rule} would fire, {c.step_range.text(QUIET)}" for c in d.checked if c.step_range and c.range_text()]
    return f" Uncertain on this estimated step: {'; '.join(said)}." if said else ""


def _bucket_text(bucket: Bucket) -> str:
    """'host setup inside kernel-launching ops (aten::_cudnn_attention_forward), 95 % of the step'."""
    named = f" ({bucket.names[0]})" if bucket.names else ""
    text = f"{bucket.label}{named}, {percent(bucket.share)} of the step"
    if bucket.id == "unexplained":
        text += f": {EXPLAIN_UNEXPLAINED}"
    return text


def _unexplained_note(buckets: dict, named: Bucket | None) -> str:
    """A sentence naming unexplained time when it is a large share and the verdict has not named it yet."""
    bucket = buckets.get("unexplained")
    if not bucket or bucket.share < UNEXPLAINED_NAMED_SHARE or (named and named.id == "unexplained"):
        return ""
    return f" {percent(bucket.share)} of the step is unexplained (host busy, nothing recorded): {EXPLAIN_UNEXPLAINED}."
