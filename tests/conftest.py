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


def plain_event(value):
    """A decoded kineto Event as plain values: its fields and its args' fields, raw lists as what they hold."""
    import msgspec

    from diagnose.trace import kineto

    if isinstance(value, msgspec.Struct):
        return {f: plain_event(getattr(value, f)) for f in value.__struct_fields__}
    if isinstance(value, msgspec.Raw):
        return kineto.decode_list(value)
    return value


SHARED_CACHE = "DIAGNOSE_TEST_SHARED_CACHE"  # a folder the controller makes for the session's workers


@functools.lru_cache(maxsize=None)
def _shared_folder() -> Path:
    """The folder the session's workers share (made by the controller), or one of this process's own
    when there is no controller (`-n 0`)."""
    folder = os.environ.get(SHARED_CACHE)
    if folder and Path(folder).is_dir():
        return Path(folder)
    import atexit
    import shutil
    import tempfile

    own = tempfile.mkdtemp(prefix="diagnose-test-analyses-")
    atexit.register(shutil.rmtree, own, True)
    return Path(own)


def _once(done: Path, make) -> Path:
    """`done`, made by `make(partial_path)` by the first process that asks while the others wait on its
    lock, then read by all: it only appears whole (written aside, then renamed)."""
    import fcntl

    with open(done.with_name(done.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            partial = done.with_name(done.name + ".partial")
            make(partial)
            partial.replace(done)
    return done


def shared_file(name: str, make) -> Path:
    """A file derived from the bundled fixtures (a stripped or copied trace) at `name` in the workers'
    shared folder, written once per session by `make(path)`: every worker reads the same path, so
    diagnosis_of shares its analysis too. Read it, never change it."""
    done = _shared_folder() / "files" / name
    done.parent.mkdir(parents=True, exist_ok=True)
    return _once(done, make)


@functools.lru_cache(maxsize=None)
def diagnosis_of(path: Path):
    """diagnose.analyze(path) with the bundled target's overrides (make_golden.overrides), made once per
    session for every test that reads the same target (golden, invariants, accounting, rule cases, same
    answer, unmarked steps, held-out): read it, never change it. Under xdist the workers share it through
    a pickle in the session's folder, made by the first worker that asks while the others wait on its
    lock, so no target is analysed twice in one run. Keyed by the resolved path: a Diagnosis names its
    target, so a copy elsewhere is a target of its own (shared_file gives copies one path for all)."""
    from diagnose import analyze

    folder = os.environ.get(SHARED_CACHE)
    if not folder or not Path(folder).is_dir():
        return analyze(path, overrides=make_golden.overrides(path))
    import hashlib
    import pickle

    done = Path(folder) / (hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest() + ".pickle")

    def make(partial: Path) -> None:
        diagnosis = analyze(path, overrides=make_golden.overrides(path))
        partial.write_bytes(pickle.dumps(diagnosis, protocol=pickle.HIGHEST_PROTOCOL))

    return pickle.loads(_once(done, make).read_bytes())


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
