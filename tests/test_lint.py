"""The code is linted and formatted in CI: ruff check (the rules in pyproject.toml's [tool.ruff.lint])
over the whole tree, and ruff format --check over the Python folders."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

PYTHON_FOLDERS = ("diagnose", "rules", "tests", "benchmarks", "fixtures")  # README's code blocks are prose


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(__import__("pathlib").Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the [test] extra)")
    done = subprocess.run(
        [ruff, "check", "--output-format", "concise", "--no-cache", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_leaves_the_tree_as_it_is():
    """Formatting is checked too: `ruff format` over the tree changes nothing (run it before committing)."""
    ruff = shutil.which("ruff", path=str(__import__("pathlib").Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the [test] extra)")
    done = subprocess.run(
        [ruff, "format", "--check", "--no-cache", *(str(ROOT / d) for d in PYTHON_FOLDERS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
