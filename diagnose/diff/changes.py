"""Findings that appeared, disappeared or changed severity between two runs, with their evidence
side by side. Findings are matched by rule id (a rule gives at most one finding per run)."""

from __future__ import annotations

import dataclasses

from diagnose.model.findings import SEVERITIES, Finding


@dataclasses.dataclass
class FindingChange:
    """One rule's finding before and after (either may be None)."""

    rule: str
    status: str  # "appeared" | "disappeared" | "more severe" | "less severe" | "unchanged"
    before: Finding | None
    after: Finding | None

    def to_dict(self) -> dict:
        """Plain data for diff.json: severity, title, evidence, estimate and fixes of each side."""
        return {"rule": self.rule, "status": self.status, "before": _side(self.before), "after": _side(self.after)}


def finding_changes(before: list[Finding], after: list[Finding]) -> list[FindingChange]:
    """Every rule that fired on either side; appeared and more severe first, unchanged last."""
    by_b = {f.rule: f for f in before}
    by_a = {f.rule: f for f in after}
    out = []
    for rule in dict.fromkeys([*by_b, *by_a]):
        b, a = by_b.get(rule), by_a.get(rule)
        out.append(FindingChange(rule, _status(b, a), b, a))
    order = ("appeared", "more severe", "disappeared", "less severe", "unchanged")
    return sorted(out, key=lambda c: order.index(c.status))


def _status(b: Finding | None, a: Finding | None) -> str:
    if b is None:
        return "appeared"
    if a is None:
        return "disappeared"
    rank_b, rank_a = _rank(b.severity), _rank(a.severity)
    if rank_a < rank_b:
        return "more severe"
    if rank_a > rank_b:
        return "less severe"
    return "unchanged"


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def _side(f: Finding | None) -> dict | None:
    if f is None:
        return None
    return {
        "severity": f.severity,
        "title": f.title,
        "est_speedup": f.est_speedup,
        "evidence": [e.text() for e in f.evidence],
        "fixes": [x.id for x in f.fixes],
        "uncertain": f.range_text(),  # where an end of an uncertain estimated step changes it, else ""
    }
