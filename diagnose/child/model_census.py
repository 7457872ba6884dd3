"""What the workload was built from, read in the capture child once its steps are done: the models it
holds (their classes, parameter and buffer bytes on the GPU) and the ML libraries it loaded, with versions.

The analysis reads them from meta.json: the weights' bytes let decode-latency judge a CUDA-graph-replayed
decode (whose trace carries no shapes) from the step time alone, and the libraries let a fix be written in
the API the step runs under (transformers Trainer, Lightning, ...). Pure reading: nothing the workload
holds is changed.
"""

from __future__ import annotations

import gc
import sys

LIBRARIES = (
    "transformers",
    "lightning",
    "pytorch_lightning",
    "accelerate",
    "timm",
    "torchvision",
    "diffusers",
    "peft",
    "deepspeed",
    "vllm",
)
MAX_MODELS = 8


def libraries() -> dict[str, str]:
    """{library: version} for each of LIBRARIES the workload imported."""
    found = {}
    for name in LIBRARIES:
        module = sys.modules.get(name)
        if module is not None:
            found[name] = str(getattr(module, "__version__", "") or "")
    return found


def models(torch, objects: list) -> dict:
    """The outermost nn.Modules among `objects` (gc.get_objects()) and the bytes of the parameters and buffers they
    hold on the GPU (on the CPU when no GPU is visible), each tensor counted once however many modules
    share it."""
    on_gpu = torch.cuda.is_available()
    modules = [o for o in objects if isinstance(o, torch.nn.Module)]
    children = {id(child) for m in modules for child in m.children()}
    roots = [m for m in modules if id(m) not in children]
    seen: set[int] = set()
    held = {"parameter": 0, "buffer": 0}  # bytes of each kind
    parameters = 0
    dtypes: dict[str, int] = {}
    found: list[dict[str, str | int]] = []
    for root in roots:
        own = 0
        for kind, tensors in (("parameter", root.parameters()), ("buffer", root.buffers())):
            for tensor in tensors:
                if tensor.is_cuda != on_gpu or id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                size = tensor.numel() * tensor.element_size()
                held[kind] += size
                own += size
                if kind == "parameter":
                    parameters += 1
                    dtype = str(tensor.dtype).removeprefix("torch.")
                    dtypes[dtype] = dtypes.get(dtype, 0) + size
        if own:
            found.append({"class": type(root).__name__, "module": type(root).__module__, "bytes": own})
    return {
        "device": "cuda" if on_gpu else "cpu",
        "parameter_bytes": held["parameter"],
        "buffer_bytes": held["buffer"],
        "parameters": parameters,
        "dtypes": dtypes,
        "models": sorted(found, key=lambda m: -int(m["bytes"]))[:MAX_MODELS],
    }


def live_tensors(torch, objects: list) -> dict:
    """Bytes of the distinct storages of every tensor among `objects` (gc.get_objects()) on the GPU (the CPU when none is visible), and
    the allocator's current total: what a step that holds its weights outside any nn.Module (raw tensors, a
    CUDA graph's captured inputs) keeps resident."""
    on_gpu = torch.cuda.is_available()
    storages: dict[int, tuple[int, str]] = {}
    for obj in objects:
        if not isinstance(obj, torch.Tensor) or obj.is_cuda != on_gpu or obj.is_meta:
            continue
        try:
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = (storage.nbytes(), str(obj.dtype).removeprefix("torch."))
        except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
            continue
    dtypes: dict[str, int] = {}
    for size, dtype in storages.values():
        dtypes[dtype] = dtypes.get(dtype, 0) + size
    out = {
        "tensor_bytes": sum(size for size, _ in storages.values()),
        "tensors": len(storages),
        "tensor_dtypes": dtypes,
    }
    if on_gpu:
        out["allocated_bytes"] = torch.cuda.memory_allocated()
    return out


def census(torch) -> dict:
    """The meta.json `workload` record: libraries and models (a failure to read them is recorded, not raised)."""
    record: dict = {"libraries": libraries()}
    try:
        objects = gc.get_objects()  # one scan of the process for both
        record.update(models(torch, objects))
        record.update(live_tensors(torch, objects))
    except Exception as exc:  # an exotic object in gc must not fail the capture
        record["error"] = f"{type(exc).__name__}: {exc}"
    return record
