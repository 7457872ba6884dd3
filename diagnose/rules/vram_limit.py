"""vram-limit: weights, gradients and optimizer state (and activations) do not fit in one GPU's memory.

**Signal.** The run ran out of memory (status "oom", an OOM in the allocator's record), or its
reserved peak reached `max_peak_share` of the memory it may use: the device's total, or the
per-process cap the OOM message states ("12.00 GiB allowed"). What holds the memory comes from
the ops where they were recorded (diagnose/memory/breakdown.py: parameters from the gradients
accumulated into them, one gradient each, the optimizer's state per parameter, the rest
activations; in inference the weights of the linear and embedding layers); when the workload
died before the profiler, from the allocator snapshot taken at the OOM and the traceback (which
phase failed: forward, backward, or the optimizer creating its state). An OOM caused by one
request of at least `single_request_share` of the memory is one huge tensor (quadratic attention
scores, an oversized batch), not weights and state: the rule stays quiet and says so
(attention-memory judges the scores).

**Thresholds.** `max_peak_share` 90 %: above it the next longer batch or sequence fails, and
the allocator's rounding and the CUDA context (≈ 0.5 GB outside PyTorch) take the rest. On the
H200 captures the training step that fits peaks at 25.5 GB reserved of 150 GB (17 %); under a
12 GiB cap it dies creating AdamW's state with 12.69 GB allocated. `single_request_share` 25 %:
the OOMs of the naive attention sweep asked for 64 GiB (46 % of the H200) and 128 GiB (92 %)
in one tensor, the training OOM for 256 MiB (2 % of its cap). `usable_share` 90 % of each GPU
is what the GPU count counts on, for the same reason as `max_peak_share`.

**Fix.** Training: `fsdp2` (`fully_shard` each block: parameters, gradients and optimizer state
split across N GPUs), `activation-checkpointing` (recompute activations in backward: the part
that sharding does not split), `tensor-parallel` (split each matmul across GPUs over NVLink
when a single layer is too large). Inference: `tensor-parallel`, and `gguf-mmap` (4-bit GGUF
weights memory-mapped) on edge devices.

**Estimate.** No speedup: the finding says what fits. With the parts known: sharded = parameters
+ gradients + optimizer state, unsharded = activations; GPUs needed = ⌈sharded ÷ (usable − activations)⌉
(FSDP2 without activation checkpointing). From an OOM snapshot only: at least what was allocated
plus the failed request; when the optimizer was creating its state (traceback through torch/optim),
parameters and gradients were complete and the state was partial, so the full step needs at most
(2 + states per parameter) ÷ 2 × allocated (2× for Adam's two states) plus activations: GPUs
needed between ⌈low ÷ usable⌉ and ⌈high ÷ usable⌉.
"""

from __future__ import annotations

import dataclasses
import math
import re

from diagnose.rulebook.engine import Quiet, Rule, Skip, Threshold, severity_from, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.memory.breakdown import STATES_PER_PARAM
from diagnose.memory.details import breakdown
from diagnose.memory.record import MemoryRecord
from diagnose.memory.units import gb, in_gb, in_size
from diagnose.vocabulary.units import percent

_REQUEST = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_OPTIMIZER_FILE = re.compile(r"torch/optim/(\w+)\.py")


class VramLimit(Rule):
    """Weights + gradients + optimizer state beyond one GPU → FSDP2, activation checkpointing, TP."""

    id = "vram-limit"
    order = 90
    title = "The model does not fit in one GPU's memory"
    cheat_sheet = {
        "bottleneck": "single-GPU VRAM limits",
        "signal": "weights + gradients + optimizer states exceed one GPU's memory",
        "fix": "FSDP2 (training), tensor parallelism (NVLink), Q4_K_M GGUF + mmap (edge)",
        "impact": "fits models from 100B+ on clusters down to a phone",
    }
    needs = ("memory",)
    thresholds = (
        Threshold("max_peak_share", 0.90, "fraction", "fire when the reserved peak reaches this share of the limit"),
        Threshold(
            "single_request_share",
            0.25,
            "fraction",
            "an OOM whose one request is at least this share of the limit is one huge tensor, not weights",
        ),
        Threshold(
            "usable_share", 0.90, "fraction", "share of each GPU's memory counted usable when sizing GPUs", minimum=0.01
        ),
    )

    def check(self, ctx, t):
        """Weigh what the run held against the memory it may use."""
        limit, limit_source = ctx.memory.limit
        if not limit:
            return Skip("the GPU's memory size is unknown (no device record in the capture or the trace)")
        v = _measure(ctx, limit)
        severity = _decide(v, t)
        if isinstance(severity, Quiet):
            return severity
        return _word(self, v, severity, _estimate(v, t), limit_source, t)


_WHY = (
    "Training keeps, per parameter, the weight, its gradient and the optimizer's state (two more "
    "tensors for Adam): 16 bytes per fp32 parameter before any activation. When that exceeds one "
    "GPU, sharding splits it: FSDP2 gives each of N GPUs 1/N of the parameters, gradients and "
    "state and gathers each layer's weights just in time. Activations are not sharded; activation "
    "checkpointing trades their memory for recomputation."
)


@dataclasses.dataclass(frozen=True)
class _Held:
    """What the run held against the memory it may use (what `_measure` found)."""

    record: MemoryRecord
    limit: float  # bytes the run may use
    bd: dict  # the memory breakdown (diagnose/memory/details.py), {} without one
    peak: float  # reserved peak, else allocated peak, bytes
    requested: float  # bytes of the request that failed, 0 without an OOM

    @property
    def share(self) -> float:
        """The peak as a share of the limit."""
        return self.peak / self.limit

    @property
    def traceback(self) -> str:
        """The OOM's traceback, "" without one."""
        return self.record.error.get("traceback") or ""

    @property
    def training(self) -> bool:
        """Whether the run trains: the breakdown says so, or the OOM came from backward or the optimizer."""
        return self.bd.get("kind") == "training" or any(
            k in self.traceback for k in ("backward", "torch/optim", "autograd")
        )


def _measure(ctx, limit: float) -> _Held:
    """The reserved peak, the breakdown of what was held, and the failed request's size."""
    record = ctx.memory
    return _Held(
        record=record,
        limit=limit,
        bd=breakdown(ctx) or {},
        peak=record.peak_reserved or record.peak_allocated or 0.0,
        requested=_requested(record),
    )


def _decide(v: _Held, t: dict[str, float]) -> Severity | Quiet:
    """Quiet when the OOM came from one request of `single_request_share` of the limit or more (one huge
    tensor), or without an OOM below `max_peak_share`; else high with an OOM, medium without."""
    record, limit = v.record, v.limit
    if record.out_of_memory and v.requested >= t["single_request_share"] * limit:
        return Quiet(
            f"the OOM came from one request of {gb(v.requested)} ({percent(v.requested / limit)} of "
            f"{gb(limit)}): one huge tensor, not weights and optimizer state (see attention-memory)"
        )
    if not record.out_of_memory and v.share < t["max_peak_share"]:
        return Quiet(
            f"reserved peak {gb(v.peak)} = {percent(v.share)} of {gb(limit)} < {percent(t['max_peak_share'])}"
            + _parts_text(v.bd)
        )
    return severity_from(bool(record.out_of_memory))


def _estimate(v: _Held, t: dict[str, float]) -> dict:
    """How many GPUs of this size the run needs, within `usable_share` of each: from the breakdown's parts,
    else from the memory snapshot."""
    usable = t["usable_share"] * v.limit
    if v.bd.get("parts"):
        return _sizing_from_parts(v.bd, usable)
    return _sizing_from_snapshot(v.record, v.requested, v.traceback, usable)


def _word(rule: Rule, v: _Held, severity: Severity, sizing: dict, limit_source: str, t: dict[str, float]) -> Finding:
    """The finding: the limit and the peak, the OOM, the sizing; sharding fixes for training, else serving ones."""
    evidence = [
        Evidence("memory limit", in_gb(v.limit), unit="GB"),
        Evidence.share(
            "reserved peak ÷ limit", v.share, ">=" if v.share >= t["max_peak_share"] else "<", t["max_peak_share"]
        ),
    ]
    if v.record.out_of_memory:
        evidence += _oom_evidence(v.record, v.requested, v.traceback)
    training = v.training
    fixes = (
        [
            fix("fsdp2", code=_fsdp_code()),
            fix("activation-checkpointing", code=_checkpoint_code()),
            fix("tensor-parallel"),
        ]
        if training
        else [fix("tensor-parallel"), fix("gguf-mmap")]
    )
    return Finding(
        rule=rule.id,
        severity=severity,
        title=(
            f"{'Training' if training else 'The model'} does not fit in {gb(v.limit)}: "
            f"{sizing['gpus']} GPU{'' if sizing['gpus'] == '1' else 's'} of this size needed"
        ),
        evidence=evidence + sizing["evidence"],
        fixes=fixes,
        offenders=_offenders(v.bd),
        basis=f"limit: {limit_source}; {sizing['basis']}",
        why=_WHY,
    )


def _requested(record) -> float:
    """The failed request's size: the OOM observer's record, else the 'Tried to allocate' message."""
    oom = record.oom or {}
    if oom.get("requested_bytes"):
        return float(oom["requested_bytes"])
    found = _REQUEST.search(record.error.get("message") or "")
    return float(found.group(1)) * _UNITS[found.group(2)] if found else 0.0


def _phase(traceback: str) -> str:
    if "torch/optim" in traceback:
        return "the optimizer step" + (" creating its state" if "_init_group" in traceback else "")
    if "backward" in traceback:
        return "the backward pass"
    return "the forward pass" if traceback else "an unknown phase"


def _oom_evidence(record, requested: float, traceback: str) -> list[Evidence]:
    snap = record.snapshot or {}
    allocated = snap.get("allocated_bytes") or record.peak_allocated
    ev = [
        Evidence("out of memory in", _phase(traceback)),
        Evidence("allocated at the OOM", in_gb(allocated), unit="GB"),
    ]
    if requested:
        ev.append(Evidence("failed request", round(requested / 1e6, 1), unit="MB"))
    if snap.get("live_blocks"):
        ev.append(Evidence("live blocks at the OOM", snap["live_blocks"]))
    return ev


def _sizing_from_parts(bd: dict, usable: float) -> dict:
    """GPUs needed with FSDP2 when the parts are known from the ops."""
    parts = bd["parts"]
    rest = parts[-1]["bytes"] if parts and parts[-1]["how"].startswith("the peak minus") else 0.0
    sharded = sum(p["bytes"] for p in parts) - rest
    evidence = [Evidence(p["part"], value, unit=unit) for p in parts for value, unit in [in_size(p["bytes"])]]
    room = usable - rest
    gpus = math.ceil(sharded / room) if room > 0 else None
    gpus_text = str(gpus) if gpus else "no number of"
    basis = (
        f"parts from the ops ({bd.get('basis', '')}); FSDP2: ⌈{gb(sharded)} sharded ÷ ({gb(usable)} usable − "
        f"{gb(rest)} activations)⌉ = {gpus_text} GPUs"
        + ("" if gpus else "; the activations alone exceed one GPU: checkpoint them first")
    )
    return {"evidence": evidence, "gpus": gpus_text, "basis": basis}


def _sizing_from_snapshot(record, requested: float, traceback: str, usable: float) -> dict:
    """GPUs needed when the workload died before the profiler: bounds from the OOM snapshot."""
    snap = record.snapshot or {}
    allocated = snap.get("allocated_bytes") or record.peak_allocated or 0.0
    low = allocated + requested
    optimizer = next((m for m in _OPTIMIZER_FILE.findall(traceback) if _states(m)), None)
    states = _states(optimizer) if optimizer else None
    high = (2 + states) / 2 * allocated if states and "_init_group" in traceback else None
    n_low = max(math.ceil(low / usable), 2)
    n_high = max(math.ceil(high / usable), n_low) if high else None
    gpus = f"{n_low}–{n_high}" if n_high and n_high > n_low else f"at least {n_low}"
    evidence = [Evidence("needed (allocated + failed request), at least", in_gb(low), unit="GB")]
    basis = (
        f"parts unknown: the workload died before the profiler recorded ops; the OOM snapshot holds "
        f"{gb(allocated)} in {snap.get('live_blocks', '?')} live blocks, the failed request {gb(requested)}"
    )
    if high and states:
        evidence.append(
            Evidence(
                f"needed with the full optimizer state ({optimizer}.py), at most, + activations", in_gb(high), unit="GB"
            )
        )
        basis += (
            f"; the optimizer was creating its state ({states} tensor{'s' if states > 1 else ''} per "
            f"parameter), so parameters and gradients (2P) were complete and 2P ≤ {gb(allocated)} < "
            f"(2 + {states})P: the full state needs ≤ {gb(high)} plus activations"
        )
    basis += f"; FSDP2 over GPUs of {gb(usable)} usable: {gpus}"
    return {"evidence": evidence, "gpus": gpus, "basis": basis}


def _states(module: str) -> int | None:
    """States per parameter of the optimizer whose torch/optim module the traceback went through."""
    names = {name.lower(): n for name, n in STATES_PER_PARAM.items()}
    return names.get(module.lower())


def _parts_text(bd: dict) -> str:
    parts = bd.get("parts") or []
    if not parts:
        return ""
    return " (" + ", ".join(f"{p['part']} {gb(p['bytes'])}" for p in parts) + ")"


def _offenders(bd: dict) -> list[Offender]:
    parts = [{"part": p["part"], "bytes": p["bytes"], "how": p["how"]} for p in bd.get("parts") or []]
    live = [
        {"live_block_by": a["where"], "bytes_live": a["bytes"], "blocks": a["count"], "largest_bytes": a["largest"]}
        for a in bd.get("top_live") or []
    ]
    return top_offenders(parts, "part", n=len(parts)) + top_offenders(live, "live blocks", n=3)


def _fsdp_code() -> str:
    return (
        "from torch.distributed.fsdp import fully_shard  # torchrun --nproc-per-node N train.py\n\n"
        "for block in model.layers:\n"
        "    fully_shard(block)      # each block's parameters, gradients and AdamW state split N ways\n"
        "fully_shard(model)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)  # created after sharding"
    )


def _checkpoint_code() -> str:
    return (
        "from torch.utils.checkpoint import checkpoint\n\n"
        "for block in model.layers:\n"
        "    x = checkpoint(block, x, use_reentrant=False)  # activations recomputed in backward"
    )
