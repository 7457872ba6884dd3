"""--verify's weight quantizers (w4a16, fp8): the quantizer, the function mode that swaps F.linear and
matmul by a weight for the quantized kernels, their NotApplicable paths, the 4-bit numerics verdict,
the plan's gating, and end-to-end trials on a CPU (torch's CPU int4 kernels); one GPU test on the
graphed decode of fixtures/workloads/gemv_decode.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from diagnose.child import quantize
from diagnose.child.compare import CHANGES, WITHIN, compare
from diagnose.child.rewrite import NotApplicable
from diagnose.capture.spec import CaptureSpec
from diagnose.model.findings import Evidence, Finding
from diagnose.model.fixes import fix
from diagnose.verify import numerics
from diagnose.verify.plan import plan_trials
from diagnose.verify.run import run_variant

from conftest import ROOT

WORKLOADS = ROOT / "tests" / "workloads"
MLP = WORKLOADS / "quantize_cpu.py"
GEMV = ROOT / "fixtures" / "workloads" / "gemv_decode.py"
CPU_INT4 = hasattr(torch, "_weight_int4pack_mm_for_cpu") and hasattr(torch, "_convert_weight_to_int4pack_for_cpu")
needs_cpu_int4 = pytest.mark.skipif(not CPU_INT4, reason="this torch has no CPU int4 kernels")


def trial(tmp_path, path, variant, **params):
    spec = CaptureSpec(
        path=str(path),
        mode="function",
        function="make_step",
        out_dir=str(tmp_path),
        params=params,
        warmup=2,
        steps=2,
        timed_steps=20,
    )
    return run_variant(spec, variant, variant, tmp_path / variant, baseline_us=[], timeout_s=180)


def finding(rule: str, *fix_ids) -> Finding:
    return Finding(
        rule=rule, severity="high", title="t", evidence=[Evidence("x", 1.0)], fixes=[fix(i) for i in fix_ids]
    )


# -- the quantizer --------------------------------------------------------------------------------
@needs_cpu_int4
def test_int4_copy_rounds_random_weights_by_about_a_tenth_and_multiplies_as_its_dequantization():
    torch.manual_seed(0)
    w = torch.randn(64, 512) * 0.02
    q = quantize.quantize(torch, quantize.INT4, w)
    # 4-bit asymmetric, group 128, Gaussian weights: step = range / 15 ≈ 0.36 σ, rms error ≈ step / √12
    assert 0.08 < q.error < 0.12, q.error
    assert q.bytes_before == 64 * 512 * 4 and q.bytes_after < q.bytes_before / 7
    x = torch.randn(3, 512)
    got = quantize.product(torch, x, q)
    exact = x @ w.T
    assert got.shape == (3, 64)
    rel = float((got - exact).norm() / exact.norm())
    assert 0.5 * q.error < rel < 2 * q.error  # one product's error is about the weight's (module docstring)


def test_fp8_copy_rounds_by_a_few_percent():
    torch.manual_seed(0)
    w = (torch.randn(32, 64) * 0.02).to(torch.bfloat16)
    q = quantize.quantize(torch, quantize.FP8, w)
    assert 0.01 < q.error < 0.05, q.error
    x = torch.randn(5, 64).to(torch.bfloat16)  # 5 rows: padded to 16 for _scaled_mm, cut back
    got = quantize.product(torch, x, q)
    exact = x.float() @ w.float().T
    assert got.shape == (5, 32) and got.dtype == torch.bfloat16
    assert float((got.float() - exact).norm() / exact.norm()) < quantize.error_bound(quantize.FP8, q.error)


def test_fits_names_what_the_kernels_cannot_take():
    assert quantize.fits(torch, quantize.INT4, torch.zeros(16, 256)) == ""
    assert "multiple of 128" in quantize.fits(torch, quantize.INT4, torch.zeros(16, 100))
    assert "multiple of 16" in quantize.fits(torch, quantize.INT4, torch.zeros(40, 256))
    assert "2-D" in quantize.fits(torch, quantize.INT4, torch.zeros(2, 16, 256))
    assert quantize.fits(torch, quantize.INT4, torch.zeros(16, 256), torch.zeros(2, 128))  # another width
    assert "16-bit" in quantize.fits(torch, quantize.FP8, torch.zeros(16, 256))


# -- the function mode ----------------------------------------------------------------------------
@needs_cpu_int4
def test_the_mode_swaps_linear_and_weight_matmuls_but_not_activations():
    torch.manual_seed(0)
    w, b = torch.randn(128, 256) * 0.02, torch.randn(128)
    v = torch.randn(256, 128) * 0.02
    x = torch.randn(4, 256)
    mode = quantize.weight_quantizer(torch, quantize.INT4)
    with mode:
        y = F.linear(x, w, b)  # a weight at first sight
        first = x @ v  # a plain tensor: a weight only once met again
        again = x @ v
        t = x @ w.T  # the transpose of a known weight: its copy
        act = torch.randn(4, 256)
        scores = x @ act.T  # a fresh activation each call: left alone
    assert len(mode.quantized()) == 2, mode.note()
    assert torch.equal(first, x @ v) and not torch.equal(again, x @ v)
    assert torch.equal(scores, x @ act.T)
    exact = F.linear(x, w, b)
    assert 0 < float((y - exact).norm() / exact.norm()) < 0.2
    assert torch.allclose(t + b, y, atol=1e-5)
    assert "2 weight(s) quantized to int4" in mode.note() and mode.weight_error() > 0.05


@needs_cpu_int4
def test_nn_linear_modules_are_quantized_through_their_forward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
    x = torch.randn(2, 256)
    mode = quantize.weight_quantizer(torch, quantize.INT4)
    with torch.no_grad():
        exact = model(x)
        with mode:
            got = model(x)
    assert len(mode.quantized()) == 2 and not torch.equal(got, exact)
    assert float((got - exact).norm() / exact.norm()) < quantize.error_bound(quantize.INT4, mode.weight_error())
    assert torch.equal(model[0].weight, model[0].weight.detach())  # the module's weights are unchanged


def test_nothing_to_quantize_is_not_applicable():
    mode = quantize.weight_quantizer(torch, quantize.INT4)
    with mode:
        F.linear(torch.randn(2, 100), torch.randn(32, 100))
    with pytest.raises(NotApplicable, match="needs a code change.*multiple of 128"):
        mode.check()
    grads = quantize.weight_quantizer(torch, quantize.INT4)
    w = torch.randn(32, 256, requires_grad=True)
    with grads:
        F.linear(torch.randn(2, 256), w).sum().backward()
    assert w.grad is not None and not grads.quantized() and "needs gradients" in " ".join(grads.left)
    with pytest.raises(NotApplicable, match="gradients"):
        grads.check()


def test_a_weight_first_met_inside_a_graph_capture_stays_and_is_counted(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    mode = quantize.weight_quantizer(torch, quantize.INT4)
    x, w = torch.randn(2, 256), torch.randn(32, 256)
    with mode:
        y = F.linear(x, w)
    assert torch.equal(y, F.linear(x, w)) and mode.missed_in_capture == 1
    with pytest.raises(NotApplicable, match="CUDA graph capture"):
        mode.check()


# -- numerics -------------------------------------------------------------------------------------
def test_quantized_outputs_are_judged_against_the_weights_rounding_in_any_dtype():
    torch.manual_seed(0)
    base = torch.randn(64, 64).to(torch.bfloat16)
    near = (base.float() + 0.05 * torch.randn(64, 64) * base.float().std()).to(torch.bfloat16)
    far = (base.float() + 0.5 * torch.randn(64, 64) * base.float().std()).to(torch.bfloat16)
    weights = torch.ones(8, 8)
    ok = compare(torch, {"return": base, "w": weights}, {"return": near, "w": weights}, "int4", weight_error=0.1)
    assert ok["verdict"] == WITHIN and ok["precision"] == "int4" and ok["failed"] == 0
    assert ok["precision_relative"] == pytest.approx(0.2)
    assert ok["detail"].startswith("within 4-bit weight rounding: normwise relative error")
    assert "2 × the weights' 10 % quantization error" in ok["detail"]
    bad = compare(torch, {"return": base}, {"return": far}, "int4", weight_error=0.1)
    assert bad["verdict"] == CHANGES and "normwise relative error" in bad["failures"][0]
    same = compare(torch, {"return": base}, {"return": base.clone()}, "int4", weight_error=0.1)
    assert same["verdict"] == "match"


# -- the plan -------------------------------------------------------------------------------------
def test_plan_tries_quantized_weights_only_for_the_findings_they_answer():
    decode = plan_trials([finding("decode-latency", "w4a16", "speculative-decoding")], set())
    assert [v for v, _ in decode[0].variants] == ["w4a16"] and decode[1].variants == []
    other = plan_trials([finding("launch-overhead", "w4a16")], set())
    assert other[0].variants == [] and "code change" in other[0].why
    fp8 = plan_trials([finding("compute-bound", "fp8")], set())
    assert [v for v, _ in fp8[0].variants] == ["fp8"]
    assert plan_trials([finding("decode-latency", "w4a16")], set(), script=True)[0].variants  # a script run too


# -- end to end on a CPU --------------------------------------------------------------------------
@needs_cpu_int4
def test_w4a16_verifies_the_gemv_decode_on_a_cpu_within_4_bit_rounding(tmp_path):
    t = trial(tmp_path, GEMV, "w4a16", tokens=1, layers=2, d_model=256, d_ff=512, device="cpu")
    assert t.status == "ok", t.error
    num = t.numerics
    assert num["verdict"] == "within precision" and num["precision"] == "int4", num
    assert 0 < num["max_rel_error"] < num["precision_relative"] and num["beyond_dtype"] >= 1
    assert "within 4-bit weight rounding: normwise relative error" in num["detail"]
    assert t.verdict != numerics.CHANGES and t.n_fixed >= 20
    notes = " ".join(__import__("json").loads((tmp_path / "w4a16" / "verify.json").read_text())["notes"])
    assert "6 weight(s) quantized to int4" in notes


@needs_cpu_int4
def test_w4a16_on_nn_linear_modules_and_where_nothing_fits(tmp_path):
    t = trial(tmp_path / "a", MLP, "w4a16")
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "within precision", t.numerics
    odd = trial(tmp_path / "b", MLP, "w4a16", width=100)
    assert odd.status == "not applicable" and "multiple of 128" in odd.error
    assert odd.verdict == numerics.NEEDS_CODE
    train = trial(tmp_path / "c", MLP, "w4a16", train=True)
    assert train.status == "not applicable" and "gradients" in train.error


@needs_cpu_int4
def test_w4a16_applies_around_a_whole_script_run(tmp_path):
    script = CaptureSpec(
        path=str(WORKLOADS / "linear_script.py"),
        mode="script",
        out_dir=str(tmp_path),
        warmup=2,
        steps=2,
        timed_steps=20,
    )
    t = run_variant(script, "w4a16", "w4a16", tmp_path / "w", baseline_us=[100.0] * 20, timeout_s=180)
    assert t.status == "ok", t.error
    assert t.n_fixed >= 10 and t.numerics["verdict"] == "not compared"
    notes = " ".join(__import__("json").loads((tmp_path / "w" / "verify.json").read_text())["notes"])
    assert "2 weight(s) quantized to int4" in notes


# -- on the GPU -----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_w4a16_speeds_up_the_graphed_decode_within_4_bit_rounding(tmp_path):
    """A graph captured in the factory records the int4 kernels: one 7B-width SwiGLU block (4096 ×
    11008), replayed; tinygemm reads ≈ 3.9× fewer weight bytes."""
    t = trial(tmp_path, GEMV, "w4a16", tokens=1, layers=1, d_model=4096, d_ff=11008, graphed=True)
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "within precision", t.numerics
    assert t.numerics["max_rel_error"] < t.numerics["precision_relative"]
    assert t.interval[0] > 1.0 and t.verdict == numerics.VERIFIED, (t.speedup, t.interval)


def test_fp8_verifies_a_bf16_mlp_on_a_cpu_within_its_rounding(tmp_path):
    t = trial(tmp_path, MLP, "fp8", dtype="bfloat16", width=64, layers=2)
    assert t.status == "ok", t.error
    assert t.numerics["verdict"] == "within precision" and t.numerics["precision"] == "fp8", t.numerics
    assert "FP8 weight and activation rounding" in t.numerics["detail"]
    fp32 = trial(tmp_path / "f", MLP, "fp8", width=64, layers=2)
    assert fp32.status == "not applicable" and "16-bit" in fp32.error
