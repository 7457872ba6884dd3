"""The metrics' sections of the report, typed (metrics/sections.py): top kernels, one step's timeline, the
per-step table, the work inventory. Each builder returns its Structs; the Diagnosis holds them as they are."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.base.typed import typed
from diagnose.metrics.sections import InventoryRow, StepRow, StepTimeline, TopKernel

MAX_TIMELINE_ITEMS = 3000


def top_kernels(metrics, limit: int = 15) -> list[TopKernel]:
    """The GPU ops that take most time per step, with the CPU op that launched each most often."""
    ops = metrics.step_kernels
    n = max(metrics.budget.n_steps, 1)
    if not len(ops):
        return []
    busy = float(ops["dur"].sum()) or 1.0
    grouped = aggregate(
        ops.groupby("name", sort=False),
        kind=("cat", "first"),
        calls=("dur", "size"),
        total_us=("dur", "sum"),
        median_us=("dur", "median"),
    )
    grouped = grouped.sort_values("total_us", ascending=False).head(limit)
    # the launching op and shapes of the top kernels only (the three columns, not a copy of every column)
    top = ops[["name", "op_name", "input_dims"]][ops["name"].isin(grouped.index)]
    by_name = dict(list(top.groupby("name", sort=False)[["op_name", "input_dims"]]))
    rows = []
    for name, row in grouped.iterrows():
        launched = by_name[name]
        op = launched["op_name"].mode().iat[0] if launched["op_name"].notna().any() else None
        rows.append(
            {
                "name": name,
                "cat": row.kind,
                "calls_per_step": round(row.calls / n, 2),
                "us_per_step": round(row.total_us / n, 3),
                "median_us": round(float(row.median_us), 3),
                "share_of_gpu_time": round(row.total_us / busy, 4),
                "op": op,
                "input_dims": _first_text(launched["input_dims"]),
            }
        )
    return typed(rows, list[TopKernel])


INVENTORY_ROWS = 400


def work_inventory(metrics, limit: int = INVENTORY_ROWS) -> list[InventoryRow]:
    """Every GPU op of the measured steps grouped by (kernel name, launching CPU op, its input
    shapes), per step, largest first (at most `limit` rows): what `diagnose diff` matches across
    two runs, kernels by name family and ops by name and shapes."""
    ops = metrics.step_kernels
    n = max(metrics.budget.n_steps, 1)
    if not len(ops):
        return []
    keys = [
        ops["name"].to_numpy(object),
        ops["op_name"].fillna("").to_numpy(object),
        np.array(_texts(ops["input_dims"]), dtype=object),
    ]
    group = group_codes(keys)
    frame = pd.DataFrame({"group": group, "cat": ops["cat"].to_numpy(), "dur": ops["dur"].to_numpy(float)})
    grouped = aggregate(
        frame.groupby("group", sort=False), kind=("cat", "first"), calls=("dur", "size"), total_us=("dur", "sum")
    )
    first = np.flatnonzero(~pd.Series(group).duplicated().to_numpy())  # each group's first row, in group order
    for column, values in zip(("name", "op", "input_dims"), keys):
        grouped[column] = values[first]
    grouped = grouped.sort_values("total_us", ascending=False).head(limit)
    rows = [
        {
            "name": row.name,
            "op": row.op or None,
            "input_dims": row.input_dims or None,
            "cat": row.kind,
            "calls_per_step": round(row.calls / n, 3),
            "us_per_step": round(row.total_us / n, 3),
        }
        for row in grouped.itertuples(index=False)
    ]
    return typed(rows, list[InventoryRow])


def group_codes(keys: list[np.ndarray]) -> np.ndarray:
    """One integer per distinct tuple of the keys' values, numbered in order of first appearance
    (the groups of a groupby on the keys with sort=False, in that order), without the keys' tuples."""
    group = pd.factorize(keys[0])[0]
    for values in keys[1:]:
        codes = pd.factorize(values)[0]
        group = pd.factorize(group * (int(codes.max()) + 1) + codes)[0]
    return group


def _texts(dims: pd.Series) -> list[str]:
    """str() of each shape list ("" for none), once per list: the decoder shares one list per
    distinct value (trace/frames.py), and `dims` keeps them alive while the ids are used."""
    values = dims.to_numpy(object)
    if not len(values):
        return []
    codes, ids = pd.factorize(np.fromiter(map(id, values), dtype=np.int64, count=len(values)))
    first = np.zeros(len(ids), dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # each id's first row
    texts = np.array([str(v) if isinstance(v, list) else "" for v in values[first]], dtype=object)
    return texts[codes].tolist()


def _first_text(series: pd.Series):
    for value in series:
        if isinstance(value, list):
            return str(value)
    return None


def step_timeline(metrics) -> StepTimeline | None:
    """GPU ops and classified gaps of the median-length measured step, times relative to its start; None
    without a measured step or a GPU timeline."""
    steps = metrics.steps.windows
    if not steps or metrics.timeline.device is None:
        return None
    ordered = sorted(steps, key=lambda w: w.duration)
    window = ordered[len(ordered) // 2]
    ops = metrics.timeline.ops
    ops = ops[(ops["end"] > window.start) & (ops["ts"] < window.end)].head(MAX_TIMELINE_ITEMS)
    gaps = metrics.timeline.gaps
    gaps = gaps[gaps["step"] == window.index].head(MAX_TIMELINE_ITEMS)
    timeline = {
        "step": window.index,
        "label": window.label,
        "duration_us": round(window.duration, 3),
        "ops": [
            {
                "t": round(r.ts - window.start, 3),
                "dur": round(r.dur, 3),
                "name": r.name,
                "cat": r.cat,
                "stream": int(r.stream),
            }
            for r in ops.itertuples()
        ],
        "gaps": [
            {
                "t": round(r.start - window.start, 3),
                "dur": round(r.dur, 3),
                "kind": r.kind,
                "after_sync": bool(r.after_sync),
            }
            for r in gaps.itertuples()
        ],
        "note": "profiled time (the profiler stretches host-side gaps)",
    }
    return typed(timeline, StepTimeline)


def per_step(metrics) -> list[StepRow]:
    """The per-step table (profiled time)."""
    frame = metrics.timeline.per_step
    return [] if frame is None or not len(frame) else typed(frame.round(3).to_dict("records"), list[StepRow])
