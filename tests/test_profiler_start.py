"""Starting the profiler does not import inductor for a workload that never did (child/capture.py)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from diagnose.child.capture import without_lazy_inductor
from diagnose.commands import main

from conftest import ROOT


def _lazy_torch(imported: list) -> types.ModuleType:
    """A stand-in for torch whose module __getattr__ imports submodules on first lookup, as torch's does."""
    fake = types.ModuleType("fake_torch")

    def lazy(name):
        imported.append(name)
        return types.ModuleType(f"fake_torch.{name}")

    fake.__getattr__ = lazy
    return fake


def test_the_lookup_of_inductor_is_answered_without_importing_it(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._inductor", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CUDAGRAPHS", "1")
    imported: list = []
    torch, profiler = _lazy_torch(imported), types.SimpleNamespace(has_cudagraphs=False)
    with without_lazy_inductor(torch, profiler):
        assert not hasattr(torch, "_inductor")
        assert hasattr(torch, "_dynamo")  # every other lazy submodule still loads
    assert imported == ["_dynamo"]
    assert profiler.has_cudagraphs is True  # the environment's default, what inductor would have said
    assert hasattr(torch, "_inductor") and imported[-1] == "_inductor"  # restored afterwards


def test_a_workload_that_imported_inductor_is_left_to_the_profiler(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch._inductor", types.ModuleType("torch._inductor"))
    imported: list = []
    torch, profiler = _lazy_torch(imported), types.SimpleNamespace(has_cudagraphs="untouched")
    with without_lazy_inductor(torch, profiler):
        assert hasattr(torch, "_inductor")
    assert profiler.has_cudagraphs == "untouched"


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="capturing needs torch")
def test_a_capture_without_compile_never_imports_inductor(tmp_path, capsys, monkeypatch):
    """End to end: the workload's last step writes whether inductor is loaded in the capture child."""
    report = tmp_path / "modules.json"
    monkeypatch.setenv("DIAGNOSE_TEST_MODULES_FILE", str(report))
    target = f"{ROOT / 'tests' / 'workloads' / 'reports_modules.py'}:make_step"
    code = main(
        ["-o", str(tmp_path / "out"), "--warmup", "1", "--steps", "2", "--timed-steps", "2", "--no-html", "-q", target]
    )
    capsys.readouterr()
    assert code == 0
    assert json.loads(report.read_text()) == {"torch._inductor": False}
