"""The installed package holds every subpackage, the rules and the bundled fixtures."""
from __future__ import annotations

import tomllib

from conftest import ROOT


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"diagnose." + ".".join(p.parent.relative_to(ROOT / "diagnose").parts)
             for p in (ROOT / "diagnose").glob("*/__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert {"diagnose.rules", "diagnose.fixtures", "diagnose.fixtures.workloads"} <= listed
