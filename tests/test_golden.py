"""Conclusions on every bundled trace match fixtures/golden/findings.json.

A refactor must not change what diagnose concludes; a change that means to re-runs
`python fixtures/golden/make_golden.py` and the JSON diff shows what moved.
"""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT, diagnosis_of

sys.path.insert(0, str(ROOT / "fixtures" / "golden"))
import make_golden  # noqa: E402

GOLDEN = json.loads((ROOT / "fixtures" / "golden" / "findings.json").read_text())
TARGETS = make_golden.targets()


def test_every_target_has_a_golden_entry():
    assert sorted(str(p.relative_to(ROOT)) for p in TARGETS) == sorted(GOLDEN)


@pytest.fixture(scope="module")
def schema_validator():
    """A validator of the JSON Schema that `diagnose schema` prints (jsonschema: an independent reader)."""
    jsonschema = pytest.importorskip("jsonschema")
    from diagnose.model.findings import findings_schema

    schema = findings_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", TARGETS, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_conclusions_unchanged_and_findings_json_fits_its_schema(path, schema_validator):
    from diagnose.model.findings import Diagnosis
    from diagnose.report.json_report import render_json

    text = render_json(diagnosis_of(path))  # make_golden.findings_json(path), from the session's analysis
    data = json.loads(text)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in schema_validator.iter_errors(data)]
    assert errors == []
    assert Diagnosis.from_dict(data).to_dict() == data  # read back typed, written again: the same document
    assert make_golden.conclusions(path, data) == GOLDEN[str(path.relative_to(ROOT))]
