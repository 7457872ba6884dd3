"""findings.json: the versioned, machine-readable form of a Diagnosis."""

from __future__ import annotations

import json
import math

from diagnose.model.findings import Diagnosis
from diagnose.base.format import json_inert
from diagnose.report import Renderer


def render_json(diagnosis: Diagnosis, indent: int | None = 2, **_) -> str:
    """The Diagnosis as JSON (schema `diagnose.model.findings/1`); NaN and infinities become null."""
    return json_inert(json.dumps(_clean(diagnosis.to_dict()), indent=indent, ensure_ascii=False))


def render_diff_json(report, indent: int | None = 2, **_) -> str:
    """A DiffReport as JSON (schema `diagnose.diff/1`, diagnose/diff/model.py)."""
    return json_inert(json.dumps(_clean(report.to_dict()), indent=indent, ensure_ascii=False))


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _clean(value.item())
    return value


RENDERER = Renderer(
    "json",
    "findings.json: the versioned schema diagnose.model.findings/1",
    render_json,
    filename="findings.json",
    label="findings",
    order=10,
    render_diff=render_diff_json,
    diff_filename="diff.json",
)
