"""The Python stack samples of a capture (pysamples.json.gz), aligned to the trace's clock.

diagnose/capture/sampler.py writes them while the profiled steps run. Here they are read lazily
from the capture folder (the Trace's `source`), put on the trace's time axis through the clock
marker range the sampler entered, and used to name the user's code behind stretches of time:
each sample is labelled with its innermost frame in the user's own code (frames under the
interpreter's library, site-packages or diagnose itself are skipped; the folders are the ones
recorded on the capture machine), and each stretch's time is shared equally among the samples
that fall inside it.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import weakref
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from diagnose.trace.model import Trace

SAMPLES_FILE = "pysamples.json.gz"
SCHEMA = "diagnose.pysamples/1"
CLOCK_MARKER = "diagnose/pysamples clock"
NO_SAMPLE = "(no sample inside: shorter than the sampling interval)"
ATTRIBUTION_COLUMNS = ["where", "file", "line", "function", "us", "samples"]


@dataclasses.dataclass
class PySamples:
    """Samples on the trace's time axis: `t` (µs, as the trace's frames), the label of each
    sample's innermost user frame (`where`: "file:line function"), and what was recorded."""

    t: np.ndarray
    where: np.ndarray
    file: np.ndarray
    line: np.ndarray
    function: np.ndarray
    interval_s: float
    cost: dict
    path: str

    def attribute(self, stretches: np.ndarray) -> pd.DataFrame:
        """Share each stretch's µs among the user lines sampled inside it, summed per line.

        `stretches` is a sorted (n, 2) array of disjoint [start, end) on the trace's time axis.
        Stretches without a sample go to one NO_SAMPLE row, so the rows add up to the stretches."""
        if not len(stretches):
            return pd.DataFrame(columns=ATTRIBUTION_COLUMNS)
        lo = np.searchsorted(self.t, stretches[:, 0], side="left")
        hi = np.searchsorted(self.t, stretches[:, 1], side="left")
        counts = hi - lo
        lengths = stretches[:, 1] - stretches[:, 0]
        rows = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if counts.sum() else np.empty(0, int)
        weights = np.repeat(np.divide(lengths, counts, out=np.zeros_like(lengths), where=counts > 0), counts)
        frame = pd.DataFrame({"where": self.where[rows], "file": self.file[rows], "line": self.line[rows],
                              "function": self.function[rows], "us": weights, "samples": 1})
        out = frame.groupby(["where", "file", "line", "function"], as_index=False, sort=False)[["us", "samples"]].sum()
        missed = float(lengths[counts == 0].sum())
        if missed > 0:
            out = pd.concat([out, pd.DataFrame([{"where": NO_SAMPLE, "file": "", "line": 0, "function": "",
                                                 "us": missed, "samples": 0}])], ignore_index=True)
        return out.sort_values(["us", "where"], ascending=[False, True], kind="stable").reset_index(drop=True)


_CACHE: dict[int, tuple] = {}


def python_samples(trace: Trace) -> PySamples | None:
    """The capture's stack samples aligned to `trace`, or None when it has none (a trace file from
    elsewhere, or a capture recorded before the sampler existed). Read once per trace; a file that
    cannot be used adds one warning to the trace and gives None."""
    key = id(trace)
    cached = _CACHE.get(key)
    if cached is not None and cached[0]() is trace:
        return cached[1]
    path = samples_path(trace)
    samples = None
    if path is not None:
        try:
            samples = read_samples(path, trace)
        except ValueError as exc:
            trace.warnings.append(f"{path}: Python stack samples not used ({exc})")
    _CACHE[key] = (weakref.ref(trace), samples)
    return samples


def samples_path(trace: Trace) -> Path | None:
    """pysamples.json.gz of the capture folder the trace came from, when there is one."""
    files = (trace.capture or {}).get("files") or {}
    folder = Path(trace.source)
    if not folder.is_dir():
        return None
    path = folder / (files.get("pysamples") or SAMPLES_FILE)
    return path if path.is_file() else None


def read_samples(path: Path, trace: Trace) -> PySamples:
    """Parse a samples file and align it to `trace`; ValueError with the reason when it cannot be."""
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise ValueError(f"unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file")
    try:
        offset = _offset_us(data["clock"], trace)
        frames, stacks = data["frames"], data["stacks"]
        rows = np.asarray(data["samples"], dtype=float).reshape(-1, 2)
        roots = [_folder(r) for r in data.get("library_roots", [])]
        labels = [_user_frame(stack, frames, roots, data.get("cwd") or "") for stack in stacks]
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"malformed: {exc!r}") from None
    ids = rows[:, 1].astype(int)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(labels)):
        raise ValueError("a sample names a stack that is not in the file")
    order = np.argsort(rows[:, 0], kind="stable")
    t, ids = rows[order, 0] + offset, ids[order]
    table = np.array(labels, dtype=object).reshape(-1, 4) if labels else np.empty((0, 4), dtype=object)
    return PySamples(t=t, where=table[ids, 0], file=table[ids, 1], line=table[ids, 2].astype(int),
                     function=table[ids, 3], interval_s=float(data.get("interval_s") or 0.0),
                     cost=data.get("cost") or {}, path=str(path))


def _offset_us(clock: dict, trace: Trace) -> float:
    """µs to add to a sample's time (µs since the sampler started) to put it on the trace's axis."""
    ops = trace.ops
    marker = ops[ops["name"] == clock.get("marker", CLOCK_MARKER)] if len(ops) else ops
    if not len(marker):
        raise ValueError(f"the trace has no {CLOCK_MARKER!r} range to align the samples with")
    marker_ts = float(marker["ts"].iloc[0])
    return marker_ts + (float(clock["start_ns"]) - float(clock["marker_ns"])) / 1000.0


def _folder(path: str) -> str:
    return path.rstrip("/\\") + os.sep if path else path


def _user_frame(stack: list[int], frames: list, roots: list[str], cwd: str) -> tuple:
    """(label, file, line, function) of the innermost frame of `stack` in the user's code; when
    every frame is library code, the innermost frame, marked as such."""
    for fid in reversed(stack):
        file, line, function = frames[fid]
        if not _is_library(file, roots):
            short = _relative(file, cwd)
            return (f"{short}:{line} {function}", short, int(line), function)
    if not stack:
        return ("(empty stack)", "", 0, "")
    file, line, function = frames[stack[-1]]
    short = _relative(file, cwd)
    return (f"{short}:{line} {function} (library code; no user frame)", short, int(line), function)


def _is_library(file: str, roots: list[str]) -> bool:
    return file.startswith("<") or any(file.startswith(root) for root in roots if root)


def _relative(file: str, cwd: str) -> str:
    folder = _folder(cwd)
    return file[len(folder):] if folder and file.startswith(folder) else file
