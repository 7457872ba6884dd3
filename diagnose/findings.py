"""The Diagnosis: findings with evidence, rules skipped with reasons; versioned JSON in and out.

Every class here is a msgspec Struct: findings.json is their encoding (`Diagnosis.to_dict`), a
findings.json is read back typed and checked (`Diagnosis.from_dict`), and `diagnose schema` prints
the JSON Schema of `diagnose.findings/1` made from them (`findings_schema`). Changes stay additive:
a field added later has a default, so an older findings.json still reads.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from diagnose.vocabulary.units import fmt
from diagnose.invariants import holds

SCHEMA = "diagnose.findings/1"
SEVERITIES = ("high", "medium", "low")
Severity = Literal["high", "medium", "low"]


class Evidence(msgspec.Struct):
    """One measured value compared with its threshold: "host wait 71 % > 20 %".

    A comparison that does not hold (a rule that fires on either of two conditions shows both)
    carries `holds = False`, set here from the numbers, and is shown as not met."""

    metric: str
    value: float | str  # a measurement, or what was found where a name says more (a file:line, a command)
    op: str = ""
    threshold: float | None = None
    unit: str = ""
    holds: bool | None = None  # False: the comparison is not met; None: met, or not a comparison

    def __post_init__(self):
        if self.holds is None and holds(self.value, self.op, self.threshold) is False:
            self.holds = False

    @property
    def is_test(self) -> bool:
        """True when the line compares its value with a threshold."""
        return self.threshold is not None and bool(self.op)

    def text(self) -> str:
        """The evidence as one readable condition ("(not met)" after one that does not hold)."""
        unit = f" {self.unit}" if self.unit else ""
        if not self.is_test:
            return f"{self.metric} {fmt(self.value)}{unit}"
        unmet = " (not met)" if self.holds is False else ""
        return f"{self.metric} {fmt(self.value)}{unit} {self.op} {fmt(self.threshold)}{unit}{unmet}"


class Fix(msgspec.Struct):
    """A recommended fix, by stable id (diagnose/fixes.py lists them), with a code example for the case."""

    id: str
    title: str
    how: str
    code: str = ""
    prerequisite: bool = False  # a change the next fix needs first; the finding's estimate is for both
    api: str = ""  # the framework whose API the code is written in ("transformers.Trainer"); "" for plain PyTorch


class CheatSheet(msgspec.Struct):
    """The cheat-sheet row a rule encodes, as the finding carries it (an old findings.json renders
    the same after the rules change)."""

    bottleneck: str = ""
    signal: str = ""
    fix: str = ""
    impact: str = ""


class Finding(msgspec.Struct):
    """A bottleneck a rule found, with everything needed to believe and act on it."""

    rule: str
    severity: Severity
    title: str
    evidence: list[Evidence]
    fixes: list[Fix]
    offenders: list[dict] = msgspec.field(default_factory=list)
    est_speedup: float | None = None
    basis: str = ""
    recoverable_us: float | None = None
    why: str = ""
    verify: list | None = None  # --verify: one entry per fix, measured (diagnose/verify/model.py Verification.to_dict)
    ranks: list | None = None  # with several ranks: the ranks it holds on (None: a single trace)
    sheet: CheatSheet | None = None  # the rule's cheat-sheet row, filled in when the Diagnosis is assembled

    def fix_phrase(self) -> str:
        """The fix the estimate is for: "cuda-graphs", or "fused-optimizer, then cuda-graphs" when
        the first fixes are prerequisites of the next ("remove-sync and fused-optimizer, then
        cuda-graphs"); "" without fixes."""
        if not self.fixes:
            return ""
        first = [x.id for x in self.fixes[:-1] if x.prerequisite]
        lead = len(first) if all(x.prerequisite for x in self.fixes[: len(first)]) else 0
        if not lead:
            return self.fixes[0].id
        before = first[0] if lead == 1 else ", ".join(first[: lead - 1]) + f" and {first[lead - 1]}"
        return f"{before}, then {self.fixes[lead].id}"


class Skipped(msgspec.Struct):
    """A rule that could not run on this input, and why."""

    rule: str
    reason: str


class Checked(msgspec.Struct):
    """A rule that ran and did not fire, with the deciding numbers."""

    rule: str
    detail: str


class Details(msgspec.Struct, omit_defaults=True):
    """The report's supporting data, one named section each; a section the run has nothing for is None.

    Each section is plain data (lists and dicts of numbers and strings), built once by
    diagnose/assemble.py and read by every renderer:
      top_kernels    the GPU ops that take most time per step (metrics/views.py; ncu columns when measured)
      step_timeline  the median step's GPU ops and classified gaps (metrics/views.py)
      steps          the per-step table, profiled time (metrics/views.py)
      memory         allocator peaks, timeline, peak breakdown, sweep fits (memory/summary.py)
      roofline       roofline points and ceilings (ncu/roofline.py)
      ncu            the Nsight Compute join and measured kernels (ncu/details.py)
      inventory      every GPU op per step by (kernel, launching op, input shapes), for `diagnose diff`
                     (metrics/views.py)
      ranks          with several ranks: each rank's step budget, side by side (ranks/model.py)
    """

    top_kernels: list | None = None
    step_timeline: dict | None = None
    steps: list | None = None
    memory: dict | None = None
    roofline: dict | None = None
    ncu: dict | None = None
    inventory: list | None = None
    ranks: list | None = None


class Diagnosis(msgspec.Struct):
    """Everything a report shows; `to_dict` is the findings.json schema."""

    target: str
    device: dict
    summary: dict
    findings: list[Finding]
    skipped: list[Skipped]
    checked: list[Checked] = msgspec.field(default_factory=list)
    capture: dict = msgspec.field(default_factory=dict)
    warnings: list[str] = msgspec.field(default_factory=list)
    verdict: str = ""
    details: Details = msgspec.field(default_factory=Details)
    schema: str = SCHEMA

    def __repr__(self) -> str:
        top = (
            f"{self.findings[0].rule} est. {fmt(self.findings[0].est_speedup or 1)}×" if self.findings else "no finding"
        )
        return (
            f"<Diagnosis {self.target!r}: {top}; {len(self.findings)} findings, {len(self.checked)} quiet, "
            f"{len(self.skipped)} skipped>"
        )

    def to_dict(self) -> dict:
        """Plain data for JSON (the stable, versioned schema)."""
        data = msgspec.to_builtins(self, enc_hook=_plain)
        for finding in data["findings"]:  # additive fields appear only when they hold something
            for key in ("ranks", "sheet"):
                if finding.get(key) is None:
                    finding.pop(key, None)
            for e in finding["evidence"]:  # `holds` only on a comparison that is not met
                if e.get("holds") is None:
                    e.pop("holds", None)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Diagnosis":
        """Rebuild a Diagnosis from its JSON form, checked against the model (msgspec.ValidationError
        names the field that does not fit)."""
        return msgspec.convert(data, cls)

    def worst_severity(self) -> str | None:
        """The most serious severity among the findings."""
        for level in SEVERITIES:
            if any(f.severity == level for f in self.findings):
                return level
        return None

    def findings_frame(self):
        """The findings as a pandas DataFrame: one row per finding, evidence as text."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "rule": f.rule,
                    "severity": f.severity,
                    "title": f.title,
                    "est_speedup": f.est_speedup,
                    "recoverable_us": f.recoverable_us,
                    "fixes": ", ".join(x.id for x in f.fixes),
                    "evidence": "; ".join(e.text() for e in f.evidence),
                }
                for f in self.findings
            ]
        )

    def kernels_frame(self):
        """The top GPU kernels per step as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.details.top_kernels or [])

    def steps_frame(self):
        """The per-step table (profiled time) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.details.steps or [])

    @property
    def workload_failed(self) -> bool:
        """True when the captured workload raised, ran out of memory, timed out or crashed."""
        return self.capture.get("status") not in (None, "ok")


def _plain(value):
    """numpy scalars and arrays (in details and offenders) as plain numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise NotImplementedError(f"cannot encode {type(value).__name__} in findings.json")


def check_findings_file(path) -> Diagnosis:
    """A findings.json read and checked against the model; InputError naming the file and the
    field that does not fit (or the schema it claims, when that is not this one)."""
    from pathlib import Path

    from diagnose.errors import InputError
    from diagnose.trace.schemas import read_json_object

    path = Path(path)
    data = read_json_object(path, "findings")
    if data.get("schema") != SCHEMA:
        raise InputError(f"{path}: schema {data.get('schema')!r}, not {SCHEMA!r} (is it a findings.json?)")
    try:
        return Diagnosis.from_dict(data)
    except msgspec.ValidationError as exc:
        raise InputError(f"{path}: does not fit {SCHEMA}: {exc}") from None


def findings_schema() -> dict:
    """The JSON Schema of findings.json (`diagnose.findings/1`), from the model itself."""
    schema = msgspec.json.schema(Diagnosis)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": SCHEMA, **schema}
