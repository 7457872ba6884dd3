"""The Diagnosis: findings with evidence, rules skipped with reasons; versioned JSON in and out."""
from __future__ import annotations

import dataclasses
from typing import Any

SCHEMA = "diagnose.findings/1"
SEVERITIES = ("high", "medium", "low")


def fmt(value: Any) -> str:
    """Compact human formatting for evidence numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value == 0:
        return "0"
    magnitude = abs(value)
    if float(value).is_integer() and magnitude < 1e15:
        return f"{int(value):,}"
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


@dataclasses.dataclass
class Evidence:
    """One measured value compared with its threshold: "host wait 71 % > 20 %"."""

    metric: str
    value: float
    op: str = ""
    threshold: float | None = None
    unit: str = ""

    def text(self) -> str:
        """The evidence as one readable condition."""
        unit = f" {self.unit}" if self.unit else ""
        if self.threshold is None or not self.op:
            return f"{self.metric} {fmt(self.value)}{unit}"
        return f"{self.metric} {fmt(self.value)}{unit} {self.op} {fmt(self.threshold)}{unit}"


@dataclasses.dataclass
class Fix:
    """A recommended fix, by stable id (../shared/mission.md), with a code example for the case."""

    id: str
    title: str
    how: str
    code: str = ""


@dataclasses.dataclass
class Finding:
    """A bottleneck a rule found, with everything needed to believe and act on it."""

    rule: str
    severity: str
    title: str
    evidence: list[Evidence]
    fixes: list[Fix]
    offenders: list[dict] = dataclasses.field(default_factory=list)
    est_speedup: float | None = None
    basis: str = ""
    recoverable_us: float | None = None
    why: str = ""


@dataclasses.dataclass
class Skipped:
    """A rule that could not run on this input, and why."""

    rule: str
    reason: str


@dataclasses.dataclass
class Checked:
    """A rule that ran and did not fire, with the deciding numbers."""

    rule: str
    detail: str


@dataclasses.dataclass
class Diagnosis:
    """Everything a report shows; `to_dict` is the findings.json schema."""

    target: str
    device: dict
    summary: dict
    findings: list[Finding]
    skipped: list[Skipped]
    checked: list[Checked] = dataclasses.field(default_factory=list)
    capture: dict = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    verdict: str = ""
    details: dict = dataclasses.field(default_factory=dict)
    schema: str = SCHEMA

    def to_dict(self) -> dict:
        """Plain data for JSON (the stable, versioned schema)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Diagnosis":
        """Rebuild a Diagnosis from its JSON form."""
        findings = [Finding(**{**f, "evidence": [Evidence(**e) for e in f["evidence"]],
                               "fixes": [Fix(**x) for x in f["fixes"]]}) for f in data["findings"]]
        return cls(target=data["target"], device=data["device"], summary=data["summary"],
                   findings=findings, skipped=[Skipped(**s) for s in data["skipped"]],
                   checked=[Checked(**c) for c in data.get("checked", [])],
                   capture=data.get("capture", {}), warnings=data.get("warnings", []),
                   verdict=data.get("verdict", ""), details=data.get("details", {}),
                   schema=data.get("schema", SCHEMA))

    def worst_severity(self) -> str | None:
        """The most serious severity among the findings."""
        for level in SEVERITIES:
            if any(f.severity == level for f in self.findings):
                return level
        return None

    def findings_frame(self):
        """The findings as a pandas DataFrame: one row per finding, evidence as text."""
        import pandas as pd

        return pd.DataFrame([{"rule": f.rule, "severity": f.severity, "title": f.title,
                              "est_speedup": f.est_speedup, "recoverable_us": f.recoverable_us,
                              "fixes": ", ".join(x.id for x in f.fixes),
                              "evidence": "; ".join(e.text() for e in f.evidence)} for f in self.findings])

    def kernels_frame(self):
        """The top GPU kernels per step as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.details.get("top_kernels", []))

    def steps_frame(self):
        """The per-step table (profiled time) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.details.get("steps", []))

    def _repr_html_(self) -> str:
        """Notebook display: the full report, isolated in an iframe so its styles stay its own."""
        import html

        from diagnose.report.html import render_html

        return (f'<iframe srcdoc="{html.escape(render_html(self), quote=True)}" '
                'style="width:100%;height:900px;border:1px solid #ddd"></iframe>')

    @property
    def workload_failed(self) -> bool:
        """True when the captured workload raised, ran out of memory, timed out or crashed."""
        return self.capture.get("status") not in (None, "ok")
