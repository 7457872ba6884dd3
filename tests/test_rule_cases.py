"""Runs every case in fixtures/cases/*.yaml: the rule must fire, stay quiet or be skipped as stated."""
from __future__ import annotations

import yaml
import pytest

from diagnose.config import Config
from diagnose.engine import diagnose_trace
from diagnose.memory import diagnose_sweep
from diagnose.rules import ALL_RULES
from diagnose.trace import load_target

from conftest import CAPTURES, CASES, PEER_TRACES, SYNTHETIC, load_capture


def _cases():
    for path in sorted(CASES.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        for i, case in enumerate(spec["cases"]):
            label = case.get("capture") or case.get("synthetic") or case.get("sweep") or case.get("peer")
            yield pytest.param(spec["rule"], case, id=f"{spec['rule']}:{i}:{label}")


def _load(case):
    if "capture" in case:
        if case.get("set"):
            return load_target(CAPTURES / case["capture"])
        return load_capture(case["capture"])
    if "peer" in case:
        return load_target(PEER_TRACES / case["peer"])
    return load_target(SYNTHETIC / case["synthetic"])


@pytest.mark.parametrize("rule_id,case", list(_cases()))
def test_case(rule_id, case):
    rule = next(r for r in ALL_RULES if r.id == rule_id)
    config = Config(overrides={k: float(v) for k, v in (case.get("set") or {}).items()})
    if "sweep" in case:
        diagnosis = diagnose_sweep(CAPTURES / case["sweep"], config, rules=[rule])
    else:
        diagnosis = diagnose_trace(_load(case), config, rules=[rule])
    fired = [f for f in diagnosis.findings if f.rule == rule_id]
    skipped = [s for s in diagnosis.skipped if s.rule == rule_id]
    expected = case["fires"]
    if expected == "skipped":
        assert skipped, f"{rule_id} should have been skipped; findings={fired}"
        return
    assert not skipped, f"{rule_id} was skipped: {skipped[0].reason}"
    assert bool(fired) == expected, (
        f"{rule_id} {'did not fire' if expected else 'fired'} on {case}: "
        f"{[c.detail for c in diagnosis.checked] or [e.text() for f in fired for e in f.evidence]}")
    if fired:
        finding = fired[0]
        if "severity" in case:
            assert finding.severity == case["severity"]
        if "min_speedup" in case:
            assert finding.est_speedup >= case["min_speedup"]
        if "max_speedup" in case:
            assert finding.est_speedup <= case["max_speedup"]
        if "fix" in case:
            assert case["fix"] in [x.id for x in finding.fixes]


def test_every_rule_has_cases():
    covered = {yaml.safe_load(p.read_text())["rule"] for p in CASES.glob("*.yaml")}
    assert {r.id for r in ALL_RULES} <= covered
