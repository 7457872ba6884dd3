"""The installed package holds every subpackage, the rules and the bundled fixtures."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        "diagnose." + ".".join(p.parent.relative_to(ROOT / "diagnose").parts)
        for p in (ROOT / "diagnose").glob("*/__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert {"diagnose.rules", "diagnose.fixtures", "diagnose.fixtures.workloads"} <= listed


DISTRIBUTION = "diagnose-gpu"  # `diagnose` on the package index is an unrelated project


def test_the_distribution_has_a_name_of_its_own_and_every_hint_uses_it():
    import re

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION and project["scripts"] == {"diagnose": "diagnose.commands:main"}
    hint = re.compile(r"pip install\s+['\"]?([A-Za-z0-9_.\-]+)\[")
    files = [
        *(ROOT / "diagnose").rglob("*.py"),
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
    wrong = [
        (str(p.relative_to(ROOT)), name)
        for p in files
        for name in hint.findall(p.read_text())
        if name not in (DISTRIBUTION, ".")
    ]
    assert not wrong, f"install hints that name another distribution: {wrong}"
