"""Which fixes `--verify` can apply from outside the user's code, and with which variants.

Each catalogue fix id (diagnose/model/fixes.py) that can be applied by wrapping the step callable (or by
the process environment) maps to its variants, the main one first: the child process
(diagnose/child/verify.py) knows each variant by name. Every other fix "needs a code change".
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from diagnose.child.verify import SCRIPT_VARIANTS  # what applies to a script run as a whole
from diagnose.metrics.optimizer import PREFIX as OPTIMIZER_RANGE
from diagnose.model.findings import Finding
from diagnose.vocabulary.ops import is_sdpa_op

# fix id -> [(variant, what it does)], main variant first
APPLICABLE: dict[str, list[tuple[str, str]]] = {
    "cuda-graphs": [
        ("cuda-graph", "torch.cuda.CUDAGraph capture of the step, replayed each call"),
        ("reduce-overhead", 'torch.compile(step, mode="reduce-overhead")'),
        (
            "capturable-cuda-graph",
            "the step's optimizers made capturable=True (step counters on the GPU), then a CUDA graph",
        ),
        ("static-cache", 'transformers generate(cache_implementation="static"): compiled decoding'),
    ],
    "static-shapes": [("static-cache", 'transformers generate(cache_implementation="static"): a fixed-shape KV cache')],
    "torch-compile": [("compile", "torch.compile(step)"), ("max-autotune", 'torch.compile(step, mode="max-autotune")')],
    "bf16-tensor-cores": [
        ("tf32", 'torch.set_float32_matmul_precision("high") (TF32 matmuls)'),
        ("autocast-bf16", "torch.autocast(dtype=torch.bfloat16) around the step"),
    ],
    "flash-attention": [("sdpa-flash", "torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) around the step")],
    "expandable-segments": [("expandable-segments", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")],
    "dataloader-workers": [
        ("dataloader-workers", "the step's DataLoader rebuilt with worker processes, persistent, and pinned memory")
    ],
    "channels-last": [("channels-last", "the step's conv modules and 4-D input tensors put in torch.channels_last")],
    "fused-optimizer": [
        ("fused-optimizer", "the step's optimizers switched to fused=True"),
        ("foreach-optimizer", "the step's optimizers switched to foreach=True"),
    ],
    "pinned-memory": [
        ("dataloader-workers", "the step's DataLoader rebuilt with worker processes, persistent, and pinned memory")
    ],
    "w4a16": [
        (
            "w4a16",
            "the step's weights quantized to 4 bits (group-128 scales) and multiplied by tinygemm "
            "(torch._weight_int4pack_mm), from a TorchFunctionMode around the step's build and calls",
        )
    ],
    "fp8": [
        (
            "fp8",
            "the step's weights and activations in FP8 e4m3 (per-tensor scales) multiplied by torch._scaled_mm, "
            "from a TorchFunctionMode around the step's build and calls",
        )
    ],
}
# variant -> the rules whose findings it answers: quantized weights pay off where the step streams its weights
# (decode-latency) or where FP8 tensor cores double a compute-bound matmul's rate (compute-bound)
RULES_OF = {"w4a16": ("decode-latency",), "fp8": ("compute-bound",)}

PROCESS_LEVEL = {"expandable-segments": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}
"""Variants set in the environment before CUDA starts: no in-process baseline, the capture's own is used."""

GENERATE = "transformers.generate"


@dataclasses.dataclass
class Planned:
    """One fix of one finding, and the variants to try (none: it needs a code change, `why`)."""

    finding: int
    fix: str
    variants: list[tuple[str, str]]
    why: str = ""
    snippet: str = ""  # for a fix that needs a code change: the finding's code example (or how-to)


def variant_names() -> frozenset:
    """Every variant --verify knows."""
    return frozenset(name for variants in APPLICABLE.values() for name, _ in variants)


def plan_trials(
    findings: list, op_names: set[str] | frozenset = frozenset(), skip: frozenset = frozenset(), script: bool = False
) -> list[Planned]:
    """For every fix of every finding: the variants to run, or why it cannot be applied from outside.

    `op_names` are the CPU op names of the captured trace: flash-attention applies only where the step
    calls scaled_dot_product_attention (an explicit softmax(QKᵀ)V needs the code changed). Variants in
    `skip` (--verify-skip) are left out; a fix left with none says so. A `script` (or module) run takes
    only SCRIPT_VARIANTS: the others need the step as a function."""
    planned = []
    for index, finding in enumerate(findings):
        for fx in finding.fixes:
            variants = APPLICABLE.get(fx.id)
            snippet = fx.code or fx.how
            if variants is None:
                planned.append(Planned(index, fx.id, [], "needs a code change", snippet))
            elif fx.id == "flash-attention" and not any(is_sdpa_op(n) for n in op_names):
                planned.append(
                    Planned(
                        index,
                        fx.id,
                        [],
                        "needs a code change: the step does not call F.scaled_dot_product_attention",
                        snippet,
                    )
                )
            else:
                variants = [v for v in variants if _fits(v[0], finding, op_names)]
                if not variants:
                    planned.append(Planned(index, fx.id, [], "needs a code change", snippet))
                    continue
                kept = [v for v in variants if v[0] not in skip and (not script or v[0] in SCRIPT_VARIANTS)]
                why = (
                    ""
                    if kept
                    else "not tried: --verify-skip"
                    if not script or any(v[0] in SCRIPT_VARIANTS for v in variants)
                    else "needs the step as a function in script mode (model.py:NAME returning one step)"
                )
                planned.append(Planned(index, fx.id, kept, why, "" if kept else snippet))
    return planned


def _fits(variant: str, finding: Finding, op_names: Iterable[str]) -> bool:
    """Whether what `variant` acts on is in the step: an optimizer to make capturable (an
    `Optimizer.step#` range), transformers' generate() (a fix written in its API), weights to
    quantize where the finding is one that quantized weights answer (`RULES_OF`: a graph replay
    records no matmul ops, so the finding, not the ops, says the step multiplies by weights)."""
    if variant in RULES_OF:
        return finding.rule in RULES_OF[variant]
    if variant == "capturable-cuda-graph":
        return any(n.startswith(OPTIMIZER_RANGE) for n in op_names)
    if variant == "static-cache":
        return any(x.api == GENERATE for x in finding.fixes)
    return True


def env_for(variant: str) -> dict[str, str]:
    """Environment a variant needs set before the child starts ({} for in-process variants)."""
    return dict(PROCESS_LEVEL.get(variant, {}))
