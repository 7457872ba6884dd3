"""What a collective is, said once: every module that asks "is this communication" asks here.

A GPU kernel is collective communication when its library says so by name: NCCL's
`ncclKernel_*` / `ncclDevKernel_*`, RCCL's (which keeps NCCL's names, or `rccl…`), MSCCL's
`mscclKernel_*`; or when the kernel itself exchanges data between GPUs and is named after the
collective (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`, `sendrecv`: the symmetric
memory and custom all-reduce kernels of PyTorch, vLLM and TensorRT-LLM). Inductor's `triton_*`
kernels are never communication, whatever their names: `triton_poi_fused_all_reduce_0` copies a
buffer in or out of a functional collective; it exchanges nothing.

A CPU op is a collective when it issues one: `c10d::allreduce_`, `nccl:all_reduce`,
`record_param_comms`, `ProcessGroupNCCL…`, torch.distributed's Python entry points; not the
ops that copy a buffer in or out of one (FSDP's `fsdp::all_gather_copy_in`): their kernels are
copies on the compute stream.

The *kind* of a collective (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll,
SendRecv, Send, Recv) comes from the same names, spelt the way NCCL spells them.
"""

from __future__ import annotations

import functools
import re

# the torch.distributed functions that are collectives (what the capture's arrival recorder wraps)
TORCH_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "reduce",
    "barrier",
)
_LIBRARY = re.compile(r"nccl|rccl|msccl", re.IGNORECASE)
_NAMED = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv", re.IGNORECASE)
_COMPILED = re.compile(r"^triton_")
_OP = re.compile(
    r"nccl|rccl|msccl|c10d|record_param_comms|ProcessGroup|all_?reduce|all_?gather|reduce_?scatter|"
    r"all_?to_?all|broadcast|barrier",
    re.IGNORECASE,
)
_COPY = re.compile(r"copy_in|copy_out", re.IGNORECASE)
_KINDS = (
    ("AllReduce", re.compile(r"all_?reduce", re.IGNORECASE)),
    ("AllGather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("ReduceScatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("AllToAll", re.compile(r"all_?to_?all", re.IGNORECASE)),
    ("Broadcast", re.compile(r"broadcast", re.IGNORECASE)),
    ("SendRecv", re.compile(r"sendrecv", re.IGNORECASE)),
    ("Send", re.compile(r"(?<![a-z])send|_send", re.IGNORECASE)),
    ("Recv", re.compile(r"recv", re.IGNORECASE)),
    ("Reduce", re.compile(r"reduce", re.IGNORECASE)),
)


@functools.lru_cache(maxsize=8192)
def is_collective_kernel(name) -> bool:
    """Whether a GPU kernel's name says it is collective communication (module docstring)."""
    if not isinstance(name, str) or _COMPILED.match(name):
        return False
    return bool(_LIBRARY.search(name) or _NAMED.search(name))


@functools.lru_cache(maxsize=8192)
def is_collective_op(name) -> bool:
    """Whether a CPU op's name says it issues a collective."""
    return isinstance(name, str) and not _COMPILED.match(name) and bool(_OP.search(name)) and not _COPY.search(name)


@functools.lru_cache(maxsize=8192)
def collective_kind(name) -> str | None:
    """The collective a kernel runs (AllReduce, AllGather, …), None when it is none or does not say."""
    if not is_collective_kernel(name):
        return None
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return None


def collective_key(group, seq: int, name, sizes) -> str:
    """What identifies one collective instance across ranks: its process group, its sequence number in
    that group, its kind (`collective_kind`, else the kernel's name without its arguments) and its
    message sizes (the launching op's input dims). Every rank issues the same collectives of a group
    in the same order with the same sizes, whatever its clock says."""
    kind = collective_kind(name) or str(name).split("(")[0]
    sizes = "" if sizes is None else str(sizes).replace(", []", "")
    return f"{group}|{seq}|{kind}|{sizes}"
