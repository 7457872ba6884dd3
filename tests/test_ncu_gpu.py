"""`--ncu` for real: capture, replay one step under Nsight Compute, attach (marked `gpu`; needs ncu too)."""

from __future__ import annotations

import json

import pytest

from diagnose.commands import main
from diagnose.ncu import run

from conftest import ROOT

pytestmark = pytest.mark.gpu
W = ROOT / "fixtures" / "workloads"


def ncu_capture(tmp_path, capsys, target: str, *extra: str):
    """Run `diagnose TARGET --ncu --json`; (exit code, findings JSON, capture folder)."""
    if run.find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed here")
    out = tmp_path / "cap"
    code = main(
        ["-o", str(out), "--json", "--ncu", "--warmup", "2", "--steps", "3", "--timed-steps", "5", *extra, target]
    )
    data = json.loads(capsys.readouterr().out)
    if any("ERR_NVGPUCTRPERM" in w for w in data["warnings"]):
        pytest.skip("this machine does not let Nsight Compute read the GPU counters")
    return code, data, out


def finding(data, rule):
    return next((f for f in data["findings"] if f["rule"] == rule), None)


def test_swiglu_under_ncu(tmp_path, capsys):
    code, data, out = ncu_capture(tmp_path, capsys, f"{W / 'swiglu.py'}:make_step")
    assert code == 0 and data["capture"]["status"] == "ok"
    assert (out / "ncu.csv").read_text().startswith('"ID"') and (out / "ncu.log").exists()
    assert not any(w.startswith("--ncu") for w in data["warnings"]), data["warnings"]
    ncu = data["details"]["ncu"]
    assert ncu["ncu_rows"] == ncu["matched"] == 10 and ncu["coverage"] >= 0.9, ncu["summary"]
    assert 0 < ncu["seconds"] < 300
    bounds = [k["bound"] for k in ncu["kernels"]]
    assert bounds.count("memory-bound") >= 4
    f = finding(data, "memory-bound")
    assert f and f["basis"].startswith("DRAM bytes and throughput measured by Nsight Compute")
    assert f["evidence"][0]["metric"].startswith("measured DRAM bandwidth")
    assert data["details"]["roofline"]["measured_points"] >= 6


def test_matmul_under_ncu(tmp_path, capsys):
    code, data, _ = ncu_capture(tmp_path, capsys, f"{W / 'matmul.py'}:make_step")
    assert code == 0
    row = data["details"]["ncu"]["kernels"][0]
    assert row["bound"] == "compute-bound" and row["sm_pct"] >= 80 and row["tensor_pct"] >= 80
    f = finding(data, "compute-bound")
    assert f and "measured by Nsight Compute" in f["basis"]


def test_hot_kernel_filter_on_decode(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(run, "MAX_LAUNCHES", 30)  # 78 kernels per step: forces the -k regex filter
    code, data, _ = ncu_capture(tmp_path, capsys, f"{W / 'tiny_decode.py'}:make_step")
    assert code == 0
    ncu = data["details"]["ncu"]
    assert 0 < ncu["ncu_rows"] <= 30 and ncu["matched"] == ncu["ncu_rows"], ncu["summary"]
    assert all(k["bound"] == "latency-bound" for k in ncu["kernels"])
