"""Fixes that `--verify` applies by changing what the step's closure holds: the memory layout of its
modules and image tensors (channels-last), the implementation of its optimizers (fused, foreach,
capturable); and one that changes a library call: transformers' generate() with a static KV cache.

The step is the zero-argument callable a factory returned; what it computes with lives in its
closure cells (and in the closures of callables it holds, a few levels down). These functions find
the modules, tensors and optimizers there and change them in place before the step first runs, so
the step's own code runs unchanged with the fix applied. Nothing found to change is NotApplicable:
the fix then needs a change in the code.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Iterator

MAX_DEPTH = 3


class NotApplicable(Exception):
    """The fix cannot be applied from outside this step: what it acts on is not there."""


class AlreadyApplied(Exception):
    """The step already has the fix: applying it would change nothing, so nothing is timed."""


def closure_cells(fn, depth: int = 0, seen: set | None = None) -> Iterator:
    """Each closure cell of `fn` (following functools.partial, bound methods and __wrapped__) and of the
    plain functions it holds, up to MAX_DEPTH levels down."""
    seen = set() if seen is None else seen
    while fn is not None and id(fn) not in seen and depth <= MAX_DEPTH:
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            yield cell
            if callable(value) and hasattr(value, "__code__"):
                yield from closure_cells(value, depth + 1, seen)
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)


def _values(step, kind) -> list:
    found, ids = [], set()
    for cell in closure_cells(step):
        value = cell.cell_contents
        if isinstance(value, kind) and id(value) not in ids:
            ids.add(id(value))
            found.append(value)
    return found


def apply_channels_last(torch, step) -> str:
    """Put every module of the step that holds a 2-D convolution, and every 4-D floating tensor its
    closure holds, in torch.channels_last (values unchanged; parameters keep their identity, so an
    optimizer built over them still updates them). Returns what was changed."""
    modules = [
        m for m in _values(step, torch.nn.Module) if any(isinstance(sub, torch.nn.Conv2d) for sub in m.modules())
    ]
    if not modules:
        raise NotApplicable("the step's closure holds no module with a Conv2d to put in channels_last")
    for module in modules:
        module.to(memory_format=torch.channels_last)
    tensors = 0
    for cell in closure_cells(step):
        value = cell.cell_contents
        if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
            cell.cell_contents = value.contiguous(memory_format=torch.channels_last)
            tensors += 1
    convs = sum(isinstance(sub, torch.nn.Conv2d) for m in modules for sub in m.modules())
    return f"{len(modules)} module(s) with {convs} Conv2d and {tensors} 4-D input tensor(s) put in torch.channels_last"


def apply_optimizer(torch, step, impl: str) -> str:
    """Switch every optimizer the step's closure holds to `impl` ("fused", "foreach", or "capturable":
    its own implementation with step counters on the GPU, which a CUDA graph can capture) for its next
    steps; existing state is kept (a fused or capturable step counter moves to the parameter's device).
    Returns what was changed; AlreadyApplied when every optimizer already runs `impl` (foreach=None runs
    what PyTorch picks for its parameters: foreach on CUDA), since timing an unchanged step measures drift."""
    optimizers = _values(step, torch.optim.Optimizer)
    if not optimizers:
        raise NotApplicable("the step's closure holds no torch.optim optimizer")
    changed, already = [], []
    for opt in optimizers:
        name = type(opt).__name__
        if impl not in opt.defaults:
            raise NotApplicable(f"{name} has no {impl}=True implementation in this PyTorch")
        if any(group.get("differentiable") for group in opt.param_groups):
            raise NotApplicable(f"{name} is differentiable=True, which {impl} does not support")
        befores = [running_implementation(torch, group) for group in opt.param_groups]
        if impl == "capturable":  # keeps its implementation; step counters and math stay on the GPU
            befores = [b + (", capturable" if g.get("capturable") else "") for b, g in zip(befores, opt.param_groups)]
        elif all(b.split(" ")[0] == impl for b in befores):
            already.append(f"{name} ({befores[0]})")
            continue
        for group in opt.param_groups:
            if impl == "capturable":
                group["capturable"] = True
            else:
                group["fused"] = impl == "fused" if "fused" in group else None
                group["foreach"] = impl == "foreach"
        if impl in ("fused", "capturable"):
            opt._step_supports_amp_scaling = True  # as a fused optimizer's constructor sets it
            _counters_to_device(torch, opt)
        before = befores[0] if len(set(befores)) == 1 else ", ".join(sorted(set(befores)))
        changed.append(f"{name} ({before} → {'capturable=True' if impl == 'capturable' else impl})")
    if not changed:
        raise AlreadyApplied(f"{', '.join(already)} already runs {impl}: the step has this fix")
    return ", ".join(changed + [f"{a}: already {impl}" for a in already])


def running_implementation(torch, group: dict) -> str:
    """The implementation a param group's next step runs: "fused", "foreach" or "single-tensor", with
    "(PyTorch's default)" where the group leaves it to PyTorch (foreach=None, fused not set)."""
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is not None:
        return "foreach" if group["foreach"] else "single-tensor"
    module = sys.modules.get("torch.optim.optimizer")  # imported with torch.optim; not an attribute of it
    pick = getattr(module, "_default_to_fused_or_foreach", None)
    if pick is None:
        return "single-tensor"
    params = [p for p in group["params"] if isinstance(p, torch.Tensor)]
    try:
        _, foreach = pick(params, bool(group.get("differentiable")), use_fused=False)
    except (TypeError, RuntimeError):  # another PyTorch's signature: assume the loop, as before defaults changed
        return "single-tensor"
    return f"{'foreach' if foreach else 'single-tensor'} (PyTorch's default)"


def _counters_to_device(torch, opt) -> None:
    """A fused or capturable step keeps its step counter on the parameter's device; state made before the switch
    holds it on the CPU."""
    for param, state in opt.state.items():
        count = state.get("step") if isinstance(state, dict) else None
        if isinstance(count, torch.Tensor) and count.device != param.device:
            state["step"] = count.to(param.device, torch.float32)


@contextlib.contextmanager
def static_cache_generate(calls: list):
    """transformers' `generate()` with `cache_implementation="static"` for every call made inside: a
    preallocated KV cache of fixed shapes, whose decoding forward transformers compiles (CUDA graphs).
    Each call is counted in `calls` (one element). NotApplicable without transformers."""
    try:
        from transformers.generation.utils import GenerationMixin
    except Exception as exc:  # not installed, or broken beside this torch
        raise NotApplicable(f"transformers is not importable here ({type(exc).__name__})") from None
    original = GenerationMixin.generate

    @functools.wraps(original)
    def generate(self, *args, **kwargs):
        calls[0] += 1
        if kwargs.get("past_key_values") is None:
            kwargs["cache_implementation"] = "static"
        return original(self, *args, **kwargs)

    GenerationMixin.generate = generate
    try:
        yield
    finally:
        GenerationMixin.generate = original
