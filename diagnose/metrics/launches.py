"""Kernel launches: each GPU op joined to the host call that launched it and the op that asked.

Kernel ↔ launch call on `correlation`; launch call ↔ CPU op on `External id`. The launch delay
is the time from the end of the launch call to the kernel's start (queueing on the GPU).
"""
from __future__ import annotations

import pandas as pd

from diagnose.trace.model import Trace


def join_launches(trace: Trace) -> pd.DataFrame:
    """One row per GPU op with `launch_name`, `launch_ts`, `launch_dur`, `launch_delay`, `op_name`, shapes."""
    gpu = trace.gpu
    cols = ["name", "cat", "ts", "dur", "end", "device", "stream", "correlation", "external_id",
            "grid", "block", "blocks", "registers", "occupancy", "bytes"]
    out = gpu[cols].copy()
    runtime = trace.runtime.dropna(subset=["correlation"]).drop_duplicates("correlation")
    runtime = runtime.rename(columns={"name": "launch_name", "ts": "launch_ts", "dur": "launch_dur",
                                      "external_id": "launch_external_id", "tid": "launch_tid"})
    out = out.merge(runtime[["correlation", "launch_name", "launch_ts", "launch_dur",
                             "launch_external_id", "launch_tid"]], on="correlation", how="left")
    out["launch_delay"] = out["ts"] - (out["launch_ts"] + out["launch_dur"])
    ops = trace.ops
    cpu_ops = ops[ops["cat"] == "cpu_op"].dropna(subset=["external_id"])
    # The innermost op owns the launch: with nested ops sharing an id, keep the latest-starting one.
    cpu_ops = cpu_ops.sort_values("ts").drop_duplicates("external_id", keep="last")
    cpu_ops = cpu_ops.rename(columns={"name": "op_name", "external_id": "op_external_id"})
    ext = out["external_id"].fillna(out["launch_external_id"])
    out["op_external_id"] = ext.astype("Int64")
    out = out.merge(cpu_ops[["op_external_id", "op_name", "input_dims", "input_types"]],
                    on="op_external_id", how="left")
    return out
