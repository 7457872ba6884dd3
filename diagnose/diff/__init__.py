"""`diagnose diff BEFORE AFTER`: did a change make the workload slower, and why?

Two Diagnoses in (each side analysed once, by pipeline.analyse), one DiffReport out:

- `stats.py`        step time before/after, a bootstrap interval on the ratio of medians, the verdict
- `matching.py`     kernels matched by name family, ops by name and input shapes
- `attribution.py`  the change split over the step-accounting buckets and, inside them, matched items
- `changes.py`      findings that appeared, disappeared or changed severity
- `model.py`        the DiffReport and its JSON form (`diagnose.diff/1`)
- `build.py`        the one function that puts them together (`diff_diagnoses`)

The package sits between assemble and the renderers: it reads Diagnoses, never a trace.
"""

from __future__ import annotations

from diagnose.diff.build import diff_diagnoses
from diagnose.diff.model import DIFF_SCHEMA, DiffReport

__all__ = ["DIFF_SCHEMA", "DiffReport", "diff_diagnoses"]
