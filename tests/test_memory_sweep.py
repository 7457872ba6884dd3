"""Sweeps: growth fits on the real H200 sweeps, the wall, and the diagnosis of a sweep folder."""

from __future__ import annotations

import json

import pytest

from diagnose.base.errors import InputError
from diagnose.memory import load_sweep
from diagnose.front.pipeline import analyse_sweep as diagnose_sweep
from diagnose.memory.sweep import fit_power, is_sweep_folder

from conftest import CAPTURES


def test_fit_power_is_exact_on_a_power_law():
    fit = fit_power([1, 2, 4, 8], [3 * x**2 for x in (1, 2, 4, 8)])
    assert fit.exponent == pytest.approx(2.0) and fit.coefficient == pytest.approx(3.0)
    assert fit.r2 == pytest.approx(1.0) and fit.local == pytest.approx([2.0, 2.0, 2.0])
    assert fit.reach(3 * 16**2) == pytest.approx(16)
    assert fit_power([4, 4], [1, 2]) is None and fit_power([1], [1]) is None


def test_naive_attention_grows_quadratically_and_hits_the_wall():
    sweep = load_sweep(CAPTURES / "sweep_attention_naive")
    assert sweep.param == "seq" and len(sweep.ok_points) == 4
    assert 1.9 < sweep.memory_fit.exponent < 2.05
    assert 1.8 < sweep.time_fit.exponent < 2.1
    assert sweep.wall.value == 32768 and "64.00 GiB" in sweep.wall.error
    assert 16384 < sweep.predicted_wall() < 32768
    assert sweep.representative().folder == "seq=16384"


def test_sdpa_attention_grows_linearly():
    sweep = load_sweep(CAPTURES / "sweep_attention_sdpa")
    assert 0.95 < sweep.memory_fit.exponent < 1.05 and sweep.memory_fit.n == 6
    assert sweep.wall is None
    assert sweep.time_fit.local[-1] > 1.8  # compute stays quadratic for causal attention at long T
    assert sweep.representative().folder == "seq=65536"


def test_diagnose_sweep_folder():
    d = diagnose_sweep(CAPTURES / "sweep_attention_naive")
    assert d.target == str(CAPTURES / "sweep_attention_naive")
    sweep = d.details.memory.sweep
    assert (sweep.analysed_point.value, sweep.analysed_point.folder) == (16384, "seq=16384")
    assert sweep.fits.peak_allocated.exponent == pytest.approx(1.97, abs=0.01)
    assert [p.status for p in sweep.points] == ["ok"] * 4 + ["oom"] * 2
    assert sweep.wall.value == 32768
    top = d.findings[0]
    assert top.rule == "attention-memory" and "seq^1.97" in top.basis
    json.dumps(d.to_dict())


def test_not_a_sweep(tmp_path):
    assert not is_sweep_folder(CAPTURES / "kv_concat") and is_sweep_folder(CAPTURES / "sweep_attention_sdpa")
    with pytest.raises(InputError, match="not a sweep folder"):
        load_sweep(CAPTURES / "kv_concat")
    (tmp_path / "sweep.json").write_text('{"schema": "other"}')
    with pytest.raises(InputError, match="diagnose.sweep/1"):
        load_sweep(tmp_path)


def test_a_sweep_of_names_has_no_fit(tmp_path):
    points = [
        {"value": v, "status": "ok", "folder": f"impl={v}", "peak_allocated_bytes": 10, "median_step_us": 5}
        for v in ("naive", "sdpa")
    ]
    (tmp_path / "sweep.json").write_text(json.dumps({"schema": "diagnose.sweep/1", "param": "impl", "points": points}))
    sweep = load_sweep(tmp_path)
    assert sweep.memory_fit is None and sweep.time_fit is None
    assert sweep.to_dict()["fits"]["peak_allocated"] is None
