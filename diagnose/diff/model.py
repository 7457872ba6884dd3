"""The DiffReport: what `diagnose diff` concluded, and its JSON form (schema `diagnose.diff/1`).

    {"schema": "diagnose.diff/1",
     "before": {"target", "path", "device", "step_time_us", "verdict", "findings": [rule ids]},
     "after":  {...the same...},
     "step": {"before_us", "after_us", "change_pct", "interval_pct": [low, high], "confidence",
              "verdict": "faster" | "slower" | "no significant change", "basis", "n_before", "n_after",
              "method"},
     "verdict": "one sentence",
     "top_cause": bucket id of the largest change in the step's direction (or null),
     "buckets": [{"id", "label", "before_us", "after_us", "delta_us", "share_of_change",
                  "items": [{"kind", "name", "status", "before_us", "after_us", "delta_us", "detail"}]}],
     "shape_changes": [{"op", "before": [shapes], "after": [shapes], "us_per_step"}],
     "findings": [{"rule", "status", "before": {...} | null, "after": {...} | null}],
     "gate": {"fail_on_regression_pct", "tripped"} | null,
     "warnings": [...]}

Times are µs per step. New fields may be added within `diagnose.diff/1`, none removed or renamed.
"""

from __future__ import annotations

import dataclasses

from diagnose.diff.attribution import BucketChange, ItemChange
from diagnose.diff.changes import FindingChange
from diagnose.diff.stats import StepChange
from diagnose.vocabulary.units import percent

DIFF_SCHEMA = "diagnose.diff/1"


@dataclasses.dataclass
class Side:
    """What the report says about one side."""

    target: str
    device: dict
    step_time_us: float | None
    verdict: str
    findings: list[str]
    path: str = ""  # what the user named (a capture folder or trace); the target is the workload

    @property
    def name(self) -> str:
        """How to show this side: the path given, else the workload's target."""
        return self.path or self.target

    def to_dict(self) -> dict:
        """Plain data for diff.json."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(repr=False)
class DiffReport:
    """BEFORE against AFTER: the step change with its interval, where it went, what the rules say."""

    before: Side
    after: Side
    step: StepChange
    buckets: list[BucketChange]
    findings: list[FindingChange]
    shape_changes: list[dict] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    gate_pct: float | None = None
    gate_tripped: bool = False
    schema: str = DIFF_SCHEMA

    def __repr__(self) -> str:
        return f"<DiffReport {self.before.name!r} → {self.after.name!r}: {self.verdict}>"

    @property
    def step_delta_us(self) -> float:
        """Sum of the bucket changes, µs per step."""
        return sum(b.delta_us for b in self.buckets)

    @property
    def top_cause(self) -> BucketChange | None:
        """The bucket that carries most of the change in the direction the step moved."""
        total = self.step_delta_us
        if not self.buckets or not total:
            return None
        first = self.buckets[0]
        return first if first.delta_us * total > 0 else None

    def top_changes(self, n: int = 3) -> list[tuple[BucketChange, ItemChange | None]]:
        """The `n` largest attributed changes: (bucket, its largest matched item or None)."""
        out: list[tuple[BucketChange, ItemChange | None]] = []
        for bucket in self.buckets:
            if len(out) >= n or abs(bucket.delta_us) < 0.0005:
                break
            out.append((bucket, bucket.items[0] if bucket.items else None))
        return out

    @property
    def verdict(self) -> str:
        """One sentence: faster / slower / no significant change, by how much, and the main cause."""
        s = self.step
        low, high = s.interval_pct
        head = {"faster": "Faster", "slower": "Slower", "no significant change": "No significant change"}[s.verdict]
        text = (
            f"{head}: step {s.before_us:,.1f} µs → {s.after_us:,.1f} µs ({s.change_pct:+.1f} %, "
            f"{percent(s.confidence)} interval {low:+.1f} % to {high:+.1f} %)"
        )
        cause = self.top_cause
        if cause is not None and s.verdict != "no significant change":
            follows = next((b for b in self.buckets[1:2] if b.note), None)
            if follows is not None:
                text += (
                    f"; caused by {cause.label} ({cause.delta_us:+,.1f} µs per step), after which the GPU's "
                    f"queue ran dry: {follows.label} {follows.delta_us:+,.1f} µs per step"
                )
            else:
                text += f"; mostly {cause.label} ({cause.delta_us:+,.1f} µs per step)"
        return text + "."

    def to_dict(self) -> dict:
        """Plain data for JSON (the stable, versioned schema above)."""
        total = self.step_delta_us
        cause = self.top_cause
        return {
            "schema": self.schema,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "step": self.step.to_dict(),
            "verdict": self.verdict,
            "top_cause": cause.id if cause else None,
            "buckets": [b.to_dict(total) for b in self.buckets],
            "shape_changes": self.shape_changes,
            "findings": [f.to_dict() for f in self.findings],
            "gate": None
            if self.gate_pct is None
            else {"fail_on_regression_pct": self.gate_pct, "tripped": self.gate_tripped},
            "warnings": self.warnings,
        }
