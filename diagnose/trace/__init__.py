"""Trace: read a kineto trace (ours or anyone's) once into typed pandas frames.

`Trace` and `load_target` are imported on first use (PEP 562), so a module that needs only this
package's schemas or names (the config's threshold check, a command line that fails before reading
anything) does not pay for pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnose.trace.load import load_target
    from diagnose.trace.model import Trace

__all__ = ["Trace", "load_target"]
_HOMES = {"Trace": "diagnose.trace.model", "load_target": "diagnose.trace.load"}


def __getattr__(name: str) -> object:
    """`Trace` and `load_target`, imported when first asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
