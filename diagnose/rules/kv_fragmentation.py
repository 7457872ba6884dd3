"""kv-fragmentation: the KV cache wastes memory, so fewer sequences fit than the GPU could hold.

**Signal.** Any of three:
(1) *a cache grown by concatenation*: `aten::cat([cache, new])` where `new` adds at most
`max_append` positions along one dimension of a cache of at least `min_cache_tokens` positions
(same-rank tensors, rank ≥ 3, every other dimension equal), in the measured steps, with the cache
longer from one step to the next: every token reallocates and copies the whole cache of every
layer, and the caching allocator keeps the old, slightly smaller blocks it cannot reuse;
(2) *a cache preallocated and mostly unused*: decode-shaped attention (at least 8× more keys than
queries) reads per step less than `max_used_share` of the memory held outside the weights (the
allocated floor over the measured steps, minus the linear/embedding weights of one step), and the
unread part is at least `min_unused_gb`;
(3) *allocator fragmentation*: at the peak, reserved memory not held by tensors is at least
`min_waste_share` of the reserved memory and at least `min_waste_gb`; or the run ran out of
memory although the reserved-but-unallocated memory at the OOM could have held the request.
From a trace alone (no memory.json and no meta.json peaks), a reserve already at its peak at the
trace's first allocator event is not weighed: it was made before the trace, and memory cached
after an earlier, higher peak (a model's setup) looks the same as fragmentation. The quiet line
says so (gemv_decode_1tok_w4a16's trace alone: 2.35 GB reserved against 0.75 GB allocated in the
trace, while its run peaked at 1.78 GB allocated).
Supporting numbers: the snapshot's fragmentation (1 − largest free block ÷ free bytes in
segments), inactive split bytes, allocation retries.

**Thresholds.** Calibrated on the H200 captures. `min_waste_share` 50 % and `min_waste_gb`
1 GB: the concatenating decode (kv_concat) reserved 9.21 GB for a 2.39 GB peak (74 % unused,
6.8 GB; snapshot fragmentation 0.98); the block-table decode 8 %; the highest among the other
captures is the inline data loader, 42 % (1.15 GB); the naive attention 17 %, training 14 %.
`max_used_share` 50 % (a cache at most twice the tokens it holds) and `min_unused_gb` 1 GB:
the block pool sized for 4,096 tokens while 1,060 were used had attention reading 26 % of it
(6.4 GB unread); the concatenated cache is read whole (100 %); a pool sized to the tokens held plus
256 tokens of headroom (1,280 slots for 1,060 tokens) would be ≈ 83 % read (computed from the
shapes, not measured). `max_append` 16 positions (one token per step up to a
speculative block) and `min_cache_tokens` 64 keep small concatenations (feature lists, a
handful of scalars) out. `block_tokens` 16 is vLLM's default block size, used in the estimate.
Severity is high when the estimated capacity gain reaches `high_gain` (2×, the low end of the
cheat sheet's 2–5× more sequences) or the workload ran out of memory, medium otherwise.

**Fix.** `paged-attention`: keep K and V in fixed-size blocks addressed through a block table
(vLLM, or FlexAttention/FlashInfer paged kernels), allocated as sequences grow and freed when they
finish: no reallocation, no copy, at most one partly filled block per sequence. `kv-quantization`:
store K and V in FP8 (or INT4), halving (quartering) the bytes per token. With fragmentation,
`expandable-segments` (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`) lets freed memory
serve requests of another size.

**Estimate.** From the decode attention calls of the last measured step: batch B (sequences),
tokens T (keys per call), KV bytes per token (K and V of every layer). Memory the cache costs
now = the reserved peak minus the weights; with a paged cache = B × T rounded up to
`block_tokens` × bytes per token. Concurrent sequences that fit = B × (memory limit − weights) ÷
cost per B sequences, now and paged, and the paged figure × the element size in bytes with
one-byte FP8 K/V (2× from bf16). Without decode attention calls, B, T and the bytes come from
the concatenated caches (16-bit elements assumed: a tensor list records no dtype). On kv_concat:
9.21 GB now against 2.25 GB paged, ≈ 4.1× more sequences; 8.2× with FP8 KV. The figure counts
memory only: the step time of a larger batch is not estimated.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_from, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender
from diagnose.model.fixes import fix
from diagnose.memory.details import breakdown, step_levels, step_windows
from diagnose.memory.patterns import kv_appends, step_index
from diagnose.memory.units import gb, in_gb
from diagnose.vocabulary.units import percent

GB = 1e9


class KVFragmentation(Rule):
    """A KV cache grown by concatenation, preallocated and unused, or fragmented → paged attention."""

    id = "kv-fragmentation"
    order = 80
    title = "KV-cache memory is wasted: fewer sequences fit than the GPU could hold"
    cheat_sheet = {
        "bottleneck": "KV-cache fragmentation",
        "signal": "low maximum batch size at inference although total VRAM is free",
        "fix": "PagedAttention (as in vLLM) + FP8/INT4 KV quantization (or MLA)",
        "impact": "2–5× more concurrent sequences",
    }
    needs = (("ops", "memory"),)
    thresholds = (
        Threshold("max_append", 16, "positions", "a cat adding at most this many positions to a cache is an append"),
        Threshold("min_cache_tokens", 64, "positions", "cache length from which a cat counts as a KV-cache append"),
        Threshold(
            "max_used_share", 0.5, "fraction", "fire when attention reads less than this share of the cache memory held"
        ),
        Threshold("min_unused_gb", 1.0, "GB", "…and the unread part is at least this large"),
        Threshold(
            "min_waste_share",
            0.5,
            "fraction",
            "fire when reserved-but-unallocated memory at the peak is at least this share of reserved",
        ),
        Threshold("min_waste_gb", 1.0, "GB", "…and at least this large"),
        Threshold("block_tokens", 16, "tokens", "paged-cache block size assumed in the estimate (vLLM's default)"),
        Threshold(
            "high_gain",
            2.0,
            "×",
            "estimated gain in concurrent sequences at which severity is high (an OOM is always high)",
        ),
    )

    def check(self, ctx, t):
        """Look for concatenated or oversized KV caches and for allocator fragmentation."""
        kv = _measure(ctx, t)
        if not (kv.concat or kv.prealloc or kv.frag):
            return Quiet(_quiet_detail(ctx, t, kv.decode, kv.weights, kv.windows))
        capacity = _capacity(ctx.memory, t, kv.decode, kv.appends, kv.weights)
        return _word(self, ctx, kv, capacity, t)


_WHY = (
    "Every sequence in flight needs its keys and values for every layer. Grown by torch.cat, the cache "
    "is reallocated one token larger at every step: the whole cache is copied, and the caching "
    "allocator keeps the freed blocks, which the next, slightly larger request does not fit. "
    "Preallocated for the maximum length, most of it is never read. Either way the memory that "
    "would hold more sequences is reserved for nothing. A paged cache allocates fixed-size blocks "
    "as tokens arrive and addresses them through a block table, so memory tracks the tokens held."
)


@dataclasses.dataclass(frozen=True)
class _KV:
    """The KV caches of the last step and the allocator's state (what `_measure` found)."""

    windows: list
    appends: list  # torch.cat appends to a cache inside the measured steps
    decode: list  # the last step's decode attention calls
    weights: float  # bytes of the model's weights
    concat: dict | None  # a cache grown by torch.cat: its evidence and basis
    prealloc: dict | None  # a preallocated cache mostly never read
    frag: dict | None  # allocator fragmentation


def _measure(ctx, t) -> _KV:
    """The caches grown by torch.cat, preallocated beyond what is read, and the allocator's fragmentation."""
    ops = ctx.trace.ops
    windows = step_windows(ctx)
    appends = (
        [a for a in kv_appends(ops, step_index(ops, windows), t["max_append"], t["min_cache_tokens"]) if a.step >= 0]
        if len(ops)
        else []
    )
    decode = _last_step_decode(ctx.metrics.attention_calls, windows)
    weights = _weights(ctx)
    return _KV(
        windows=windows,
        appends=appends,
        decode=decode,
        weights=weights,
        concat=_concat(appends, t),
        prealloc=_preallocated(ctx, t, decode, weights, windows),
        frag=_fragmentation(ctx.memory, t),
    )


def _word(rule: Rule, ctx, kv: _KV, capacity: dict | None, t) -> Finding:
    """The finding: each finding's evidence and basis, then the capacity; paged and FP8 caches for a KV
    cache, expandable segments for fragmentation; high from `high_gain` or an OOM."""
    parts = [p for p in (kv.concat, kv.prealloc, kv.frag, capacity) if p]
    fixes = (
        [fix("paged-attention", code=_paged_code()), fix("kv-quantization", code=_fp8_code())]
        if kv.concat or kv.prealloc
        else []
    )
    if kv.frag:
        fixes.append(fix("expandable-segments", code=_expandable_code()))
    gain = capacity["gain"] if capacity else 0.0
    return Finding(
        rule=rule.id,
        severity=severity_from(gain >= t["high_gain"] or bool((kv.frag or {}).get("oom"))),
        title=_title(kv.concat, kv.prealloc, kv.frag),
        evidence=[e for p in parts for e in p["evidence"]],
        fixes=fixes,
        offenders=_offenders(ctx),
        basis="; ".join(p["basis"] for p in parts),
        why=_WHY,
    )


def _last_step_decode(calls: list, windows: list) -> list:
    """The decode-shaped attention calls (of all `calls`, the trace's) of the last measured step
    (the whole trace without steps)."""
    calls = [c for c in calls if c.decode]
    if not calls or not windows:
        return calls
    steps = step_index(pd.DataFrame({"ts": [c.ts for c in calls]}), windows)
    last = max(steps)
    return [c for c, s in zip(calls, steps) if s == last] if last >= 0 else []


def _concat(appends: list, t) -> dict | None:
    """Evidence of a cache grown by cat, step after step; None without one."""
    if not appends:
        return None
    by_step: dict[int, list] = {}
    for a in appends:
        by_step.setdefault(a.step, []).append(a)
    lengths = [max(a.cache_len for a in by_step[s]) for s in sorted(by_step)]
    if len(lengths) > 1 and max(lengths) <= min(lengths):
        return None
    n = len(by_step)
    per_step = len(appends) / n
    copied = sum(2.0 * math.prod(a.out_dims) * 2 for a in appends) / n
    growth = " → ".join(f"{v:,}" for v in lengths[:6]) + (" …" if len(lengths) > 6 else "")
    a0 = appends[0]
    evidence = [
        Evidence("cat appends to a cache per step", round(per_step, 1)),
        Evidence("positions appended per cat", a0.added, "<=", t["max_append"], "positions"),
        Evidence("cache length (positions) step after step", growth),
        Evidence("bytes copied by the appends per step (read + write, 16-bit)", in_gb(copied), unit="GB"),
    ]
    return {
        "evidence": evidence,
        "basis": (
            f"concatenation: {per_step:.0f} cat per step append {a0.added} position(s) to caches "
            f"{list(a0.dims)} (dim {a0.dim}), {growth} over {n} step(s)"
        ),
    }


def _weights(ctx) -> float:
    parts = (breakdown(ctx) or {}).get("parts") or []
    return float(sum(p["bytes"] for p in parts if p["part"] == "weights"))


def _preallocated(ctx, t, decode: list, weights: float, windows: list) -> dict | None:
    """A cache much larger than what attention reads; None when not the case or not measurable."""
    numbers = _usage(ctx, decode, weights, windows)
    if numbers is None:
        return None
    read, held, share = numbers
    unused = held - read
    if share >= t["max_used_share"] or unused < t["min_unused_gb"] * GB:
        return None
    evidence = [
        Evidence.share("K/V read per step ÷ memory held outside the weights", share, "<", t["max_used_share"]),
        Evidence("memory held outside the weights (allocated floor)", in_gb(held), unit="GB"),
        Evidence("held but never read by attention", in_gb(unused), ">=", t["min_unused_gb"], "GB"),
    ]
    return {
        "evidence": evidence,
        "basis": (
            f"preallocation: attention reads {gb(read)} of K/V per step while {gb(held)} stays allocated "
            f"outside the weights (floor over the measured steps{_minus(weights)})"
        ),
    }


def _usage(ctx, decode: list, weights: float, windows: list) -> tuple[float, float, float] | None:
    """(K/V bytes read per step, bytes held outside the weights, their ratio), or None."""
    record = ctx.memory
    if not decode or record is None:
        return None
    levels = step_levels(ctx)
    if not levels:
        return None
    read = float(sum(c.k.nbytes + c.v.nbytes for c in decode))
    held = levels["floor"] - weights
    if held <= 0:
        return None
    return read, held, read / held


def _fragmentation(record, t) -> dict | None:
    """Reserved memory far above allocated at the peak, or an OOM the cached free memory could have served."""
    if record is None or not record.peak_reserved or record.peak_allocated is None or _reserved_before(record):
        return None
    waste = record.peak_reserved - record.peak_allocated
    share = waste / record.peak_reserved
    snap = record.snapshot or {}
    oom = record.oom or {}
    requested = oom.get("requested_bytes") or 0
    idle_at_oom = (snap.get("reserved_bytes") or 0) - (snap.get("allocated_bytes") or 0)
    oom_frag = bool(record.out_of_memory and requested and idle_at_oom >= requested)
    if not oom_frag and (share < t["min_waste_share"] or waste < t["min_waste_gb"] * GB):
        return None
    evidence = [
        Evidence.share("reserved but not allocated at the peak", share, ">=", t["min_waste_share"]),
        Evidence("reserved peak", in_gb(record.peak_reserved), unit="GB"),
        Evidence("allocated peak", in_gb(record.peak_allocated), unit="GB"),
    ]
    if snap.get("fragmentation") is not None:
        evidence.append(Evidence("snapshot fragmentation (1 − largest free block ÷ free bytes)", snap["fragmentation"]))
    if record.inactive_split_peak is not None:
        evidence.append(Evidence("inactive split blocks at peak", in_gb(record.inactive_split_peak), unit="GB"))
    if record.alloc_retries:
        evidence.append(Evidence("allocation retries (cache flushed to satisfy cudaMalloc)", record.alloc_retries))
    if oom_frag:
        evidence.append(
            Evidence(
                "reserved-but-free memory at the OOM ÷ the failed request", round(idle_at_oom / requested, 2), ">=", 1
            )
        )
    return {
        "evidence": evidence,
        "oom": oom_frag,
        "basis": (
            f"fragmentation: reserved peak {gb(record.peak_reserved)} against {gb(record.peak_allocated)} "
            f"allocated ({gb(waste)} held by the allocator, not by tensors)"
        ),
    }


def _capacity(record, t, decode: list, appends: list, weights: float) -> dict | None:
    """How many more sequences fit with a paged (and FP8) cache, in memory terms."""
    if record is None or not record.peak_reserved:
        return None
    shape = _cache_shape(decode, appends)
    if shape is None:
        return None
    batch, tokens, read, itemsize = shape
    per_token = read / (batch * tokens)
    block = t["block_tokens"]
    cache = _Cache(batch, tokens, per_token, itemsize, block, record.peak_reserved - weights)
    if cache.paged <= 0 or cache.now <= 0:
        return None
    gain = cache.now / cache.paged
    fp8 = gain * itemsize
    return {
        "gain": gain,
        "evidence": _capacity_evidence(cache, record.limit[0], weights),
        "basis": (
            f"capacity: the cache costs {gb(cache.now)} now (reserved peak{_minus(weights)}) for {batch} "
            f"sequences of {tokens:,} tokens; paged: {batch} × ⌈{tokens:,} ÷ {block:.0f}⌉ × {block:.0f} × "
            f"{per_token / 1e3:,.1f} KB = {gb(cache.paged)}: {gain:.1f}× more sequences, {fp8:.1f}× with FP8 K/V "
            f"(from {itemsize}-byte elements)"
        ),
    }


@dataclasses.dataclass(frozen=True)
class _Cache:
    """The last step's KV cache, now and paged (what `_capacity` weighs)."""

    batch: int  # sequences
    tokens: int  # per sequence
    per_token: float  # KV bytes per token, all layers, K and V
    itemsize: int  # bytes per element
    block: float  # tokens per page
    now: float  # bytes the cache costs now: the reserved peak less the weights

    @property
    def paged(self) -> float:
        """Bytes with a paged cache: every sequence rounded up to whole blocks."""
        return self.batch * math.ceil(self.tokens / self.block) * self.block * self.per_token


def _cache_shape(decode: list, appends: list) -> tuple[int, int, float, int] | None:
    """(sequences, tokens per sequence, KV bytes, bytes per element) of the last step's cache: from its
    decode attention calls, else from its torch.cat appends (2-byte elements); None without either."""
    if decode:
        batch = decode[0].q.dims[0]
        tokens = max(c.k.dims[-2] for c in decode)
        return batch, tokens, float(sum(c.k.nbytes + c.v.nbytes for c in decode)), decode[0].k.itemsize
    if appends:
        last = max(a.step for a in appends)
        mine = [a for a in appends if a.step == last]
        itemsize = 2
        read = float(sum(math.prod(a.out_dims) * itemsize for a in mine))
        return mine[0].dims[0], max(a.cache_len + a.added for a in mine), read, itemsize
    return None


def _capacity_evidence(cache: _Cache, limit: float | None, weights: float) -> list[Evidence]:
    """The cache's sequences, tokens and bytes, now and paged; with a known limit, the sequences that fit."""
    batch, now, paged = cache.batch, cache.now, cache.paged
    evidence = [
        Evidence("sequences in the batch", batch),
        Evidence("tokens per sequence", cache.tokens),
        Evidence("KV bytes per token (all layers, K and V)", round(cache.per_token / 1e3, 1), unit="KB"),
        Evidence("cache memory per sequence now", round(now / batch / 1e6, 1), unit="MB"),
        Evidence(f"… with a paged cache (blocks of {cache.block:.0f})", round(paged / batch / 1e6, 1), unit="MB"),
        Evidence("more concurrent sequences with a paged cache", round(now / paged, 2), unit="×"),
    ]
    if limit:
        usable = limit - weights
        evidence += [
            Evidence(
                f"sequences of {cache.tokens:,} tokens that fit in {gb(limit)} now", math.floor(batch * usable / now)
            ),
            Evidence("… with a paged cache", math.floor(batch * usable / paged)),
            Evidence("… with a paged FP8 cache", math.floor(batch * usable / paged * cache.itemsize)),
        ]
    return evidence


def _quiet_detail(ctx, t, decode: list, weights: float, windows: list) -> str:
    record = ctx.memory
    parts = []
    usage = _usage(ctx, decode, weights, windows) if decode else None
    if usage:
        read, held, share = usage
        why = (
            f"{percent(share)} of it read (≥ {percent(t['max_used_share'])})"
            if share >= t["max_used_share"]
            else f"only {gb(held - read)} unread (< {t['min_unused_gb']:g} GB)"
        )
        parts.append(f"decode attention reads {gb(read)} of K/V per step of {gb(held)} held outside the weights: {why}")
    elif decode:
        parts.append("decode attention found, but no allocator events to weigh the cache against")
    else:
        parts.append("no KV-cache pattern (no cat appending to a cache, no decode-shaped attention)")
    if record is not None and record.peak_reserved and record.peak_allocated is not None:
        waste = record.peak_reserved - record.peak_allocated
        share = waste / record.peak_reserved
        parts.append(
            f"reserved peak {gb(record.peak_reserved)} vs allocated {gb(record.peak_allocated)}: "
            + _reserve_why(record, waste, share, t)
        )
    return "; ".join(parts)


def _reserved_before(record) -> bool:
    """The trace's allocator events alone, reserved at their peak from the first one on (no OOM): the
    reserve was made before the trace, and a cache kept after an earlier peak looks the same."""
    return record.reserved_before_trace and not record.out_of_memory


def _reserve_why(record, waste: float, share: float, t) -> str:
    """Why the reserved-but-unallocated memory is not fragmentation."""
    if share < t["min_waste_share"]:
        return f"{percent(share)} of it unallocated (< {percent(t['min_waste_share'])})"
    if _reserved_before(record):
        return (
            f"{percent(share)} of it unallocated, but all of it was reserved before the trace's first allocator "
            "event, by a peak the trace does not show: fragmentation cannot be told from memory cached since then "
            "(a capture's memory.json can)"
        )
    return f"{gb(waste)} unallocated (< {t['min_waste_gb']:g} GB)"


def _minus(weights: float) -> str:
    return f" − {gb(weights)} of weights" if weights else "; no weights found in the ops"


def _title(concat, prealloc, frag) -> str:
    if concat:
        return (
            "KV cache grown by concatenation: every token reallocates the cache and the allocator keeps the old blocks"
        )
    if prealloc:
        return "KV cache preallocated for the maximum length and mostly unused"
    return "Allocator fragmentation: far more memory reserved than tensors hold"


def _offenders(ctx) -> list[Offender]:
    """The user code that allocated the most during the profiled steps, and the largest live blocks."""
    bd = breakdown(ctx) or {}
    allocating = [
        {
            "allocated_by": a["where"],
            "bytes_allocated": a["bytes"],
            "allocations": a["count"],
            "largest_bytes": a["largest"],
        }
        for a in bd.get("top_allocating") or []
    ]
    live = [
        {"live_block_by": a["where"], "bytes_live": a["bytes"], "blocks": a["count"]} for a in bd.get("top_live") or []
    ]
    return top_offenders(allocating, "allocation", n=4) + top_offenders(live, "live blocks", n=2)


def _paged_code() -> str:
    return (
        "# a pool of fixed-size blocks shared by all sequences, and a block table per sequence\n"
        "BLOCK = 16\n"
        "pool_k = torch.empty(num_blocks, heads, BLOCK, head_dim, dtype=torch.bfloat16, device='cuda')\n"
        "pool_v = torch.empty_like(pool_k)\n"
        "free = list(range(num_blocks))\n"
        "# when sequence s reaches a new block: table[s].append(free.pop())\n"
        "blk, off = divmod(pos, BLOCK)\n"
        "pool_k[table[s][blk], :, off] = k_new  # written in place: no torch.cat, no copy\n"
        "# serving: vLLM does all of this (LLM(model, block_size=16, kv_cache_dtype='fp8'))"
    )


def _fp8_code() -> str:
    return (
        "pool_k = torch.empty(num_blocks, heads, BLOCK, head_dim, dtype=torch.float8_e4m3fn, device='cuda')\n"
        "scale_k = k_new.abs().amax() / 448.0  # per-tensor (or per-head) scale\n"
        "pool_k[slot] = (k_new / scale_k).to(torch.float8_e4m3fn)\n"
        "# vLLM: LLM(model, kv_cache_dtype='fp8')"
    )


def _expandable_code() -> str:
    return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python serve.py"
