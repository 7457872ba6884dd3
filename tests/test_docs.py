"""Rule documentation: every rule documents itself, and docs/rules is regenerated from it."""

from __future__ import annotations

import re

import yaml

from diagnose.ruleset.docs import generate
from diagnose.rulebook.engine import NEEDS
from diagnose.model.fixes import CATALOGUE
from diagnose.rules import ALL_RULES

from conftest import ROOT


def test_every_rule_is_documented():
    for rule in ALL_RULES:
        doc = rule.doc()
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.id), rule.id
        for section in ("**Signal.**", "**Threshold", "**Fix", "**Estimate.**"):
            assert section in doc, f"{rule.id} docstring lacks {section}"
        assert rule.thresholds and all(t.doc for t in rule.thresholds)


def test_generated_docs_are_current():
    stale = [
        str(p.relative_to(ROOT))
        for p, text in generate(ROOT / "docs").items()
        if not p.exists() or p.read_text() != text
    ]
    assert not stale, f"run `python -m diagnose.ruleset.docs` to regenerate: {stale}"


def test_fix_ids_are_the_stable_ones():
    stable = {
        "cuda-graphs",
        "torch-compile",
        "triton-kernel",
        "bf16-tensor-cores",
        "fp8",
        "pad-dims",
        "flash-attention",
        "flex-attention",
        "paged-attention",
        "kv-quantization",
        "w4a16",
        "speculative-decoding",
        "fsdp2",
        "tensor-parallel",
        "gguf-mmap",
        "activation-checkpointing",
        "remove-sync",
        "pinned-memory",
        "dataloader-workers",
        "larger-batch",
        "static-shapes",
        "shape-bucketing",
    }
    assert stable <= set(CATALOGUE)


def test_rule_ids_are_unique_and_each_rule_is_complete():
    """Adding a rule is one file in diagnose/rules/, one YAML file of cases and regenerated docs: nothing else to edit.
    Each rule needs only registered inputs, and its cases show it both firing and staying quiet."""
    ids = [rule.id for rule in ALL_RULES]
    assert len(ids) == len(set(ids))
    for rule in ALL_RULES:
        named = {n for need in rule.needs for n in ((need,) if isinstance(need, str) else need)}
        assert named <= set(NEEDS), f"{rule.id} needs an input the engine does not know"
        cases = yaml.safe_load((ROOT / "fixtures" / "cases" / f"{rule.id}.yaml").read_text())["cases"]
        outcomes = {case["fires"] for case in cases}
        assert True in outcomes and False in outcomes, f"{rule.id}: cases must show it firing and quiet"
