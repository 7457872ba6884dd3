"""The type checker passes in CI: mypy (pyproject.toml's [tool.mypy]) over every module diagnose installs.

fixtures/ is installed as `diagnose.fixtures` (setuptools package-dir), which mypy cannot see through
the editable install's import hook. So the test lays out the installed tree, diagnose/ with
fixtures/__init__.py as diagnose/fixtures, in .mypy_cache/tree (a fixed place, so mypy's cache there
stays valid between runs), and runs mypy on the installed names (-p, -m). Its output names the
source files (fixtures/__init__.py, not diagnose/fixtures/__init__.py). A module is checked as part of a
package in PACKAGES or by itself in MODULES, and every installed module must be one of them
(test_every_module_is_checked). By hand:

    python -m pytest -q -o addopts="" tests/test_types.py
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

PACKAGES = [
    "diagnose.metrics",
    "diagnose.memory",
    "diagnose.ncu",
    "diagnose.diff",
    "diagnose.report",
    "diagnose.model",
    "diagnose.rules",
    "diagnose.ranks",
    "diagnose.trace",
    "diagnose.commands",
    "diagnose.vocabulary",
    "diagnose.verify",
    "diagnose.capture",
    "diagnose.front",
    "diagnose.base",
    "diagnose.rulebook",
    "diagnose.ruleset",
    "diagnose.rankset",
    "diagnose.child",
]
MODULES = [
    "diagnose",
    "diagnose.__main__",
    "diagnose.fixtures",
]


def in_package(module):
    """True when `module` is one of PACKAGES or inside one."""
    return any(module == name or module.startswith(name + ".") for name in PACKAGES)


def mypy_targets():
    """mypy's arguments: -p for each package, -m for each module no package holds (mypy refuses a
    module named twice)."""
    modules = [name for name in dict.fromkeys(MODULES) if not in_package(name)]
    return [arg for name in dict.fromkeys(PACKAGES) for arg in ("-p", name)] + [
        arg for name in modules for arg in ("-m", name)
    ]


def installed_modules(tree):
    """The dotted names of the modules in the installed tree `tree` (a package by its own name)."""
    names = []
    for path in sorted((tree / "diagnose").rglob("*.py")):
        parts = path.relative_to(tree).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def installed_tree(dest):
    """Copy the sources into `dest` as they are installed (diagnose.fixtures) and return it."""
    if dest.exists():
        shutil.rmtree(dest)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    # copy2 keeps modification times, so mypy's cache knows an unchanged file
    shutil.copytree(ROOT / "diagnose", dest / "diagnose", ignore=skip, copy_function=shutil.copy2)
    (dest / "diagnose" / "fixtures").mkdir()
    shutil.copy2(ROOT / "fixtures" / "__init__.py", dest / "diagnose" / "fixtures" / "__init__.py")
    return dest


def run_mypy():
    """Run mypy over PACKAGES and MODULES; return (exit code, its output with source paths)."""
    cache = ROOT / ".mypy_cache"
    tree = installed_tree(cache / "tree")
    targets = mypy_targets()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--show-error-codes",
            *targets,
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=540,
    )
    output = re.sub(r"^diagnose/fixtures/", "fixtures/", done.stdout + done.stderr, flags=re.MULTILINE)
    return done.returncode, output


def test_mypy_finds_nothing():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it comes with the [test] extra)")
    code, output = run_mypy()
    assert code == 0, output


def test_every_module_is_checked(tmp_path):
    tree = installed_tree(tmp_path / "tree")
    modules = installed_modules(tree)
    assert "diagnose.trace.model" in modules and any(name.startswith("diagnose.rules.") for name in modules)
    assert [name for name in modules if not in_package(name) and name not in MODULES] == []


def test_a_module_in_a_checked_package_is_not_named_twice(monkeypatch):
    monkeypatch.setitem(globals(), "PACKAGES", ["diagnose.front", "diagnose.front"])
    monkeypatch.setitem(globals(), "MODULES", ["diagnose.front.cli", "diagnose.frontier", "diagnose.front"])
    assert mypy_targets() == ["-p", "diagnose.front", "-m", "diagnose.frontier"]


if __name__ == "__main__":
    code, output = run_mypy()
    print(output, end="")
    sys.exit(code)
