"""The verify child: apply one fix to the step from outside the user's code, time it, check its outputs.

Run as `python -m diagnose.child.verify SPEC.json` (one process per fix, so a fix that crashes,
runs out of memory or wedges the CUDA context takes nothing else down). The spec is a CaptureSpec
(diagnose/capture/spec.py, function mode) plus `variant`, `baseline` and `compile_backend`.

In that process, for `variant`:

1. *baseline* (unless `baseline` is false: a process-level fix such as expandable segments, whose
   baseline is the diagnosis's own capture): seed, build the step from NAME(**params), call it
   `compare_after(variant)` times (once for a fix that keeps the calls as they are, five for a CUDA
   graph, which warms, captures and replays) and keep a snapshot of its outputs (the return value of the last call and
   every tensor the step's closure holds: module parameters and buffers, caches, the token it
   writes), warm up, time it.
2. *fixed*: seed, build a fresh step the same way, wrap it (`wrap`), call it as many times,
   snapshot and compare with the baseline (`compare`), warm up, time it, profile `steps` steps.

Timing is the baseline's (capture.py): synchronised after each step, at least `MIN_TIMED_STEPS`
steps (or --timed-steps, if more), and more in chunks while the 95 % interval of the median is
wider than `WIDE_INTERVAL` of it, up to `MAX_TIMED_STEPS` steps or `MAX_TIMING_S` seconds.

A DataLoader fix (`dataloader-workers`) applies where the step's closure holds a map-style
DataLoader or an iterator over one: both the baseline and the fixed step get it rebuilt with a
seeded sampler (the same sample order on both sides), the baseline with its own worker count and
pinning, the fixed step with LOADER_WORKERS persistent workers and pinned memory. Anything else
(an iterable dataset, a custom sampler, batches made in the step itself) "needs a code change".

Script (or module) mode: the script runs again as __main__ with the fix around the whole run (a
setting of the process or a context entered before it starts), its steps found and timed by the same
hooks as the capture (diagnose/child/steps.py); the baseline is the capture's own unprofiled steps,
and the outputs are not compared (a script's tensors are out of reach: function mode compares them).
Only SCRIPT_VARIANTS apply that way.

Numerics (diagnose/child/compare.py): each tensor is compared in the baseline's dtype with
torch.testing.assert_close; a fix that computes at a lower precision (`fix_precision`: TF32 for tf32
and for channels-last convolutions under cuDNN's default TF32, bf16 for autocast) is judged at that
precision's tolerance and reported with its relative error; beyond it, it "changes results".
Integer and bool tensors (token ids) must match exactly.

channels-last, fused-optimizer and foreach-optimizer change what the step's closure holds
(diagnose/child/rewrite.py): its conv modules and image tensors, its optimizers.

w4a16 and fp8 quantize the step's weights (diagnose/child/quantize.py): a TorchFunctionMode is
entered around the fixed step's build (so a CUDA graph its factory captures records the quantized
kernels) and around each of its calls, and runs F.linear / matmul by a weight on a quantized copy
of it. The outputs are judged against the weights' own rounding (`quantize.error_bound`, the
largest normwise error of a quantized weight × 2): "within 4-bit weight rounding" up to it.

Writes into the output folder: verify.json (what happened), and for a fix that ran, meta.json and
trace.json.gz of the profiled fixed steps (a capture folder diagnose can load).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from diagnose.base.safe_files import write_new

from diagnose.child.compare import (  # noqa: F401 (TOLERANCES, tolerance re-exported)
    CHANGES,
    TOLERANCES,
    compare,
    relative_differences,
    tolerance,
)
from diagnose.child.capture import CaptureSession, is_out_of_memory, load_function, memory_summary
from diagnose.capture.meta import VerifyRecord
from diagnose.child.quantize import KINDS as WEIGHT_KINDS, Quantizer, weight_quantizer
from diagnose.child.rewrite import (
    AlreadyApplied,
    NotApplicable,
    apply_channels_last,
    apply_optimizer,
    static_cache_generate,
)
from diagnose.capture.spec import CaptureSpec
from diagnose.child.steps import EnoughSteps
from diagnose.vocabulary.markers import step_label, warmup_label

VERIFY_SCHEMA = "diagnose.verify/1"
SEED = 0
COMPARE_AFTER = 5  # calls before the outputs are compared: a CUDA graph has warmed, captured and replayed by then
# Variants that change no call's structure are compared after one call: one update from the same state,
# as a precision-trading fix is judged (loss, logits, parameters after an update). Over several training
# steps two runs that round differently drift apart by the training's own dynamics, not the fix's error.
COMPARE_AFTER_ONE = frozenset(
    {"tf32", "autocast-bf16", "channels-last", "fused-optimizer", "foreach-optimizer", "sdpa-flash"}
)


def compare_after(variant: str) -> int:
    """Calls of the step before its outputs are compared, for `variant`."""
    return 1 if variant in COMPARE_AFTER_ONE else COMPARE_AFTER


GRAPH_WARMUP_CALLS = 3  # eager calls on a side stream before a CUDA graph is captured
MIN_TIMED_STEPS = 20
MAX_TIMED_STEPS = 200
MAX_TIMING_S = 60.0
WIDE_INTERVAL = 0.05  # half-width of the median's 95 % interval, as a share of the median
CHUNK = 20
Z95 = 1.959964

VARIANTS = (
    "cuda-graph",
    "reduce-overhead",
    "compile",
    "max-autotune",
    "tf32",
    "autocast-bf16",
    "sdpa-flash",
    "expandable-segments",
    "dataloader-workers",
    "channels-last",
    "fused-optimizer",
    "foreach-optimizer",
    "capturable-cuda-graph",
    "static-cache",
    "w4a16",
    "fp8",
)
LOADER_VARIANTS = ("dataloader-workers",)
SCRIPT_VARIANTS = ("tf32", "autocast-bf16", "sdpa-flash", "expandable-segments", "static-cache", "w4a16", "fp8")
"""What applies to a script or module run as a whole: a process setting or a context around the run (the
weight quantizers' function mode is one: entered before the script runs, it quantizes each weight the
first time it is multiplied by, outside a graph capture)."""
LOADER_WORKERS = max(2, min(8, (os.cpu_count() or 2) // 2))


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free 95 % interval of the median from order statistics."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan
    med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    half = Z95 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return med, xs[lo], xs[hi]


def is_wide(values: list[float]) -> bool:
    """True when the median's interval is wider than WIDE_INTERVAL of it on either side."""
    med, lo, hi = median_interval(values)
    return med > 0 and max(med - lo, hi - med) > WIDE_INTERVAL * med


class VerifySession(CaptureSession):
    """One fix, in its own process: baseline, fixed step, comparison, timing, one profile."""

    def __init__(self, spec: CaptureSpec, variant: str, baseline: bool = True, compile_backend: str = ""):
        super().__init__(spec)
        self.variant, self.with_baseline, self.compile_backend = variant, baseline, compile_backend
        self.meta["verify"] = {"variant": variant}
        self.result: VerifyRecord = {
            "schema": VERIFY_SCHEMA,
            "variant": variant,
            "status": "running",
            "phase": "start",
            "error": None,
            "baseline_us": [],
            "fixed_us": [],
            "numerics": None,
            "notes": [],
        }
        self._restore: list[Callable[[], None]] = []
        self.generate_calls = [0]  # static-cache: generate() calls the fix reached
        # w4a16 / fp8: the function mode that quantizes the fixed step's weights
        self.quantizer: Quantizer | None = None

    # -- bookkeeping -------------------------------------------------------------------------
    def write_result(self) -> None:
        """Write verify.json atomically."""
        write_new(self.out / "verify.json", json.dumps(self.result, indent=2, default=str).encode())

    def build(self, around=None):
        """A fresh step from the factory, with the same seed each time (inside the context `around`, if any:
        a weight quantizer, which a graph captured by the factory then records)."""
        self.torch.manual_seed(SEED)
        factory = load_function(self.spec.path, self.spec.function)
        with around if around is not None else contextlib.nullcontext():
            step = factory(**self.spec.params)
        if not callable(step):
            raise TypeError(f"{self.spec.function}(**params) must return a zero-argument callable")
        return step

    def time_steps(self, step) -> list[float]:
        """Per-step seconds, synchronised after each, as the baseline is timed (more while wide)."""
        n = max(MIN_TIMED_STEPS, self.spec.timed_steps)
        times: list[float] = []
        started = time.perf_counter()
        while True:
            for _ in range(n - len(times)):
                t0 = time.perf_counter()
                step()
                self.sync()
                times.append(time.perf_counter() - t0)
            if not is_wide(times) or len(times) >= MAX_TIMED_STEPS or time.perf_counter() - started > MAX_TIMING_S:
                return times
            n = min(MAX_TIMED_STEPS, len(times) + CHUNK)

    def run_calls(self, step, calls: int):
        """Call the step `calls` times; the last return value."""
        out = None
        for _ in range(calls):
            out = step()
        self.sync()
        return out

    # -- the fix -----------------------------------------------------------------------------
    def prepare(self, step, fixed: bool) -> None:
        """Changes made inside the step's closure before it runs (the DataLoader fixes), on both sides."""
        if self.variant not in LOADER_VARIANTS:
            return
        cells = list(loader_cells(step))
        if not cells:
            raise NotApplicable("the step holds no DataLoader (or iterator over one) that diagnose can rebuild")
        for cell, source, is_iterator in cells:
            workers, pin = (
                (LOADER_WORKERS, self.torch.cuda.is_available())
                if fixed
                else (_loader_attr(source, "num_workers"), _loader_attr(source, "pin_memory"))
            )
            loader = rebuild_loader(self.torch, source, workers, bool(pin))
            cell.cell_contents = iter(loader) if is_iterator else loader
        if fixed:
            self.result["notes"].append(
                f"DataLoader rebuilt with {LOADER_WORKERS} persistent workers and pinned "
                "memory; both sides use the same seeded sampler"
            )

    def wrap(self, step):
        """The step with the fix applied from outside (a new callable; the step itself is unchanged)."""
        torch, v = self.torch, self.variant
        if v == "cuda-graph":
            return cuda_graph_step(torch, step)
        if v == "capturable-cuda-graph":
            self.result["notes"].append(apply_optimizer(torch, step, "capturable"))
            return cuda_graph_step(torch, step)
        if v == "static-cache":
            calls = self.generate_calls

            def static_cache_step():
                with static_cache_generate(calls):
                    return step()

            return static_cache_step
        if v in ("compile", "max-autotune", "reduce-overhead"):
            mode = {"compile": None, "max-autotune": "max-autotune", "reduce-overhead": "reduce-overhead"}[v]
            kwargs = {"mode": mode} if mode else {}
            if self.compile_backend:
                kwargs["backend"] = self.compile_backend
            return torch.compile(step, **kwargs)
        if v == "tf32":
            before = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision("high")
            self._restore.append(lambda: torch.set_float32_matmul_precision(before))
            return step
        if v == "autocast-bf16":
            device = "cuda" if torch.cuda.is_available() else "cpu"

            def autocast_step():
                with torch.autocast(device_type=device, dtype=torch.bfloat16):
                    return step()

            return autocast_step
        if v == "sdpa-flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def flash_step():
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return step()

            return flash_step
        if v in LOADER_VARIANTS:
            return step
        if v in WEIGHT_KINDS:
            mode = self.quantizer

            def quantized_step():
                with mode:
                    return step()

            return quantized_step
        if v == "channels-last":
            self.result["notes"].append(apply_channels_last(torch, step))
            return step
        if v in ("fused-optimizer", "foreach-optimizer"):
            self.result["notes"].append(apply_optimizer(torch, step, v.split("-")[0]))
            return step
        if v == "expandable-segments":
            conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
            if "expandable_segments:True" not in conf:
                raise RuntimeError("PYTORCH_CUDA_ALLOC_CONF does not hold expandable_segments:True")
            return step
        raise ValueError(f"unknown fix variant {v!r} (known: {', '.join(VARIANTS)})")

    def run_to_run(self, reference: dict) -> dict:
        """How much the baseline differs from itself: a second baseline from the same seed, run as far as
        the first, and each floating tensor's normwise relative difference (nondeterministic kernels:
        atomics in a convolution's backward, cuDNN's choice of algorithm)."""
        self.progress("verify-baseline")
        step = self.build()
        self.prepare(step, fixed=False)
        again = snapshot(self.torch, step, self.run_calls(step, compare_after(self.variant)))
        del step
        self.free()
        return relative_differences(reference, again)

    def check_quantized(self) -> None:
        """w4a16 / fp8: NotApplicable when no weight was quantized; the note says what was."""
        if self.quantizer is None:
            return
        self.quantizer.check()
        self.result["notes"].append(self.quantizer.note())

    def check_generate_called(self) -> None:
        """static-cache acts on transformers' generate(): a run that never called it was not fixed."""
        if self.variant == "static-cache" and not self.generate_calls[0]:
            raise NotApplicable("the step never called transformers' generate()")
        if self.variant == "static-cache":
            self.result["notes"].append(
                f'{self.generate_calls[0]} generate() call(s) with cache_implementation="static"'
            )

    # -- driver ------------------------------------------------------------------------------
    def run_verify_script(self) -> None:
        """Script mode: the whole run again with the fix around it, steps timed by the capture's hooks."""
        if self.variant not in SCRIPT_VARIANTS:
            raise NotApplicable(f"{self.variant} needs the step as a function (model.py:NAME returning it)")
        self.result["phase"] = "fixed"
        with contextlib.ExitStack() as stack:
            self.wrap(lambda: None)  # process-wide settings (tf32) take effect; their undo is in _restore
            if self.variant == "autocast-bf16":
                stack.enter_context(
                    self.torch.autocast(
                        device_type="cuda" if self.torch.cuda.is_available() else "cpu", dtype=self.torch.bfloat16
                    )
                )
            elif self.variant == "sdpa-flash":
                from torch.nn.attention import SDPBackend, sdpa_kernel

                stack.enter_context(sdpa_kernel(SDPBackend.FLASH_ATTENTION))
            elif self.variant == "static-cache":
                stack.enter_context(static_cache_generate(self.generate_calls))
            elif self.variant in WEIGHT_KINDS:
                self.quantizer = weight_quantizer(self.torch, WEIGHT_KINDS[self.variant])
                stack.enter_context(self.quantizer)
            try:
                self.run_script()
            except EnoughSteps:
                pass
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise RuntimeError(f"the script exited with status {exc.code}") from None
        self.check_generate_called()
        self.check_quantized()
        self.result["fixed_us"] = list((self.meta.get("timing") or {}).get("unprofiled_step_us") or [])
        self.result["numerics"] = {
            "verdict": "not compared",
            "tensors": 0,
            "detail": "script mode: the script's tensors are out of reach; function "
            "mode (model.py:NAME) compares outputs",
        }
        self.result["status"] = "ok"
        self.result["phase"] = "done"

    def run_verify(self) -> None:
        """Baseline, then the fixed step: compare, time, profile."""
        if self.spec.mode != "function":
            self.run_verify_script()
            return
        torch = self.torch
        reference = None
        if self.with_baseline:
            self.result["phase"] = "baseline"
            self.progress("verify-baseline")
            step = self.build()
            self.prepare(step, fixed=False)
            reference = snapshot(torch, step, self.run_calls(step, compare_after(self.variant)))
            self.run_calls(step, self.spec.warmup)
            self.result["baseline_us"] = [round(t * 1e6, 3) for t in self.time_steps(step)]
            del step
            self.free()
        self.result["phase"] = "apply"
        self.progress("verify-apply")
        if self.variant in WEIGHT_KINDS:
            self.quantizer = weight_quantizer(torch, WEIGHT_KINDS[self.variant])
        base = self.build(self.quantizer)
        self.prepare(base, fixed=True)
        fixed = self.wrap(base)
        self.result["phase"] = "fixed"
        out = self.run_calls(fixed, compare_after(self.variant))
        self.check_generate_called()
        self.check_quantized()
        judged, numerics, precision = None, None, fix_precision(torch, self.variant)
        weight_error = self.quantizer.weight_error() if self.quantizer is not None else None
        if reference is not None:
            judged = snapshot(torch, base, out)
            self.result["numerics"] = numerics = compare(torch, reference, judged, precision, weight_error=weight_error)
        del out
        self.run_calls(fixed, self.spec.warmup)
        self.progress("verify-timing")
        times = self.time_steps(fixed)
        self.result["fixed_us"] = [round(t * 1e6, 3) for t in times]
        self.record_timing(
            times,
            f"{len(times)} steps of the fixed step ({self.variant}) without the profiler, synchronised after each step",
        )
        self.result["phase"] = "profile"
        self.progress("verify-profile")
        self.meta["steps"]["how"] = f"each call of the step with the fix {self.variant} applied"
        self.start_profiler()
        with self.step_range(warmup_label(0)):
            fixed()
        for i in range(self.spec.steps):
            with self.step_range(step_label(i)):
                fixed()
            self.meta["steps"]["profiled"] = i + 1
        self.sync()
        self.stop_profiler()
        if reference is not None and judged is not None and numerics is not None and numerics.get("verdict") == CHANGES:
            # Only a fix that changes results needs the baseline's own variation to be judged by, and
            # only once the fixed step is gone: two copies of a large model need not fit at once.
            del fixed, base
            self.quantizer = None  # its quantized copies go with the fixed step
            self.free()
            self.undo_settings()  # the second baseline runs as the first did: without the fix's settings
            noise = self.run_to_run(reference)
            self.result["numerics"] = compare(torch, reference, judged, precision, noise, weight_error)
        self.result["status"] = "ok"
        self.result["phase"] = "done"

    def undo_settings(self) -> None:
        """Undo the fix's process-wide settings (TF32), once."""
        undo, self._restore = self._restore, []
        for step in undo:
            with contextlib.suppress(Exception):
                step()

    def free(self) -> None:
        """Let the baseline's memory go before the fixed step is built."""
        gc.collect()
        if self.torch.cuda.is_available():
            self.torch.cuda.empty_cache()

    def run(self) -> int:
        """Run the verification; 0 whatever the fix did (its failure is the result), 3 without torch."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.write_result()
        try:
            import torch
        except ImportError:
            self.result["status"] = "failed"
            self.result["error"] = {"type": "ImportError", "message": "torch is not installed"}
            self.write_result()
            return 3
        self.torch = torch
        from diagnose.child.capture import device_info

        self.meta["device"] = device_info(torch)
        try:
            self.run_verify()
            self.meta["status"] = "ok"
        except BaseException as exc:  # the fix's failure is the result, not a crash of diagnose
            kind = (
                "already applied"
                if isinstance(exc, AlreadyApplied)
                else "not applicable"
                if isinstance(exc, NotApplicable)
                else "oom"
                if is_out_of_memory(torch, exc)
                else "failed"
            )
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.result["status"] = kind
            self.result["error"] = {
                "type": type(exc).__name__,
                "message": first[:2000],
                "traceback": traceback.format_exc(limit=-8)[-4000:],
            }
            self.fail(kind, type(exc).__name__, first)
        finally:
            with contextlib.suppress(BaseException):
                self.stop_profiler()
            self.undo_settings()
            self.meta["memory"] = memory_summary(torch)
            self.write_meta()
            self.write_result()
        return 0


def fix_precision(torch, variant: str) -> str | None:
    """The reduced precision a variant computes in (None: the baseline's dtype): TF32 matmuls, bf16
    autocast, channels-last, whose convolutions cuDNN runs in TF32 on both sides when
    torch.backends.cudnn.allow_tf32 is on (PyTorch's default) but with other kernels, and the
    quantized weights of w4a16 (int4) and fp8."""
    if variant in WEIGHT_KINDS:
        return WEIGHT_KINDS[variant]
    if variant == "tf32":
        return "tf32"
    if variant == "autocast-bf16":
        return "bfloat16"
    if variant == "channels-last" and torch.cuda.is_available() and torch.backends.cudnn.allow_tf32:
        return "tf32"
    return None


def cuda_graph_step(torch, step):
    """The step replayed from a torch.cuda.CUDAGraph: the first GRAPH_WARMUP_CALLS calls run eagerly on
    a side stream (one step each), the next captures the step and replays it, every later call replays."""
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA graphs need a CUDA device")
    state = {"calls": 0, "graph": None, "out": None}
    side = torch.cuda.Stream()

    def graphed():
        if state["graph"] is None and state["calls"] < GRAPH_WARMUP_CALLS:
            state["calls"] += 1
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = step()
            torch.cuda.current_stream().wait_stream(side)
            return out
        if state["graph"] is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                state["out"] = step()
            state["graph"] = graph
        state["graph"].replay()
        return state["out"]

    return graphed


def loader_cells(fn, depth: int = 0):
    """(cell, source, is_iterator) for each closure cell of the step (and of callables it holds) that
    holds a DataLoader or an iterator over one."""
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    if code is None or depth > 3:
        return
    for cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, DataLoader):
            yield cell, value, False
        elif isinstance(value, _BaseDataLoaderIter):
            yield cell, value, True
        elif callable(value) and hasattr(value, "__code__") and value is not fn:
            yield from loader_cells(value, depth + 1)


def _loader_attr(source, name: str):
    """A DataLoader setting from the loader or from an iterator over one (which keeps it as `_name`)."""
    return getattr(source, name, getattr(source, f"_{name}", None))


def rebuild_loader(torch, source, workers: int, pin: bool):
    """A new DataLoader over the same dataset, batches and collate function, with a seeded sampler."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler

    dataset = getattr(source, "dataset", getattr(source, "_dataset", None))
    batches = getattr(source, "batch_sampler", getattr(source, "_index_sampler", None))
    collate = getattr(source, "collate_fn", getattr(source, "_collate_fn", None))
    inner = getattr(batches, "sampler", None)
    if dataset is None or not isinstance(batches, BatchSampler) or not hasattr(dataset, "__len__"):
        raise NotApplicable("the DataLoader reads an iterable dataset or has no batch sampler: rebuild it in the code")
    sampler: Sampler[int]
    if isinstance(inner, RandomSampler):
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED))
    elif isinstance(inner, SequentialSampler):
        sampler = SequentialSampler(dataset)
    else:
        raise NotApplicable(f"the DataLoader uses a custom sampler ({type(inner).__name__}): rebuild it in the code")
    return DataLoader(
        dataset,
        batch_sampler=BatchSampler(sampler, batches.batch_size, batches.drop_last),
        collate_fn=collate,
        num_workers=workers,
        pin_memory=pin,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers else None,
    )


def snapshot(torch, step, returned) -> dict:
    """Every tensor the step's outputs reach, by name, copied to the CPU: the return value and the tensors
    (and modules' parameters and buffers) its closure and bound object hold."""
    found: dict = {}
    _collect(torch, "return", returned, found, depth=0)
    for name, value in _closure_items(step):
        _collect(torch, name, value, found, depth=0)
    return found


def _closure_items(fn):
    """(name, value) for the cells of a function's closure (following functools.partial and bound methods)."""
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if hasattr(fn, "__self__") and not isinstance(fn.__self__, type(sys)):
            yield "self", fn.__self__
        code = getattr(fn, "__code__", None)
        cells = getattr(fn, "__closure__", None) or ()
        if code is not None:
            for name, cell in zip(code.co_freevars, cells):
                with contextlib.suppress(ValueError):
                    yield name, cell.cell_contents
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)


def _collect(torch, name: str, value, found: dict, depth: int) -> None:
    if depth > 3 or len(found) > 2000:
        return
    if isinstance(value, torch.Tensor):
        found[name] = value.detach().to("cpu", copy=True)
    elif isinstance(value, torch.nn.Module):
        for key, tensor in value.state_dict(keep_vars=False).items():
            found[f"{name}.{key}"] = tensor.detach().to("cpu", copy=True)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _collect(torch, f"{name}[{i}]", item, found, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect(torch, f"{name}[{key!r}]", item, found, depth + 1)
    elif callable(value) and hasattr(value, "__code__"):
        for inner, item in _closure_items(value):
            _collect(torch, f"{name}.{inner}", item, found, depth + 1)


def main() -> int:
    """Entry point of the verify child."""
    data = json.loads(Path(sys.argv[1]).read_text())
    variant = data.pop("variant")
    baseline = data.pop("baseline", True)
    backend = data.pop("compile_backend", "")
    return VerifySession(CaptureSpec(**data), variant, baseline, backend).run()


if __name__ == "__main__":
    sys.exit(main())
