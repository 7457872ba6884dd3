"""Metrics: pure functions of a Trace, computed once and shared by every rule.

`Metrics` (metrics/shared.py) holds one trace's views; the modules beside it compute them. The two
public names are imported on first use (PEP 562): the report's typed sections live here too
(metrics/sections.py), and a command line that imports them to say `--version` or refuse a path
does not pay for pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from diagnose.base.lazy import lazy_names

if TYPE_CHECKING:
    from diagnose.metrics.shared import TIMELINE_DEFAULTS, Metrics

__all__ = ["Metrics", "TIMELINE_DEFAULTS"]
__getattr__ = lazy_names(__name__, dict.fromkeys(__all__, "diagnose.metrics.shared"))
