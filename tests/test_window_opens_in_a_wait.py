"""A window that opens with a blocking copy waiting on GPU work launched before the profiler began
(kineto does not record that work) books the wait as a wait after a sync, not as host setup inside
the copy op. SYNTHETIC traces, written here."""

from __future__ import annotations

import json

from diagnose import analyze

from fixtures.golden.make_golden import UNPROFILED


def _event(name, cat, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path, first_wait_us: float):
    """Three 1,000 µs steps. Each opens with `aten::copy_`, whose blocking `cudaMemcpy` waits with the GPU
    idle in the trace: `first_wait_us` in the first step (on work launched before the profiler began,
    which the trace does not hold), 5 µs in the others; then a 10 µs memcpy and five 60 µs kernels."""
    events, corr = [], 1
    for step in range(3):
        t = 1000.0 * step
        wait_us = first_wait_us if step == 0 else 5.0
        events.append(_event(f"ProfilerStep#{step}", "user_annotation", t, 1000.0))
        events.append(_event("aten::copy_", "cpu_op", t + 2, wait_us + 20, **{"External id": corr}))
        events.append(_event("cudaMemcpy", "cuda_runtime", t + 5, wait_us + 12, correlation=corr))
        events.append(
            {
                **_event("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", t + 5 + wait_us, 10, correlation=corr),
                "pid": 0,
                "tid": 7,
            }
        )
        corr += 1
        host = t + wait_us + 30
        for k in range(5):
            events.append(_event("aten::add", "cpu_op", host, 8, **{"External id": corr}))
            events.append(_event("cudaLaunchKernel", "cuda_runtime", host + 1, 6, correlation=corr))
            gpu = t + wait_us + 40 + 60 * k
            events.append({**_event("add_kernel", "kernel", gpu, 58, correlation=corr, stream=7), "pid": 0, "tid": 7})
            corr += 1
            host += 10
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 85e9}],
        "traceEvents": events,
    }
    path = tmp_path / f"window_wait_{first_wait_us:g}.synthetic.json"
    path.write_text(json.dumps(doc))
    return path


def _buckets(d) -> dict:
    return {b.id: b.us_per_step for b in d.summary.accounting.buckets}


def test_the_opening_wait_is_a_sync_wait_not_host_setup(tmp_path):
    long, short = (_buckets(analyze(_trace(tmp_path, w), overrides=UNPROFILED)) for w in (500.0, 5.0))
    # the first step's 500 µs wait, shared over three steps, lands in the waits after syncs
    assert long["sync_wait"] - short["sync_wait"] > 0.95 * 495 / 3
    assert long["host_in_ops"] < 5  # before this change: 167 µs a step of "host setup inside ops"
