"""Capture on a CUDA GPU (marked `gpu`: skipped without one; run on the H200 machine)."""

from __future__ import annotations

import gzip
import json

import pytest

from diagnose.commands import main
from diagnose.metrics import Metrics
from diagnose.metrics.overhead import prepare
from diagnose.trace import load_target

from conftest import ROOT

pytestmark = pytest.mark.gpu
DECODE = f"{ROOT / 'fixtures' / 'workloads' / 'tiny_decode.py'}:make_step"


def run(tmp_path, capsys, *argv):
    out = tmp_path / "cap"
    code = main(["-o", str(out), "--json", *argv])  # options first: argv may end with "-- ARGS"
    return code, json.loads(capsys.readouterr().out), json.loads((out / "meta.json").read_text())


def memory_doc(tmp_path):
    return json.loads(gzip.decompress((tmp_path / "cap" / "memory.json.gz").read_bytes()))


def test_eager_decode_is_launch_bound(tmp_path, capsys):
    code, data, meta = run(tmp_path, capsys, DECODE)
    assert code == 0 and meta["status"] == "ok"
    assert data["device"]["sm_count"] and "cuda-graphs" in [x["id"] for x in data["findings"][0]["fixes"]]
    assert data["findings"][0]["rule"] == "launch-overhead"
    mem = memory_doc(tmp_path)
    assert mem["snapshot"]["reserved_bytes"] > 0 and mem["stats"]["allocated_bytes.all.peak"] > 0
    assert (
        any(b["where"] and "tiny_decode.py" in b["where"] for b in mem["snapshot"]["top_blocks"])
        or mem["snapshot"]["events"]
    ), "allocations recorded with the user code that made them"
    head = json.loads(gzip.decompress((tmp_path / "cap" / "trace.json.gz").read_bytes()))
    assert head["diagnose"] == {
        "capture": "diagnose",
        "allocator_history": True,
        "allocator_history_steps": "warm-up",
        "stack_sampler": True,
    }
    trace = load_target(tmp_path / "cap" / "trace.json.gz")  # the trace file alone: still diagnose's harness
    assert trace.diagnose_mark and not prepare(trace, Metrics(trace).steps.windows).plain


def test_graphed_decode_is_not(tmp_path, capsys):
    code, data, _ = run(tmp_path, capsys, DECODE, "--param", "graphed=true")
    assert code == 0
    assert "launch-overhead" not in [f["rule"] for f in data["findings"]]


def test_real_out_of_memory(tmp_path, capsys):
    code, data, meta = run(
        tmp_path,
        capsys,
        f"{ROOT / 'tests' / 'workloads' / 'oom.py'}:make_step",
        "--param",
        "real=true",
        "--warmup",
        "1",
        "--timed-steps",
        "1",
    )
    assert code == 3 and meta["status"] == "oom"
    assert "OutOfMemoryError" in meta["error"]["type"]
    mem = memory_doc(tmp_path)
    assert mem["snapshot_taken"] == "at the out-of-memory error"
    assert mem["oom"]["requested_bytes"] >= 1 << 50


def test_script_mode_on_gpu(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        (ROOT / "tests" / "workloads" / "train_script.py")
        .read_text()
        .replace("torch.nn.Linear(32, 32)", "torch.nn.Linear(32, 32).cuda()")
        .replace("torch.randn(16, 32)", "torch.randn(16, 32, device='cuda')")
    )
    code, data, meta = run(tmp_path, capsys, str(script), "--", "60")
    assert code == 0 and meta["steps"]["how"] == "each optimizer.step() call"
    assert data["summary"]["gpu_ops_per_step"] > 0
