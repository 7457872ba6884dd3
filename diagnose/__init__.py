"""diagnose: a bottleneck-diagnosis profiler for PyTorch GPU workloads.

import diagnose
d = diagnose.analyze("trace.json.gz")     # no torch needed
d.findings[0].fixes[0].id                 # e.g. "cuda-graphs"
d.findings_frame(), d.kernels_frame()     # pandas frames; in a notebook `d` shows the report

d = diagnose.profile("model.py:make_step", batch=1)   # capture on this machine's GPU, then analyse
"""

from __future__ import annotations

from diagnose.base.version import __version__

__all__ = ["__version__", "analyze", "profile"]


def analyze(target, overrides: dict | None = None, ncu_csv=None):
    """Analyse a kineto trace file, a capture folder or a sweep folder and return its Diagnosis.

    Exactly what the command line does: a capture folder's ncu.csv is attached, as is `ncu_csv`.
    """
    from pathlib import Path

    from diagnose.front import pipeline
    from diagnose.front.api import Report

    return Report.of(pipeline.analyse(Path(target), _config(overrides), ncu_csv=Path(ncu_csv) if ncu_csv else None))


def profile(
    target: str,
    out=None,
    warmup: int = 3,
    steps: int = 5,
    timed_steps: int = 20,
    timeout_s: float = 900,
    overrides: dict | None = None,
    nproc_per_node: int | None = None,
    **params,
):
    """Capture `file.py:NAME` (NAME(**params) returns the step callable) and return its Diagnosis.

    The workload runs in a child process, as with the command line; the capture folder is `out`
    (default diagnose-out/FILE-NAME). A failed workload returns a Diagnosis whose
    `workload_failed` is True. With `nproc_per_node=N` the workload runs on N ranks through
    torch.distributed.run (one rank-K/ folder each) and the Diagnosis compares them.
    """
    from pathlib import Path

    from diagnose.front import pipeline
    from diagnose.front.api import Report
    from diagnose.capture.spec import CaptureOptions
    from diagnose.base.errors import UsageError
    from diagnose.front.output import default_out
    from diagnose.front.target import resolve_target

    parsed = resolve_target(target)
    if parsed.kind != "function":
        raise UsageError("profile() takes a 'file.py:NAME' target; use analyze() for traces")
    folder = Path(out) if out else default_out(parsed)
    options = CaptureOptions(params=params, warmup=warmup, steps=steps, timed_steps=timed_steps, timeout_s=timeout_s)
    if nproc_per_node:
        from diagnose.capture.distributed import Launch

        return Report.of(
            pipeline.capture_distributed_and_analyse(
                parsed, folder, _config(overrides), options, Launch(nproc_per_node)
            )
        )
    return Report.of(pipeline.capture_and_analyse(parsed, folder, _config(overrides), options))


def _config(overrides: dict | None):
    """A Config from Python overrides, checked like --set."""
    from diagnose.model.config import Config, _check
    from diagnose.rulebook.engine import known_thresholds
    from diagnose.rules import ALL_RULES

    known = known_thresholds(ALL_RULES)
    for key, value in (overrides or {}).items():
        _check(key, value, known)
    return Config(overrides=dict(overrides or {}))
