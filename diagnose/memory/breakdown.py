"""What holds the peak: parameters, gradients, optimizer state and activations where the ops say so,
else the largest live allocations by the user code that made them (memory.json's snapshot).

Training is recognised by `torch::autograd::AccumulateGrad` (one per parameter per backward pass,
its input shaped and typed like the parameter) and the optimizer by `Optimizer.step#NAME.step`;
the optimizer keeps STATES_PER_PARAM tensors like each parameter. In inference the weights are
the weight operands of the outermost `aten::linear` calls and embedding tables of one step, and
the KV cache is what the decode-shaped attention calls read. The rest of the peak is activations
and temporaries.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pandas as pd

from diagnose.memory.patterns import attention_calls, shapes, step_index

ACCUMULATE = "torch::autograd::AccumulateGrad"
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#(\w+)\.step$")
STATES_PER_PARAM = {
    "Adam": 2,
    "AdamW": 2,
    "Adamax": 2,
    "NAdam": 2,
    "RAdam": 2,
    "Adadelta": 2,
    "SparseAdam": 2,
    "SGD": 1,
    "Adagrad": 1,
    "RMSprop": 1,
    "Rprop": 2,
    "ASGD": 2,
    "LBFGS": 2,
    "Lion": 1,
}
NOT_RECORDED = "(not recorded: allocated before the allocation history started)"
TOP = 8


def one_step(ops: pd.DataFrame, windows: list | None) -> pd.DataFrame:
    """The ops of the last measured step (the whole trace when it has no step ranges)."""
    if not len(ops):
        return ops
    steps = step_index(ops, windows)
    if not windows:
        return ops
    last = max(w.index for w in windows)
    return ops[steps == last]


def _in_last_step(calls: list, windows: list | None) -> list:
    """The calls whose op one_step keeps: those that start in the last measured step."""
    if not windows or not calls:
        return calls
    last = max(w.index for w in windows)
    steps = step_index(pd.DataFrame({"ts": [c.ts for c in calls]}), windows)
    return [c for c, s in zip(calls, steps) if s == last]


def training_parts(ops: pd.DataFrame, step_ops: pd.DataFrame) -> dict | None:
    """Parameters, gradients and optimizer state from the backward and optimizer ops; None without them."""
    acc = step_ops[step_ops["name"] == ACCUMULATE] if len(step_ops) else step_ops
    if not len(acc):
        return None
    params = [a for d, t in zip(acc["input_dims"], acc["input_types"]) for a in shapes(d, t)[:1] if a is not None]
    if not params:
        return None
    p_bytes = float(sum(a.nbytes for a in params))
    dtypes = sorted({a.dtype for a in params if a.dtype})
    optimizer = next((m.group(1) for m in map(OPTIMIZER_STEP.match, ops["name"].astype(str)) if m), None)
    states = STATES_PER_PARAM.get(optimizer) if optimizer else None
    numel = sum(a.numel for a in params)
    parts = [
        {
            "part": "parameters",
            "bytes": p_bytes,
            "how": f"{len(params)} tensors, {numel:,} values ({', '.join(dtypes) or 'dtype not recorded'}), "
            "from the gradients accumulated into them",
        },
        {"part": "gradients", "bytes": p_bytes, "how": "one per parameter, same shape and dtype"},
    ]
    if states is not None:
        parts.append(
            {
                "part": f"optimizer state ({optimizer})",
                "bytes": states * p_bytes,
                "how": f"{states} tensor{'s' if states > 1 else ''} per parameter, its dtype",
            }
        )
    note = (
        ""
        if states is not None
        else f"optimizer {'not recorded' if not optimizer else optimizer + ' not known'}: its state is not counted"
    )
    return {
        "kind": "training",
        "optimizer": optimizer,
        "parts": parts,
        "params": len(params),
        "param_values": numel,
        "note": note,
    }


def inference_parts(step_ops: pd.DataFrame, calls: list | None = None) -> dict | None:
    """Weights of the outermost linear layers and embeddings, and the KV cache read by decode
    attention (`calls`: the attention calls of the step, found in `step_ops` when not given)."""
    if not len(step_ops):
        return None
    weights = 0.0
    count = 0
    for name in ("aten::linear", "aten::embedding"):
        rows = _outermost(step_ops[step_ops["name"] == name])
        pos = 1 if name == "aten::linear" else 0
        for d, t in zip(rows["input_dims"], rows["input_types"]):
            args = shapes(d, t)
            weight = args[pos] if len(args) > pos else None
            if weight is not None and len(weight.dims) == 2:
                weights += weight.nbytes
                count += 1
    calls = attention_calls(step_ops) if calls is None else calls
    kv = sum(c.k.nbytes + c.v.nbytes for c in calls if c.decode)
    parts = []
    if weights:
        parts.append({"part": "weights", "bytes": weights, "how": f"{count} linear/embedding weights used in one step"})
    if kv:
        parts.append(
            {
                "part": "KV cache (read per step)",
                "bytes": float(kv),
                "how": "keys and values the decode attention calls of one step read",
            }
        )
    return {"kind": "inference", "optimizer": None, "parts": parts, "note": ""} if parts else None


def _outermost(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows not nested inside an earlier row of the same set and thread (autocast wraps linear in linear)."""
    if len(rows) < 2:
        return rows
    rows = rows.sort_values("ts", kind="stable")
    keep = np.zeros(len(rows), dtype=bool)
    ends: dict = {}
    for i, (ts, end, tid) in enumerate(zip(rows["ts"], rows["ts"] + rows["dur"], rows["tid"])):
        if ts >= ends.get(tid, -np.inf):
            keep[i] = True
            ends[tid] = end
    return rows[keep]


def top_live(snapshot: dict | None) -> list[dict]:
    """The snapshot's largest live blocks, grouped by the user frame that allocated them."""
    blocks = (snapshot or {}).get("top_blocks") or []
    return _group([(b.get("where") or NOT_RECORDED, b.get("bytes") or 0) for b in blocks])


def top_allocating(snapshot: dict | None) -> list[dict]:
    """The user frames that allocated the most bytes while the history was recorded (the profiled warm-up steps)."""
    events = (snapshot or {}).get("events") or []
    return _group([(e.get("where") or NOT_RECORDED, e.get("bytes") or 0) for e in events if e.get("action") == "alloc"])


def _group(items: list[tuple[str, float]]) -> list[dict]:
    if not items:
        return []
    frame = pd.DataFrame(items, columns=["where", "bytes"])
    grouped = frame.groupby("where")["bytes"].agg(["sum", "size", "max"]).sort_values("sum", ascending=False)
    return [
        {"where": str(w), "bytes": float(r["sum"]), "count": int(r["size"]), "largest": float(r["max"])}
        for w, r in grouped.head(TOP).iterrows()
    ]


def peak_breakdown(
    ops: pd.DataFrame,
    windows: list | None,
    peak: float | None,
    snapshot: dict | None,
    attention: Callable[[], list] | None = None,
) -> dict:
    """The peak split into the parts the ops reveal, the rest as activations and temporaries, plus
    the snapshot's largest live blocks and allocating frames by user code. `attention` gives the
    attention calls of all of `ops` (Metrics.attention_calls), read only for an inference
    breakdown; without it they are found in the last step's ops."""
    step_ops = one_step(ops, windows)
    known = None
    if len(ops):
        known = training_parts(ops, step_ops)
        if known is None:
            calls = None if attention is None else _in_last_step(attention(), windows)
            known = inference_parts(step_ops, calls)
    out: dict[str, Any] = {
        "peak_bytes": peak,
        "kind": "unknown",
        "optimizer": None,
        "parts": [],
        "note": "",
        "top_live": top_live(snapshot),
        "top_allocating": top_allocating(snapshot),
    }
    if known:
        out.update(known)
        counted = sum(p["bytes"] for p in out["parts"])
        if peak is not None:
            rest = max(peak - counted, 0.0)
            label = "activations and temporaries" if out["kind"] == "training" else "activations and other"
            out["parts"].append({"part": label, "bytes": rest, "how": "the peak minus the parts above"})
        out["basis"] = "shapes of the recorded ops; " + (out["note"] or "the rest of the peak is the remainder")
    else:
        out["basis"] = (
            "no op reveals parameters or weights: the largest live blocks of the allocator "
            "snapshot, by the user code that allocated them"
            if snapshot
            else "no op reveals parameters or weights and no allocator snapshot was recorded"
        )
    return out
