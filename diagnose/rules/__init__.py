"""The rules of diagnose, one file each; ALL_RULES lists them in report order.

Each rule's module docstring is its documentation; the pages in docs/rules/ are generated from them
(`python -m diagnose.ruleset.docs`). A rule joins by existing: every
module here that defines a `Rule` subclass is found, and the rules are ordered by their `order`
(time rules first, then memory rules). Adding a rule is one file here, one YAML file of cases in
fixtures/cases/, and regenerated docs.
"""

from __future__ import annotations

import importlib
import pkgutil

from diagnose.rulebook.engine import Rule


def _discover() -> list[type[Rule]]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += [
            obj
            for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, Rule) and obj.__module__ == module.__name__
        ]
    return sorted(found, key=lambda rule: (rule.order, rule.id))


ALL_RULES: list[type[Rule]] = _discover()

__all__ = ["ALL_RULES"]
