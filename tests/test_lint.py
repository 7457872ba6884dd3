"""The code is linted and formatted in CI: ruff check (the rules in pyproject.toml's [tool.ruff.lint])
over the whole tree, and ruff format --check over the Python folders."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PYTHON_FOLDERS = ("diagnose", "tests", "benchmarks", "fixtures")  # README's code blocks are prose


def _ruff(*args: str) -> subprocess.CompletedProcess:
    """Run the ruff beside this interpreter (or on the PATH); skip when there is none."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the [test] extra)")
    return subprocess.run([ruff, *args], capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing():
    done = _ruff("check", "--output-format", "concise", "--no-cache", str(ROOT))
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_leaves_the_tree_as_it_is():
    """Formatting is checked too: `ruff format` over the tree changes nothing (run it before committing)."""
    done = _ruff("format", "--check", "--no-cache", *(str(ROOT / d) for d in PYTHON_FOLDERS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_tracked_file_is_ignored_by_git():
    """ruff skips what .gitignore names, tracked or not: a stale line there once kept every rule module
    (diagnose/rules) out of the lint and format checks, and would have left a new rule out of a commit."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(
        [git, "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
