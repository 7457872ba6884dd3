"""Many tiny events cost time in proportion to their number (issue 27): nothing runs Python once
per kernel or per op instance where a column of objects would make pandas fall back to it.

The trace is synthetic (benchmarks/make_tiny_trace.py: 2 µs kernels and their launches, no launch
geometry, so every kernel's `blocks` is None). Timed against the same trace with launch geometry
(`blocks` numbers), so the check holds however loaded the machine is.
"""
from __future__ import annotations

import json
import sys
import time

import pytest
from conftest import ROOT

from diagnose.metrics import Metrics
from diagnose.metrics.work import op_instances
from diagnose.trace import load_target

sys.path.insert(0, str(ROOT / "benchmarks"))
import make_tiny_trace  # noqa: E402

pytestmark = pytest.mark.hostile


def _timed_instances(kern) -> float:
    started = time.perf_counter()
    op_instances(kern)
    return time.perf_counter() - started


def test_op_instances_without_launch_geometry_cost_no_more_than_with_it(tmp_path):
    path = tmp_path / "tiny.json"
    make_tiny_trace.write(path, 60_000)
    kern = Metrics(load_target(path)).kernels_in_steps
    assert len(kern) >= 29_000 and kern["blocks"].isna().all()
    with_geometry = kern.assign(blocks=128)
    base = min(_timed_instances(with_geometry) for _ in range(2))
    without = min(_timed_instances(kern) for _ in range(2))
    # an object column's groupby max ran in Python group by group: ~50x slower at this size
    assert without < 3 * base + 0.5, (without, base)


def test_the_tiny_trace_generator_writes_what_it_says(tmp_path):
    path = tmp_path / "tiny.json"
    info = make_tiny_trace.write(path, 4_000)
    doc = json.loads(path.read_text())
    assert len(doc["traceEvents"]) == info["events"] == 4_004
    trace = load_target(path)
    assert len(trace.gpu) == info["kernels"] == 2_000
