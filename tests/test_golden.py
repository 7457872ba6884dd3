"""Conclusions on every bundled trace match fixtures/golden/findings.json.

A refactor must not change what diagnose concludes; a change that means to re-runs
`python fixtures/golden/make_golden.py` and the JSON diff shows what moved.
"""
from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "fixtures" / "golden"))
import make_golden  # noqa: E402

GOLDEN = json.loads((ROOT / "fixtures" / "golden" / "findings.json").read_text())
TARGETS = make_golden.targets()


def test_every_target_has_a_golden_entry():
    assert sorted(str(p.relative_to(ROOT)) for p in TARGETS) == sorted(GOLDEN)


@pytest.mark.parametrize("path", TARGETS, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_conclusions_unchanged(path):
    assert make_golden.conclusions(path) == GOLDEN[str(path.relative_to(ROOT))]
