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

from typing import TYPE_CHECKING

from diagnose.base.lazy import lazy_names

if TYPE_CHECKING:
    from diagnose.ncu.csv import NcuTable, read_ncu

__all__ = ["NcuTable", "read_ncu"]
__getattr__ = lazy_names(__name__, dict.fromkeys(__all__, "diagnose.ncu.csv"))
