"""A finding on an uncertain estimated step says how it fares at the range's ends (diagnose/ruleset/step_range.py).

REAL (H200, transfer_pinned: a DataLoader loop whose steps are bimodal without the profiler too): its trace file
alone estimates a 25,020 µs step whose replayed steps range from 14,532 to 33,013 µs, and launch-overhead fires
low on the estimate. Its folder, whose step was timed (19,147 µs), is quiet.
"""

from __future__ import annotations

import pytest

from conftest import CAPTURES, PEER_TRACES as PEER, diagnosis_of
from diagnose.commands import main
from diagnose.diff.build import diff_diagnoses
from diagnose.metrics.budget import StepBudget, at_step
from diagnose.model.config import Config
from diagnose.model.findings import QUIET, StepRange
from diagnose.report.diff_views import finding_lines
from diagnose.report.html import render_html
from diagnose.report.markdown import render_markdown
from diagnose.report.text import render_text
from diagnose.rulebook.engine import Context, run_rules
from diagnose.rules import ALL_RULES
from diagnose.trace import load_target

PINNED_ALONE = CAPTURES / "transfer_pinned" / "trace.json.gz"


def _launch(d):
    return next(f for f in d.findings if f.rule == "launch-overhead")


def test_a_finding_quiet_at_the_fastest_replayed_step_says_so_on_the_first_screen():
    d = diagnosis_of(PINNED_ALONE)
    f = _launch(d)
    assert f.severity == "low"
    assert f.step_range == StepRange(14532.1, 33012.8, QUIET, "medium", est_at_slowest=1.49)
    assert not f.step_range.holds
    said = "quiet if the step is 14,532 µs (the fastest replayed)"
    assert f.range_text() == f"uncertain: {said}; medium, est. 1.49×, if the step is 33,013 µs (the slowest replayed)"
    assert f"Uncertain on this estimated step: {said}." in d.verdict
    assert said in render_text(d) and "quiet if the step is 14,532 µs" in render_markdown(d)
    html = render_html(d)
    assert (
        f'<p class="uncertain">uncertain: {said}' in html
        and '<span class="pill unsure" title="uncertain: quiet' in html
    )


def test_a_timed_step_or_steps_close_together_carry_no_range():
    assert all(f.step_range is None for f in diagnosis_of(CAPTURES / "transfer_pinned").findings)
    eager = diagnosis_of(CAPTURES / "decode_eager" / "trace.json.gz")
    assert eager.findings and all(f.step_range is None and f.range_text() == "" for f in eager.findings)
    assert "Uncertain" not in eager.verdict


def test_a_finding_that_holds_at_both_ends_says_nothing_more():
    d = diagnosis_of(CAPTURES / "compile_fullgraph" / "trace.json.gz")
    f = _launch(d)
    assert f.step_range is not None and f.step_range.holds
    assert f.step_range.at_fastest == f.step_range.at_slowest == f.severity
    assert f.range_text() == "" and "Uncertain" not in d.verdict


def test_the_rules_run_again_at_the_estimated_step_give_the_same_findings():
    trace = load_target(PINNED_ALONE)
    ctx = Context(trace, Config())
    here = {f.rule: f.severity for f in run_rules(ctx, ALL_RULES).findings}
    again = Context(trace, Config())
    again.metrics = ctx.metrics.at_step(ctx.metrics.budget.step_us)
    assert again.metrics.budget.step_us == pytest.approx(ctx.metrics.budget.step_us, rel=1e-9)
    assert again.metrics.timeline is ctx.metrics.timeline  # shared, not made again
    assert {f.rule: f.severity for f in run_rules(again, ALL_RULES).findings} == here
    fast = ctx.metrics.at_step(14532.1)
    assert fast.budget.step_us == pytest.approx(14532.1) and fast.accounting is not ctx.metrics.accounting


def _budget(**kw) -> StepBudget:
    values = dict(
        n_steps=4,
        profiled_step_us=2000.0,
        unprofiled_step_us=None,
        busy_us=600.0,
        host_paced_us=600.0,
        host_silent_us=200.0,
        host_after_sync_us=100.0,
        kernel_wait_us=100.0,
        other_wait_us=0.0,
        basis="profiled",
    )
    return StepBudget(**{**values, **kw})


def test_a_budget_moved_to_another_step_stays_within_what_the_trace_recorded():
    """SYNTHETIC numbers: 700 µs of GPU-side time and 800 µs of host-side idle a step."""
    b = _budget()
    half = at_step(b, 1100.0)
    assert half.step_us == pytest.approx(1100.0)
    assert (half.host_paced_us, half.host_silent_us, half.host_after_sync_us) == pytest.approx((300, 100, 50))
    assert at_step(b, 100.0).step_us == pytest.approx(700.0)  # never below the GPU-side time
    assert at_step(b, 9000.0).step_us == pytest.approx(1500.0)  # never more host idle than was recorded
    measured = _budget(unprofiled_step_us=1800.0)
    assert at_step(measured, 1100.0) is measured


def test_a_quiet_rule_that_would_fire_at_an_end_says_so_and_the_verdict_names_it():
    """REAL (H100, transfer_pinned_h100): quiet on its estimated step, launch-overhead would fire at the slowest."""
    d = diagnosis_of(CAPTURES / "transfer_pinned_h100" / "trace.json.gz")
    assert not d.findings
    launch = next(c for c in d.checked if c.rule == "launch-overhead")
    assert (launch.step_range.at_fastest, launch.step_range.at_slowest) == (QUIET, "low")
    said = "low, est. 1.34×, if the step is 27,787 µs (the slowest replayed)"
    assert launch.range_text() == f"uncertain: {said}"
    assert d.verdict.endswith(f"Uncertain on this estimated step: launch-overhead would fire, {said}.")
    assert said in render_text(d)
    quiet_at_both = [c for c in d.checked if c.step_range and c.step_range.at_fastest == c.step_range.at_slowest]
    assert quiet_at_both and all(c.range_text() == "" for c in quiet_at_both)
    skipped = {s.rule for s in d.skipped}
    assert skipped and not skipped & {c.rule for c in d.checked}


def test_a_diff_says_which_side_holds_a_finding_its_uncertain_step_could_overturn():
    report = diff_diagnoses(diagnosis_of(CAPTURES / "transfer_pinned"), diagnosis_of(PINNED_ALONE))
    assert finding_lines(report) == ["launch-overhead appeared (— → low, uncertain on AFTER's estimated step)"]
    after = next(c for c in report.findings if c.rule == "launch-overhead").to_dict()["after"]
    assert after["uncertain"].startswith("uncertain: quiet if the step is 14,532 µs")


def test_a_tripped_gate_names_its_findings_and_where_the_uncertain_step_would_leave_them_under_it(tmp_path, capsys):
    assert main([str(PINNED_ALONE), "--fail-on", "low", "-q", "-o", str(tmp_path / "a")]) == 1
    assert capsys.readouterr().err.strip() == (
        "diagnose: --fail-on low: launch-overhead (low); uncertain on this trace's estimated step: launch-overhead "
        "quiet if the step is 14,532 µs (the fastest replayed) (timing steps without the profiler settles it)"
    )
    assert main([str(CAPTURES / "transfer_pinned"), "--fail-on", "low", "-q", "-o", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().err == ""
    assert main([str(CAPTURES / "decode_eager"), "--fail-on", "high", "-q", "-o", str(tmp_path / "c")]) == 1
    assert capsys.readouterr().err.strip() == "diagnose: --fail-on high: launch-overhead (high)"


def test_an_end_shorter_than_the_gpu_side_time_is_judged_and_said_at_that_time():
    """REAL (HTA's MI250 trace, two steps): one replays to 49 µs, shorter than the 74.5 µs its GPU work and waits take."""
    d = diagnosis_of(PEER / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert d.summary.estimated_step_range_us[0] == pytest.approx(49.1)
    idle = d.summary.idle_us_per_step
    gpu_side = d.summary.gpu_busy_us_per_step + idle.kernel_wait + idle.other_wait
    transfer = next(c for c in d.checked if c.rule == "transfer")
    assert transfer.step_range.fastest_us == pytest.approx(gpu_side, abs=0.1) == pytest.approx(74.5, abs=0.1)
    assert transfer.step_range.replayed_fastest_us == pytest.approx(49.1)
    text = transfer.range_text()
    assert "if the step is 74.5 µs (the shortest the trace allows; the fastest replayed step is shorter)" in text
    assert "49" not in text  # the step quoted is the one judged, not the replayed step the trace does not allow


def test_an_end_the_trace_allows_is_named_the_replayed_step():
    """REAL (transfer_pinned's trace file alone): both ends lie within what the trace allows."""
    f = diagnosis_of(CAPTURES / "transfer_pinned" / "trace.json.gz").findings[0]
    assert (f.step_range.replayed_fastest_us, f.step_range.replayed_slowest_us) == (0.0, 0.0)
    assert "(the fastest replayed)" in f.range_text()


def test_the_estimate_at_an_end_is_the_rules_own_on_that_step():
    """REAL (transfer_pinned's trace file alone): the slowest end's estimate is what launch-overhead gives when the
    metrics are taken at that step, and larger than on the estimated step, whose idle is a smaller share."""
    from diagnose.ruleset.step_range import _verdicts

    f = _launch(diagnosis_of(PINNED_ALONE))
    ctx = Context(load_target(PINNED_ALONE), Config())
    launch = [r for r in ALL_RULES if r.id == "launch-overhead"]
    step_us, there = _verdicts(ctx, launch, ctx.metrics.estimated_step_range()[1])
    assert step_us == f.step_range.slowest_us
    assert there["launch-overhead"] == ("medium", f.step_range.est_at_slowest)
    assert f.step_range.est_at_slowest > f.est_speedup and f.step_range.est_at_fastest is None
