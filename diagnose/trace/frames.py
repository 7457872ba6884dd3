"""Turn decoded events into the frames a Trace holds: one pass, one bucket per event family."""
from __future__ import annotations

import math

import pandas as pd

from diagnose.trace.kineto import Event

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"}
OP_CATS = {"cpu_op", "user_annotation"}

GPU_COLUMNS = ["name", "cat", "ts", "dur", "device", "stream", "correlation", "external_id",
               "grid", "block", "blocks", "threads_per_block", "registers", "shared_memory",
               "blocks_per_sm", "warps_per_sm", "occupancy", "bytes"]
RUNTIME_COLUMNS = ["name", "ts", "dur", "pid", "tid", "correlation", "external_id"]
OP_COLUMNS = ["name", "cat", "ts", "dur", "pid", "tid", "external_id", "input_dims", "input_types"]
ANNOTATION_COLUMNS = ["name", "ts", "dur", "device", "stream"]
SYNC_COLUMNS = ["name", "ts", "dur", "device", "stream", "correlation", "wait_on_stream"]
MEMORY_COLUMNS = ["ts", "bytes", "total_allocated", "total_reserved", "device_id", "device_type",
                  "addr", "tid"]


def _product(dims) -> int | None:
    if not isinstance(dims, list) or not dims:
        return None
    out = 1
    for d in dims:
        if not isinstance(d, (int, float)) or isinstance(d, bool):
            return None
        out *= int(d)
    return out


def _dims_text(dims) -> str | None:
    if not isinstance(dims, list):
        return None
    return ",".join(str(d) for d in dims)


def _int_or(value, fallback):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return fallback


def build_frames(events: list[Event], warnings: list[str]) -> dict[str, pd.DataFrame]:
    """Bucket events into gpu / runtime / ops / gpu_annotations / syncs / memory frames.

    Times are in microseconds relative to the earliest kept event (`t0`, returned in the
    dict under "t0" as a one-row frame). Events with missing or non-finite times or negative
    durations are dropped and counted in `warnings`.
    """
    gpu, runtime, ops, annotations, syncs, memory = [], [], [], [], [], []
    bad = 0
    for ev in events:
        cat, ph, ts = ev.cat, ev.ph, ev.ts
        if ts is None or not math.isfinite(ts):
            if cat in GPU_CATS or cat in RUNTIME_CATS or cat in OP_CATS:
                bad += 1
            continue
        if ph == "i" or ph == "I":
            if ev.name == "[memory]" and ev.args is not None:
                a = ev.args
                memory.append((ts, a.mem_bytes, a.total_allocated, a.total_reserved, a.device_id,
                               a.device_type, a.addr, ev.tid if isinstance(ev.tid, int) else None))
            continue
        if ph != "X" or cat is None:
            continue
        dur = ev.dur
        if dur is None or not math.isfinite(dur) or dur < 0:
            bad += 1
            continue
        a = ev.args
        name = ev.name if ev.name is not None else "<unnamed>"
        if cat in GPU_CATS:
            if a is None:
                a = _EMPTY
            gpu.append((name, "memcpy" if cat == "gpu_memcpy" else "memset" if cat == "gpu_memset"
                        else "kernel", ts, dur, _int_or(a.device, _int_or(ev.pid, 0)),
                        _int_or(a.stream, _int_or(ev.tid, 0)), a.correlation, a.external_id,
                        _dims_text(a.grid), _dims_text(a.block), _product(a.grid), _product(a.block),
                        a.registers, a.shared_memory, a.blocks_per_sm, a.warps_per_sm, a.occupancy,
                        a.bytes))
        elif cat in RUNTIME_CATS:
            a = a or _EMPTY
            runtime.append((name, ts, dur, ev.pid, ev.tid, a.correlation, a.external_id))
        elif cat in OP_CATS:
            a = a or _EMPTY
            ops.append((name, cat, ts, dur, ev.pid, ev.tid, a.external_id,
                        a.input_dims, a.input_types))
        elif cat == "gpu_user_annotation":
            a = a or _EMPTY
            annotations.append((name, ts, dur, _int_or(a.device, _int_or(ev.pid, 0)),
                                _int_or(a.stream, _int_or(ev.tid, 0))))
        elif cat == "cuda_sync":
            a = a or _EMPTY
            syncs.append((name, ts, dur, _int_or(a.device, _int_or(ev.pid, 0)),
                          _int_or(a.stream, _int_or(ev.tid, 0)), a.correlation, a.wait_on_stream))
    if bad:
        warnings.append(f"{bad} events with missing, non-finite or negative times were ignored")
    frames = {
        "gpu": pd.DataFrame(gpu, columns=GPU_COLUMNS),
        "runtime": pd.DataFrame(runtime, columns=RUNTIME_COLUMNS),
        "ops": pd.DataFrame(ops, columns=OP_COLUMNS),
        "gpu_annotations": pd.DataFrame(annotations, columns=ANNOTATION_COLUMNS),
        "syncs": pd.DataFrame(syncs, columns=SYNC_COLUMNS),
        "memory": pd.DataFrame(memory, columns=MEMORY_COLUMNS),
    }
    starts = [f["ts"].min() for f in frames.values() if len(f)]
    t0 = float(min(starts)) if starts else 0.0
    for key, frame in frames.items():
        frame["ts"] = frame["ts"].astype("float64") - t0
        if "dur" in frame:
            frame["dur"] = frame["dur"].astype("float64")
            frame["end"] = frame["ts"] + frame["dur"]
        for col in ("correlation", "external_id"):
            if col in frame:
                frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
        frames[key] = frame.sort_values("ts", kind="stable").reset_index(drop=True)
    frames["t0"] = t0
    return frames


class _Empty:
    """Stands in for a missing args object."""

    def __getattr__(self, name):
        return None


_EMPTY = _Empty()
