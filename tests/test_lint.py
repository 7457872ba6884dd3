"""The code is linted in CI: ruff (the rules in pyproject.toml's [tool.ruff.lint]) over the whole tree."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(__import__("pathlib").Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the [test] extra)")
    done = subprocess.run([ruff, "check", "--output-format", "concise", "--no-cache", str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
