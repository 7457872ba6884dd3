"""Find the events whose times lie far outside the bulk of the trace, so one bad timestamp cannot
stretch the timeline over years and wipe the diagnosis.

A single kernel shifted to ts = 1e15, a duration of 1e30 or one event at ts = −9e18 would
otherwise become the trace's first event or last end: every other event then sits in one
instant of a window billions of seconds long, the steps hold no GPU work, and the report says
"no GPU activity". The rule, over the start times of every kept event (all frames together):

    bulk   = [q25, q75] of the start times, IQR = q75 − q25
    fence  = OUTLIER_IQR_FACTOR × IQR + OUTLIER_SLACK_US
    keep an event when q25 − fence ≤ start and end ≤ q75 + fence

OUTLIER_SLACK_US (one hour) dominates for real captures: on the bundled H200 captures and peer
traces the first event lies up to 72 ms before the bulk and the latest end 13 s after it (a long
Triton compile annotation), far inside it; corrupted timestamps lie years away. The IQR term
scales the fence for traces longer than an hour. Dropped events are named in a warning.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

OUTLIER_IQR_FACTOR = 10.0
OUTLIER_SLACK_US = 3600e6
NAMED = 3  # dropped events named in the warning


def drop_time_outliers(frames: dict[str, pd.DataFrame], warnings: list[str]) -> dict[str, pd.DataFrame]:
    """`frames` (absolute times in µs) without the events outside the fence (module docstring);
    a warning says how many were dropped and names the first few."""
    starts = [f["ts"].to_numpy(dtype=float) for f in frames.values() if len(f)]
    if not starts:
        return frames
    every = np.concatenate(starts)
    if len(every) < 4:
        return frames
    q25, q75 = np.percentile(every, [25, 75])
    fence = OUTLIER_IQR_FACTOR * (q75 - q25) + OUTLIER_SLACK_US
    low, high = q25 - fence, q75 + fence
    kept: dict[str, pd.DataFrame] = {}
    named: list[tuple] = []
    count = 0
    for key, frame in frames.items():
        if not len(frame):
            kept[key] = frame
            continue
        ts = frame["ts"].to_numpy(dtype=float)
        end = ts + frame["dur"].to_numpy(dtype=float) if "dur" in frame else ts
        outside = (ts < low) | (end > high)
        if not outside.any():
            kept[key] = frame
            continue
        bad = frame[outside]
        count += len(bad)
        named += [
            (key, row.get("name"), row["ts"], row.get("dur")) for row in bad.head(NAMED - len(named)).to_dict("records")
        ]
        kept[key] = frame[~outside].reset_index(drop=True)
    if count:
        warnings.append(_warning(count, named, low, high))
    return kept


def _warning(count: int, named: list, low: float, high: float) -> str:
    described = "; ".join(_describe(*d) for d in named)
    more = f"; and {count - len(named)} more" if count > len(named) else ""
    events = (
        "event with times far outside the trace's time range was"
        if count == 1
        else "events with times far outside the trace's time range were"
    )
    return f"{count} {events} dropped (kept: {low:.6g} to {high:.6g} µs): {described}{more}"


FAMILY = {
    "gpu": "GPU op",
    "runtime": "CUDA call",
    "ops": "CPU op",
    "gpu_annotations": "GPU annotation",
    "syncs": "sync",
    "memory": "allocator event",
}


def _describe(key: str, name: object, ts: float, dur: object) -> str:
    text = (
        f"{FAMILY.get(key, key)} {str(name)[:80]!r} at ts {ts:.6g} µs"
        if name is not None
        else f"{FAMILY.get(key, key)} at ts {ts:.6g} µs"
    )
    if dur is not None and dur == dur:
        text += f" lasting {dur:.6g} µs"
    return text
