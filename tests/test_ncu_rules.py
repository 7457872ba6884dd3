"""The memory-bound and compute-bound rules with real H200 Nsight Compute CSVs attached (`--ncu-csv` API)."""

from __future__ import annotations

import pytest

from diagnose.front import pipeline
from diagnose.model.config import Config

from conftest import CAPTURES, ROOT

NCU = ROOT / "fixtures" / "ncu"


def analyse(name: str, with_csv: bool = True):
    """The diagnosis of a fixture capture, with its Nsight Compute CSV attached or not."""
    csv = NCU / f"{name}.ncu.csv.gz" if with_csv else None
    return pipeline.analyse(CAPTURES / name, Config(), ncu_csv=csv)


def finding(diagnosis, rule):
    return next((f for f in diagnosis.findings if f.rule == rule), None)


def test_swiglu_memory_bound_uses_measured_dram():
    f = finding(analyse("swiglu_eager"), "memory-bound")
    assert f is not None and f.severity == "high" and 3.5 <= f.est_speedup <= 5.5
    bw = f.evidence[0]
    assert bw.metric.startswith("measured DRAM bandwidth") and "Nsight Compute" in bw.metric
    assert 0.6 <= bw.value <= 0.75  # 61.6 % of the 4.8 TB/s peak = 69 % of the achievable 4.3 TB/s
    assert f.basis.startswith("DRAM bytes and throughput measured by Nsight Compute")


def test_swiglu_without_csv_says_estimated():
    f = finding(analyse("swiglu_eager", with_csv=False), "memory-bound")
    assert f.evidence[0].metric.startswith("HBM bandwidth")
    assert f.basis.startswith("bytes and FLOPs estimated from shapes (not measured)")


def test_matmul_bf16_compute_bound_with_measured_sm_and_tensor_pipe():
    f = finding(analyse("matmul_bf16"), "compute-bound")
    assert f is not None and "fp8" in [x.id for x in f.fixes]
    by_metric = {e.metric: e for e in f.evidence}
    sm = by_metric["SM throughput (share of peak), measured by Nsight Compute"]
    assert sm.value == pytest.approx(0.933, abs=0.001) and sm.op == ">=" and sm.threshold == 0.6
    assert by_metric["tensor pipe active, measured"].value == pytest.approx(0.969, abs=0.001)
    assert "measured by Nsight Compute for all compute-bound ops" in f.basis


def test_matmul_bf16_without_csv_keeps_its_estimate_basis():
    f = finding(analyse("matmul_bf16", with_csv=False), "compute-bound")
    assert f.basis.startswith("FLOPs and bytes estimated from shapes")
    assert not any("measured" in e.metric for e in f.evidence)


def test_matmul_fp32_still_tensor_cores_unused():
    f = finding(analyse("matmul_fp32"), "compute-bound")
    assert f.severity == "high" and f.fixes[0].id == "bf16-tensor-cores" and f.est_speedup >= 10


@pytest.mark.parametrize(
    "name,rule",
    [
        ("gemv_decode_1tok", "compute-bound"),
        ("decode_eager", "memory-bound"),
        ("decode_eager", "compute-bound"),
        ("matmul_bf16", "memory-bound"),
    ],
)
def test_quiet_cases_stay_quiet_with_measurements(name, rule):
    d = analyse(name)
    assert finding(d, rule) is None and any(c.rule == rule for c in d.checked)


def test_verdicts_unchanged_by_measurements():
    for name in ("swiglu_eager", "matmul_bf16", "matmul_fp32", "gemv_decode_1tok", "decode_eager"):
        with_csv, without = analyse(name), analyse(name, with_csv=False)
        assert [f.rule for f in with_csv.findings] == [f.rule for f in without.findings]
        assert with_csv.details.ncu.matched == with_csv.details.ncu.ncu_rows


def test_op_work_measured_columns():
    d = analyse("gemv_decode_1tok")
    points = d.details.roofline.points
    assert d.details.roofline.measured_points == len(points)
    gemv = [p for p in points if p.op == "aten::mm"]
    assert gemv and all(p.bound == "memory-bound" for p in gemv)


def graph_like(name: str, with_csv: bool):
    """A real capture with its kernel-to-op links removed, as a CUDA-graph replay records its kernels (no CPU
    op, no shapes): a trace derived from the capture, with its ncu CSV attached or not."""
    import numpy as np

    from diagnose.ruleset.assemble import diagnose_trace
    from diagnose.ncu import read_ncu
    from diagnose.trace import load_target

    trace = load_target(CAPTURES / name)
    trace.gpu = trace.gpu.assign(external_id=np.nan)
    trace.runtime = trace.runtime.assign(external_id=np.nan)
    return diagnose_trace(trace, ncu=read_ncu(NCU / f"{name}.ncu.csv.gz") if with_csv else None)


def test_graphed_decode_fires_from_measured_bytes_with_w4a16_first():
    d = graph_like("gemv_decode_1tok", with_csv=True)
    f = finding(d, "decode-latency")
    assert f is not None and f.severity == "high" and f.fixes[0].id == "w4a16"
    assert 1.25 <= f.est_speedup <= 1.6  # 1.44× from the shapes of the same capture
    weights = next(e for e in f.evidence if e.metric == "weight bytes read per step")
    assert 2.7 <= weights.value <= 3.0  # measured 2.88 GB against 2.82 GB from shapes
    assert "measured by Nsight Compute (no shapes recorded)" in f.basis
    assert not any(e.metric.startswith("tokens/s") for e in f.evidence)


def test_graphed_decode_without_ncu_is_read_from_its_thin_tiles_with_a_floor_estimate():
    f = finding(graph_like("gemv_decode_1tok", with_csv=False), "decode-latency")
    assert f is not None and f.fixes[0].id == "w4a16"
    assert "8-row cuBLAS tiles" in " ".join(e.metric for e in f.evidence)
    assert "the W4A16 estimate is the least it gives" in f.basis
    assert 1.0 < f.est_speedup <= 1.44  # a floor: 1.44× from the shapes of the same capture


def test_a_graph_replays_offenders_show_no_bandwidth_the_trace_did_not_measure():
    """REAL (H200): the graphed decode's census and its thin tiles give weight bytes, not bytes moved per
    kernel, so the offender rows leave their TB/s empty rather than 0 (or the assumed bound restated)."""
    from conftest import diagnosis_of

    for target in (CAPTURES / "gemv_decode_1tok_graphed", CAPTURES / "gemv_decode_1tok_graphed" / "trace.json.gz"):
        f = finding(diagnosis_of(target), "decode-latency")
        assert f is not None and {o.row()["tb_per_s"] for o in f.offenders} == {None}


def test_graphed_steps_without_ncu_say_ncu_would_answer():
    d = graph_like("gemv_prefill_512", with_csv=False)  # 128-row tiles: nothing tells weight streaming
    skip = next(s for s in d.skipped if s.rule == "decode-latency")
    assert "CUDA-graph" in skip.reason and "`--ncu`" in skip.reason
    memory = next(s for s in graph_like("swiglu_eager", with_csv=False).skipped if s.rule == "memory-bound")
    assert "`--ncu`" in memory.reason


def test_graphed_swiglu_memory_bound_from_measured_bytes():
    f = finding(graph_like("swiglu_eager", with_csv=True), "memory-bound")
    assert f is not None and f.severity == "high" and 3.5 <= f.est_speedup <= 6.0  # 4.37× from shapes
    assert "no shapes recorded" in f.basis


def test_graphed_compute_bound_matmul_is_not_weight_streaming():
    d = graph_like("matmul_bf16", with_csv=True)
    quiet = next(c for c in d.checked if c.rule == "decode-latency")
    assert "compute-bound" in quiet.detail and "none streams weights" in quiet.detail


def test_misaligned_matmul_keeps_pad_dims_when_ncu_calls_it_latency_bound():
    csv = NCU / "matmul_bf16_k8191.synthetic.ncu.csv.gz"  # SYNTHETIC, from the real matmul_bf16 CSV
    d = pipeline.analyse(CAPTURES / "matmul_bf16_k8191", Config(), ncu_csv=csv)
    assert d.details.ncu.kernels[0].bound == "latency-bound"
    f = finding(d, "compute-bound")
    assert f is not None and f.severity == "high" and f.fixes[0].id == "pad-dims"
    sm = next(e for e in f.evidence if e.metric.startswith("SM throughput"))
    assert sm.op == "<" and sm.value == pytest.approx(0.304)
    assert "stay compute-bound" in f.basis


@pytest.mark.parametrize("name", ["gemv_decode_1tok", "gemv_decode_1tok_graphed"])
@pytest.mark.parametrize("share", [0.39, 0.99])  # 0.99: int4 kernels faster than today's (73-89 % of achievable)
def test_the_w4a16_ceiling_is_never_below_its_estimate(name, share):
    import re

    from conftest import load_capture

    from diagnose.ruleset.assemble import diagnose_trace

    config = Config(overrides={"decode-latency.w4_bandwidth_share": share})
    f = finding(diagnose_trace(load_capture(name), config), "decode-latency")
    how = next(x.how for x in f.fixes if x.id == "w4a16")
    ceiling = float(re.search(r"up to ([\d.]+)×", how).group(1))
    assert f.est_speedup <= ceiling
