"""Resolve an analysis target (trace file, standard input, capture folder, or a folder of one process's kineto
traces: trace/trace_folder.py) into a Trace, or a clear InputError.

What may be opened and how far gzip may inflate is trace/source.py's job; the capture folder's
meta.json is checked against its schema (trace/schemas.py); JSON nested too deeply for the
decoder is an InputError, never a RecursionError.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from diagnose.base.errors import InputError
from diagnose.base import step_timing
from diagnose.trace import kineto, legacy, parallel, schemas, source
from diagnose.trace.frames import build_frames
from diagnose.trace.model import Trace
from diagnose.trace.names import name_starts
from diagnose.trace.parallel import ProgressCallback
from diagnose.trace.trace_folder import folder_trace, readable_below
from diagnose.vocabulary.markers import OWN_PREFIX

TRACE_NAMES = ("trace.json.gz", "trace.json")
_BLANK = re.compile(rb"\s*")


def load_target(path: str | Path, on_progress: ProgressCallback | None = None, max_bytes: int | None = None) -> Trace:
    """Load a kineto trace (.json / .json.gz), standard input (`-`) or a capture folder written by diagnose.

    `on_progress`, when given, is called with {"phase": "decode", "done": n, "total": N} as the
    events are decoded (see parallel.build). `max_bytes` replaces the default ceiling on how large
    a trace may be once inflated (source.py; the command's --max-trace-bytes)."""
    path = Path(path)
    if source.input_fd(path) is not None:
        return load_trace_file(path, on_progress=on_progress, max_bytes=max_bytes)
    source.check_present(path)
    if path.is_dir():
        return load_capture_folder(path, on_progress, max_bytes=max_bytes)
    return load_trace_file(path, on_progress=on_progress, max_bytes=max_bytes)


def load_capture_folder(
    folder: Path, on_progress: ProgressCallback | None = None, max_bytes: int | None = None
) -> Trace:
    """A capture folder: meta.json (checked against its schema) plus, when the workload got that
    far, trace.json.gz."""
    meta_path = folder / "meta.json"
    trace_path = next((folder / n for n in TRACE_NAMES if (folder / n).exists()), None)
    if not meta_path.exists() and trace_path is None:
        return _load_folder_trace(folder, on_progress, max_bytes)
    meta = schemas.read_meta(meta_path) if meta_path.exists() else {}
    if meta.get("timing"):
        meta["timing"] = step_timing.normalised(meta["timing"])
    if trace_path is None:
        trace = empty_trace(str(folder))
    else:
        # diagnose wrote this trace: no events in it means the workload ran none, not a foreign file
        trace = load_trace_file(trace_path, allow_empty=True, on_progress=on_progress, max_bytes=max_bytes)
    own = name_starts(trace.ops["name"], OWN_PREFIX) if len(trace.ops) else None
    user_ops = int((~own).sum()) if own is not None else 0
    if meta.get("status") == "ok" and not (len(trace.gpu) or user_ops or len(trace.runtime)):
        trace.warnings.append(
            "the workload ran no PyTorch operation while it was profiled (does the script "
            "use torch?): there is nothing to diagnose"
        )
    trace.warnings.extend(str(w) for w in meta.get("warnings") or [] if w not in trace.warnings)
    trace.capture = meta
    trace.source = str(folder)
    return trace


def _load_folder_trace(folder: Path, on_progress: ProgressCallback | None, max_bytes: int | None) -> Trace:
    """A folder that is no capture folder: the kineto trace of one process it holds (the latest of several,
    with a warning that says so); InputError when it holds none."""
    found = folder_trace(folder)
    if found is None:
        below = readable_below(folder)
        hint = (
            f"; its sub-folder{'s' if len(below) > 1 else ''} {', '.join(str(p) for p in below)} can be read"
            if below
            else ""
        )
        raise InputError(
            f"{folder}: not a capture folder (no meta.json or trace.json.gz in it), and no kineto trace file in it{hint}"
        )
    trace = load_trace_file(found.path, on_progress=on_progress, max_bytes=max_bytes)
    if found.note:
        trace.warnings.append(found.note)
    return trace


def load_trace_file(
    path: Path, allow_empty: bool = False, on_progress: ProgressCallback | None = None, max_bytes: int | None = None
) -> Trace:
    """Read one kineto trace file (or standard input); raises InputError for anything that is not one."""
    read = _read_events(path, on_progress, max_bytes)
    name = source.describe(path)
    if read is None:
        if allow_empty:
            return empty_trace(name)
        raise InputError(f"{name}: the file is empty")
    decoded, frames = read
    warnings = decoded.warnings
    if not decoded.kept:
        if allow_empty:
            return empty_trace(name)
        raise InputError(f"{name}: the trace holds no events")
    if not (len(frames["gpu"]) or len(frames["ops"]) or len(frames["runtime"])):
        if allow_empty:
            return empty_trace(name)
        raise InputError(
            f"{name}: no PyTorch profiler events in it (no CPU ops, kernels or CUDA calls): "
            "is it a trace from another tool?"
        )
    return Trace(
        source=name,
        gpu=frames["gpu"],
        runtime=frames["runtime"],
        ops=legacy.relabel_operators(frames["ops"]),
        gpu_annotations=frames["gpu_annotations"],
        syncs=frames["syncs"],
        memory=frames["memory"],
        device_properties=decoded.deviceProperties or [],
        distributed=decoded.distributedInfo,
        diagnose_mark=decoded.diagnose,
        warnings=warnings,
        t0_us=frames["t0"],
        python=frames["python"],
        session_end_us=frames["session_end"],
        older_allocator_events=frames["older_allocator_events"],
    )


def _read_events(
    path: Path, on_progress: ProgressCallback | None = None, max_bytes: int | None = None
) -> tuple[kineto.Decoded, dict] | None:
    """Decode the file chunk by chunk into frames; None for an empty file.

    The file's bytes live only inside this call, so they are freed before the analysis starts.
    """
    raw = source.trace_bytes(path, max_bytes)
    name = source.describe(path)
    blank = _BLANK.match(raw)  # always matches (maybe nothing)
    if not len(raw) or (blank is not None and blank.end() == len(raw)):
        return None
    try:
        decoded = kineto.decode(raw)
        try:
            builder = parallel.build(decoded, on_progress)
        except msgspec.DecodeError:
            if not decoded.located:
                raise
            decoded = kineto.decode(raw, locate=False)
            builder = parallel.build(decoded, on_progress)
        del raw
        decoded.finish()
    except msgspec.DecodeError as exc:
        raise InputError(f"{name}: not a JSON trace ({exc})") from None
    except kineto.NotATrace as exc:
        raise InputError(f"{name}: not a PyTorch profiler (kineto) trace: {exc}") from None
    except RecursionError:
        raise InputError(f"{name}: JSON nested too deeply (more than ~1,000 levels) to be a trace") from None
    return decoded, builder.finish(decoded.warnings)


def empty_trace(source: str) -> Trace:
    """A trace with no events: what a workload that failed before profiling leaves."""
    frames = build_frames([], [])
    return Trace(
        source=source,
        gpu=frames["gpu"],
        runtime=frames["runtime"],
        ops=frames["ops"],
        gpu_annotations=frames["gpu_annotations"],
        syncs=frames["syncs"],
        memory=frames["memory"],
    )
