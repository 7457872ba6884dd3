"""The line that says the unchanged step's time wandered while --verify timed the fixes (verify/drift.py),
on the trials of a real --verify run (an H100, benchmarks/results-user-loop-verify.json) and on made-up ones."""

from __future__ import annotations

import json

from conftest import ROOT

from diagnose.verify.drift import IN_PROCESS, NOTE_AT, baseline_spread, drift_note
from diagnose.verify.model import FixTrial


def _llama_trials() -> tuple[list[FixTrial], float]:
    entry = json.loads((ROOT / "benchmarks" / "results-user-loop-verify.json").read_text())["llama_train_bf16"]
    trials = {}
    for finding in entry["findings"]:
        for fix in finding["verify"]:
            for t in fix["trials"]:
                trials[t["variant"]] = FixTrial(
                    t["variant"],
                    "",
                    t["status"],
                    speedup=t["speedup"],
                    baseline_us=t["baseline_us"],
                    n_baseline=t["n_baseline"] or 0,
                    baseline_basis=t["baseline_basis"] or "",
                )
    return list(trials.values()), entry["unprofiled_median_us"]


def test_the_h100_llama_run_wandered_enough_to_explain_its_smaller_speedups():
    trials, capture_median = _llama_trials()
    fastest, slowest, n = baseline_spread(trials, capture_median)
    assert n == 5  # the capture and the four variants that ran (cuda-graph failed to apply)
    assert round(fastest) == 27606 and round(slowest) == 40285
    note = drift_note(trials, capture_median)
    assert "27,606-40,285 µs across 5 timings" in note and "1.46× apart" in note
    # the optimizer switches measured within the spread; the CUDA graph (1.98x) and compile (2.71x) beyond it
    assert note.endswith("(foreach-optimizer, fused-optimizer measured within it)")


def test_a_steady_host_gets_no_line():
    trials = [
        FixTrial("compile", "", "ok", speedup=1.05, baseline_us=1000.0, n_baseline=30, baseline_basis=IN_PROCESS),
        FixTrial("tf32", "", "ok", speedup=1.2, baseline_us=1040.0, n_baseline=30, baseline_basis=IN_PROCESS),
    ]
    assert 1040 / 1000 < NOTE_AT and drift_note(trials, 1010.0) == ""


def test_only_baselines_that_were_timed_count():
    failed = FixTrial("cuda-graph", "", "failed", baseline_us=None)
    # a process-level fix is compared with the capture's own steps: no baseline of its own
    process = FixTrial("expandable-segments", "", "ok", speedup=1.3, baseline_us=2000.0, n_baseline=30)
    assert baseline_spread([failed, process], 1000.0) is None  # the capture's own steps alone: nothing to compare
    assert drift_note([failed, process], 1000.0) == ""
