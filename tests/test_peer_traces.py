"""Every trace recorded by others (fixtures/peer: HTA's, kineto's, param's and TraceLens's test data) is analysed without a crash, sensibly."""

from __future__ import annotations

import json

import pytest

from diagnose.commands import main
from diagnose.rules import ALL_RULES

from conftest import PEER_TRACES

TRACES = sorted(PEER_TRACES.glob("**/*.json.gz"))
EXPECTED_DEVICE = {
    "amd_trace": "AMD",
    "ns_resolution_trace": "V100",
    "cpu_only": "no GPU",
    "resnet50_num_workers_0": "V100",
    "resnet50_num_workers_4": "V100",
    "param": "RTX 2080 Ti",
    "h100": "H100",
    "normalization": "MI300X",
    # vLLM's traces leave deviceProperties' names empty (the SM count and memory are there)
    "vllm_decode_full": None,
    "capture_traces": None,
}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name)
def test_peer_trace(path, tmp_path, capsys):
    code = main([str(path), "--json", "-o", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    name = data["device"]["name"]
    expected = EXPECTED_DEVICE.get(path.parent.name, "A100")
    if expected is None:
        assert data["device"]["sm_count"], "an unnamed device still has its deviceProperties"
    else:
        assert name, "the device must be named where the trace says it"
        assert expected in name
    judged = (
        {f["rule"] for f in data["findings"]}
        | {c["rule"] for c in data["checked"]}
        | {s["rule"] for s in data["skipped"]}
    )
    assert judged == {r.id for r in ALL_RULES}, "every rule is reported as fired, quiet or skipped"
    assert all(s["reason"] for s in data["skipped"])
    if path.parent.name == "cpu_only":
        assert not data["findings"]
        assert all("CPU-only" in s["reason"] for s in data["skipped"] if s["rule"] == "launch-overhead")


def test_lost_gpu_records(tmp_path, capsys):
    """SYNTHETIC (fixtures/synthetic/make_synthetic_lost_gpu.py): 60 kernel launches, no GPU record.
    Not a CPU-only run and not a host-bound step: the GPU side of the trace was lost."""
    from conftest import SYNTHETIC

    code = main([str(SYNTHETIC / "synthetic_lost_gpu_records.json"), "--json", "-o", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["verdict"].startswith("GPU activity was not recorded (60 launches, 0 kernels)")
    assert "CPU-only" not in data["verdict"]
    assert not data["findings"]
    assert data["summary"]["unrecorded_launches"] == 60
    reasons = {s["rule"]: s["reason"] for s in data["skipped"]}
    assert "0 kernels" in reasons["host-bound"] and "0 kernels" in reasons["launch-overhead"]


def test_the_fused_kernel_fix_claims_a_saved_second_read_only_where_there_is_one():
    """PEER (kineto's V100 ResNet-50): its unfused chains have no looped reduction, so the Triton fix prices
    one pass without saying 'X µs instead of X µs'."""
    from conftest import diagnosis_of

    d = diagnosis_of(PEER_TRACES / "kineto" / "resnet50_num_workers_4" / "worker0.1623212756351.pt.trace.json.gz")
    finding = next(f for f in d.findings if f.rule == "memory-bound")
    how = next(x.how for x in finding.fixes if x.id == "triton-kernel")
    assert "instead of" not in how and "reads its inputs and writes its output once" in how
