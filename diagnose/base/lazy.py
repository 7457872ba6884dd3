"""Package names imported on first use (PEP 562): a package whose public names live in modules that
import pandas can still be imported by a command line that never analyses anything."""

from __future__ import annotations

import importlib
import sys
from typing import Callable


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], object]:
    """The module `__getattr__` of `package`: each name of `homes` (name -> the module that defines it) is
    imported when first asked for and then kept on the package; any other name is an AttributeError."""

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
