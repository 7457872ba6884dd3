"""The catalogue of fixes, by stable id: rules name them, the report shows their code examples."""

from __future__ import annotations

import textwrap

from diagnose.model.findings import Fix

CODE_COLUMNS = 100  # the widest line of a fix's code: the report shows it whole at 1400 px


def comment(text: str) -> str:
    """`text` as Python comment lines of at most CODE_COLUMNS characters, each ending in a newline
    (names from a trace make some comments arbitrarily long)."""
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, CODE_COLUMNS - 2, break_on_hyphens=False))


CATALOGUE: dict[str, tuple[str, str]] = {
    "cuda-graphs": (
        "Replay the step from a CUDA graph",
        "Capture the steady-state step once and replay it: one launch per step instead of one "
        'per kernel. torch.compile(mode="reduce-overhead") does it for you; '
        "torch.cuda.CUDAGraph does it by hand (static input buffers, fixed shapes).",
    ),
    "torch-compile": (
        "Fuse with torch.compile",
        "torch.compile turns chains of pointwise and reduction ops into a few Triton kernels "
        "that read and write HBM once.",
    ),
    "triton-kernel": ("Write a fused Triton kernel", "Hand-fuse the chain into one autotuned Triton kernel."),
    "bf16-tensor-cores": (
        "Use tensor cores (bf16 / TF32 / autocast)",
        "Run matmuls in bf16 (torch.autocast) or allow TF32 for fp32 matmuls.",
    ),
    "fp8": (
        "FP8 tensor cores",
        "Hopper doubles matmul throughput in FP8 (torch._scaled_mm, Transformer Engine, torchao).",
    ),
    "pad-dims": ("Pad matrix dimensions", "Pad M, N, K to multiples of 64/128 (at least 8 for 16-bit types)."),
    "flash-attention": (
        "Fused attention (FlashAttention / cuDNN via SDPA)",
        "F.scaled_dot_product_attention with the flash or cuDNN backend never materialises T×T scores.",
    ),
    "flex-attention": (
        "FlexAttention",
        "torch.nn.attention.flex_attention with a block_mask skips fully masked tiles.",
    ),
    "paged-attention": ("Paged KV cache", "Allocate the KV cache in fixed blocks with a block table (as vLLM does)."),
    "kv-quantization": ("Quantize the KV cache", "Store K and V in FP8 or INT4."),
    "w4a16": (
        "4-bit weights, 16-bit activations",
        "AWQ/GPTQ weights with Marlin-class kernels cut weight bytes per token by 4×.",
    ),
    "speculative-decoding": (
        "Speculative decoding",
        "A draft model proposes k tokens; one pass of the big model verifies them.",
    ),
    "fsdp2": (
        "Shard with FSDP2",
        "torch.distributed.fsdp.fully_shard shards parameters, gradients and optimizer state.",
    ),
    "tensor-parallel": ("Tensor parallelism", "Split large matmuls across GPUs over NVLink."),
    "gguf-mmap": ("Q4_K_M GGUF + mmap", "For edge inference: 4-bit GGUF weights, memory-mapped."),
    "activation-checkpointing": (
        "Activation checkpointing",
        "Recompute activations in backward instead of storing them.",
    ),
    "remove-sync": (
        "Remove host-device syncs from the loop",
        "Keep values on the GPU (.item(), .cpu(), print of a tensor and torch.cuda.synchronize() each drain the queue).",
    ),
    "pinned-memory": ("Pinned host memory", "pin_memory=True in the DataLoader and .to(device, non_blocking=True)."),
    "non-blocking-copies": (
        "Overlap host-to-device copies with compute",
        ".to(device, non_blocking=True) from pinned memory, issued on a side stream one batch ahead "
        "(the next batch copies while this one computes; the compute stream waits on an event).",
    ),
    "compact-transfer": (
        "Send fewer bytes to the GPU",
        "Copy the compact form and convert on the GPU: uint8 image pixels (a quarter of fp32's bytes), "
        "bf16 features or int32 token ids instead of fp32/int64, then normalise or cast after the copy.",
    ),
    "dataloader-workers": (
        "DataLoader workers",
        "num_workers > 0 (and persistent_workers=True) to prepare batches off the main process.",
    ),
    "larger-batch": ("Larger batch", "More work per launch amortises fixed per-step costs."),
    "expandable-segments": (
        "Expandable allocator segments",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the caching allocator grow a "
        "segment in place instead of caching one block per odd size, so memory freed at one "
        "size serves requests of another.",
    ),
    "overlap-comm": (
        "Overlap communication with compute",
        "Start collectives earlier so compute hides them: DDP with a smaller bucket_cap_mb and "
        "gradient_as_bucket_view=True, FSDP2 with forward and backward prefetch "
        "(set_modules_to_forward_prefetch / set_modules_to_backward_prefetch).",
    ),
    "grad-accumulation": (
        "All-reduce once per optimizer step",
        "With gradient accumulation, run all micro-batches but the last under "
        "model.no_sync(): one all-reduce per optimizer step instead of one per micro-batch.",
    ),
    "static-shapes": (
        "Keep input shapes static",
        "Give the op one shape: a preallocated maximum-length KV cache with a mask, fixed-length "
        "padded batches; for torch.compile, mark the varying dimension dynamic instead of "
        "recompiling for every length. cuDNN/cuBLAS plans, autotuning and compiled graphs are "
        "then built once and reused.",
    ),
    "shape-bucketing": (
        "Bucket the varying length",
        "Round the varying length up to a few buckets (multiples of 64 or 128, or powers of two) "
        "and pad: one plan or compiled graph per bucket, built once, reused after.",
    ),
    "fix-graph-break": (
        "Remove the graph break",
        "Rewrite the line dynamo broke the graph at so it stays traceable: keep data-dependent "
        "checks on the device (torch.where, torch._check) instead of .item() or a Python if "
        "on a tensor, move print/logging out of the compiled function, or set "
        "torch._dynamo.config.capture_scalar_outputs = True. One graph per step then runs "
        "without eager code and graph entries between graphs.",
    ),
    "mark-dynamic": (
        "Mark the changing dimension dynamic",
        "torch._dynamo.mark_dynamic(x, dim) (or torch.compile(dynamic=True)) compiles one graph "
        "that takes every size of that dimension, instead of a recompile per new size until the "
        "recompile limit makes dynamo fall back to eager.",
    ),
    "fullgraph": (
        "Compile with fullgraph=True",
        "torch.compile(model, fullgraph=True) raises at the first graph break, with its reason and "
        "line, instead of silently splitting the step into graphs with eager code between them; "
        "torch._dynamo.explain(model)(x) lists every break at once.",
    ),
    "channels-last": (
        "Put convolutions in channels_last (NHWC)",
        "model.to(memory_format=torch.channels_last) and the input "
        "x.contiguous(memory_format=torch.channels_last): cuDNN then runs its NHWC convolution "
        "kernels directly, without converting layouts around every convolution.",
    ),
    "fused-optimizer": (
        "Use a fused (or foreach) optimizer",
        "torch.optim.AdamW(params, fused=True) updates all parameters in a few fused kernels "
        "(foreach=True in a few multi-tensor kernels) instead of ~10 small kernels per parameter "
        "tensor; zero_grad(set_to_none=True) and clip_grad_norm_(..., foreach=True) likewise.",
    ),
    "balance-ranks": (
        "Balance the work across ranks",
        "Give every rank the same work per step: equal-sized shards and batches (a "
        "DistributedSampler with drop_last, length-bucketed batches for variable-length "
        "data), no rank-only work (logging, evaluation, checkpointing on rank 0) inside the "
        "step, and the same GPU clocks and placement for every rank; every collective waits "
        "for the slowest rank.",
    ),
}


# The rule whose own subject a fix is, for the fixes a finding names as a prerequisite of its next one: the
# finding that prices the change (rulebook/engine.py `builds_on`). A finding whose lead prerequisite is its own
# subject (transfer's "pinned-memory, then non-blocking-copies") builds on no other finding for it.
SUBJECT_OF: dict[str, str] = {
    "remove-sync": "sync-stall",
    "fused-optimizer": "optimizer-step",
    "pinned-memory": "transfer",
    "non-blocking-copies": "transfer",
    "static-shapes": "dynamic-shapes",
}


def fix(
    fix_id: str, code: str = "", how: str | None = None, prerequisite: bool = False, title: str | None = None
) -> Fix:
    """A Fix from the catalogue, optionally with a case-specific code example, explanation or title
    (the form of the fix this case needs); `prerequisite`: the next fix of the finding needs this one first."""
    default_title, default_how = CATALOGUE[fix_id]
    return Fix(id=fix_id, title=title or default_title, how=how or default_how, code=code, prerequisite=prerequisite)


def capturable_fix(name: str) -> Fix:
    """fused-optimizer in the form a CUDA graph needs first: the optimizer class found built with
    capturable=True (a prerequisite of the graph)."""
    cls = name if name in ("Adam", "AdamW", "SGD", "Adagrad") else "AdamW"
    return fix(
        "fused-optimizer",
        code=(
            "# step counters and bias corrections stay on the GPU: a CUDA graph can capture opt.step()\n"
            f"opt = torch.optim.{cls}(model.parameters(), lr=lr, capturable=True)  # or fused=True, capturable=True"
        ),
        prerequisite=True,
        title="Make the optimizer capturable (capturable=True)",
        how=(
            f"torch.optim.{name}(params, capturable=True) (or fused=True, capturable=True) keeps the step "
            "counters and bias corrections on the GPU, so a CUDA graph can capture the optimizer's step; "
            "without it PyTorch refuses the capture."
        ),
    )


# a DataLoader whose batches are pinned, for the fixes that start there (transfer, launch-overhead's copy wait)
PINNED_LOADER_CODE = "loader = DataLoader(dataset, batch_size=128, num_workers=4, pin_memory=True)"

WHOLE_STEP_HOW = (
    'The compiled code already replays CUDA graphs (mode="reduce-overhead"), but every call still runs its '
    "guard checks, wrappers and the graph tree's bookkeeping in Python. Capture the whole step once with "
    "torch.cuda.CUDAGraph (static input buffers, fixed shapes) and replay that: none of it runs per step."
)


WHOLE_STEP_CODE = (
    "# one graph for the whole compiled step: no guards, wrappers or tree bookkeeping per call\n"
    "static_x = x.clone()                       # inputs live in fixed buffers\n"
    "side = torch.cuda.Stream()\n"
    "side.wait_stream(torch.cuda.current_stream())\n"
    "with torch.cuda.stream(side):\n"
    "    for _ in range(3):\n"
    "        step(static_x)                     # warm up (compiles) off the capture\n"
    "torch.cuda.current_stream().wait_stream(side)\n"
    "graph = torch.cuda.CUDAGraph()\n"
    "with torch.cuda.graph(graph):\n"
    "    out = step(static_x)\n"
    "# each step: static_x.copy_(next_x); graph.replay()"
)


def whole_step_graph_fix(replays: bool) -> Fix:
    """cuda-graphs as one hand-captured graph of a whole compiled step (what its compiled call's own Python, around
    the graphs, costs); `replays`: the compiled code already replays CUDA graphs (mode="reduce-overhead"), which the
    fix then says instead of recommending that mode."""
    return fix("cuda-graphs", code=WHOLE_STEP_CODE, how=WHOLE_STEP_HOW if replays else None)


def optimizer_code(name: str) -> str:
    """The fix as code, for the optimizer class found."""
    cls = name if name in ("Adam", "AdamW", "SGD", "Adagrad") else "AdamW"
    return (
        f"opt = torch.optim.{cls}(model.parameters(), lr=lr, fused=True)  # or foreach=True\n"
        "...\n"
        "opt.zero_grad(set_to_none=True)\n"
        "loss.backward()\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)  # if you clip\n"
        "opt.step()"
    )
