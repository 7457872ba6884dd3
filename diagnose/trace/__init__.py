"""Trace: read a kineto trace (ours or anyone's) once into typed pandas frames.

`Trace` and `load_target` are imported on first use (PEP 562), so a module that needs only this
package's schemas or names (the config's threshold check, a command line that fails before reading
anything) does not pay for pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from diagnose.base.lazy import lazy_names

if TYPE_CHECKING:
    from diagnose.trace.load import load_target
    from diagnose.trace.model import Trace

__all__ = ["Trace", "load_target"]
__getattr__ = lazy_names(__name__, {"Trace": "diagnose.trace.model", "load_target": "diagnose.trace.load"})
