"""Metrics: pure functions of a Trace, computed once and shared by every rule.

`Metrics` (metrics/shared.py) holds one trace's views; the modules beside it compute them. The two
public names are imported on first use (PEP 562): the report's typed sections live here too
(metrics/sections.py), and a command line that imports them to say `--version` or refuse a path
does not pay for pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnose.metrics.shared import TIMELINE_DEFAULTS, Metrics

__all__ = ["Metrics", "TIMELINE_DEFAULTS"]


def __getattr__(name: str) -> object:
    """`Metrics` and `TIMELINE_DEFAULTS`, imported when first asked for."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("diagnose.metrics.shared"), name)
    globals()[name] = value
    return value
