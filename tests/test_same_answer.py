"""The same answer in every mode: a capture folder (`diagnose fixtures/captures/NAME`) and its trace file
alone (`diagnose fixtures/captures/NAME/trace.json.gz`) name the same first finding and the same first fix,
on every single-rank capture in fixtures/captures.

A trace file alone has no unprofiled timing, no Python stack samples and no capture metadata: the profiler's
own host time is estimated (diagnose/metrics/overhead.py) rather than measured. The captures listed in
DIFFER still differ for a reason written beside them; each is checked to differ still, so that the list
shrinks when the reason goes. The third mode, the same workload recorded by a user with torch.profiler, is held to
the capture folder's answer on every pair the fixtures hold (USER_RECORDED).
"""

from __future__ import annotations

import json

import pytest

from conftest import CAPTURES, ROOT, diagnosis_of

DIFFER = {
    "transfer_pinned": (
        "H200, 4 DataLoader workers and a pin-memory thread copying 77 MB a batch: the loop's unprofiled steps are "
        "bimodal (30 timed: twelve of 11.4-13.2 ms, the rest 20.0-28.9 ms) and so are its 4 "
        "profiled ones (the main thread's same ~880 events take 10.0-24.6 ms of recorded host time a step); the "
        "trace file alone estimates 25,020 µs, where the launch-paced idle is 28 % (launch-overhead low, 1.38x), "
        "21.6 % at the measured mean, 19,147 µs (< 25 %, quiet). The H100 twin (transfer_pinned_h100, its step estimated "
        "within 9 %) agrees. docs/profiler-overhead.md, 'loops fed by DataLoader workers'. Leaving a share of an "
        "estimated step within 1.25x of its threshold to timed steps where the replayed steps lie far apart made this "
        "one agree and its marker-stripped trace differ ('a verdict within the estimate's error', tried). The trace "
        "file alone says its finding would be quiet at the fastest replayed step (ruleset/step_range.py)"
    ),
    "python_batch_workers": (
        "12 DataLoader workers tokenising in Python: the same 175 autograd-thread events take 1,966-3,872 µs of "
        "recorded host time from one profiled step to the next, where the 30 unprofiled steps are tight "
        "(2,338-2,721 µs): host time the trace does not record, which no per-event cost removes, so the trace "
        "file alone estimates 5,222 µs against 2,661 µs measured (mean) and reads the rest as launch idle "
        "(launch-overhead 1.53x); docs/profiler-overhead.md, 'loops fed by DataLoader workers'. The same loop sits on "
        "launch-overhead's threshold under any harness (an H100, 2026-12-07: a plain torch.profiler loop fired it in one "
        "round of two; 'the loader-loop benchmark on an H100'). This capture kept the allocator's history on through "
        "its measured steps and ran the old stack sampler; six H100 captures with the history in the warm-up only "
        "estimate 0.93-1.24x and agree in three rounds of six ('the allocator's history in the warm-up step only'). The "
        "trace file alone says its finding would be low, not medium, at the fastest replayed step (ruleset/step_range.py)"
    ),
}


def _single_rank_captures() -> list[str]:
    return sorted(p.name for p in CAPTURES.iterdir() if (p / "trace.json.gz").is_file())


def _first(path) -> tuple:
    """(rule, first fix) of the first finding, or (None, None) when nothing fired."""
    findings = diagnosis_of(path).findings
    if not findings:
        return None, None
    top = findings[0]
    return top.rule, top.fixes[0].id if top.fixes else None


@pytest.mark.parametrize("name", _single_rank_captures())
def test_folder_and_trace_file_name_the_same_first_finding_and_fix(name):
    folder, alone = _first(CAPTURES / name), _first(CAPTURES / name / "trace.json.gz")
    if name in DIFFER:
        assert folder != alone, f"{name} now agrees ({folder}): take it off DIFFER"
        # where they still differ, the trace file alone at least says its first finding rests on an uncertain step
        assert diagnosis_of(CAPTURES / name / "trace.json.gz").findings[0].range_text().startswith("uncertain: ")
        pytest.xfail(f"{DIFFER[name]} (folder {folder}, trace file alone {alone})")
    assert folder == alone


def test_the_list_of_differences_names_real_captures():
    assert set(DIFFER) <= set(_single_rank_captures())


# The same workload (the same factory and parameters) recorded by a user with torch.profiler (fixtures/record_plain.py:
# a bare profile() with no markers, and its ProfilerStep twin) and captured by diagnose, on the same GPU model:
# fixtures/plain_h200 on the H200 against the H200 captures, fixtures/plain and plain_shapes on the H100 against the
# H100 captures of the same BERT loop and the transfer pair (pageable: transfer first; pinned: quiet)
USER_RECORDED = {
    "plain_h200/decode_eager": "captures/decode_eager",
    "plain_h200/decode_graphed": "captures/decode_graphed",
    "plain_h200/compile_breaks": "captures/compile_breaks",
    "plain_h200/bert_infer_b1": "heldout/hf_bert_infer_b1",
    "plain/bert_infer_b1": "unshaped/bert_infer_b1-shaped",
    "plain_shapes/bert_infer_b1": "unshaped/bert_infer_b1-shaped",
    "plain/transfer_pageable": "captures/transfer_pageable_h100",
    "plain/transfer_pinned": "captures/transfer_pinned_h100",
}


def _user_recordings() -> list[tuple[str, str]]:
    return [
        (loop, kind)
        for loop in sorted(USER_RECORDED)
        for kind in ("plain", "marked")
        if (ROOT / "fixtures" / loop / f"{kind}.json.gz").is_file()
    ]


@pytest.mark.parametrize("loop, kind", _user_recordings())
def test_a_users_own_recording_gets_the_first_finding_and_fix_of_diagnoses_capture(loop, kind):
    """REAL (H200 and H100): the third mode. A user's torch.profiler trace of a workload names the same first
    finding and first fix as diagnose's capture folder of it, recorded on the same GPU model."""
    folder = ROOT / "fixtures" / USER_RECORDED[loop]
    recorded_on = json.loads((ROOT / "fixtures" / loop.split("/")[0] / "INDEX.json").read_text())
    device = json.loads((folder / "meta.json").read_text())["device"]["name"]
    assert recorded_on[loop.split("/")[1]]["device"] == device
    assert _first(ROOT / "fixtures" / loop / f"{kind}.json.gz") == _first(folder)


def test_every_user_recording_listed_is_there():
    assert len(_user_recordings()) >= 2 * len(USER_RECORDED) - 1  # plain_shapes keeps the plain recording alone
