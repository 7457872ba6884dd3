"""Fixes the code already has (diagnose/rulebook/in_place.py): found on real captures, passed over in one place."""

from __future__ import annotations

from diagnose.model.config import Config
from diagnose.model.findings import Evidence, Finding
from diagnose.model.fixes import fix
from diagnose.rulebook.engine import Context, Quiet, Rule, run_rules, verdict
from diagnose.rulebook.in_place import all_in_place, in_place, pass_over

from conftest import diagnosis_of, load_capture, CAPTURES


def _present(name: str) -> dict:
    return in_place(Context(load_capture(name), Config()))


def test_workers_that_keep_up_are_in_place_and_a_main_process_loader_is_not():
    """transfer_pageable's four workers wait 2 % of the step; regress_workers0 loads in the main process."""
    assert "they keep up" in _present("transfer_pageable")["dataloader-workers"]
    assert "dataloader-workers" not in _present("regress_workers0")
    assert "dataloader-workers" not in _present("host_loader_inline")


def test_pinned_copies_are_in_place_and_pageable_ones_are_not():
    assert "pinned" in _present("transfer_pinned")["pinned-memory"]
    assert "pinned-memory" not in _present("transfer_pageable")


def test_a_fused_or_foreach_optimizer_is_in_place_and_a_single_tensor_one_is_not():
    assert "fused" in _present("opt_fused")["fused-optimizer"]
    assert "foreach" in _present("opt_foreach")["fused-optimizer"]
    assert "fused-optimizer" not in _present("opt_single")


def test_compiled_code_is_in_place_but_reduce_overhead_graphs_leave_the_whole_step_graph_open():
    present = _present("compile_graphs")
    assert "torch-compile" in present and "cuda-graphs" not in present


def test_a_reduce_overhead_step_is_told_the_whole_step_graph_not_the_mode_it_already_has():
    """REAL (H200, compile_graphs: torch.compile mode="reduce-overhead"): the host-bound fix says the compiled
    code already replays graphs and what a hand-captured whole-step graph adds, not to turn that mode on."""
    finding = next(f for f in diagnosis_of(CAPTURES / "compile_graphs").findings if f.rule == "host-bound")
    graphs = next(f for f in finding.fixes if f.id == "cuda-graphs")
    assert "already replays CUDA graphs" in graphs.how and "does it for you" not in graphs.how
    assert "torch.cuda.CUDAGraph" in graphs.how and "torch.cuda.graph(graph)" in graphs.code


def test_launch_overhead_on_a_graph_tree_step_names_the_whole_step_graph_too():
    """REAL (H100, compile_graphs_h100): launch-overhead fires second on the launches around the tree's replays; its
    cuda-graphs fix is the same whole-step graph host-bound names, not the reduce-overhead mode the code has."""
    d = diagnosis_of(CAPTURES / "compile_graphs_h100")
    graphs = [f for f in d.findings if f.rule in ("host-bound", "launch-overhead")]
    fixes = {f.rule: next(x for x in f.fixes if x.id == "cuda-graphs") for f in graphs}
    assert fixes["launch-overhead"] == fixes["host-bound"]
    assert "already replays CUDA graphs" in fixes["launch-overhead"].how


def test_pass_over_moves_a_present_fix_last_with_its_reason_and_keeps_a_prerequisite():
    finding = Finding(
        rule="x",
        severity="low",
        title="t",
        evidence=[Evidence("m", 1.0)],
        fixes=[fix("fused-optimizer", prerequisite=True), fix("pinned-memory"), fix("dataloader-workers")],
    )
    out = pass_over(finding, {"fused-optimizer": "fused already", "pinned-memory": "pinned already"})
    assert [f.id for f in out.fixes] == ["fused-optimizer", "dataloader-workers", "pinned-memory"]
    assert out.fixes[-1].passed_over == "pinned already" and out.fixes[-1].how.startswith("Passed over: pinned")
    assert not out.fixes[0].passed_over and not all_in_place(out)


def test_the_real_host_loader_workers_finding_passes_over_pinned_memory():
    finding = next(f for f in diagnosis_of(CAPTURES / "host_loader_workers").findings if f.rule == "host-bound")
    assert [f.id for f in finding.fixes] == ["dataloader-workers", "pinned-memory"]
    assert "pinned memory" in finding.fixes[-1].passed_over


def _saved(ctx, speedup: float) -> float:
    """The µs per step a speedup recovers on this capture's step (the invariants check the two agree)."""
    return ctx.metrics.budget.step_us * (1 - 1 / speedup)


class _Had(Rule):
    """A rule whose only fix the opt_fused capture already has, with the larger estimate."""

    id = "had"
    title = "had"
    cheat_sheet = {"bottleneck": "", "signal": "", "fix": "", "impact": ""}

    def check(self, ctx, t):
        return Finding(
            self.id,
            "high",
            "Had",
            [Evidence("m", 1.0)],
            [fix("fused-optimizer")],
            est_speedup=1.5,
            recoverable_us=_saved(ctx, 1.5),
        )


class _Open(Rule):
    """A rule whose fix is still open, with the smaller estimate."""

    id = "open"
    title = "open"
    cheat_sheet = {"bottleneck": "", "signal": "", "fix": "", "impact": ""}

    def check(self, ctx, t):
        return Finding(
            self.id,
            "low",
            "Open",
            [Evidence("m", 1.0)],
            [fix("cuda-graphs")],
            est_speedup=1.2,
            recoverable_us=_saved(ctx, 1.2),
        )


class _Nothing(Rule):
    id = "nothing"
    title = "nothing"
    cheat_sheet = {"bottleneck": "", "signal": "", "fix": "", "impact": ""}

    def check(self, ctx, t):
        return Quiet("nothing")


def test_a_finding_whose_fixes_are_all_in_place_ranks_after_one_with_a_fix_left():
    results = run_rules(Context(load_capture("opt_fused"), Config()), [_Had, _Open, _Nothing])
    assert [f.rule for f in results.findings] == ["open", "had"]
    assert all_in_place(results.findings[1])


def test_the_verdict_says_when_the_top_findings_fixes_are_in_place():
    from diagnose.ruleset.assemble import diagnose_trace

    d = diagnose_trace(load_capture("opt_fused"), Config(), rules=[_Had])
    assert "its fixes are in place already: the optimizer already runs AdamW fused" in verdict(d)
