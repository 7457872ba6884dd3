"""`--verify`: fixes applied from outside, timed as the baseline is, outputs compared.

CPU tests run the real verify child on tiny workloads (a fake step whose speed the TF32 switch sets,
bf16 autocast on an fp32 MLP, torch.compile with aot_eager); GPU tests are marked `gpu`.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from diagnose.capture.spec import CaptureSpec
from diagnose.commands import main
from diagnose.model.findings import Diagnosis, Evidence, Finding, Numerics, Summary
from diagnose.model.fixes import fix
from diagnose.verify import numerics
from diagnose.verify.plan import plan_trials
from diagnose.verify.run import read_trial, run_variant
from diagnose.model.details import Device

from conftest import ROOT

WORKLOADS = ROOT / "tests" / "workloads"
FAKE = WORKLOADS / "verify_fake.py"
MLP = WORKLOADS / "tiny_cpu.py"
DECODE = f"{ROOT / 'fixtures' / 'workloads' / 'tiny_decode.py'}:make_step"


def spec(path, tmp_path, **params) -> CaptureSpec:
    return CaptureSpec(
        path=str(path),
        mode="function",
        function="make_step",
        out_dir=str(tmp_path),
        params=params,
        warmup=2,
        steps=2,
        timed_steps=20,
    )


def trial(tmp_path, path, variant, timeout_s=120.0, backend="", **params):
    return run_variant(
        spec(path, tmp_path, **params),
        variant,
        variant,
        tmp_path / variant,
        baseline_us=[],
        timeout_s=timeout_s,
        compile_backend=backend,
    )


def finding(*fix_ids, est=2.0) -> Finding:
    return Finding(
        rule="launch-overhead",
        severity="high",
        title="t",
        evidence=[Evidence("x", 1.0)],
        fixes=[fix(i) for i in fix_ids],
        est_speedup=est,
    )


# -- the child, end to end on a CPU ---------------------------------------------------------------
def test_fake_step_verifies_with_interval_above_one(tmp_path):
    t = trial(tmp_path, FAKE, "tf32")
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "match"
    assert t.interval[0] > 1.5 and 2.5 < t.speedup < 6, (t.speedup, t.interval)
    assert t.verdict == numerics.VERIFIED
    assert t.n_baseline >= 20 and t.n_fixed >= 20
    assert t.budget and t.budget["step_time_us"] > 0, t.error  # the fixed step was profiled and read back
    assert (tmp_path / "tf32" / "trace.json.gz").exists()


def test_fake_step_that_changes_results_is_never_verified(tmp_path):
    t = trial(tmp_path, FAKE, "tf32", changes=True)
    assert t.numerics["verdict"] == "changes results" and t.numerics["failed"] >= 1
    assert t.interval[0] > 1.0 and t.verdict == numerics.CHANGES


def test_bf16_autocast_is_judged_at_bf16_precision(tmp_path):
    """bf16 autocast on an fp32 workload misses the fp32 tolerance but is within bf16 rounding;
    it is verified with its relative error, not reported as changing results."""
    t = trial(tmp_path, MLP, "autocast-bf16")
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "within precision" and t.numerics["precision"] == "bfloat16"
    assert t.numerics["beyond_dtype"] >= 1 and t.numerics["failed"] == 0
    assert t.numerics["max_abs_diff"] > 1e-4 and 0 < t.numerics["max_rel_error"] < 0.05
    assert "within bf16 rounding: max relative error" in t.numerics["detail"]
    assert t.verdict != numerics.CHANGES


def test_a_tensor_that_varies_as_much_between_two_baseline_runs_is_within_that_variation():
    import torch

    from diagnose.child.compare import compare, relative_differences

    torch.manual_seed(0)
    base = {"g": torch.randn(64), "w": torch.randn(64)}
    again = {"g": base["g"] * 1.3, "w": base["w"].clone()}  # "g" differs 30 % between two baseline runs
    noise = relative_differences(base, again)
    assert noise["w"] == 0 and abs(noise["g"] - 0.3) < 1e-6
    fixed = {"g": base["g"] * 1.45, "w": base["w"].clone()}
    judged = compare(torch, base, fixed, "tf32", noise)
    assert judged["verdict"] == "within run-to-run variation" and judged["run_to_run"]["within_it"] == 1
    assert "1 of 2 tensors" in judged["detail"]
    # the same error on a tensor the baseline reproduces exactly still changes results
    assert compare(torch, base, {"g": base["g"], "w": base["w"] * 1.45}, "tf32", noise)["verdict"] == "changes results"
    # twice the baseline's own difference is the bound
    assert compare(torch, base, {"g": base["g"] * 1.7, "w": base["w"]}, "tf32", noise)["verdict"] == "changes results"
    assert numerics.verdict("ok", 1.2, 1.4, judged) == numerics.VERIFIED


def test_compare_at_a_precision_keeps_changes_beyond_it():
    import torch

    from diagnose.child.compare import compare

    base = {"w": torch.linspace(1, 2, 64)}
    rounded = {"w": base["w"].to(torch.bfloat16).float()}
    assert compare(torch, base, rounded)["verdict"] == "changes results"  # fp32 tolerance
    within = compare(torch, base, rounded, "bfloat16")
    assert within["verdict"] == "within precision" and within["max_rel_error"] < 4e-3
    wrong = compare(torch, base, {"w": base["w"] * 1.1}, "bfloat16")
    assert wrong["verdict"] == "changes results" and wrong["failed"] == 1
    assert compare(torch, base, {"w": base["w"] * 1.004}, "tf32")["verdict"] == "within precision"
    assert compare(torch, base, {"w": base["w"] * 1.03}, "tf32")["verdict"] == "changes results"
    # a reduced-precision product: elements near zero miss any elementwise tolerance, the tensor does not
    torch.manual_seed(0)
    a, b = torch.randn(256, 2048), torch.randn(2048, 256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        product = (a @ b).float()
    exact = {"r": a @ b}
    judged = compare(torch, exact, {"r": product}, "bfloat16")
    assert judged["verdict"] == "within precision" and judged["max_rel_error"] < 2**-8, judged
    beyond = compare(torch, exact, {"r": product}, "tf32")
    assert beyond["verdict"] == "changes results" and "normwise relative error" in beyond["failures"][0]


CONV = ROOT / "fixtures" / "workloads" / "conv_train.py"
OPTIM = ROOT / "fixtures" / "workloads" / "optimizer_step.py"


def test_channels_last_puts_the_steps_conv_net_in_nhwc():
    """The conv workload's model and input are converted in the step's closure, in place (the
    optimizer still updates the same parameters), and the step computes the same loss. In-process: the
    child that runs it (VerifySession.wrap) is exercised end to end by the optimizer variants below."""
    import importlib.util

    import torch

    from diagnose.child.rewrite import apply_channels_last, closure_cells

    spec_ = importlib.util.spec_from_file_location("conv_train", CONV)
    conv_train = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(conv_train)
    plain = conv_train.make_step(batch=2, size=16, width=4, blocks=(1, 1), device="cpu")
    step = conv_train.make_step(batch=2, size=16, width=4, blocks=(1, 1), device="cpu")
    cells = {c.cell_contents.__class__.__name__: c.cell_contents for c in closure_cells(step)}
    params = list(cells["Sequential"].parameters())
    note = apply_channels_last(torch, step)
    assert note == "1 module(s) with 9 Conv2d and 1 4-D input tensor(s) put in torch.channels_last"
    convs = [m for m in cells["Sequential"].modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(m.weight.is_contiguous(memory_format=torch.channels_last) for m in convs)
    x = next(
        c.cell_contents
        for c in closure_cells(step)
        if isinstance(c.cell_contents, torch.Tensor) and c.cell_contents.dim() == 4
    )
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    assert [id(p) for p in cells["SGD"].param_groups[0]["params"]] == [id(p) for p in params]
    torch.testing.assert_close(step(), plain(), rtol=1e-4, atol=1e-5)


def test_channels_last_needs_a_conv_module(tmp_path):
    t = trial(tmp_path, OPTIM, "channels-last", blocks=2, width=32, batch=4)
    assert t.status == "not applicable" and "Conv2d" in t.error and t.verdict == numerics.NEEDS_CODE


@pytest.mark.parametrize("variant,impl", [("fused-optimizer", "fused"), ("foreach-optimizer", "foreach")])
def test_optimizer_variants_switch_a_single_tensor_adamw(tmp_path, variant, impl):
    t = trial(tmp_path, OPTIM, variant, blocks=4, width=64, batch=4)
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "match", t.numerics  # the same update, in fewer kernels
    notes = json.loads((tmp_path / variant / "verify.json").read_text())["notes"]
    assert notes == [f"AdamW (single-tensor → {impl})"]


def test_apply_optimizer_refuses_what_it_cannot_switch():
    import torch

    from diagnose.child.rewrite import NotApplicable, apply_optimizer

    model = torch.nn.Linear(4, 4)
    lbfgs = torch.optim.LBFGS(model.parameters())
    with pytest.raises(NotApplicable, match="no fused=True"):
        apply_optimizer(torch, lambda: lbfgs.step(lambda: model(torch.ones(4)).sum()), "fused")
    with pytest.raises(NotApplicable, match="no torch.optim optimizer"):
        apply_optimizer(torch, lambda: model(torch.ones(4)), "fused")
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    assert apply_optimizer(torch, lambda: sgd.step(), "foreach") == "SGD (single-tensor → foreach)"
    assert sgd.param_groups[0]["foreach"] is True and sgd.param_groups[0]["fused"] is False


def test_apply_optimizer_says_when_the_step_already_runs_the_implementation(monkeypatch):
    """Switching an optimizer to what it already runs changes nothing: timing it would measure drift (an H100 run
    of a foreach AdamW loop once reported foreach-optimizer 'verified 1.14x'), so the trial says so instead."""
    import torch

    from diagnose.child.rewrite import AlreadyApplied, apply_optimizer, running_implementation

    model = torch.nn.Linear(4, 4)
    explicit = torch.optim.AdamW(model.parameters(), foreach=True)
    with pytest.raises(AlreadyApplied, match=r"AdamW \(foreach\) already runs foreach"):
        apply_optimizer(torch, lambda: explicit.step(), "foreach")
    assert apply_optimizer(torch, lambda: explicit.step(), "fused") == "AdamW (foreach → fused)"
    with pytest.raises(AlreadyApplied, match="already runs fused"):
        apply_optimizer(torch, lambda: explicit.step(), "fused")
    # foreach=None runs what PyTorch picks for the parameters: single-tensor on the CPU, foreach on CUDA
    default = torch.optim.AdamW(model.parameters())
    assert running_implementation(torch, default.param_groups[0]) == "single-tensor (PyTorch's default)"
    import torch.optim.optimizer as optimizer_module

    monkeypatch.setattr(optimizer_module, "_default_to_fused_or_foreach", lambda *a, **k: (False, True))
    assert running_implementation(torch, default.param_groups[0]) == "foreach (PyTorch's default)"
    with pytest.raises(AlreadyApplied, match=r"\(foreach \(PyTorch's default\)\) already runs foreach"):
        apply_optimizer(torch, lambda: default.step(), "foreach")
    assert default.param_groups[0]["foreach"] is None  # left as it was


def test_a_fix_already_in_the_code_reads_as_one_clause():
    from diagnose.model.findings import Trial
    from diagnose.report.verify_view import trial_line

    trial = Trial(
        "foreach-optimizer",
        "",
        "already applied",
        verdict="already in the code",
        error="AdamW (foreach (PyTorch's default)) already runs foreach: the step has this fix",
    )
    assert trial_line(trial) == (
        "foreach-optimizer: already in the code: AdamW (foreach (PyTorch's default)) already runs foreach: "
        "the step has this fix"
    )


def test_a_fix_the_step_already_has_is_its_own_verdict():
    from diagnose.verify import numerics

    assert numerics.verdict("already applied", None, None, None) == numerics.ALREADY == "already in the code"
    assert numerics.verdict("not applicable", None, None, None) == numerics.NEEDS_CODE


def test_compile_keeps_fp32_results(tmp_path):
    t = trial(tmp_path, MLP, "compile", backend="aot_eager")
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "match" and t.numerics["tensors"] >= 5  # return value + parameters
    assert t.speedup and t.interval[0] <= t.speedup <= t.interval[1]


def test_a_fix_that_cannot_apply_is_reported_with_its_error(tmp_path):
    t = trial(tmp_path, MLP, "cuda-graph")
    assert t.status == "failed" and t.verdict == numerics.FAILED
    assert "CUDA graphs need a CUDA device" in t.error and "while applying the fix" in t.error


def test_dataloader_workers_rebuild_the_steps_loader_with_the_same_samples(tmp_path):
    t = trial(tmp_path, WORKLOADS / "loader_cpu.py", "dataloader-workers")
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "match", t.numerics  # the same seeded sample order on both sides
    assert t.speedup > 1.5 and t.interval[0] > 1.0, (t.speedup, t.interval)


def test_dataloader_workers_need_a_loader_in_the_step(tmp_path):
    t = trial(tmp_path, WORKLOADS / "loader_cpu.py", "dataloader-workers", inline=True)
    assert t.status == "not applicable" and t.verdict == numerics.NEEDS_CODE
    assert "holds no DataLoader" in t.error


def test_a_workload_that_fails_is_a_failed_trial(tmp_path):
    t = trial(tmp_path, WORKLOADS / "raises.py", "tf32")
    assert t.status == "failed" and t.verdict == numerics.FAILED and "unchanged step" in t.error


def test_a_timeout_is_reported(tmp_path):
    t = trial(tmp_path, FAKE, "tf32", timeout_s=0.5, slow_ms=200.0)
    assert t.status == "timeout" and t.verdict == numerics.FAILED


def test_a_crashed_child_is_reported(tmp_path):
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "verify.json").write_text(json.dumps({"status": "running", "phase": "fixed"}))
    t = read_trial(folder, "cuda-graph", "", -11, False, 10, [])
    assert t.status == "crashed" and "signal 11" in t.error and t.verdict == numerics.FAILED


# -- the analysis side ----------------------------------------------------------------------------
def test_plan_applies_only_what_can_be_applied_from_outside():
    planned = plan_trials([finding("cuda-graphs", "remove-sync"), finding("flash-attention")], set())
    by_fix = {p.fix: p for p in planned}
    assert [v for v, _ in by_fix["cuda-graphs"].variants] == ["cuda-graph", "reduce-overhead"]
    assert by_fix["remove-sync"].variants == [] and "code change" in by_fix["remove-sync"].why
    assert by_fix["flash-attention"].variants == [] and "scaled_dot_product_attention" in by_fix["flash-attention"].why
    sdpa = plan_trials([finding("flash-attention")], {"aten::scaled_dot_product_attention"})
    assert [v for v, _ in sdpa[0].variants] == ["sdpa-flash"]


def test_plan_tries_the_variants_whose_target_the_step_holds():
    trained = plan_trials([finding("cuda-graphs")], {"Optimizer.step#AdamW.step"})
    assert [v for v, _ in trained[0].variants] == ["cuda-graph", "reduce-overhead", "capturable-cuda-graph"]
    generating = finding("static-shapes", "cuda-graphs")
    generating = msgspec.structs.replace(
        generating, fixes=[msgspec.structs.replace(x, api="transformers.generate") for x in generating.fixes]
    )
    planned = plan_trials([generating], set(), script=True)
    assert [[v for v, _ in p.variants] for p in planned] == [["static-cache"], ["static-cache"]]
    plain = plan_trials([finding("static-shapes")], set())
    assert plain[0].variants == [] and "code change" in plain[0].why


@pytest.mark.parametrize(
    "low,high,num,expected",
    [
        (1.2, 1.5, {"verdict": "match"}, numerics.VERIFIED),
        (1.2, 1.5, {"verdict": "changes results"}, numerics.CHANGES),
        (1.2, 1.5, None, numerics.UNCOMPARED),
        (0.9, 1.2, {"verdict": "match"}, numerics.NO_GAIN),
        (0.5, 0.8, {"verdict": "match"}, numerics.SLOWER),
    ],
)
def test_verdicts(low, high, num, expected):
    assert numerics.verdict("ok", low, high, num) == expected
    assert numerics.verdict("oom", low, high, num) == numerics.FAILED


def test_speedup_is_baseline_over_fixed():
    s, low, high = numerics.speedup([200.0 + i % 3 for i in range(30)], [100.0 + i % 3 for i in range(30)])
    assert 1.9 < low <= s <= high < 2.1


def test_median_interval_and_tolerances():
    import torch

    from diagnose.child.verify import compare, median_interval, tolerance

    med, lo, hi = median_interval(list(range(1, 22)))
    assert med == 11 and lo < 11 < hi
    assert tolerance("float32") == (1e-4, 1e-5) and tolerance("int64") == (0.0, 0.0)
    base = {"x": torch.ones(4), "tok": torch.tensor([3])}
    assert compare(torch, base, {"x": torch.ones(4) + 1e-7, "tok": torch.tensor([3])})["verdict"] == "match"
    assert compare(torch, base, {"x": torch.ones(4), "tok": torch.tensor([4])})["verdict"] == "changes results"
    bf16 = {"x": (torch.ones(4) / 3).to(torch.bfloat16), "tok": torch.tensor([3])}
    assert compare(torch, {"x": torch.ones(4) / 3, "tok": torch.tensor([3])}, bf16)["verdict"] == "changes results"
    assert compare(torch, {}, {})["verdict"] == "not compared"


def test_verify_entries_render_and_round_trip(tmp_path):
    """Plumbing end to end: a captured CPU diagnosis, a finding naming fixes, verify, every renderer."""
    from diagnose import report
    from diagnose.front import pipeline
    from diagnose.capture.runner import run_capture
    from diagnose.model.config import Config
    from diagnose.trace.load import load_capture_folder

    s = spec(FAKE, tmp_path / "cap")
    meta = run_capture(s, timeout_s=120)
    trace = load_capture_folder(tmp_path / "cap")
    from diagnose.ruleset.assemble import diagnose_trace

    analysed = diagnose_trace(trace, Config())
    planted = msgspec.structs.replace(analysed, findings=[finding("bf16-tensor-cores", "remove-sync")])
    d = pipeline.verify_fixes(planted, trace, s, meta, tmp_path / "cap", timeout_s=120, python=None)
    assert planted.findings[0].verify is None  # a new Diagnosis: the one given is left as it was
    entries = d.findings[0].verify
    assert [e.fix for e in entries] == ["bf16-tensor-cores", "remove-sync"]
    tf32 = entries[0].trials[0]
    assert tf32.variant == "tf32" and tf32.verdict == numerics.VERIFIED
    assert entries[0].best == "tf32" and not entries[1].applicable
    assert "synchron" in entries[1].snippet or ".item()" in entries[1].snippet
    again = Diagnosis.from_dict(json.loads(report.get("json").render(d)))
    assert again.findings[0].verify == entries
    text = report.get("text").render(d)
    assert "verify: bf16-tensor-cores → tf32: verified · measured" in text and "est. 2×" in text
    assert "remove-sync: needs a code change" in text
    assert "**verify** bf16-tensor-cores → tf32: verified" in report.get("md").render(d)
    assert "Measured with --verify" in report.get("html").render(d)


def test_numerics_lines_name_the_precision_and_the_relative_error():
    from diagnose.report.verify_view import numerics_text

    within = {
        "verdict": "within precision",
        "tensors": 12,
        "precision": "bfloat16",
        "max_rel_error": 0.0029,
        "detail": "within bf16 rounding: max relative error 0.29 % (3 of 12 tensors beyond the baseline "
        "dtype's tolerance)",
    }
    assert numerics_text(Numerics(**within)).startswith("outputs within bf16 rounding: max relative error 0.29 %")
    beyond = {
        "verdict": "changes results",
        "tensors": 12,
        "failed": 2,
        "precision": "tf32",
        "max_abs_diff": 0.14,
        "max_rel_error": 0.031,
    }
    assert numerics_text(Numerics(**beyond)) == (
        "changes results (2 of 12 tensors beyond the TF32 tolerance, max |Δ| 0.14, max relative error 3.1 %)"
    )
    assert numerics.verdict("ok", 1.2, 1.4, within) == numerics.VERIFIED
    assert numerics.verdict("ok", 1.2, 1.4, beyond) == numerics.CHANGES


def test_prerequisite_fix_reads_in_the_verdict():
    from diagnose.rulebook.engine import verdict as verdict_of

    f = Finding(
        rule="launch-overhead",
        severity="high",
        title="CPU launch overhead",
        evidence=[],
        fixes=[fix("fused-optimizer", prerequisite=True), fix("cuda-graphs")],
        est_speedup=4.0,
    )
    d = Diagnosis(target="t", device=Device(), summary=Summary(), findings=[f], skipped=[])
    assert "est. 4× faster with fused-optimizer, then cuda-graphs" in verdict_of(d)
    assert Diagnosis.from_dict(d.to_dict()).findings[0].fixes[0].prerequisite is True
    plain = msgspec.structs.replace(f, fixes=[msgspec.structs.replace(f.fixes[0], prerequisite=False), f.fixes[1]])
    assert "with fused-optimizer)" in verdict_of(msgspec.structs.replace(d, findings=[plain]))


def test_old_findings_json_without_verify_still_loads():
    d = Diagnosis.from_dict(
        {
            "target": "t",
            "device": {},
            "summary": {},
            "skipped": [],
            "findings": [{"rule": "r", "severity": "low", "title": "t", "evidence": [], "fixes": []}],
        }
    )
    assert d.findings[0].verify is None


# -- the command line -----------------------------------------------------------------------------
def test_verify_needs_a_workload(tmp_path, capsys):
    trace = ROOT / "fixtures" / "captures"
    folder = next(p for p in sorted(trace.iterdir()) if p.is_dir())
    assert main([str(folder), "--verify", "-o", str(tmp_path / "o")]) == 2
    assert "--verify needs a workload" in capsys.readouterr().err


def test_verify_and_sweep_do_not_combine(tmp_path, capsys):
    assert main([f"{MLP}:make_step", "--verify", "--sweep", "width=8,16", "-o", str(tmp_path / "o")]) == 2
    assert "cannot be combined" in capsys.readouterr().err


def test_verify_on_a_cpu_workload_without_findings_says_so(tmp_path, capsys):
    code = main(["-o", str(tmp_path / "o"), "--json", "--no-html", "--verify", f"{MLP}:make_step"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and any(w.startswith("--verify: no finding") for w in data["warnings"])


def test_script_mode_times_the_whole_run_with_the_fix(tmp_path):
    script = CaptureSpec(
        path=str(WORKLOADS / "verify_script.py"),
        mode="script",
        out_dir=str(tmp_path),
        warmup=2,
        steps=2,
        timed_steps=20,
    )
    t = run_variant(script, "tf32", "tf32", tmp_path / "tf32", baseline_us=[4200.0] * 20, timeout_s=120)
    assert t.status == "ok", t.error
    assert t.baseline_basis == "the capture's own unprofiled steps" and t.n_fixed >= 10
    assert 2.0 < t.speedup < 5.0, t.speedup
    assert t.numerics["verdict"] == "not compared" and t.verdict == numerics.UNCOMPARED


def test_script_mode_takes_only_fixes_that_act_on_the_whole_run(tmp_path):
    script = CaptureSpec(
        path=str(WORKLOADS / "verify_script.py"),
        mode="script",
        out_dir=str(tmp_path),
        warmup=2,
        steps=2,
        timed_steps=20,
    )
    t = run_variant(script, "cuda-graph", "cuda-graph", tmp_path / "g", baseline_us=[4200.0] * 20, timeout_s=120)
    assert t.status == "not applicable" and "needs the step as a function" in t.error
    planned = plan_trials([finding("cuda-graphs", "bf16-tensor-cores")], script=True)
    assert [p.variants for p in planned][0] == [] and "as a function" in planned[0].why
    assert [name for name, _ in planned[1].variants] == ["tf32", "autocast-bf16"]


# -- on the GPU -----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_decode_verifies_cuda_graphs(tmp_path, capsys):
    code = main(["-o", str(tmp_path / "o"), "--json", "--no-html", "--verify", DECODE])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    top = data["findings"][0]
    assert top["rule"] == "launch-overhead"
    graphs = next(e for e in top["verify"] if e["fix"] == "cuda-graphs")
    graph = next(t for t in graphs["trials"] if t["variant"] == "cuda-graph")
    assert graph["status"] == "ok", graph["error"]
    assert graph["numerics"]["verdict"] == "match" and graph["interval"][0] > 1.0
    assert graph["verdict"] == numerics.VERIFIED and graph["budget"]["gpu_busy_fraction"] > 0


@pytest.mark.gpu
def test_script_mode_verifies_tf32_on_a_gpu(tmp_path, capsys):
    code = main(["-o", str(tmp_path / "o"), "--json", "--no-html", "--verify", str(WORKLOADS / "matmul_script.py")])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    top = data["findings"][0]
    assert top["rule"] == "compute-bound"
    trials = {t["variant"]: t for v in top["verify"] for t in v["trials"]}
    assert set(trials) == {"tf32", "autocast-bf16"}
    for t in trials.values():
        assert t["status"] == "ok", t["error"]
        assert t["interval"][0] > 1.5 and t["verdict"] == numerics.UNCOMPARED
        assert t["baseline_basis"] == "the capture's own unprofiled steps"


@pytest.mark.gpu
def test_bf16_autocast_on_fp32_matmul_is_within_bf16_on_gpu(tmp_path):
    t = trial(
        tmp_path,
        ROOT / "fixtures" / "workloads" / "matmul.py",
        "autocast-bf16",
        dtype="float32",
        m=2048,
        n=2048,
        k=2048,
    )
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "within precision" and t.numerics["precision"] == "bfloat16"
    assert t.numerics["max_rel_error"] < 0.01


def test_verify_in_script_mode_runs_through_the_cli(tmp_path, capsys):
    code = main(
        [
            "-o",
            str(tmp_path / "o"),
            "--json",
            "--no-html",
            "--steps",
            "1",
            "--verify",
            str(WORKLOADS / "train_script.py"),
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert not any("not yet" in w for w in data["warnings"])


def test_a_fix_that_keeps_the_calls_is_compared_after_one_update_and_a_graph_after_its_replays():
    from diagnose.child.verify import COMPARE_AFTER, GRAPH_WARMUP_CALLS, compare_after

    for variant in ("tf32", "autocast-bf16", "channels-last", "fused-optimizer", "foreach-optimizer", "sdpa-flash"):
        assert compare_after(variant) == 1, variant
    for variant in ("cuda-graph", "reduce-overhead", "compile"):
        assert compare_after(variant) == COMPARE_AFTER > GRAPH_WARMUP_CALLS + 1, variant  # warm, capture, replay


def test_capturable_keeps_the_implementation_and_moves_the_counters():
    torch = pytest.importorskip("torch")
    from diagnose.child.rewrite import apply_optimizer

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()

    def step():
        return opt.step()

    assert apply_optimizer(torch, step, "capturable") == "AdamW (foreach → capturable=True)"
    assert all(g["capturable"] and g["foreach"] for g in opt.param_groups)
    assert all(s["step"].dtype == torch.float32 for s in opt.state.values())


def test_static_cache_needs_transformers_or_says_so():
    from diagnose.child.rewrite import NotApplicable, static_cache_generate

    try:
        import transformers  # noqa: F401
    except Exception:
        with pytest.raises(NotApplicable, match="transformers is not importable"):
            with static_cache_generate([0]):
                pass
    else:
        from transformers.generation.utils import GenerationMixin

        before, calls = GenerationMixin.generate, [0]
        with static_cache_generate(calls):
            assert GenerationMixin.generate is not before
        assert GenerationMixin.generate is before and calls == [0]
