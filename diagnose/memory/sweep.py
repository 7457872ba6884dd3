"""Parameter sweeps: read a sweep folder's sweep.json and fit how peak memory and step time grow.

A sweep folder (diagnose/capture/sweep.py) holds sweep.json (schema diagnose.sweep/1) and one
capture folder per point. Growth is fitted as a power law y = a·x^b by least squares on
log y against log x over the points that ran (status "ok"); b is the growth exponent (1: linear,
2: quadratic). Points that ran out of memory are not fitted: the first of them is the wall.
"""

from __future__ import annotations

import dataclasses
import os
import math
from collections.abc import Sequence
from pathlib import Path

from diagnose.base.errors import InputError
from diagnose.trace import schemas

SWEEP_FILE = "sweep.json"
SCHEMA = "diagnose.sweep/1"


def is_sweep_folder(path) -> bool:
    """True when `path` is a folder holding sweep.json."""
    path = Path(path)
    return path.is_dir() and (path / SWEEP_FILE).is_file()


@dataclasses.dataclass
class SweepPoint:
    """One value of the swept parameter and what its capture measured."""

    value: object
    status: str | None
    folder: str | None
    peak_allocated: float | None
    peak_reserved: float | None
    step_us: float | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def x(self) -> float | None:
        """The value as a positive number, or None (a string value, zero, negative)."""
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) or self.value <= 0:
            return None
        return float(self.value)


@dataclasses.dataclass
class Fit:
    """y ≈ coefficient · x^exponent over `n` points; `r2` on the log scale; `local` the exponent
    between each pair of neighbouring points."""

    exponent: float
    coefficient: float
    r2: float
    n: int
    local: list[float]

    def predict(self, x: float) -> float:
        """The fitted value at x."""
        return self.coefficient * x**self.exponent

    def reach(self, y: float) -> float | None:
        """The x at which the fit reaches y (None for a flat or falling fit)."""
        if self.exponent <= 0 or y <= 0:
            return None
        return (y / self.coefficient) ** (1.0 / self.exponent)


def fit_power(xs: Sequence[float | None], ys: Sequence[float | None]) -> Fit | None:
    """Least-squares fit of log y = log a + b·log x (pairs with a None or a non-positive side left out);
    None with fewer than two usable points."""
    pairs = sorted((x, y) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0)
    if len({x for x, _ in pairs}) < 2:
        return None
    import numpy as np  # here: the command line asks whether a folder is a sweep before any analysis

    lx = np.log([x for x, _ in pairs])
    ly = np.log([y for _, y in pairs])
    b, log_a = np.polyfit(lx, ly, 1)
    residual = ly - (log_a + b * lx)
    spread = ((ly - ly.mean()) ** 2).sum()
    r2 = 1.0 - float((residual**2).sum() / spread) if spread > 0 else 1.0
    local = [float((ly[i + 1] - ly[i]) / (lx[i + 1] - lx[i])) for i in range(len(lx) - 1) if lx[i + 1] > lx[i]]
    return Fit(float(b), float(math.exp(log_a)), r2, len(pairs), local)


@dataclasses.dataclass
class Sweep:
    """A loaded sweep: its points (in sweep order) and the growth fits over the points that ran."""

    folder: str
    param: str
    target: str | None
    params: dict
    points: list[SweepPoint]
    memory_fit: Fit | None
    time_fit: Fit | None
    reserved_fit: Fit | None
    device_total: float | None

    @property
    def ok_points(self) -> list[SweepPoint]:
        return [p for p in self.points if p.ok]

    @property
    def oom_points(self) -> list[SweepPoint]:
        return [p for p in self.points if p.status == "oom"]

    @property
    def wall(self) -> SweepPoint | None:
        """The smallest value that ran out of memory (points in sweep order when values are not numbers)."""
        ooms = self.oom_points
        numeric = [(x, p) for p in ooms if (x := p.x) is not None]
        return min(numeric, key=lambda xp: xp[0])[1] if numeric else (ooms[0] if ooms else None)

    def predicted_wall(self) -> float | None:
        """Where the peak-memory fit reaches the device's memory."""
        if self.memory_fit is None or not self.device_total:
            return None
        return self.memory_fit.reach(self.device_total)

    def representative(self) -> SweepPoint | None:
        """The point the rules run on: the largest that ran and left a trace; else the first point."""
        root = Path(self.folder)
        traced = [p for p in self.ok_points if p.folder and _has_trace(root / p.folder)]
        if traced:
            return max(traced, key=lambda p: p.x if p.x is not None else self.points.index(p))
        return next((p for p in self.points if p.folder and (root / p.folder).is_dir()), None)

    def to_dict(self) -> dict:
        """Plain data for Diagnosis.details["memory"]["sweep"] and the report's charts."""
        wall = self.wall
        return {
            "folder": self.folder,
            "param": self.param,
            "target": self.target,
            "params": self.params,
            "points": [
                {
                    "value": p.value,
                    "status": p.status,
                    "folder": p.folder,
                    "peak_allocated_bytes": p.peak_allocated,
                    "peak_reserved_bytes": p.peak_reserved,
                    "median_step_us": p.step_us,
                    "error": p.error,
                }
                for p in self.points
            ],
            "fits": {
                name: _fit_dict(fit)
                for name, fit in (
                    ("peak_allocated", self.memory_fit),
                    ("peak_reserved", self.reserved_fit),
                    ("step_time", self.time_fit),
                )
            },
            "wall": None if wall is None else {"value": wall.value, "error": wall.error},
            "device_total_bytes": self.device_total,
            "predicted_wall": _round(self.predicted_wall()),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _fit_dict(fit: Fit | None) -> dict | None:
    if fit is None:
        return None
    return {
        "exponent": round(fit.exponent, 3),
        "coefficient": fit.coefficient,
        "r2": round(fit.r2, 4),
        "points": fit.n,
        "local_exponents": [round(v, 3) for v in fit.local],
    }


def _has_trace(folder: Path) -> bool:
    return (folder / "trace.json.gz").is_file() or (folder / "trace.json").is_file()


def load_sweep(folder) -> Sweep:
    """Read sweep.json of `folder` and fit the growth of peak memory and step time; InputError when
    the folder is not a sweep."""
    folder = Path(folder)
    path = folder / SWEEP_FILE
    if not path.is_file():
        raise InputError(f"{folder}: not a sweep folder (no {SWEEP_FILE} in it)")
    doc = schemas.read_json_object(path, "sweep record")  # bounded; InputError naming the file
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("points"), list):
        raise InputError(f"{path}: not a {SCHEMA} file")
    points = [
        SweepPoint(
            value=p.get("value"),
            status=p.get("status"),
            folder=confined(folder, p.get("folder")),
            peak_allocated=_num(p.get("peak_allocated_bytes")),
            peak_reserved=_num(p.get("peak_reserved_bytes")),
            step_us=_num(p.get("median_step_us")),
            error=p.get("error"),
        )
        for p in doc["points"]
        if isinstance(p, dict)
    ]
    ok = [p for p in points if p.ok and p.x is not None]
    xs = [p.x for p in ok]
    return Sweep(
        folder=str(folder),
        param=str(doc.get("param") or "parameter"),
        target=doc.get("target"),
        params=doc.get("params") or {},
        points=points,
        memory_fit=fit_power(xs, [p.peak_allocated for p in ok]),
        time_fit=fit_power(xs, [p.step_us for p in ok]),
        reserved_fit=fit_power(xs, [p.peak_reserved for p in ok]),
        device_total=_device_total(folder, points),
    )


def confined(folder: Path, name) -> str | None:
    """`name` when it is a relative path to a folder inside `folder` (links resolved); None otherwise, so a
    sweep.json naming `../elsewhere`, an absolute path or a link out of the sweep folder reads nothing there."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        return None
    inside = Path(os.path.realpath(folder / name))
    return (
        name
        if inside.is_relative_to(Path(os.path.realpath(folder))) and inside != Path(os.path.realpath(folder))
        else None
    )


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _device_total(folder: Path, points: list[SweepPoint]) -> float | None:
    """The GPU's memory, from the first point whose meta.json or memory.json names it."""
    for p in points:
        for name, key in (
            ("memory.json.gz", ("device_total_bytes",)),
            ("memory.json", ("device_total_bytes",)),
            ("meta.json", ("device", "total_memory_bytes")),
        ):
            path = folder / str(p.folder) / name
            if not p.folder or not path.is_file():
                continue
            try:
                value: object = schemas.read_json_object(path, name)
                for k in key:
                    value = value.get(k) if isinstance(value, dict) else None
            except (OSError, ValueError, InputError):
                continue
            if isinstance(value, (int, float)) and value > 0:
                return float(value)
    return None
