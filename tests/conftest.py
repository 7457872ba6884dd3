"""Shared test helpers: where fixtures and peer traces live, and cached loads and analyses."""

from __future__ import annotations

import functools
import os
import sys
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
sys.path.insert(0, str(ROOT / "fixtures" / "golden"))
import make_golden  # noqa: E402


@functools.lru_cache(maxsize=None)
def load_capture(name: str):
    """Load (once per session) a bundled capture folder by name."""
    from diagnose.trace import load_target

    return load_target(CAPTURES / name)


SHARED_CACHE = "DIAGNOSE_TEST_SHARED_CACHE"  # a folder the controller makes for the session's workers


@functools.lru_cache(maxsize=None)
def diagnosis_of(path: Path):
    """diagnose.analyze(path), made once per session for every test that reads the same bundled target
    (golden, invariants, accounting, rule cases): read it, never change it. Under xdist the workers
    share it through a pickle in the session's folder, made by the first worker that asks while the
    others wait on its lock, so no target is analysed twice in one run."""
    from diagnose import analyze

    folder = os.environ.get(SHARED_CACHE)
    if not folder or not Path(folder).is_dir():
        return analyze(path, overrides=make_golden.overrides(path))
    import fcntl
    import hashlib
    import pickle

    stem = Path(folder) / hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()
    with open(stem.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = stem.with_suffix(".pickle")
        if done.exists():
            return pickle.loads(done.read_bytes())
        diagnosis = analyze(path, overrides=make_golden.overrides(path))
        partial = stem.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(diagnosis, protocol=pickle.HIGHEST_PROTOCOL))
        partial.replace(done)
        return diagnosis


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
    0.3 s a process). Reading bytecode is unaffected by that setting; only writing it is. Under xdist,
    also make the folder through which the workers share their analyses (diagnosis_of)."""
    if hasattr(config, "workerinput"):
        return
    if getattr(config.option, "numprocesses", None) and not os.environ.get(SHARED_CACHE):
        import tempfile

        config._diagnose_shared_cache = tempfile.mkdtemp(prefix="diagnose-test-analyses-")
        os.environ[SHARED_CACHE] = config._diagnose_shared_cache
    import compileall

    for folder in ("diagnose", "tests/workloads", "fixtures/workloads"):
        if (ROOT / folder).is_dir():
            compileall.compile_dir(ROOT / folder, quiet=2, workers=1)


def pytest_unconfigure(config):
    """Remove the session's shared analyses (only the controller made them)."""
    folder = getattr(config, "_diagnose_shared_cache", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(SHARED_CACHE, None)
