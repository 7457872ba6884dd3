"""Estimator constants come from the calibration captures only, and the held-out table in
docs/measured-fixes.md is what benchmarks/calibrate.py computes from the captures and the verify runs."""

from __future__ import annotations

import importlib.util

from conftest import ROOT, diagnosis_of

spec = importlib.util.spec_from_file_location("calibrate", ROOT / "benchmarks" / "calibrate.py")
calibrate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calibrate)
# calibrate's analyse(capture, Config()) is analyze(capture): take the session's (conftest), which the
# golden, invariants and accounting tests make of the same captures
calibrate._diagnosis = lambda name: diagnosis_of(calibrate.CAPTURES / name)


def test_constants_in_the_code_are_what_the_calibration_captures_give():
    rows = calibrate.derive()
    assert {r["constant"] for r in rows} >= {
        "launch-overhead.graph_gap_us",
        "memory-bound.fused_call_us",
        "attention-memory.flash_efficiency",
    }
    assert [r["constant"] for r in rows if not calibrate.agrees(r)] == []


def test_a_constant_off_its_calibration_is_caught():
    row = {"constant": "x", "derived": 0.096, "rounding": "up to 0.1 µs", "expected": 0.1, "code": 0.2}
    assert not calibrate.agrees(row)


def test_held_out_table_in_the_docs_is_current():
    rows = calibrate.held_out()
    text = calibrate.table(rows)
    doc = calibrate.DOC.read_text()
    assert text in doc, "run `python benchmarks/calibrate.py --write`"
    assert "median |log(estimate ÷ measured)|" in text
    held = {r["capture"] for r in rows}
    assert not held & set(calibrate.CALIBRATION), "a calibration capture is in the held-out set"


def test_library_table_in_the_docs_is_current():
    """The fixes measured on the held-out library captures, against what diagnose says of them now."""
    text = calibrate.library_table()
    assert text in calibrate.DOC.read_text(), "run `python benchmarks/calibrate.py --write`"
    rows = calibrate.library_rows()
    assert {r["capture"] for r in rows} >= {"hf_bert_infer_b1", "hf_bert_infer_b1_compiled"}
    # measured 1.05-1.08× with TF32 and slower with autocast: no finding may promise bf16 there
    assert all(r["rule"] == "none names it" for r in rows if r["fix"] == "bf16-tensor-cores")
