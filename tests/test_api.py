"""The Python API for notebooks: analyze() and profile() return a Diagnosis with frames and HTML."""

from __future__ import annotations

import pytest

import diagnose

from conftest import CAPTURES, ROOT


def test_analyze_returns_frames_and_html():
    d = diagnose.analyze(CAPTURES / "decode_eager")
    frame = d.findings_frame()
    assert frame.loc[0, "rule"] == "launch-overhead" and "cuda-graphs" in frame.loc[0, "fixes"]
    assert len(d.kernels_frame()) > 0 and len(d.steps_frame()) == d.summary.steps_analysed
    html = d._repr_html_()
    assert html.startswith("<iframe srcdoc=") and "&lt;" in html and "<script" not in html
    assert "each call of the callable" in d.summary.steps_found_by


def test_analyze_with_overrides():
    d = diagnose.analyze(CAPTURES / "decode_eager", overrides={"launch-overhead.min_recoverable_share": 0.99})
    assert d.findings_frame().empty or "launch-overhead" not in set(d.findings_frame()["rule"])


def test_profile_a_callable(tmp_path):
    pytest.importorskip("torch", reason="capturing needs torch (.ci/run installs the CPU build)")
    d = diagnose.profile(
        f"{ROOT / 'tests' / 'workloads' / 'tiny_cpu.py'}:make_step",
        out=tmp_path / "cap",
        warmup=1,
        steps=2,
        timed_steps=2,
        width=16,
    )
    assert not d.workload_failed
    assert d.capture.params == {"width": 16}
    assert (tmp_path / "cap" / "trace.json.gz").exists()


def test_analyze_a_sweep_folder():
    d = diagnose.analyze(CAPTURES / "sweep_attention_naive")
    assert d.details.memory.sweep.param == "seq"
    assert "attention-memory" in set(d.findings_frame()["rule"])
