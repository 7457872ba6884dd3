"""Every trace recorded by others (fixtures/peer: HTA's, kineto's and param's test data) is analysed without a crash, sensibly."""
from __future__ import annotations

import json

import pytest

from diagnose.cli import main
from diagnose.rules import ALL_RULES

from conftest import PEER_TRACES

TRACES = sorted(PEER_TRACES.glob("**/*.json.gz"))
EXPECTED_DEVICE = {"amd_trace": "AMD", "ns_resolution_trace": "V100", "cpu_only": "no GPU",
                   "resnet50_num_workers_0": "V100", "resnet50_num_workers_4": "V100", "param": "RTX 2080 Ti"}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name)
def test_peer_trace(path, tmp_path, capsys):
    code = main([str(path), "--json", "-o", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    name = data["device"]["name"]
    assert name, "the device must be named where the trace says it"
    expected = EXPECTED_DEVICE.get(path.parent.name, "A100")
    assert expected in name
    judged = {f["rule"] for f in data["findings"]} | {c["rule"] for c in data["checked"]} | \
        {s["rule"] for s in data["skipped"]}
    assert judged == {r.id for r in ALL_RULES}, "every rule is reported as fired, quiet or skipped"
    assert all(s["reason"] for s in data["skipped"])
    if path.parent.name == "cpu_only":
        assert not data["findings"]
        assert all("CPU-only" in s["reason"] for s in data["skipped"] if s["rule"] == "launch-overhead")
