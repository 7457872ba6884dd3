"""What a CPU rank's host did before each of its collectives, from its profiled trace.

On a CPU-only rank (gloo) the collectives are host ops (`c10d::allreduce_`, `record_param_comms`) on
the thread that runs the step. Per profiled step and per collective, in issue order: the *lead-in*
from the previous collective's entry (or the step's start) to this one, and how much of it no op of
that thread covers (*silent*: a sleep, a slow reader, Python work that calls no operator). The rest
of the lead-in is op time, the rank's compute. A rank made late by its host shows a longer silent
lead-in before the collective it is late at; a rank made late by extra compute, a longer busy one.
The time a rank spends waiting for the others lies after its own entries, not in the lead-ins
before its first late one. The silent stretches are named as on GPU ranks (profile.py `_host_ranges`).
"""

from __future__ import annotations

import numpy as np

from diagnose.metrics import Metrics
from diagnose.metrics.host import intersect, length, merge_intervals, subtract

COLLECTIVE_OPS = ("c10d::", "record_param_comms")


def cpu_lead_ins(metrics: Metrics) -> tuple[list, np.ndarray]:
    """Per step, [[lead-in µs, silent µs], ...] per collective in issue order; and every silent
    stretch before a collective (for naming). Empty without host collectives."""
    trace, windows = metrics.trace, metrics.steps.windows
    ops = trace.cpu_ops
    if not len(ops) or not windows:
        return [], np.zeros((0, 2))
    names = ops["name"].astype(str)
    entries = ops[names.str.startswith(COLLECTIVE_OPS)]
    if not len(entries):
        return [], np.zeros((0, 2))
    main = entries["tid"].value_counts().idxmax()
    mine = ops[ops["tid"] == main]
    busy = merge_intervals(mine["ts"].to_numpy(float), mine["end"].to_numpy(float))
    starts = np.sort(entries.loc[entries["tid"] == main, "ts"].to_numpy(float))
    starts = starts[np.concatenate(([True], np.diff(starts) > 0))] if len(starts) else starts  # nested entries
    steps, silent_parts = [], []
    for w in windows:
        inside = starts[(starts >= w.cpu_start) & (starts < w.cpu_end)]
        rows, previous = [], float(w.cpu_start)
        for at in inside:
            lead = np.array([[previous, float(at)]])
            silent = subtract(lead, intersect(lead, busy)) if len(busy) else lead
            silent_parts.append(silent)
            rows.append([round(float(at) - previous, 3), round(length(silent), 3)])
            previous = float(at)
        steps.append(rows)
    stretches = np.concatenate(silent_parts) if silent_parts else np.zeros((0, 2))
    return steps, stretches
