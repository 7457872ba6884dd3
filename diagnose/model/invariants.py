"""What every Diagnosis must satisfy: the numbers it shows must be possible.

`violations(diagnosis)` lists, as sentences, every way a Diagnosis breaks these rules:
  - an evidence line with a comparison (value op threshold) holds, or carries `holds: false`
    (shown as not met); a finding with comparisons has at least one that holds;
  - a share of a peak (datasheet or achievable) is at most 100 %;
  - no saving is negative: a finding recovers between 0 and the whole step, an offender's time
    after a fix is never above its time now, and no quiet rule's line says "would save −x %";
  - an estimate never exceeds what removing the recovered time can give (Amdahl over the step:
    step / (step − recoverable_us)), and an estimate comes with the time it recovers; exposed-comm
    recovers at most the step's exposed communication, dynamic-shapes at most the host time its op holds;
  - accounting buckets lie in [0, 1] and the summed ones add up to 1 (also each rank's);
  - a rank's collective wait and time lie within that rank's profiled step.
`screen(diagnosis)` is what the assembling step runs (`Diagnosis.assemble`): a finding that breaks one
is left out of the Diagnosis it builds, with the reason in `warnings`, so it is never shown; a violation
outside the findings is a warning.
"""

from __future__ import annotations

import math
import operator
import re

COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
SPEEDUP_ROUNDING = 0.006  # est_speedup is rounded to 2 decimals
RECOVERED_ROUNDING = 0.05  # recoverable_us is rounded to 1 decimal by some rules
SHARE_ROUNDING = 0.05  # percentages are rounded to 1 decimal
SUM_TOLERANCE = 1e-9
RECOVERED_FROM = {"exposed-comm": "comm_exposed"}  # the one accounting bucket a rule's saving comes out of
# the evidence line (a share of the step, by the start of its metric) whose time is all a rule's fix removes
RECOVERED_SHARE = {"dynamic-shapes": "host time "}
DROPPED = "dropped the {rule} finding: it broke an invariant of diagnose ({why})"


def holds(value, op: str, threshold) -> bool | None:
    """Whether `value op threshold` is true; None when it is not a comparison diagnose knows."""
    compare = COMPARE.get(op)
    if compare is None or threshold is None or value is None:
        return None
    try:
        return bool(compare(float(value), float(threshold)))
    except (TypeError, ValueError):
        return None


def violations(diagnosis) -> list[str]:
    """Every way `diagnosis` (a Diagnosis, or its findings.json dict) breaks an invariant; [] when none."""
    return [why for _, why in _all(_as_dict(diagnosis))]


def screen(diagnosis) -> tuple[set[int], list[str]]:
    """What holding `diagnosis` (a Diagnosis) to the invariants takes: the indexes of the findings that break
    one (to be dropped) and the warning that says so of every violation, in order; `diagnosis` is only read.
    `Diagnosis.assemble` builds the Diagnosis from what is left."""
    found = _all(_as_dict(diagnosis))
    bad = {index for index, _ in found if index is not None}
    notes = []
    for index, why in found:
        rule = diagnosis.findings[index].rule if index is not None else None
        notes.append(DROPPED.format(rule=rule, why=why) if rule else f"an invariant of diagnose broke: {why}")
    return bad, notes


def _as_dict(diagnosis) -> dict:
    return diagnosis if isinstance(diagnosis, dict) else diagnosis.to_dict()


def _all(d: dict) -> list[tuple[int | None, str]]:
    """(finding index or None, sentence) for every violation."""
    out: list[tuple[int | None, str]] = []
    step = (d.get("summary") or {}).get("step_time_us")
    buckets = {b.get("id"): b for b in ((d.get("summary") or {}).get("accounting") or {}).get("buckets") or []}
    for i, f in enumerate(d.get("findings") or []):
        out += [(i, f"{f.get('rule')}: {why}") for why in _finding(f, step)]
        out += [(i, f"{f.get('rule')}: {why}") for why in _within_bucket(f, buckets)]
        out += [(i, f"{f.get('rule')}: {why}") for why in _within_share(f, step)]
    out += [(None, why) for why in _quiet(d.get("checked") or [])]
    out += [(None, why) for why in _accounting(d)]
    out += [(None, why) for why in _ranks(d)]
    return out


def _finding(f: dict, step) -> list[str]:
    out = []
    tests = []
    for e in f.get("evidence") or []:
        met = holds(e.get("value"), e.get("op") or "", e.get("threshold"))
        if met is not None:
            tests.append(met)
            if not met and e.get("holds") is not False:
                out.append(
                    f"evidence {e.get('metric')!r} {e.get('value')} {e.get('op')} {e.get('threshold')} "
                    "does not hold and is not marked as unmet"
                )
            if met and e.get("holds") is False:
                out.append(f"evidence {e.get('metric')!r} holds but is marked as unmet")
        if _is_peak_share(e) and _num(e.get("value")) > 100 + SHARE_ROUNDING:
            out.append(f"{e.get('metric')} is {e.get('value')} %, above 100 %")
    if tests and not any(tests):
        out.append("none of its evidence comparisons holds")
    for o in f.get("offenders") or []:
        share = o.get("share_of_peak")
        if share is not None and _num(share) > 1 + SHARE_ROUNDING / 100:
            out.append(f"offender {o.get('op')} at {share:.3f} of its precision's peak, above 1")
        now, after = o.get("us_per_step"), o.get("est_us_per_step_after", o.get("fused_us_per_step"))
        if now is not None and after is not None and _num(after) > _num(now) * (1 + 1e-6) + 0.1:
            out.append(
                f"offender {o.get('op') or o.get('chain')} priced at {after} µs after the fix, above "
                f"the {now} µs it measured"
            )
    est, rec = f.get("est_speedup"), f.get("recoverable_us")
    if est is not None and not math.isfinite(_num(est)):
        out.append(f"estimate {est} is not finite")
    elif est is not None and _num(est) < 1 - 1e-9:
        out.append(f"estimate {est}× is a slowdown")
    if est is not None and rec is None:
        out.append(f"estimate {est}× without the recovered time (recoverable_us)")
    if rec is not None and _num(rec) < 0:
        out.append(f"negative saving: recoverable_us {rec}")
    if rec is not None and step and _num(rec) > _num(step) * (1 + 1e-6):
        out.append(f"recovers {rec} µs of a {step} µs step")
    elif est is not None and rec is not None and step and _num(rec) + RECOVERED_ROUNDING < _num(step):
        bound = _num(step) / (_num(step) - _num(rec) - RECOVERED_ROUNDING)
        if _num(est) > bound + SPEEDUP_ROUNDING:
            out.append(
                f"estimate {est}× exceeds {bound:.3f}×, what removing its {rec} µs of the {step} µs step can give"
            )
    return out


def _within_bucket(f: dict, buckets: dict) -> list[str]:
    """A finding that removes one part of the step recovers at most that part: exposed-comm at most
    the step's exposed communication (removing every collective gives step / (step − comm))."""
    bucket = buckets.get(RECOVERED_FROM.get(f.get("rule") or ""))
    rec = f.get("recoverable_us")
    if bucket is None or rec is None:
        return []
    most = _num(bucket.get("us_per_step"))
    if _num(rec) > most + RECOVERED_ROUNDING:
        return [
            f"recovers {rec} µs, more than the {most:.1f} µs of {bucket.get('label') or bucket.get('id')} in the step"
        ]
    return []


def _within_share(f: dict, step) -> list[str]:
    """A finding whose fix removes the time one evidence line gives as a share of the step recovers at most
    that time: dynamic-shapes at most the host time its op holds."""
    start, rec = RECOVERED_SHARE.get(f.get("rule") or ""), f.get("recoverable_us")
    lines = [e for e in f.get("evidence") or [] if start and str(e.get("metric", "")).startswith(start)]
    if not lines or rec is None or not step or not str(lines[0].get("unit") or "").startswith("%"):
        return []
    share = _num(lines[0].get("value"))
    most = (share + SHARE_ROUNDING) / 100 * _num(step)
    if _num(rec) > most + RECOVERED_ROUNDING:
        return [f"recovers {rec} µs, more than the {share} % of the step ({most:,.1f} µs) its evidence says it holds"]
    return []


def _quiet(checked: list[dict]) -> list[str]:
    out = []
    for c in checked:
        text = c.get("detail") or ""
        if re.search(r"would save\s+[−-]\s*\d", text):
            out.append(f"{c.get('rule')} (quiet) states a negative saving: {text}")
    return out


def _accounting(d: dict) -> list[str]:
    out = []
    acc = (d.get("summary") or {}).get("accounting")
    if acc:
        out += _buckets("accounting", acc.get("buckets") or [])
        step, shown = (d.get("summary") or {}).get("step_time_us"), acc.get("step_us")
        if step is not None and shown is not None and _num(step) != _num(shown):
            out.append(f"the step is {step} µs in the summary and {shown} µs in the accounting")
    for row in (d.get("details") or {}).get("ranks") or []:
        out += _buckets(f"rank {row.get('rank')}'s accounting", row.get("buckets") or [])
        wait, step = row.get("wait_us"), row.get("step_us")
        if wait is not None and step and _num(wait) > _num(step) * (1 + 1e-6) + 0.1:
            out.append(f"rank {row.get('rank')}'s budget: wait {wait} µs is longer than its {step} µs step")
    return out


def _buckets(where: str, buckets: list[dict]) -> list[str]:
    out = []
    summed = [b for b in buckets if b.get("in_sum", True)]
    for b in buckets:
        share = _num(b.get("share"))
        if not 0 <= share <= 1:
            out.append(f"{where}: bucket {b.get('id')} has share {b.get('share')}, outside [0, 1]")
        if _num(b.get("us_per_step")) < 0:
            out.append(f"{where}: bucket {b.get('id')} is {b.get('us_per_step')} µs, negative")
    total = sum(_num(b.get("share")) for b in summed)
    if summed and abs(total - 1) > SUM_TOLERANCE and any(_num(b.get("us_per_step")) for b in summed):
        out.append(f"{where}: the shares sum to {total:.6f}, not 1")
    return out


def _ranks(d: dict) -> list[str]:
    out = []
    for r in ((d.get("summary") or {}).get("ranks") or {}).get("per_rank") or []:
        step = r.get("profiled_step_us", r.get("step_us"))
        if not step:
            continue
        for key in ("wait_us", "transfer_us", "exposed_comm_us"):
            if r.get(key) is not None and _num(r[key]) > _num(step) * (1 + 1e-6) + 0.1:
                out.append(f"rank {r.get('rank')}: {key} {r[key]} µs is longer than its {step} µs step")
        timed, timed_step = r.get("timed_wait_us"), r.get("timed_step_us")
        if timed is not None and timed_step and _num(timed) > _num(timed_step) * (1 + 1e-6) + 0.1:
            out.append(f"rank {r.get('rank')}: timed_wait_us {timed} µs is longer than its {timed_step} µs timed step")
        share = r.get("wait_share")
        if share is not None and not 0 <= _num(share) <= 1:
            out.append(f"rank {r.get('rank')}: wait_share {share} outside [0, 1]")
    return out


def _is_peak_share(e: dict) -> bool:
    metric = (e.get("metric") or "").lower()
    of_a_peak = "peak" in metric or "achievable" in metric
    return "share" in metric and of_a_peak and (e.get("unit") or "").startswith("%")


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
