"""Thresholds: the named, documented, overridable numbers that rules and metrics decide by.

Every threshold declares the kind of value it takes, so `--set` and `[tool.diagnose]` values are
checked before any rule runs (a NaN share or a fractional token count never reaches a rule).
"""

from __future__ import annotations

import dataclasses
import math

from diagnose.vocabulary.units import fmt

COUNT_UNITS = {"count", "tokens", "positions", "rows", "kernels", "bytes", "steps"}


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A named, documented, overridable threshold of a rule (or of the timeline).

    `kind` says which values make sense, and is checked before any rule runs: "fraction" (a share,
    0 to 1), "count" (a whole number, at least 1) or "number" (any finite number, at least 0). Left
    empty it follows from the unit: "fraction", a count unit (tokens, rows, bytes...) or a number.
    `minimum` narrows the range from below: every threshold a rule divides by declares one above 0,
    so that no accepted value makes the quotient infinite (tests/test_threshold_ranges.py runs
    every rule with every threshold at the edges of its range)."""

    name: str
    default: float
    unit: str
    doc: str
    kind: str = ""
    minimum: float | None = None

    @property
    def value_kind(self) -> str:
        """The kind in force: the declared one, else the one the unit implies."""
        if self.kind:
            return self.kind
        if self.unit == "fraction":
            return "fraction"
        return "count" if self.unit in COUNT_UNITS else "number"

    def problem(self, value: float) -> str | None:
        """Why `value` cannot be this threshold (None when it can): the range it must lie in."""
        kind = self.value_kind
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
        if kind == "fraction" and not 0.0 <= value <= 1.0:
            return f"is a fraction: it must lie in [0, 1], got {fmt(value)}"
        if kind == "count" and (value < 1 or not float(value).is_integer()):
            return f"is a count of {self.unit}: it must be a whole number ≥ 1, got {fmt(value)}"
        if kind == "number" and value < 0:
            return f"must be ≥ 0, got {fmt(value)}"
        if self.minimum is not None and value < self.minimum:
            return f"must be ≥ {fmt(self.minimum)} (a rule divides by it), got {fmt(value)}"
        return None

    @property
    def lowest(self) -> float:
        """The smallest value `problem` accepts."""
        floor = 1 if self.value_kind == "count" else 0.0
        return floor if self.minimum is None else max(floor, self.minimum)
