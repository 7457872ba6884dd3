"""Ops that hold the host without launching: setup time inside kernel-launching ops, per step.

A kernel-launching op that sits for hundreds of µs without a CUDA call while the GPU idles is
not dispatching: it is building a cuDNN/cuBLAS plan, autotuning, allocating, or (for
torch.compile's ranges) compiling. This module lists every such op instance of the measured
steps with the silent host time it holds itself (its deepest op owns each µs; a compile range
holds everything inside it), its host and kernel µs, its input shapes and its step, and
compares the shapes of consecutive steps, for the dynamic-shapes rule.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from diagnose.metrics.host import _spans, _touching, merge_intervals, overlap_us, self_held, setup_mask
from diagnose.trace.model import Trace
from diagnose.trace.names import name_match, name_search
from diagnose.vocabulary.compiled import COMPILED_REGION, COMPILING

HELD_COLUMNS = ["step", "name", "ts", "host_us", "held_us", "kernel_us", "shapes", "compile"]


def held_ops(trace: Trace, windows, silent: pd.DataFrame, min_held_us: float) -> pd.DataFrame:
    """Op instances of the measured steps that hold at least `min_held_us` of silent host time."""
    if not len(silent) or not windows:
        return pd.DataFrame(columns=HELD_COLUMNS)
    stretches = merge_intervals(silent["start"].to_numpy(float), silent["end"].to_numpy(float))
    cpu = trace.cpu_ops
    cpu = cpu[_touching(cpu["ts"].to_numpy(float), cpu["end"].to_numpy(float), stretches)].reset_index(drop=True)
    cpu = cpu[setup_mask(trace, cpu)].reset_index(drop=True)
    compiling = name_search(cpu["name"], COMPILING)
    outer = _outermost(cpu[compiling])
    launching = cpu[~compiling]
    launching = launching[~_inside(launching, outer)]
    held = np.concatenate(
        [self_held(launching, stretches), [overlap_us(stretches, _spans(outer.iloc[[i]])) for i in range(len(outer))]]
    )
    ops = pd.concat([launching.assign(compile=False), outer.assign(compile=True)], ignore_index=True)
    ops = ops.assign(held_us=held)
    ops = ops[ops["held_us"] >= min_held_us]
    step = _step_of(ops["ts"].to_numpy(float), windows)
    ops = ops.assign(step=step)[step >= 0]
    if not len(ops):
        return pd.DataFrame(columns=HELD_COLUMNS)
    return (
        pd.DataFrame(
            {
                "step": ops["step"].to_numpy(int),
                "name": ops["name"].to_numpy(object),
                "ts": ops["ts"].to_numpy(float),
                "host_us": ops["dur"].to_numpy(float),
                "held_us": ops["held_us"].to_numpy(float),
                "kernel_us": _kernel_us(trace, ops),
                "shapes": [_dims_text(d) for d in ops["input_dims"]],
                "compile": ops["compile"].to_numpy(bool),
            }
        )
        .sort_values("ts", kind="stable")
        .reset_index(drop=True)
    )


def step_shapes(trace: Trace, windows) -> list[list[tuple[str, str]]]:
    """Per step, the (op name, input shapes) of its CPU ops in order, for ops with recorded shapes."""
    cpu = trace.cpu_ops
    step = _step_of(cpu["ts"].to_numpy(float), windows)
    out: list[list[tuple[str, str]]] = [[] for _ in windows]
    names, dims = cpu["name"].to_numpy(object), cpu["input_dims"].to_numpy(object)
    for i in np.nonzero(step >= 0)[0]:
        text = _dims_text(dims[i])
        if text:
            out[step[i]].append((names[i], text))
    return out


def shape_changes(before: list[tuple[str, str]], after: list[tuple[str, str]], limit: int = 3) -> list[tuple]:
    """(op, shapes before, shapes after) for the first `limit` ops whose k-th call in one step has
    other shapes than its k-th call in the step before."""
    seen: dict[str, list[str]] = {}
    for name, dims in before:
        seen.setdefault(name, []).append(dims)
    count: dict[str, int] = {}
    changes: list[tuple[str, str, str]] = []
    for name, dims in after:
        k = count.get(name, 0)
        count[name] = k + 1
        prior = seen.get(name, [])
        if k < len(prior) and prior[k] != dims and all(c[0] != name for c in changes):
            changes.append((name, prior[k], dims))
            if len(changes) >= limit:
                break
    return changes


def compiled_versions(trace: Trace, windows) -> list[list[str]]:
    """Per step, the `Torch-Compiled Region: frame/version` ranges it ran: a new version number
    for the same frame is a recompile."""
    ops = trace.ops
    marked = ops[name_match(ops["name"], COMPILED_REGION)] if len(ops) else ops
    step = _step_of(marked["ts"].to_numpy(float), windows)
    out: list[list[str]] = [[] for _ in windows]
    for name, s in zip(marked["name"], step):
        if s >= 0:
            out[s].append(name.split(": ", 1)[1])
    return out


def _dims_text(dims) -> str:
    """Input shapes as compact text ("[32, 16, 1, 128], [32, 16, 1060, 128]"); "" when none."""
    if not isinstance(dims, (list, tuple)):
        return ""
    shaped = [d for d in dims if isinstance(d, (list, tuple)) and len(d)]
    return ", ".join(str(list(d)) for d in shaped)


def _step_of(ts: np.ndarray, windows) -> np.ndarray:
    """Index of the step whose CPU range holds each time (the ranges tile from the first step's
    start to the last one's end), else -1."""
    starts = np.array([w.cpu_start for w in windows], dtype=float)
    last_end = max(w.cpu_end for w in windows)
    idx = np.searchsorted(starts, ts, side="right") - 1
    return np.where((idx >= 0) & (ts < last_end), idx, -1)


def _outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops of `ops` not nested inside another one of them on the same thread."""
    keep = ~_inside(ops, ops, strict=True)
    return ops[keep].reset_index(drop=True)


def _inside(ops: pd.DataFrame, outer: pd.DataFrame, strict: bool = False) -> np.ndarray:
    """For each op, whether some op of `outer` on its thread contains it (itself excluded when strict)."""
    out = np.zeros(len(ops), dtype=bool)
    if not len(outer) or not len(ops):
        return out
    ts, end, tid = ops["ts"].to_numpy(float), ops["end"].to_numpy(float), ops["tid"].to_numpy(object)
    for o_ts, o_end, o_tid in zip(outer["ts"], outer["end"], outer["tid"]):
        hit = (tid == o_tid) & (ts >= o_ts) & (end <= o_end)
        if strict:
            hit &= (ts != o_ts) | (end != o_end)
        out |= hit
    return out


def _kernel_us(trace: Trace, ops: pd.DataFrame) -> np.ndarray:
    """For each op, the GPU time of the work launched by CUDA calls inside it on its thread."""
    runtime = trace.runtime.dropna(subset=["correlation"])
    gpu_by_corr = trace.gpu.dropna(subset=["correlation"]).groupby("correlation")["dur"].sum()
    out = np.zeros(len(ops))
    for tid, group in ops.groupby("tid", sort=False):
        calls = runtime[runtime["tid"] == tid].sort_values("ts")
        call_ts, corr = calls["ts"].to_numpy(float), calls["correlation"].to_numpy()
        durs = gpu_by_corr.reindex(corr).fillna(0.0).to_numpy(float)
        total = np.concatenate(([0.0], np.cumsum(durs)))
        lo = np.searchsorted(call_ts, group["ts"].to_numpy(float), side="left")
        hi = np.searchsorted(call_ts, group["end"].to_numpy(float), side="right")
        out[ops.index.get_indexer(group.index)] = total[hi] - total[lo]
    return out
