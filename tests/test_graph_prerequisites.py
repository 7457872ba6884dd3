"""Fixes that can apply: a CUDA graph cannot hold a host sync, so launch-overhead names remove-sync first
when the step syncs between its kernel launches, and prices both changes together."""

from __future__ import annotations

import msgspec
import pytest

from diagnose.ruleset.assemble import diagnose_trace
from diagnose.model.config import Config
from diagnose.model.findings import Finding
from diagnose.model.fixes import fix
from diagnose.rules import ALL_RULES

from conftest import load_capture

LAUNCH = next(r for r in ALL_RULES if r.id == "launch-overhead")
SYNC = next(r for r in ALL_RULES if r.id == "sync-stall")


def _launch(name: str, **overrides) -> Finding | None:
    d = diagnose_trace(load_capture(name), Config(overrides=overrides), rules=[LAUNCH, SYNC])
    return next((f for f in d.findings if f.rule == "launch-overhead"), None), d


def test_syncs_between_launches_put_remove_sync_before_cuda_graphs():
    f, d = _launch("sync_item")
    # sync_item's AdamW also keeps its step counters on the CPU: both prerequisites, in order
    assert [x.id for x in f.fixes] == ["remove-sync", "fused-optimizer", "cuda-graphs"] and f.fixes[0].prerequisite
    assert f.fix_phrase() == "remove-sync and fused-optimizer, then cuda-graphs"
    line = next(e for e in f.evidence if e.metric.startswith("host syncs per step"))
    sync = next(x for x in d.findings if x.rule == "sync-stall")
    per_step = next(e.value for e in sync.evidence if e.metric == "syncs per step")
    assert line.value == per_step - 1  # the end-of-step loss.item() stays outside the graph
    assert "remove-sync and fused-optimizer, then cuda-graphs" in d.verdict
    assert f.recoverable_us > sync.recoverable_us  # both changes: the graphed gaps and the idle after syncs


def test_the_estimate_for_both_changes_includes_the_idle_after_the_syncs():
    both, _ = _launch("sync_item")
    graphs_only, _ = _launch("sync_item", **{"launch-overhead.max_graph_syncs_per_step": 1000})
    assert [x.id for x in graphs_only.fixes] == ["fused-optimizer", "cuda-graphs"]
    assert both.est_speedup > graphs_only.est_speedup


def test_a_step_without_syncs_goes_straight_to_cuda_graphs():
    f, _ = _launch("decode_eager")
    assert [x.id for x in f.fixes] == ["cuda-graphs"]
    assert not any(e.metric.startswith("host syncs per step") for e in f.evidence)


def test_an_optimizer_with_its_step_counters_on_the_cpu_is_made_capturable_first():
    f, d = _launch("sync_free")  # AdamW (foreach, capturable=False): 48 aten::item per step in its range
    assert [x.id for x in f.fixes] == ["fused-optimizer", "cuda-graphs"] and f.fixes[0].prerequisite
    assert "capturable=True" in f.fixes[0].code and "capturable" in f.fixes[0].title
    line = next(e for e in f.evidence if "CPU step counters" in e.metric)
    assert line.value == 48
    assert not any(e.metric.startswith("host syncs per step") for e in f.evidence)
    assert "first capturable=True" in f.basis


def test_a_fused_optimizer_reads_nothing_back_and_needs_no_prerequisite():
    from diagnose.metrics import Metrics

    steps = Metrics(load_capture("opt_fused")).optimizer_steps
    assert steps and steps[0].impl == "fused" and not steps[0].counters_on_host
    foreach = Metrics(load_capture("opt_foreach")).optimizer_steps
    assert foreach[0].impl == "foreach" and foreach[0].counters_on_host


def test_two_prerequisites_read_in_order():
    f = Finding(
        "launch-overhead",
        "high",
        "t",
        [],
        [fix("remove-sync", prerequisite=True), fix("fused-optimizer", prerequisite=True), fix("cuda-graphs")],
    )
    assert f.fix_phrase() == "remove-sync and fused-optimizer, then cuda-graphs"
    assert Finding("r", "low", "t", [], [fix("cuda-graphs"), fix("torch-compile")]).fix_phrase() == "cuda-graphs"


def test_the_quiet_line_names_the_launch_paced_idle_it_does_not_count():
    """REAL (H200): compile_graphs replays its kernels from a CUDA graph; the step accounting's launch / dispatch
    bucket counts the host-paced idle before them, launch-overhead does not (the fix is applied), and its quiet line
    says how much, so the two numbers add up instead of disagreeing."""
    d = diagnose_trace(load_capture("compile_graphs"), Config())
    detail = next(c.detail for c in d.checked if c.rule == "launch-overhead")
    counted = float(detail.split("launch-bound idle ")[1].split(" %")[0])
    graphed = float(detail.split("not counted: ")[1].split(" %")[0])
    assert "before kernels a CUDA graph already replays" in detail and graphed > counted
    bucket = next(b for b in d.summary.accounting.buckets if b.id == "launch")
    assert counted + graphed == pytest.approx(bucket.share * 100, abs=1.0)  # kernel-wait excess aside


def test_blocking_uploads_between_launches_put_non_blocking_copies_first():
    """REAL (H200, transfer_uint8: pageable uint8 batches copied with a blocking .to()): the syncs between
    launches are the copies' own waits, so the first fix is the transfer's, not `.item()` advice."""
    transfer = next(r for r in ALL_RULES if r.id == "transfer")
    d = diagnose_trace(
        load_capture("transfer_uint8"),
        Config(overrides={"launch-overhead.min_recoverable_share": 0.2}),
        rules=[LAUNCH, transfer],
    )
    f = next(x for x in d.findings if x.rule == "launch-overhead")
    assert [x.id for x in f.fixes] == ["non-blocking-copies", "cuda-graphs"] and f.fixes[0].prerequisite
    assert "pin_memory=True" in f.fixes[0].code and ".item()" not in f.fixes[0].code
    line = next(e for e in f.evidence if e.metric.startswith("blocking host-to-device copies per step"))
    assert line.value == 2.0  # images and labels
    assert "waits of blocking host-to-device copies" in f.basis
    assert [x.rule for x in d.findings] == ["transfer", "launch-overhead"]  # the copies' own finding leads


def test_syncs_that_read_values_still_get_remove_sync():
    f, _ = _launch("sync_item")
    assert f.fixes[0].id == "remove-sync"
    assert not any(e.metric.startswith("blocking host-to-device") for e in f.evidence)


def _finding(rule: str, fixes: list, est: float) -> Finding:
    return Finding(rule=rule, severity="low", title=rule, evidence=[], fixes=fixes, est_speedup=est)


def test_a_finding_whose_first_fix_is_another_findings_subject_comes_after_it():
    from diagnose.rulebook.engine import prerequisites_first

    graphs = _finding("launch-overhead", [fix("remove-sync", prerequisite=True), fix("cuda-graphs")], 3.0)
    syncs = _finding("sync-stall", [fix("remove-sync")], 1.2)
    memory = _finding("memory-bound", [fix("torch-compile")], 2.0)
    assert [f.rule for f in prerequisites_first([graphs, memory, syncs])] == [
        "sync-stall",
        "launch-overhead",
        "memory-bound",
    ]
    plain = _finding("launch-overhead", [fix("cuda-graphs")], 3.0)
    assert [f.rule for f in prerequisites_first([plain, syncs])] == ["launch-overhead", "sync-stall"]


def test_a_finding_whose_fixes_are_all_in_place_is_not_put_first():
    from diagnose.rulebook.engine import prerequisites_first

    graphs = _finding("launch-overhead", [fix("non-blocking-copies", prerequisite=True), fix("cuda-graphs")], 3.0)
    done = msgspec.structs.replace(fix("non-blocking-copies"), passed_over="the copies already overlap compute")
    copies = _finding("transfer", [done], 1.2)
    assert [f.rule for f in prerequisites_first([graphs, copies])] == ["launch-overhead", "transfer"]


def test_a_finding_whose_lead_prerequisite_is_its_own_subject_keeps_its_place():
    # measured on H100 re-recordings of transfer_pageable (2026-12-07): host-bound low, 1.26-1.33x, led with
    # pinned-memory, its host work being the pageable copies; the high transfer finding was put after it
    from diagnose.rulebook.engine import prerequisites_first

    copies = _finding("transfer", [fix("pinned-memory", prerequisite=True), fix("non-blocking-copies")], 1.5)
    host = _finding("host-bound", [fix("pinned-memory"), fix("dataloader-workers")], 1.3)
    assert [f.rule for f in prerequisites_first([copies, host])] == ["transfer", "host-bound"]
    graphs = _finding("launch-overhead", [fix("non-blocking-copies", prerequisite=True), fix("cuda-graphs")], 3.0)
    assert [f.rule for f in prerequisites_first([graphs, copies, host])] == [
        "transfer",
        "launch-overhead",
        "host-bound",
    ]
