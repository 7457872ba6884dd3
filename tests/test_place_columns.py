"""compute-bound places every matrix op on the roofline in column operations (`_place_all`); the
figures are the same, bit for bit and dtype for dtype, as the row-by-row placement it replaced
(kept here as the reference): on real captures that reach every issue, and on a frame of the odd
values a row can hold (missing tensor-core flags and bytes, measured classes, no time, unknown dtypes)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT

import diagnose.rules.compute_bound as cb
from diagnose.base import devices
from diagnose.model.config import Config
from diagnose.rulebook.engine import Context
from diagnose.vocabulary.dtypes import dtype_bytes, precision, precision_bytes
from diagnose.vocabulary.kernels import MATMUL_KINDS
from diagnose.trace.load import load_target

MEASURED_TENSOR_PCT = cb.MEASURED_TENSOR_PCT
DEFAULTS = {th.name: th.default for th in cb.ComputeBound.thresholds}
# misaligned K, fp32 without tensor cores, next rung, convolutions, unshaped rows
CAPTURES = ["matmul_bf16_k8191", "matmul_fp32", "matmul_tf32", "matmul_fp8", "conv_nchw", "opt_single", "decode_eager"]


def place_row(row, spec, t) -> dict:
    """The rule's placement of one op as it was written before the column version: the reference."""
    rung = precision(row.dtype)
    tc = row.tensor_core
    tc = None if tc is pd.NA or (isinstance(tc, float) and math.isnan(tc)) else bool(tc)
    if tc is None and not pd.isna(row.tensor_pct):
        tc = row.tensor_pct >= MEASURED_TENSOR_PCT
    achieved = row.flops / row.matrix_us / 1e6 if row.matrix_us > 0 else 0.0
    if rung == "fp32":
        if tc is None:
            tc = achieved > (spec.peak("fp32") or math.inf)
        rung_run = "tf32" if tc and spec.peak("tf32") else "fp32"
    elif rung in ("bf16", "fp16", "fp8", "int8"):
        rung_run = rung if tc is not False else "fp32"
    else:
        rung_run = rung or "fp32"
    measured = isinstance(row.bound, str)
    moved = row.dram_bytes if measured and row.dram_bytes > 0 else row.bytes
    intensity = row.flops / moved if moved and moved > 0 else math.inf
    shaped = row.flops / row.bytes if row.bytes and row.bytes > 0 else math.inf
    ridge = spec.ridge(rung_run) or spec.ridge("fp32") or math.inf
    # A measured class only adds: speed of light says what limits this kernel (a misaligned fallback
    # is latency-bound), not that the product stopped being compute-shaped.
    compute_bound = max(intensity, shaped) >= t["min_ridge_share"] * ridge or row.bound == "compute-bound"
    peak = spec.peak(rung_run) or math.nan
    impossible = achieved > peak  # faster than the units it ran on can go: its FLOPs or its time are wrong
    if impossible:
        compute_bound = False
    issue, target = None, None
    esize = dtype_bytes(row.dtype, 4)
    align = max(1, int(t["align_bytes"] // esize))
    bad_dims = _misaligned_row(row, align)
    if compute_bound:
        if rung_run == "fp32" and tc:  # fp32 on matrix cores without TF32 (AMD MFMA): 16-bit is the next rung
            issue, target = "next-rung", spec.half_rung()
        elif tc is False or rung_run == "fp32":
            issue, target = "tensor-cores-unused", spec.half_rung()
        elif bad_dims:
            issue, target = "misaligned", rung_run
        elif achieved >= t["near_peak_share"] * peak and spec.next_rung(rung_run):
            issue, target = "next-rung", spec.next_rung(rung_run)
    after = math.nan
    if target:
        tflops = spec.achievable(target)
        new_bytes = row.bytes * (precision_bytes(target) or esize) / esize if issue != "misaligned" else row.bytes
        after = max(row.flops / tflops / 1e6, new_bytes / spec.achievable_tbps / 1e6) if tflops else math.nan
    saving = max(0.0, row.matrix_us - after) if not math.isnan(after) else 0.0
    return {
        "op_name": row.op_name,
        "shapes": row.shapes,
        "kernel": row.kernel,
        "matrix_us": row.matrix_us,
        "flops": row.flops,
        "bytes": row.bytes,
        "dtype": row.dtype,
        "rung": rung_run,
        "achieved": achieved,
        "peak": peak,
        "intensity": intensity,
        "ridge": ridge,
        "compute_bound": compute_bound,
        "issue": issue,
        "target": target,
        "after_us": after,
        "saving_us": saving,
        "bad_dims": bad_dims,
        "impossible": impossible,
        "m": row.m,
        "n": row.n,
        "k": row.k,
        "kind": row.kind,
        "measured": measured,
        "sm_pct": row.sm_pct,
        "tensor_pct": row.tensor_pct,
        "dram_pct": row.dram_pct,
        "bound": row.bound,
    }


def _misaligned_row(row, align: int) -> str | None:
    """'K = 8191' etc. when a leading dimension is not a multiple of `align` elements."""
    names = (("K", row.k), ("N", row.n)) if row.kind == "gemm" else (("output channels", row.n),)
    bad = [f"{name} = {int(v)}" for name, v in names if v is not None and not pd.isna(v) and int(v) % align]
    return ", ".join(bad) or None


def _reference(known: pd.DataFrame, spec, t) -> pd.DataFrame:
    return pd.DataFrame([place_row(r, spec, t) for r in known.itertuples()], index=known.index)


def _known(ops: pd.DataFrame) -> pd.DataFrame:
    matrix = ops[ops["kind"].isin(MATMUL_KINDS)]
    return matrix[matrix["flops"].notna() & (matrix["flops"] > 0)]


@pytest.mark.parametrize("name", CAPTURES)
def test_placement_matches_the_rows(name):
    ctx = Context(load_target(ROOT / "fixtures" / "captures" / name), Config())
    known = _known(ctx.metrics.op_work)
    assert len(known)
    spec = ctx.metrics.device_spec
    pd.testing.assert_frame_equal(
        cb._place_all(known, spec, DEFAULTS), _reference(known, spec, DEFAULTS), check_exact=True
    )


def test_placement_matches_the_rows_on_odd_values():
    ctx = Context(load_target(ROOT / "fixtures" / "captures" / "matmul_fp32"), Config())
    base = _known(ctx.metrics.op_work)
    rng = np.random.default_rng(7)
    rows = base.sample(200, replace=True, random_state=3).reset_index(drop=True)
    n = len(rows)
    rows["tensor_core"] = pd.Series(
        rng.choice(np.array([True, False, None, pd.NA, math.nan], dtype=object), n), dtype=object
    )
    rows["tensor_pct"] = np.where(rng.random(n) < 0.5, rng.random(n) * 3, np.nan)
    rows["dtype"] = rng.choice(["float", "c10::BFloat16", "c10::Half", "double", "int", "c10::Float8_e4m3fn"], n)
    rows.loc[rng.random(n) < 0.1, "dtype"] = np.nan
    rows["bound"] = pd.Series(
        rng.choice(np.array([None, "compute-bound", "memory-bound", "latency-bound"], dtype=object), n), dtype=object
    )
    rows["dram_bytes"] = np.where(rng.random(n) < 0.5, rows["bytes"] * rng.random(n), np.nan)
    rows.loc[rng.random(n) < 0.1, "bytes"] = np.nan
    rows.loc[rng.random(n) < 0.1, "matrix_us"] = 0.0
    rows["matrix_us"] = rows["matrix_us"] * rng.choice([1e-6, 1.0, 1e3], n)
    rows["k"] = np.where(rng.random(n) < 0.3, rows["k"] + 1, rows["k"])
    rows.loc[rng.random(n) < 0.1, "n"] = np.nan
    rows["kind"] = rng.choice(["gemm", "conv"], n)
    for spec in devices.KNOWN:
        pd.testing.assert_frame_equal(
            cb._place_all(rows, spec, DEFAULTS), _reference(rows, spec, DEFAULTS), check_exact=True
        )
