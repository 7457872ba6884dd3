"""The capture child's census (meta.json `workload`): the models alive while the steps run and the
libraries loaded, in function and script mode (CPU captures: tensors on the CPU are counted)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

FUNCTION = """
import torch
def make_step():
    model = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    return lambda: model(x).sum()
"""
SCRIPT = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(100):
    opt.zero_grad()
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
"""


def _capture(tmp_path, source: str, target_suffix: str = "") -> dict:
    path = tmp_path / "work.py"
    path.write_text(textwrap.dedent(source))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "diagnose", "-o", str(out), "--format", "json", f"{path}{target_suffix}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads((out / "meta.json").read_text())["workload"]


def test_function_mode_counts_the_model_the_step_holds(tmp_path):
    census = _capture(tmp_path, FUNCTION, ":make_step")
    assert census["parameter_bytes"] == (64 * 64 + 64) * 4 and census["parameters"] == 2
    assert census["models"][0]["class"] == "Linear" and census["dtypes"] == {"float32": (64 * 64 + 64) * 4}
    assert census["libraries"] == {}


def test_script_mode_counts_the_model_before_diagnose_stops_the_script(tmp_path):
    census = _capture(tmp_path, SCRIPT)
    assert census["parameter_bytes"] == (64 * 64 + 64 + 64 * 8 + 8) * 4
    assert census["models"][0]["class"] == "Sequential"
