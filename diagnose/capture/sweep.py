"""Parameter sweeps (function mode): one capture per value, peak memory and step time per point.

An out-of-memory error at a point is a data point, not a failure of the sweep. The sweep folder
holds one capture folder per point (`NAME=VALUE/`) and sweep.json, which the analysis side reads.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from diagnose.capture.runner import run_capture
from diagnose.capture.spec import CaptureSpec, parse_scalar

SWEEP_SCHEMA = "diagnose.sweep/1"


def parse_sweep(text: str) -> tuple[str, list]:
    """'seq_len=1024,2048' -> ('seq_len', [1024, 2048])."""
    if "=" not in text:
        raise ValueError(f"--sweep expects NAME=V1,V2,..., got {text!r}")
    name, raw = text.split("=", 1)
    values = [parse_scalar(v.strip()) for v in raw.split(",") if v.strip()]
    if not name.strip() or len(values) < 2:
        raise ValueError(f"--sweep needs a name and at least two values, got {text!r}")
    return name.strip(), values


def run_sweep(spec: CaptureSpec, name: str, values: list, out: Path, timeout_s: float = 900.0,
              python: str | None = None, on_progress=None) -> dict:
    """Capture `spec` once per value of parameter `name`; write and return sweep.json's contents."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    points = []
    for i, value in enumerate(values):
        folder = out / f"{name}={value}"
        point = dataclasses.replace(spec, out_dir=str(folder), params={**spec.params, name: value})
        if on_progress:
            on_progress({"phase": "sweep", "done": i, "total": len(values), "value": value})
        meta = run_capture(point, timeout_s=timeout_s, python=python)
        memory = meta.get("memory") or {}
        timing = meta.get("timing") or {}
        points.append({"value": value, "status": meta.get("status"), "folder": folder.name,
                       "peak_allocated_bytes": memory.get("max_allocated_bytes"),
                       "peak_reserved_bytes": memory.get("max_reserved_bytes"),
                       "median_step_us": timing.get("median_us"),
                       "error": (meta.get("error") or {}).get("message")})
    doc = {"schema": SWEEP_SCHEMA, "target": spec.target, "param": name, "params": spec.params, "points": points}
    (out / "sweep.json").write_text(json.dumps(doc, indent=2, default=str))
    return doc
