"""The unprofiled step time: one summary (the true median) that the report and `diagnose diff` share."""

from __future__ import annotations

import json
import statistics

import pytest

from diagnose.ruleset.assemble import diagnose_trace
from diagnose.diff.build import stall_warning
from diagnose.diff.stats import step_change, step_samples
from diagnose.base.step_timing import normalised, paid_step_us, timing_summary

from conftest import CAPTURES, load_capture


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    summary = timing_summary("4 steps", [4.0, 1.0, 3.0, 2.0])
    assert summary["median_us"] == 2.5
    assert summary["min_us"] == 1.0 and summary["mean_us"] == 2.5
    assert summary["unprofiled_step_us"] == [4.0, 1.0, 3.0, 2.0]  # the order they ran in


def test_a_stored_upper_median_is_rederived_from_the_steps():
    old = {"source": "s", "unprofiled_step_us": [1.0, 2.0, 3.0, 4.0], "median_us": 3.0, "min_us": 1.0, "mean_us": 2.5}
    assert normalised(old)["median_us"] == 2.5
    assert normalised({"source": "s", "unprofiled_step_us": []}) == {"source": "s", "unprofiled_step_us": []}


@pytest.mark.parametrize("name", ["decode_eager", "python_batch_inline", "host_loader_workers"])
def test_the_report_quotes_the_mean_step_and_diff_the_medians(name):
    """The report's step is what a run pays (the mean); diff compares medians, which two runs of the same
    code share more closely (diff/stats.py)."""
    meta = json.loads((CAPTURES / name / "meta.json").read_text())
    steps = meta["timing"]["unprofiled_step_us"]
    trace = load_capture(name)
    d = diagnose_trace(trace)
    shown = d.summary.unprofiled_step_time_us
    unprofiled, _ = step_samples(d.capture, [])
    change = step_change(unprofiled, unprofiled, "unprofiled")
    assert shown == pytest.approx(statistics.fmean(steps), abs=1e-3)
    assert shown == pytest.approx(paid_step_us(trace.capture["timing"]), abs=1e-3)
    assert change.before_us == pytest.approx(statistics.median(steps), abs=1e-3)


def test_a_timed_step_longer_than_the_profiled_one_is_not_the_step():
    """matmul_bf16's timed steps, synchronised after each, average 1,442 µs; its profiled steps, back to back,
    1,363 µs. The profiler only adds time, so the difference is the timing's syncs: the step is the profiled one,
    and the report says so instead of calling it unprofiled."""
    trace = load_capture("matmul_bf16")
    d = diagnose_trace(trace)
    s = d.summary
    assert paid_step_us(trace.capture["timing"]) > s.profiled_step_time_us
    assert s.step_time_us == pytest.approx(s.profiled_step_time_us)
    assert s.unprofiled_step_time_us is None and s.step_basis == "profiled"
    assert "is longer than the profiled step" in s.time_basis


def test_the_report_says_why_a_timed_capture_shows_its_profiled_step():
    from diagnose.report.html import headline_tiles

    d = diagnose_trace(load_capture("matmul_bf16"))
    tile = next(t for t in headline_tiles(d) if t["label"] == "step time")
    assert "timed with a sync after each step" in tile["note"]


def test_diff_warns_when_only_some_steps_stall():
    """The verdict compares medians; a stall one step in four leaves the median alone, and diff says so."""
    before = [10_000.0 + (i % 3) * 10 for i in range(20)]
    after = [10_000.0 + (i % 3) * 10 + (40_000.0 if i % 4 == 3 else 0.0) for i in range(20)]
    assert step_change(before, after, "unprofiled").verdict == "no significant change"
    (warning,) = stall_warning(before, after)
    assert "the mean step changed by +99.9 % and the median by +0.0 %" in warning
    assert stall_warning(before, before) == []


def test_identical_reruns_raise_no_stall_warning():
    base = json.loads((CAPTURES / "regress_base" / "meta.json").read_text())["timing"]["unprofiled_step_us"]
    for n in range(10):
        again = json.loads((CAPTURES / f"regress_base_r{n}" / "meta.json").read_text())["timing"]["unprofiled_step_us"]
        assert stall_warning(base, again) == [], n
