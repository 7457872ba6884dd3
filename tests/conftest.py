"""Shared test helpers: where fixtures and peer traces live, and cached loads and analyses."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

# One intra-op thread for torch, in the test process and in every capture child it starts (they inherit
# the environment): on a small shared CPU, the thread pool's barriers made the tests' tiny steps several
# times slower and noisier, and a noisy step is timed again and again (the verify child's timing ran to
# its 200-step cap). A value set outside the tests wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "fixtures" / "captures"
SYNTHETIC = ROOT / "fixtures" / "synthetic"
CASES = ROOT / "fixtures" / "cases"
PEER_TRACES = ROOT / "fixtures" / "peer"


@functools.lru_cache(maxsize=None)
def load_capture(name: str):
    """Load (once per session) a bundled capture folder by name."""
    from diagnose.trace import load_target

    return load_target(CAPTURES / name)


@functools.lru_cache(maxsize=None)
def diagnosis_of(path: Path):
    """diagnose.analyze(path), made once per session (per xdist worker) for every test that reads the
    same bundled target (golden, invariants, accounting): read it, never change it."""
    from diagnose import analyze

    return analyze(path)


def has_cuda() -> bool:
    """True when torch with a usable CUDA device is importable."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Skip tests marked gpu when no CUDA device is present."""
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200 machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    """Compile the project's sources to bytecode once, before the workers start: the suite starts
    hundreds of `python -m diagnose` and capture children, and where PYTHONDONTWRITEBYTECODE is set
    (as on the development container) each of them would compile diagnose's modules again (about
    0.3 s a process). Reading bytecode is unaffected by that setting; only writing it is."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    for folder in ("diagnose", "rules", "tests/workloads", "fixtures/workloads"):
        if (ROOT / folder).is_dir():
            compileall.compile_dir(ROOT / folder, quiet=2, workers=1)
