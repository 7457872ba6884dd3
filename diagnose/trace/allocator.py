"""The allocator ([memory]) events a trace holds, checked: each field may be missing, null or of
another type in traces from other tools and older torch.

An event is kept only with a whole number for `Device Type` and `Device Id` and a finite,
non-negative `Total Allocated` and `Total Reserved`; the rest are dropped and counted in one
warning, or, for events written the way an older kineto wrote them (`Bytes` and neither total), in
a warning of their own that says why no peak can be read. `Bytes` that is not a number becomes a
missing value (the totals are what the memory rules read). These columns come out as float64;
`Addr` is left as decoded (an int or None).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NUMERIC = ["ts", "bytes", "total_allocated", "total_reserved", "device_id", "device_type"]


def numbers(column: pd.Series) -> pd.Series:
    """A column as float64: finite numbers kept, anything else (strings, lists, bools, None, ±inf) NaN."""
    if column.dtype.kind not in "iuf":  # an object column: mixed types, strings, bools or None
        column = column.map(lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
    out = pd.to_numeric(column, errors="coerce").astype("float64")
    return out.where(np.isfinite(out))


def usable(memory: pd.DataFrame, warnings: list[str]) -> tuple[pd.DataFrame, int]:
    """`memory` (the trace's allocator frame) numeric, without the events no rule can read (module
    docstring), and how many of those were written in an older kineto's format; how many were dropped
    goes to `warnings`."""
    if not len(memory):
        return memory, 0
    frame = memory.assign(**{c: numbers(memory[c]) for c in NUMERIC if c in memory})
    whole = [frame[c].notna() & (frame[c] == frame[c].round()) for c in ("device_type", "device_id")]
    totals = [frame[c].notna() & (frame[c] >= 0) for c in ("total_allocated", "total_reserved")]
    keep = (whole[0] & whole[1] & totals[0] & totals[1]).to_numpy()
    older = (whole[0] & whole[1] & _bytes_only(frame)).to_numpy()
    dropped = int((~keep & ~older).sum())
    if older.any():
        warnings.append(
            f"{int(older.sum()):,} allocator events record Bytes only, without Total Allocated or Total Reserved "
            "(an older kineto's format): no memory peak can be read from them"
        )
    if dropped:
        warnings.append(
            f"{dropped:,} allocator events without a number for Device Type, Device Id, Total Allocated "
            "or Total Reserved were ignored"
        )
    return (frame if keep.all() else frame[keep].reset_index(drop=True)), int(older.sum())


def _bytes_only(frame: pd.DataFrame) -> pd.Series:
    """Events written the way an older kineto wrote them: a `Bytes` number and neither total."""
    return frame["bytes"].notna() & frame["total_allocated"].isna() & frame["total_reserved"].isna()
