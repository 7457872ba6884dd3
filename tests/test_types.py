"""The type checker passes in CI: mypy (pyproject.toml's [tool.mypy]) over the analysis packages.

fixtures/ is installed as `diagnose.fixtures` (setuptools package-dir), which mypy cannot see through
the editable install's import hook. So the test lays out the installed tree, diagnose/ with
fixtures/__init__.py as diagnose/fixtures, in .mypy_cache/tree (a fixed place, so mypy's cache there
stays valid between runs), and runs mypy on the installed names (-p, -m). Its output names the
source files (fixtures/__init__.py, not diagnose/fixtures/__init__.py). By hand:

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
    "diagnose.rules",
    "diagnose.ranks",
    "diagnose.trace",
    "diagnose.commands",
    "diagnose.vocabulary",
    "diagnose.verify",
]
MODULES = [
    "diagnose.model.findings",
    "diagnose.rulebook.engine",
    "diagnose.model.invariants",
    "diagnose.model.fixes",
    "diagnose.base.format",
    "diagnose.base.thresholds",
    "diagnose.model.config",
    "diagnose.base.errors",
    "diagnose.base.devices",
    "diagnose.base.step_timing",
    "diagnose.front.pipeline",
    "diagnose.front.target",
    "diagnose.front.output",
    "diagnose.base.safe_files",
    "diagnose.base.os_errors",
    "diagnose.ruleset.assemble",
    "diagnose.ruleset.docs",
]


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
    targets = [arg for name in PACKAGES for arg in ("-p", name)] + [arg for name in MODULES for arg in ("-m", name)]
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


if __name__ == "__main__":
    code, output = run_mypy()
    print(output, end="")
    sys.exit(code)
