"""Evidence holds a share as a fraction; findings.json writes it as the percent it always has.

A share is an evidence line whose unit starts with "%" ("%", "% of step"). In memory its value and threshold
are fractions (0.712 against 0.2); every renderer writes them with units.percent; findings.json holds their
percents (71.2 against 20.0), converted in one place (Diagnosis.to_dict / from_dict). These tests pin that
one way: the conversion both ways, `holds` on the numbers as written, an older findings.json read back, no
rule that builds a percent by hand, and no bundled target whose share evidence is a percent in memory.
"""

from __future__ import annotations

import ast
import json
import re
import sys

import pytest

from conftest import ROOT, diagnosis_of
from diagnose.model.details import Device
from diagnose.model.findings import SCHEMA, Diagnosis, Evidence, Finding, Summary, check_findings_file
from diagnose.model.invariants import violations

sys.path.insert(0, str(ROOT / "fixtures" / "golden"))
import make_golden  # noqa: E402

OLD_FINDINGS = ROOT / "fixtures" / "golden" / "old_findings_main_727cab9_ddp_straggler.json"
DIAGNOSE = ROOT / "diagnose"
# an excess over a reference ("GPU work above the other ranks' median") is a share of that reference that
# may pass all of it: a rank with three times the median's work is 200 % above it
EXCESS = re.compile(r"\babove\b")


def diagnosis(*evidence: Evidence) -> Diagnosis:
    return Diagnosis("t", Device(), Summary(), [Finding("r", "low", "t", list(evidence), [])], [])


def test_a_share_is_a_fraction_in_memory_and_its_percent_in_findings_json():
    lines = [
        Evidence.share("host wait", 0.71234, ">", 0.2),
        Evidence.share("matmuls", 0.123, unit="% of step"),
        Evidence("median kernel", 2.24, "<", 10, "µs"),
        Evidence("graph break at", "train.py:12"),
    ]
    assert [(e.value, e.threshold) for e in lines[:2]] == [(0.712, 0.2), (0.123, None)]
    written = diagnosis(*lines).to_dict()["findings"][0]["evidence"]
    assert written == [
        {"metric": "host wait", "value": 71.2, "op": ">", "threshold": 20.0, "unit": "%"},
        {"metric": "matmuls", "value": 12.3, "op": "", "threshold": None, "unit": "% of step"},
        {"metric": "median kernel", "value": 2.24, "op": "<", "threshold": 10.0, "unit": "µs"},
        {"metric": "graph break at", "value": "train.py:12", "op": "", "threshold": None, "unit": ""},
    ]
    back = Diagnosis.from_dict(diagnosis(*lines).to_dict())
    assert back.findings[0].evidence == lines  # read back: the fractions again, not the percents
    assert back.to_dict()["findings"][0]["evidence"] == written
    assert [e.text() for e in lines[:2]] == ["host wait 71.2 % > 20 %", "matmuls 12.3 % of step"]


def test_holds_is_computed_on_the_numbers_as_written():
    """0.19996 shows (and is written) as 20 %: ">= 20 %" holds as the reader sees it, and the invariants, which
    read findings.json's numbers, agree; a share below its threshold carries holds: false into the file."""
    met = Evidence.share("idle", 0.19996, ">=", 0.2)
    unmet = Evidence.share("saving", 0.043, ">=", 0.1)
    assert met.holds is None and met.text() == "idle 20 % >= 20 %"
    assert unmet.holds is False and unmet.text() == "saving 4.3 % >= 10 % (not met)"
    d = diagnosis(met, unmet)
    assert violations(d) == []
    assert d.to_dict()["findings"][0]["evidence"][1] == {
        "metric": "saving",
        "value": 4.3,
        "op": ">=",
        "threshold": 10.0,
        "unit": "%",
        "holds": False,
    }


def test_a_share_unit_is_required_of_a_share():
    with pytest.raises(ValueError, match="starts with '%'"):
        Evidence.share("idle", 0.5, unit="µs")


def test_an_older_findings_json_reads_as_fractions_and_writes_back_the_same():
    data = json.loads(OLD_FINDINGS.read_text())  # written by main at 727cab9, as `diagnose diff` may read it
    d = Diagnosis.from_dict(data)
    for old, finding in zip(data["findings"], d.findings):
        for line, e in zip(old["evidence"], finding.evidence):
            if e.is_share:
                assert e.value == pytest.approx(line["value"] / 100, abs=1e-12)
        assert d.to_dict()["findings"][d.findings.index(finding)]["evidence"] == old["evidence"]
    texts = [e.text() for f in d.findings for e in f.evidence]
    assert "launch-bound idle per step 45.5 % >= 25 %" in texts
    assert "rank 1: GPU work above the other ranks' median 4.3 % >= 10 % (not met)" in texts


def test_a_malformed_share_line_is_named_not_raised(tmp_path):
    from diagnose.base.errors import InputError

    data = {**json.loads(OLD_FINDINGS.read_text()), "schema": SCHEMA}
    data["findings"][0]["evidence"][0]["value"] = [71.2]
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"evidence\[0\]\.value"):
        check_findings_file(path)


def _sources(*folders: str):
    for folder in folders:
        for path in sorted((DIAGNOSE / folder).rglob("*.py")):
            yield path, ast.parse(path.read_text(), filename=str(path))


def _is_hundred(node) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value in (100, 100.0)


def test_no_rule_builds_a_percent_by_hand():
    """A rule hands Evidence.share a fraction: no `x * 100` in the rules or the rule engine, and no evidence
    line outside the model written with a percent unit by hand (Evidence(..., unit="%") takes a percent
    for a fraction without a word). The one percent still built in a rule is straggler's `skew_pct`, an
    offender column findings.json has always held as a percent (not evidence)."""
    found = []
    for path, tree in _sources("rules", "rulebook"):
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                if _is_hundred(node.left) or _is_hundred(node.right):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "percent_value":
                if ast.unparse(node) != "percent_value(w.work_skew)":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    for path, tree in _sources("."):
        if path.relative_to(DIAGNOSE).parts[0] == "model":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Evidence":
                unit = (
                    node.args[4]
                    if len(node.args) > 4
                    else next((k.value for k in node.keywords if k.arg == "unit"), None)
                )
                if isinstance(unit, ast.Constant) and str(unit.value).startswith("%"):
                    found.append(
                        f"{path.relative_to(ROOT)}:{node.lineno}: a share built with Evidence(), not Evidence.share"
                    )
    assert found == []


@pytest.mark.parametrize("path", make_golden.targets(), ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_no_bundled_target_holds_a_share_as_a_percent(path):
    """On every bundled target (its analysis shared with the golden test), each share's threshold is a
    fraction of at most 1 under the default settings, and each share of a whole is at most 1 (only an excess
    over a reference, "above the other ranks' median", may pass it): a rule that stored 71.2 for 71.2 %
    fails here."""
    wrong = [
        f"{f.rule}: {e.metric} = {e.value!r} against {e.threshold!r}"
        for f in diagnosis_of(path).findings
        for e in f.evidence
        if e.is_share
        and (
            (e.threshold is not None and not 0 <= e.threshold <= 1)
            or (isinstance(e.value, float) and not EXCESS.search(e.metric) and not -1e-9 <= e.value <= 1 + 1e-9)
        )
    ]
    assert wrong == []
