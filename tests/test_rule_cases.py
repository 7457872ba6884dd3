"""Runs every case in fixtures/cases/*.yaml: the rule must fire, stay quiet or be skipped as stated,
and the report's verdict must hold a case's `verdict` text where it gives one.

A case is judged on the analysis a user gets, every rule at once: a case at default thresholds reads
the session's analysis of its target (conftest.diagnosis_of, shared with the golden, accounting and
invariant tests), so a target with twenty cases is analysed once, not twenty times. A case that sets
thresholds runs its rule alone with them.

A case on a capture that has a Nsight Compute CSV (fixtures/ncu/CAPTURE.ncu.csv.gz, or a
CAPTURE.synthetic.ncu.csv.gz made from a real one) runs again with it attached and must reach the
same outcome (fire, stay quiet, be skipped; the same fix when the case names one), unless the case
names another outcome under `with_ncu` (true, false or skipped): measurements only add.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
import pytest

from diagnose.model.config import Config
from diagnose.ruleset.assemble import diagnose_trace
from diagnose.front.pipeline import analyse_sweep as diagnose_sweep
from diagnose.ncu import read_ncu
from diagnose.rules import ALL_RULES
from diagnose.trace import load_target

from conftest import CAPTURES, CASES, PEER_TRACES, ROOT, SYNTHETIC, diagnosis_of, load_capture, make_golden

NCU = ROOT / "fixtures" / "ncu"


def _cases():
    for path in sorted(CASES.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        for i, case in enumerate(spec["cases"]):
            label = (
                case.get("capture")
                or case.get("synthetic")
                or case.get("sweep")
                or case.get("peer")
                or case.get("ranks")
                or case.get("rank_capture")
            )
            yield pytest.param(spec["rule"], case, id=f"{spec['rule']}:{i}:{label}")


def _load(case):
    if "capture" in case:
        if case.get("set"):
            return load_target(CAPTURES / case["capture"])
        return load_capture(case["capture"])
    if "peer" in case:
        return load_target(PEER_TRACES / case["peer"])
    return load_target(SYNTHETIC / case["synthetic"])


def _path(case) -> Path:
    """The bundled target a case names."""
    if "capture" in case:
        return CAPTURES / case["capture"]
    if "peer" in case:
        return PEER_TRACES / case["peer"]
    return SYNTHETIC / case["synthetic"]


@functools.lru_cache(maxsize=None)
def _with_ncu(capture: str):
    """Every rule on a capture with its Nsight Compute table attached, once per session."""
    return diagnose_trace(load_capture(capture), Config(), ncu=ncu_table(capture))


def ncu_csv(capture: str):
    """The Nsight Compute CSV recorded for a capture (a real one first, else a synthetic one), or None."""
    return next(
        (p for p in (NCU / f"{capture}.ncu.csv.gz", NCU / f"{capture}.synthetic.ncu.csv.gz") if p.is_file()), None
    )


@functools.lru_cache(maxsize=None)
def ncu_table(capture: str):
    """A capture's Nsight Compute CSV, read once per session."""
    return read_ncu(ncu_csv(capture))


def _ncu_cases():
    for param in _cases():
        rule_id, case = param.values
        if "capture" in case and ncu_csv(case["capture"]) is not None:
            yield pytest.param(rule_id, case, id=f"{param.id}+ncu")


def _run(rule_id, case, ncu=None):
    """The case's rule on its trace, with the Nsight Compute table `ncu` when given: (diagnosis, findings
    of the rule, its skips)."""
    rule = next(r for r in ALL_RULES if r.id == rule_id)
    synthetic = "synthetic" in case or "ranks" in case  # hand-written times: no profiler time to take out
    settings = make_golden.UNPROFILED if synthetic else {}
    config = Config(overrides={**settings, **{k: float(v) for k, v in (case.get("set") or {}).items()}})
    if "sweep" in case:
        diagnosis = diagnose_sweep(CAPTURES / case["sweep"], config, rules=[rule])
    elif "ranks" in case or "rank_capture" in case:
        # a SYNTHETIC folder of every rank's trace, or a real capture of every rank (2x H200); with
        # default thresholds the session's analysis of the folder (the same Diagnosis for any worker count)
        from diagnose.ranks.analyse import analyse_ranks

        folder = SYNTHETIC / case["ranks"] if "ranks" in case else CAPTURES / case["rank_capture"]
        diagnosis = analyse_ranks(folder, config, workers=1) if case.get("set") else diagnosis_of(folder)
    elif ncu is not None and not case.get("set"):
        diagnosis = _with_ncu(case["capture"])
    elif not case.get("set") and ncu is None:
        diagnosis = diagnosis_of(_path(case))
    else:
        diagnosis = diagnose_trace(_load(case), config, rules=[rule], ncu=ncu)
    fired = [f for f in diagnosis.findings if f.rule == rule_id]
    skipped = [s for s in diagnosis.skipped if s.rule == rule_id]
    return diagnosis, fired, skipped


@pytest.mark.parametrize("rule_id,case", list(_cases()))
def test_case(rule_id, case):
    diagnosis, fired, skipped = _run(rule_id, case)
    if "verdict" in case:  # what the whole report concludes, for a target where the case is its verdict
        assert case["verdict"] in diagnosis.verdict, diagnosis.verdict
    expected = case["fires"]
    if expected == "skipped":
        assert skipped, f"{rule_id} should have been skipped; findings={fired}"
        return
    assert not skipped, f"{rule_id} was skipped: {skipped[0].reason}"
    assert bool(fired) == expected, (
        f"{rule_id} {'did not fire' if expected else 'fired'} on {case}: "
        f"{[c.detail for c in diagnosis.checked] or [e.text() for f in fired for e in f.evidence]}"
    )
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
        if "first_fix" in case:
            assert finding.fixes[0].id == case["first_fix"], [x.id for x in finding.fixes]
        if "fixes" in case:  # the whole list, in order
            assert [x.id for x in finding.fixes] == case["fixes"]
        if "offender_rank" in case:
            assert finding.offenders[0].rank == case["offender_rank"]


@pytest.mark.parametrize("rule_id,case", list(_ncu_cases()))
def test_case_with_ncu(rule_id, case):
    """The same case with the capture's Nsight Compute CSV attached: the same outcome (or `with_ncu`)."""
    diagnosis, fired, skipped = _run(rule_id, case, ncu_table(case["capture"]))
    assert diagnosis.details.top_kernels is not None
    assert diagnosis.details.ncu and diagnosis.details.ncu.matched, "the CSV matched none of the trace's kernels"
    expected = case.get("with_ncu", case["fires"])
    outcome = "skipped" if skipped else bool(fired)
    assert outcome == expected, (
        f"{rule_id} with Nsight Compute: {outcome} instead of {expected} on {case}: "
        f"{[s.reason for s in skipped] or [c.detail for c in diagnosis.checked] or [x.id for f in fired for x in f.fixes]}"
    )
    if fired and "fix" in case and "with_ncu" not in case:
        assert case["fix"] in [x.id for x in fired[0].fixes]


def test_every_rule_has_cases():
    covered = {yaml.safe_load(p.read_text())["rule"] for p in CASES.glob("*.yaml")}
    assert {r.id for r in ALL_RULES} <= covered
