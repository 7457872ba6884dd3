"""Rule documentation: every rule documents itself, and docs/rules is regenerated from it."""
from __future__ import annotations

from diagnose.docs import generate
from diagnose.fixes import CATALOGUE
from diagnose.rules import ALL_RULES

from conftest import ROOT

MISSION_RULE_IDS = {"launch-overhead", "memory-bound", "compute-bound", "attention-memory", "kv-fragmentation",
                    "decode-latency", "vram-limit", "host-bound", "sync-stall", "dynamic-shapes"}


def test_every_rule_is_documented():
    for rule in ALL_RULES:
        doc = rule.doc()
        assert rule.id in MISSION_RULE_IDS
        for section in ("**Signal.**", "**Threshold", "**Fix", "**Estimate.**"):
            assert section in doc, f"{rule.id} docstring lacks {section}"
        assert rule.thresholds and all(t.doc for t in rule.thresholds)


def test_generated_docs_are_current():
    stale = [str(p.relative_to(ROOT)) for p, text in generate(ROOT / "docs").items()
             if not p.exists() or p.read_text() != text]
    assert not stale, f"run `python -m diagnose.docs` to regenerate: {stale}"


def test_fix_ids_are_the_stable_ones():
    stable = {"cuda-graphs", "torch-compile", "triton-kernel", "bf16-tensor-cores", "fp8", "pad-dims",
              "flash-attention", "flex-attention", "paged-attention", "kv-quantization", "w4a16",
              "speculative-decoding", "fsdp2", "tensor-parallel", "gguf-mmap", "activation-checkpointing",
              "remove-sync", "pinned-memory", "dataloader-workers", "larger-batch", "static-shapes", "shape-bucketing"}
    assert stable <= set(CATALOGUE)
