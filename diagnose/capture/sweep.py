"""Parameter sweeps (function mode): one capture per value, peak memory and step time per point.

An out-of-memory error at a point is a data point, not a failure of the sweep. The sweep folder
holds one capture folder per point (`NAME=VALUE/`) and sweep.json, which the analysis side reads.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from diagnose.capture.runner import run_capture
from diagnose.capture.spec import CaptureSpec, parse_scalar
from diagnose.base.safe_files import write_new

SWEEP_SCHEMA = "diagnose.sweep/1"


UNSAFE_IN_FOLDER_NAME = re.compile(r"[^A-Za-z0-9._+=-]")
MAX_FOLDER_NAME = 120


def parse_sweep(text: str) -> tuple[str, list]:
    """'seq_len=1024,2048' -> ('seq_len', [1024, 2048]).

    Raises ValueError for a name that is not a Python identifier (it is passed as NAME(**params)),
    fewer than two values, or two values that would share one point folder (`8,8`, `a/b,a_b`)."""
    if "=" not in text:
        raise ValueError(f"--sweep expects NAME=V1,V2,..., got {text!r}")
    name, raw = text.split("=", 1)
    name = name.strip()
    values = [parse_scalar(v.strip()) for v in raw.split(",") if v.strip()]
    if not name or len(values) < 2:
        raise ValueError(f"--sweep needs a name and at least two values, got {text!r}")
    if not name.isidentifier():
        raise ValueError(f"--sweep: the parameter name {name!r} is not a Python identifier")
    check_points(name, values)
    return name, values


def point_folder(name: str, value) -> str:
    """The folder name of one sweep point, `NAME=VALUE`, safe as a single path component.

    Characters other than letters, digits and `._+=-` become `_`, so a value such as `../../x`
    cannot reach outside the sweep folder; the result never starts with a dot and is bounded in length.
    """
    folder = UNSAFE_IN_FOLDER_NAME.sub("_", f"{name}={value}")[:MAX_FOLDER_NAME]
    return "_" + folder[1:] if folder.startswith(".") else folder


def check_points(name: str, values: list) -> None:
    """Raise ValueError when two values are equal (`8,8`, `8,8.0`) or would share one point folder
    (`a/b,a_b`; `X,x` on a case-insensitive filesystem)."""
    by_value: dict[tuple, object] = {}
    by_folder: dict[str, object] = {}
    for value in values:
        folder = point_folder(name, value)
        value_key = (isinstance(value, bool), value if isinstance(value, (int, float)) else str(value))
        if value_key in by_value:
            raise ValueError(
                f"--sweep: {value!r} is listed twice (as {by_value[value_key]!r} too); list each value once"
            )
        if folder.casefold() in by_folder:
            raise ValueError(
                f"--sweep: {value!r} and {by_folder[folder.casefold()]!r} would share one point "
                f"folder ({folder!r}); list distinct values"
            )
        by_value[value_key] = by_folder[folder.casefold()] = value


def run_sweep(
    spec: CaptureSpec,
    name: str,
    values: list,
    out: Path,
    timeout_s: float = 900.0,
    python: str | None = None,
    on_progress=None,
) -> dict:
    """Capture `spec` once per value of parameter `name`; write and return sweep.json's contents."""
    check_points(name, values)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    points = []
    for i, value in enumerate(values):
        folder = out / point_folder(name, value)
        point = dataclasses.replace(spec, out_dir=str(folder), params={**spec.params, name: value})
        if on_progress:
            on_progress({"phase": "sweep", "done": i, "total": len(values), "value": value})
        meta = run_capture(point, timeout_s=timeout_s, python=python)
        memory = meta.get("memory") or {}
        timing = meta.get("timing") or {}
        points.append(
            {
                "value": value,
                "status": meta.get("status"),
                "folder": folder.name,
                "peak_allocated_bytes": memory.get("max_allocated_bytes"),
                "peak_reserved_bytes": memory.get("max_reserved_bytes"),
                "median_step_us": timing.get("median_us"),
                "error": (meta.get("error") or {}).get("message"),
            }
        )
    doc = {"schema": SWEEP_SCHEMA, "target": spec.target, "param": name, "params": spec.params, "points": points}
    write_new(out / "sweep.json", json.dumps(doc, indent=2, default=str).encode())
    return doc
