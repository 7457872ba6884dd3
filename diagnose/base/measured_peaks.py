"""Peaks measured on the GPU itself (`diagnose probe`): the cache that keeps them per device, and the
device spec the rules use once a capture carries them.

A probe record (diagnose/child/gpu_probe.py measures it) holds the achievable HBM bandwidth in TB/s
and the matmul TFLOP/s of each precision on that GPU. It is cached as one JSON file per device and
software stack under `cache_dir()`; a capture copies it into meta.json as `gpu_probe`. `with_measured`
then replaces the achievable figures of the datasheet spec (diagnose/base/devices.py) by the measured ones
and keeps the datasheet beside them (or the estimate from the device's properties, which a measured
bandwidth completes where the estimate had none); for a GPU with neither the measured figures are the
only ceilings, and the spec's `source` says so.

This module never imports torch: the capture side and `diagnose probe` call the child that does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from diagnose.base import devices
from diagnose.base.safe_files import write_new

SCHEMA = "diagnose.gpu-probe/1"
PROBE_TIMEOUT_S = 300.0
RUNGS = ("fp32", "tf32", "fp16", "bf16", "fp8")


def cache_dir() -> Path:
    """Where probe records are cached: $DIAGNOSE_CACHE_DIR, else $XDG_CACHE_HOME/diagnose, else ~/.cache/diagnose."""
    if os.environ.get("DIAGNOSE_CACHE_DIR"):
        return Path(os.environ["DIAGNOSE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "diagnose"


def cache_key(device: dict) -> str:
    """A file-name-safe key for one GPU and software stack: name, UUID, torch, CUDA/ROCm and Triton versions."""
    parts = [device.get(k) or "" for k in ("name", "uuid", "torch", "cuda", "triton")]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(str(p) for p in parts)).strip("_")[:200]


def _path(key: str, folder) -> Path:
    return Path(folder or cache_dir()) / f"gpu-probe-{key}.json"


def valid(record) -> bool:
    """True for a probe record this version can use: the schema, a positive bandwidth, positive rates."""
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        return False
    hbm, rates = record.get("hbm_tbps"), record.get("tflops")
    if not _positive(hbm) or not isinstance(rates, dict):
        return False
    return all(isinstance(k, str) and _positive(v) for k, v in rates.items())


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def read_cache(key: str, folder=None) -> dict | None:
    """The cached record for `key`, or None (none cached, unreadable, a link, or not a valid record)."""
    path = _path(key, folder)
    try:
        if path.is_symlink():
            return None
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if valid(record) else None


def write_cache(key: str, record: dict, folder=None) -> Path | None:
    """Cache `record` under `key` (never through a link); None when the cache folder cannot be written."""
    path = _path(key, folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_new(path, json.dumps(record, indent=2).encode())
    except OSError:
        return None
    return path


def run_probe(
    python: str | None = None, refresh: bool = False, cache_folder=None, timeout_s: float = PROBE_TIMEOUT_S
) -> tuple[dict | None, str]:
    """Run the probe child (torch and the GPU live there) and return (record, "") or (None, why not)."""
    command = [python or sys.executable, "-m", "diagnose.child.gpu_probe"]
    if refresh:
        command.append("--refresh")
    if cache_folder:
        command += ["--cache-dir", str(cache_folder)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return None, f"the probe did not finish within {timeout_s:g} s"
    except OSError as exc:
        return None, f"cannot run {command[0]}: {exc.strerror or exc}"
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
        return None, lines[-1] if lines else f"the probe exited with status {done.returncode}"
    try:
        record = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "the probe printed no record"
    return (record, "") if valid(record) else (None, "the probe's record is not valid")


def measured_source(record: dict, datasheet: bool) -> str:
    """The `source` sentence of a spec whose achievable figures were measured by the probe."""
    rates = record.get("tflops") or {}
    named = ", ".join(f"{r} {rates[r]:,.0f}" for r in RUNGS if r in rates)
    when = str(record.get("measured_at") or "")[:10]
    text = (
        f"measured on this GPU by `diagnose probe`{' on ' + when if when else ''}: HBM "
        f"{record['hbm_tbps']:.2f} TB/s ({(record.get('bandwidth') or {}).get('method', 'copy kernel')}), "
        f"matmul TFLOP/s {named}"
    )
    return text + (
        "; datasheet ceilings beside them"
        if datasheet
        else "; no datasheet entry for this GPU, so shares of peak are of these measured figures"
    )


def with_measured(
    spec: devices.DeviceSpec | None, record: dict | None, device: dict | None = None
) -> devices.DeviceSpec | None:
    """`spec` with its achievable figures replaced by a probe `record`'s (None or invalid: `spec` as is).

    A datasheet peak below a measured figure is raised to it: no kernel runs above the peak, so a share of
    the peak never exceeds 100 %."""
    if not valid(record):
        return spec
    assert record is not None
    rates = {k: float(v) for k, v in record["tflops"].items() if k in RUNGS}
    hbm = float(record["hbm_tbps"])
    if spec is None:
        name = str((device or {}).get("name") or (record.get("device") or {}).get("name") or "this GPU")
        tensor = tuple(r for r in ("tf32", "bf16", "fp16", "fp8") if r in rates)
        return devices.DeviceSpec(
            name,
            hbm,
            dict(rates),
            hbm,
            dict(rates),
            measured_source(record, False),
            tensor,
            measured=("hbm", *sorted(rates)),
        )
    achievable = dict(spec.achievable_tflops)
    achievable.update({r: v for r, v in rates.items() if r in spec.peak_tflops or r == "fp16"})
    peaks = dict(spec.peak_tflops)
    for rung, value in achievable.items():
        if rung in peaks and peaks[rung] < value:
            peaks[rung] = value
    return dataclasses.replace(
        spec,
        hbm_tbps=max(spec.hbm_tbps, hbm) if spec.has_bandwidth else hbm,
        bandwidth_missing="",
        achievable_tbps=hbm,
        peak_tflops=peaks,
        achievable_tflops=achievable,
        source=measured_source(record, True),
        measured=("hbm", *sorted(r for r in rates if r in achievable)),
    )
