"""The result of `--verify`: one FixTrial per variant tried, one Verification per fix of a finding.

`Verification.record()` is what a finding's `verify` list holds: a diagnose.model.findings Verify (additive
to diagnose.model.findings/1), read by the renderers without this package.
"""

from __future__ import annotations

import dataclasses

from diagnose.base.typed import typed
from diagnose.model.findings import Verify


@dataclasses.dataclass
class FixTrial:
    """One variant of a fix, as measured: speedup (baseline ÷ fixed median) with its interval, numerics."""

    variant: str
    how: str
    status: str  # ok | failed | oom | timeout | crashed | not applicable | already applied
    verdict: str = ""  # numerics.VERDICTS
    error: str = ""
    speedup: float | None = None
    interval: list[float] | None = None  # [low, high] of the speedup, 95 %
    baseline_us: float | None = None  # median step, µs
    fixed_us: float | None = None
    n_baseline: int = 0
    n_fixed: int = 0
    baseline_basis: str = ""
    numerics: dict | None = None
    budget: dict | None = None  # the fixed step's budget, from its profiled steps
    folder: str = ""

    def to_dict(self) -> dict:
        """Plain data for findings.json."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Verification:
    """One fix of one finding: the variants tried (or why none could be), and the best outcome."""

    fix: str
    applicable: bool
    why: str = ""
    trials: list[FixTrial] = dataclasses.field(default_factory=list)
    snippet: str = ""

    @property
    def best(self) -> FixTrial | None:
        """The verified variant with the largest speedup, else the fastest that ran, else the first tried."""
        from diagnose.verify.numerics import rank

        return max(self.trials, key=rank) if self.trials else None

    def record(self) -> Verify:
        """The typed entry of a finding's `verify` list."""
        return typed(self.to_dict(), Verify)

    def to_dict(self) -> dict:
        """Plain data of a finding's `verify` entry."""
        best = self.best
        return {
            "fix": self.fix,
            "applicable": self.applicable,
            "why": self.why,
            "verdict": best.verdict if best else self.why,
            "best": best.variant if best else None,
            "snippet": self.snippet,
            "trials": [t.to_dict() for t in self.trials],
        }
