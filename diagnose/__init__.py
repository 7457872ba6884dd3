"""diagnose: a bottleneck-diagnosis profiler for PyTorch GPU workloads.

    import diagnose
    d = diagnose.analyze("trace.json.gz")     # no torch needed
    d.findings[0].fixes[0].id                 # e.g. "cuda-graphs"
"""
from __future__ import annotations

__version__ = "0.1.0"


def analyze(target, overrides: dict | None = None):
    """Analyse a kineto trace file or a capture folder and return its Diagnosis."""
    from diagnose.config import Config
    from diagnose.engine import diagnose_trace
    from diagnose.trace import load_target

    return diagnose_trace(load_target(target), Config(overrides=dict(overrides or {})))
