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
from typing import ClassVar

from diagnose.config import Config
from diagnose.findings import Checked, Diagnosis, Finding, Skipped, fmt
from diagnose.metrics import Metrics, views
from diagnose.trace.model import Trace


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A named, documented, overridable threshold of a rule."""

    name: str
    default: float
    unit: str
    doc: str


@dataclasses.dataclass
class Quiet:
    """A rule ran and found nothing; `detail` says which numbers decided it."""

    detail: str


@dataclasses.dataclass
class Skip:
    """A rule decided at run time that it cannot judge this input."""

    reason: str


class Rule:
    """Base class of every rule in rules/. The module docstring is the rule's documentation."""

    id: ClassVar[str]
    title: ClassVar[str]
    cheat_sheet: ClassVar[dict]  # bottleneck, signal, fix, impact
    needs: ClassVar[tuple[str, ...]] = ()
    thresholds: ClassVar[tuple[Threshold, ...]] = ()

    def check(self, ctx: "Context", t: dict[str, float]) -> Finding | Quiet | Skip:
        """Judge the trace; `t` maps threshold names to their values in force."""
        raise NotImplementedError

    @classmethod
    def doc(cls) -> str:
        """The rule's documentation: its module docstring."""
        return inspect.getdoc(sys.modules[cls.__module__]) or ""


NEEDS = {
    "gpu": "GPU activity (kernels or copies)",
    "launch-links": "kernels linked to their host launch calls (CUDA runtime events)",
    "steps": "at least one measured step",
    "device-peaks": "the device's bandwidth and FLOP/s ceilings (a GPU diagnose knows)",
    "memory": "an allocator record (memory.json beside the trace, meta.json's memory block, or "
              "allocator events from profile_memory=True)",
}


NO_STEP_WORK = "no kernels in the measured steps"


class Context:
    """What a rule sees: the trace, its shared metrics, the configuration, the allocator record
    (`memory`, read on first use) and, for a parameter sweep, the Sweep (diagnose/memory/sweep.py)."""

    def __init__(self, trace: Trace, config: Config, sweep=None):
        self.trace = trace
        self.config = config
        self.metrics = Metrics(trace, config.section("timeline"))
        self.sweep = sweep

    @functools.cached_property
    def memory(self):
        """The MemoryRecord of this trace (diagnose/memory/record.py), or None when nothing about
        memory was recorded."""
        from diagnose.memory.record import load_memory

        record = load_memory(self.trace)
        if record is not None:
            self.trace.warnings.extend(w for w in record.warnings if w not in self.trace.warnings)
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

    def missing(self, need: str) -> str | None:
        """Why `need` is not available in this trace, or None when it is."""
        trace = self.trace
        if need == "gpu" and not trace.has_gpu_activity:
            status = (trace.capture or {}).get("status")
            if status not in (None, "ok"):
                return (f"the workload stopped ({status}) before the profiler recorded GPU activity: "
                        "no timeline to judge")
            return "no GPU activity in the trace (a CPU-only run): nothing to judge on the GPU side"
        if need == "memory" and self.memory is None:
            return ("no allocator record: no memory.json beside the trace, no memory block in meta.json and no "
                    "allocator events in it (a trace from elsewhere recorded without profile_memory=True, "
                    "or a CPU-only run)")
        if need == "launch-links" and (not len(trace.runtime) or trace.gpu["correlation"].isna().all()):
            return "the trace does not link kernels to their host launch calls (no CUDA runtime events)"
        if need == "device-peaks" and self.metrics.device_spec is None:
            from diagnose.devices import describe_unknown

            return describe_unknown(trace.device)
        if need == "steps" and not self.metrics.steps.windows:
            return "no measured step could be found in the trace"
        return None


def diagnose_trace(trace: Trace, config: Config | None = None, rules: list | None = None,
                   sweep=None) -> Diagnosis:
    """Run every rule on `trace` and return the Diagnosis; `sweep` (a diagnose.memory.Sweep) when
    the trace is one point of a parameter sweep."""
    from diagnose.memory.details import memory_details
    from diagnose.rules import ALL_RULES

    config = config or Config()
    ctx = Context(trace, config, sweep=sweep)
    findings, skipped, checked = [], [], []
    for rule_cls in rules or ALL_RULES:
        rule = rule_cls()
        reason = next((r for r in map(ctx.missing, rule.needs) if r), None)
        if reason:
            skipped.append(Skipped(rule.id, reason))
            continue
        values = {th.name: config.threshold(rule.id, th) for th in rule.thresholds}
        result = rule.check(ctx, values)
        if isinstance(result, Skip):
            skipped.append(Skipped(rule.id, result.reason))
        elif isinstance(result, Quiet):
            checked.append(Checked(rule.id, result.detail))
        else:
            findings.append(_plain_numbers(result))
    findings.sort(key=_impact, reverse=True)
    summary = ctx.metrics.summary() if trace.has_gpu_activity or len(trace.ops) else {}
    how = ((trace.capture or {}).get("steps") or {}).get("how")
    if summary and how:
        summary["steps_found_by"] = f"{summary['steps_found_by']}; the capture marked steps at {how}"
    target = (trace.capture or {}).get("target") or trace.source
    diagnosis = Diagnosis(target=target, device=trace.device, summary=summary,
                          findings=findings, skipped=skipped, checked=checked,
                          capture=_capture_summary(trace), warnings=list(trace.warnings))
    diagnosis.verdict = verdict(diagnosis)
    if trace.has_gpu_activity:
        diagnosis.details = {"top_kernels": views.top_kernels(ctx.metrics),
                             "step_timeline": views.step_timeline(ctx.metrics),
                             "steps": views.per_step(ctx.metrics)}
    memory = memory_details(ctx)
    if memory:
        diagnosis.details["memory"] = memory
        diagnosis.warnings += [w for w in trace.warnings if w not in diagnosis.warnings]
    return diagnosis


def _plain_numbers(finding: Finding) -> Finding:
    """Numpy scalars from pandas arithmetic become Python floats, so JSON and YAML stay plain."""
    for name in ("est_speedup", "recoverable_us"):
        value = getattr(finding, name)
        if value is not None:
            setattr(finding, name, float(value))
    for ev in finding.evidence:
        ev.value = ev.value if isinstance(ev.value, (str, bool)) else float(ev.value)
        ev.threshold = None if ev.threshold is None else float(ev.threshold)
    return finding


def _impact(finding: Finding) -> tuple:
    rank = {"high": 2, "medium": 1, "low": 0}[finding.severity]
    return (finding.est_speedup or 1.0, rank)


def _capture_summary(trace: Trace) -> dict:
    meta = trace.capture or {}
    if not meta:
        return {}
    keys = ("target", "mode", "status", "error", "steps", "timing", "memory", "recorded_at", "params")
    return {k: meta.get(k) for k in keys if k in meta}


UNEXPLAINED_NAMED_SHARE = 0.10  # unexplained time at least this share of the step is named in the verdict
LOSS_NAMED_SHARE = 0.25  # a non-compute bucket this large, not covered by the top finding, is named too
EXPLAIN_UNEXPLAINED = ("a capture in script or function mode (`diagnose model.py`) samples the Python stack, "
                       "or record the trace with torch.profiler(with_stack=True), to name the code")


def verdict(d: Diagnosis) -> str:
    """One sentence: what limits this workload, and where the rest of the step went (step accounting)."""
    if d.workload_failed:
        err = d.capture.get("error") or {}
        what = {"oom": "ran out of memory", "timeout": "timed out", "crashed": "crashed"}.get(
            d.capture.get("status"), "failed")
        return f"The workload {what}: {err.get('type', '')}: {err.get('message', '')}".strip().rstrip(":")
    accounting = d.summary.get("accounting") or {}
    buckets = {b["id"]: b for b in accounting.get("buckets", []) if b.get("in_sum", True)}
    largest = buckets.get(accounting.get("largest_non_compute") or "")
    if d.findings:
        top = d.findings[0]
        gain = f" (est. {fmt(top.est_speedup)}× faster with {top.fixes[0].id})" if top.est_speedup and top.fixes else ""
        extra, named = "", None
        if largest and largest["share"] >= LOSS_NAMED_SHARE and (top.recoverable_us or 0) < 0.5 * largest["us_per_step"]:
            extra, named = f" Meanwhile {_bucket_text(largest)}.", largest
        return f"{top.title}{gain}.{extra}{_unexplained_note(buckets, named)}"
    busy = d.summary.get("gpu_busy_fraction")
    ran = len(d.checked)
    if not d.summary.get("gpu_ops_per_step"):
        return (f"No GPU activity in this trace (a CPU-only run): {len(d.skipped)} GPU rules skipped, "
                f"{ran} ran.")
    if busy is None:
        return f"No bottleneck found; {len(d.skipped)} rules could not run on this trace."
    compute = buckets.get("compute", {}).get("share", busy)
    if busy < 0.5:
        where = f" The largest part of the rest is {_bucket_text(largest)}." if largest else ""
        return (f"No rule fired; the GPU computes only {_percent(compute)} of the step.{where}"
                f"{_unexplained_note(buckets, largest)}")
    where = ""
    if largest and largest["share"] >= UNEXPLAINED_NAMED_SHARE:
        where = f"; the largest other part is {_bucket_text(largest)}"
    return (f"No bottleneck found by the {ran} rules that ran; the GPU is busy {busy:.0%} of each step"
            f"{where}.{_unexplained_note(buckets, largest)}")


def _bucket_text(bucket: dict) -> str:
    """'host setup inside kernel-launching ops (aten::_cudnn_attention_forward), 95 % of the step'."""
    names = bucket.get("names") or []
    named = f" ({names[0]})" if names else ""
    text = f"{bucket['label']}{named}, {_percent(bucket['share'])} of the step"
    if bucket["id"] == "unexplained":
        text += f": {EXPLAIN_UNEXPLAINED}"
    return text


def _percent(share: float) -> str:
    """A share as a whole percentage, or with one decimal below 1 % (so 0.1 % does not read as 0 %)."""
    return f"{share:.1%}" if 0 < share < 0.01 else f"{share:.0%}"


def _unexplained_note(buckets: dict, named: dict | None) -> str:
    """A sentence naming unexplained time when it is a large share and the verdict has not named it yet."""
    bucket = buckets.get("unexplained")
    if not bucket or bucket["share"] < UNEXPLAINED_NAMED_SHARE or (named and named["id"] == "unexplained"):
        return ""
    return f" {bucket['share']:.0%} of the step is unexplained (host busy, nothing recorded): {EXPLAIN_UNEXPLAINED}."
