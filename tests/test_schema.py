"""`diagnose schema`: the JSON Schema of findings.json from the typed model, and files checked against it."""

from __future__ import annotations

import json

import pytest

from diagnose.cli import main
from diagnose.findings import SCHEMA, CheatSheet, Diagnosis

from conftest import CAPTURES


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    """findings.json of a bundled capture, as `diagnose` writes it."""
    out = tmp_path_factory.mktemp("schema") / "out"
    assert main([str(CAPTURES / "decode_eager"), "-o", str(out), "--no-html", "-q"]) == 0
    return json.loads((out / "findings.json").read_text())


def test_schema_prints_a_json_schema_of_every_part(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == SCHEMA
    assert {"Diagnosis", "Finding", "Evidence", "Fix", "Skipped", "Checked", "Details", "CheatSheet"} <= set(
        schema["$defs"]
    )
    severity = schema["$defs"]["Finding"]["properties"]["severity"]
    assert set(severity["enum"]) == {"high", "medium", "low"}


def test_a_written_findings_json_fits_and_reads_back_typed(written, tmp_path, capsys):
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(written))
    assert main(["schema", str(path)]) == 0
    assert "fits diagnose.findings/1" in capsys.readouterr().out
    d = Diagnosis.from_dict(written)
    assert isinstance(d.findings[0].sheet, CheatSheet) and d.findings[0].sheet.bottleneck
    assert d.to_dict() == written


@pytest.mark.parametrize(
    "spoil, says",
    [
        (lambda d: d["findings"][0].update(severity="urgent"), "severity"),
        (lambda d: d["findings"][0]["evidence"][0].update(value=[1, 2]), "evidence"),
        (lambda d: d.pop("findings"), "findings"),
        (lambda d: d.update(schema="someone.else/3"), "not 'diagnose.findings/1'"),
    ],
)
def test_a_findings_json_that_does_not_fit_is_exit_2_naming_the_field(written, spoil, says, tmp_path, capsys):
    data = json.loads(json.dumps(written))
    spoil(data)
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(data))
    assert main(["schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and says in err and len(err.strip().splitlines()) == 1


def test_the_report_shows_the_cheat_sheet_the_finding_carries(written):
    from diagnose.report.html import render_html

    data = json.loads(json.dumps(written))
    data["findings"][0]["sheet"]["bottleneck"] = "a sheet from an older diagnose"
    assert "a sheet from an older diagnose" in render_html(Diagnosis.from_dict(data))
