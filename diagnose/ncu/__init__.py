"""Nsight Compute (ncu) measurements: read its CSV, join it to the trace's kernels, classify them.

- csv.py       parse `ncu --csv --page raw` output (or a `.ncu-rep` through NVIDIA's `ncu_report`)
- join.py      attach the measured rows to the profiler's kernels of each step
- classify.py  speed-of-light classes: memory-, compute- or latency-bound, with the reason
- run.py       the `--ncu` capture: the workload again under ncu, one step, the hot kernels
- details.py   plain data for the reports (measured table, top-kernel columns)
- roofline.py  roofline points of the hot ops, measured or estimated from shapes

Nothing here imports torch. Measurements reach the rules through the rules' Context
(`Context(trace, config, ncu=table)`), which hands Metrics the table's join (`ncu_join`):
`Metrics.op_work` then fills its measured columns, and the rules prefer them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnose.ncu.csv import NcuTable, read_ncu

__all__ = ["NcuTable", "read_ncu"]


def __getattr__(name: str) -> object:
    """`NcuTable` and `read_ncu`, imported when first asked for (the report's sections import this package;
    a command line that never reads a CSV does not pay for pandas)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("diagnose.ncu.csv"), name)
    globals()[name] = value
    return value
