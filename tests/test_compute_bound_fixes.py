"""compute-bound's fixes say what a performance engineer would: with mixed precisions each rung its
own next step, largest saving first; for fp32 inference (no backward pass in the trace) the weights
in bf16 once, not autocast, which casts each fp32 weight again at every call."""

from __future__ import annotations

from conftest import ROOT, diagnosis_of

CAPTURES = ROOT / "fixtures" / "captures"


def _compute_bound(name: str):
    d = diagnosis_of(CAPTURES / name)
    return next(f for f in d.findings if f.rule == "compute-bound")


def test_inference_gets_its_weights_in_bf16():
    fix = _compute_bound("matmul_fp32").fixes[0]  # a bare matmul: no backward pass
    assert fix.id == "bf16-tensor-cores"
    assert "no backward pass" in fix.how and "model.to(torch.bfloat16)" in fix.how
    assert "model = model.to(torch.bfloat16)" in fix.code and "autocast" not in fix.code.split("\n")[1]


def test_training_gets_autocast():
    fix = _compute_bound("regress_tf32_off").fixes[0]  # a plain training loop in fp32
    assert fix.id == "bf16-tensor-cores"
    assert "Autocast them to bf16" in fix.how and "torch.autocast" in fix.code


def test_mixed_precisions_name_each_rung():
    finding = _compute_bound("regress_base_r7")  # fp32 head on TF32, bf16 body
    assert finding.title.startswith("Compute-bound matrix math near the TF32 tensor cores peak: BF16")
    assert [f.id for f in finding.fixes] == ["bf16-tensor-cores", "fp8"]
    labels = [e.metric for e in finding.evidence if e.unit == "% of step"]
    assert labels == [
        "matrix time near the TF32 tensor cores peak with BF16 available",
        "matrix time near the bf16 tensor cores peak with FP8 available",
    ]
