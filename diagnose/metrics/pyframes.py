"""The Python stack samples of a capture (pysamples.json.gz), aligned to the trace's clock.

diagnose/child/sampler.py writes them while the profiled steps run. Here they are read lazily
from the capture folder (the Trace's `source`), put on the trace's time axis through the clock
marker range the sampler entered, and used to name the user's code behind stretches of time:
each sample is labelled with its innermost frame in the user's own code (frames under the
interpreter's library, site-packages or diagnose itself are skipped; the folders are the ones
recorded on the capture machine), and each stretch's time is shared equally among the samples
that fall inside it.

A trace recorded with `with_stack=True` carries `python_function` events instead: the Python
call stack as nested ranges. `trace_stacks` turns them into the same samples, a point every
TRACE_GRID_US (coarser on long traces) labelled with the innermost frame covering it that is
not torch's own or a builtin, so trace mode names host time by file:line the way capture mode
does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from diagnose.trace import schemas
from diagnose.trace.model import Trace

SAMPLES_FILE = "pysamples.json.gz"
SCHEMA = "diagnose.pysamples/1"
CLOCK_MARKER = "diagnose/pysamples clock"
NO_SAMPLE = "(no sample inside or near it)"
# A stretch with no sample inside takes the nearest sample's line when one lies within
# max(NEAREST_US, NEAREST_GAPS × the median gap between samples) of it. The sampler thread needs
# the GIL, which busy Python hands over only every sys.getswitchinterval() (5 ms by default) or
# later, so samples of busy Python come several ms apart and shorter stretches fall between two
# samples of the code that filled them.
NEAREST_US = 5_000.0
NEAREST_GAPS = 2.0
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
    from_trace: bool = False  # made from the trace's python_function events, not sampled
    # every (file, function) the stacks or events name, library frames included (frameworks.py reads them)
    frames: tuple[tuple[str, str], ...] = ()

    def attribute(self, stretches: np.ndarray) -> pd.DataFrame:
        """Share each stretch's µs among the user lines sampled inside it, summed per line.

        `stretches` is a sorted (n, 2) array of disjoint [start, end) on the trace's time axis. A
        stretch with no sample inside goes whole to the nearest sample close enough (NEAREST_US);
        the rest to one NO_SAMPLE row, so the rows add up to the stretches."""
        if not len(stretches):
            return pd.DataFrame(columns=ATTRIBUTION_COLUMNS)
        lo = np.searchsorted(self.t, stretches[:, 0], side="left")
        hi = np.searchsorted(self.t, stretches[:, 1], side="left")
        counts = hi - lo
        lengths = stretches[:, 1] - stretches[:, 0]
        nearest = self._nearest(stretches, lo, counts == 0)
        lo, counts = np.where(nearest >= 0, nearest, lo), np.where(nearest >= 0, 1, counts)
        rows = np.concatenate([np.arange(a, a + c) for a, c in zip(lo, counts)]) if counts.sum() else np.empty(0, int)
        weights = np.repeat(np.divide(lengths, counts, out=np.zeros_like(lengths), where=counts > 0), counts)
        frame = pd.DataFrame(
            {
                "where": self.where[rows],
                "file": self.file[rows],
                "line": self.line[rows],
                "function": self.function[rows],
                "us": weights,
                "samples": 1,
            }
        )
        out = frame.groupby(["where", "file", "line", "function"], as_index=False, sort=False)[["us", "samples"]].sum()
        missed = float(lengths[counts == 0].sum())
        if missed > 0:
            out = pd.concat(
                [
                    out,
                    pd.DataFrame(
                        [{"where": NO_SAMPLE, "file": "", "line": 0, "function": "", "us": missed, "samples": 0}]
                    ),
                ],
                ignore_index=True,
            )
        return out.sort_values(["us", "where"], ascending=[False, True], kind="stable").reset_index(drop=True)

    def _nearest(self, stretches: np.ndarray, lo: np.ndarray, empty: np.ndarray) -> np.ndarray:
        """For each empty stretch, the index of the closest sample within NEAREST_US (else -1)."""
        out = np.full(len(stretches), -1)
        if not len(self.t) or not empty.any():
            return out
        before = np.clip(lo - 1, 0, len(self.t) - 1)
        after = np.clip(lo, 0, len(self.t) - 1)
        gap_before = np.where(lo > 0, stretches[:, 0] - self.t[before], np.inf)
        gap_after = np.where(lo < len(self.t), self.t[after] - stretches[:, 1], np.inf)
        pick = np.where(gap_before <= gap_after, before, after)
        reach = max(NEAREST_US, NEAREST_GAPS * float(np.median(np.diff(self.t)))) if len(self.t) > 1 else NEAREST_US
        close = np.minimum(gap_before, gap_after) <= reach
        out[empty & close] = pick[empty & close]
        return out


TRACE_GRID_US = 20.0
TRACE_MAX_POINTS = 500_000
PY_EVENT = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.+)$")
NOT_USER = ("torch/", "<built-in", "<frozen", "nn.Module:", "threading.py", "contextlib.py")


def trace_stacks(trace: Trace) -> PySamples | None:
    """Samples made from the trace's python_function events (with_stack=True); None without them."""
    py = trace.python
    if not len(py):
        return None
    # a function's name repeats at every call: parse each distinct name once
    codes, distinct = pd.factorize(py["name"].astype(str))
    parsed = pd.Series(distinct, dtype=object).str.extract(PY_EVENT)
    parsed_user = parsed["file"].notna() & ~parsed["file"].fillna("").str.startswith(NOT_USER)
    parts = parsed.iloc[codes].set_axis(py.index)
    everything = parts.dropna(subset=["file", "function"]).drop_duplicates(["file", "function"])
    user = pd.Series(parsed_user.to_numpy()[codes], index=py.index)
    frames = py[user.to_numpy()]
    if not len(frames):
        return None
    parts = parts[user]
    start, stop = float(frames["ts"].min()), float(frames["end"].max())
    step = max(TRACE_GRID_US, (stop - start) / TRACE_MAX_POINTS)
    t = np.arange(start, stop, step)
    label = np.full(len(t), -1)
    order = np.argsort(frames["ts"].to_numpy(float), kind="stable")  # a callee starts after its caller
    lo = np.searchsorted(t, frames["ts"].to_numpy(float)[order], side="left")
    hi = np.searchsorted(t, frames["end"].to_numpy(float)[order], side="left")
    wide = np.nonzero(hi > lo)[0]  # most calls are shorter than the grid and cover no point
    for i, a, b in zip(order[wide].tolist(), lo[wide].tolist(), hi[wide].tolist()):
        label[a:b] = i
    keep = label >= 0
    t, label = t[keep], label[keep]
    file = parts["file"].to_numpy(object)[label]
    line = parts["line"].astype(int).to_numpy()[label]
    function = parts["function"].to_numpy(object)[label]
    where = np.array([f"{f}:{n} {fn}" for f, n, fn in zip(file, line, function)], dtype=object)
    return PySamples(
        t=t,
        where=where,
        file=file,
        line=line,
        function=function,
        interval_s=step / 1e6,
        cost={},
        path="the trace's python_function events (with_stack=True)",
        from_trace=True,
        frames=tuple(zip(everything["file"].astype(str), everything["function"].astype(str))),
    )


def python_samples(trace: Trace) -> tuple[PySamples | None, str | None]:
    """The capture's stack samples aligned to `trace`, or None when it has none (a trace file from
    elsewhere, or a capture recorded before the sampler existed); and, when a samples file exists
    but cannot be used, a warning saying why. Metrics.python_samples reads it once per trace."""
    path = samples_path(trace)
    if path is None:
        return trace_stacks(trace), None
    try:
        return read_samples(path, trace), None
    except ValueError as exc:
        return None, f"{path}: Python stack samples not used ({exc})"


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
    raw = schemas.read_side_bytes(path, "Python stack samples")  # InputError past the ceiling
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
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
    return PySamples(
        t=t,
        where=table[ids, 0],
        file=table[ids, 1],
        line=table[ids, 2].astype(int),
        function=table[ids, 3],
        interval_s=float(data.get("interval_s") or 0.0),
        cost=data.get("cost") or {},
        path=str(path),
        frames=tuple((str(f[0]), str(f[2])) for f in frames if isinstance(f, list) and len(f) >= 3),
    )


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
    return file[len(folder) :] if folder and file.startswith(folder) else file
