"""exposed-comm: collective communication runs with no compute to hide it.

**Signal.** Collective-communication kernels (NCCL's `ncclKernel_*` / `ncclDevKernel_*`, RCCL's)
occupy the GPU while gradients or activations move between ranks. On the trace's device, all
streams merged, the time a collective runs while no compute kernel runs on any stream is
*exposed*: the step waits for the network. The time a collective runs under compute is
*overlapped* (hidden, as DDP's bucketed all-reduce during backward and FSDP's prefetched
all-gathers intend) and costs nothing. The rule fires when exposed communication is at least
`min_exposed_share` of the step, and names the collectives by the exposed time they leave.

**Threshold.** 10 % of the step: below it, even hiding all of it buys less than 1.11×. On HTA's
DDP trace (nccl_data, one A100 rank of a ResNet-style model) the all-reduces run 7 % of the step,
84 % of that exposed, 5.9 % of the step: quiet; the step is lost to the host instead (see the
step accounting). On HTA's training trace (trace_diff/control: point-to-point SendRecv and
all-reduces) 19 % of the step is exposed against 16 % overlapped: it fires.

**Single-rank caveat.** A collective's kernel also runs while it waits for the slowest rank to
arrive, so on one rank's trace exposed time includes load imbalance between ranks; only traces
of every rank separate the two.

**Across ranks.** With the traces of every rank (`diagnose DIR`), each collective's time is
split into *transfer* (its shortest duration over the ranks) and *synchronisation wait* (the rest:
waiting for the slowest rank; diagnose/ranks/model.py). Wait is counted as exposed first (the
kernel starts waiting as soon as it is launched), and the rule then judges only the exposed
*transfer*, the part overlap can hide; the wait is the straggler rule's. The finding says on which
ranks it holds.

**Fixes.** `overlap-comm`: start communication earlier so compute hides it: DDP with a smaller
`bucket_cap_mb` (the first bucket is ready sooner in backward) and `gradient_as_bucket_view=True`
(no copy into the bucket), FSDP2 with forward and backward prefetch. `grad-accumulation`: with
gradient accumulation, skip the all-reduce on all but the last micro-batch (`model.no_sync()`),
so there is one all-reduce per optimizer step instead of one per micro-batch.

**Estimate.** Hiding the exposed part entirely: new step = step − exposed communication, never
below the GPU compute time; speedup = step ÷ new step. It is an upper bound: overlapping needs
compute to overlap with, and a straggling rank is not fixed by overlap.
"""
from __future__ import annotations

from diagnose.engine import Quiet, Rule, Threshold
from diagnose.findings import Evidence, Finding
from diagnose.fixes import fix


class ExposedComm(Rule):
    """Collective communication not hidden under compute → overlap it, or do less of it."""

    id = "exposed-comm"
    order = 35
    title = "Exposed communication: the GPU waits on collectives that no compute hides"
    cheat_sheet = {
        "bottleneck": "collective communication exposed on the critical path",
        "signal": "NCCL/RCCL kernels running while no compute kernel runs on any stream",
        "fix": "overlap it (DDP bucket_cap_mb, gradient_as_bucket_view, FSDP2 prefetch); "
               "all-reduce once per optimizer step (no_sync with gradient accumulation)",
        "impact": "the step shrinks by the exposed communication time",
    }
    needs = ("gpu", "steps")
    thresholds = (
        Threshold("min_exposed_share", 0.10, "fraction",
                  "fire when exposed communication is at least this share of the step"),
        Threshold("high_share", 0.30, "fraction", "exposed share at which severity is high"),
    )

    def check(self, ctx, t):
        """Measure the collectives' time that no compute kernel overlaps."""
        m = ctx.metrics
        comm, budget = m.comm, m.budget
        if not comm.comm_kernels_per_step:
            return Quiet("no collective (NCCL/RCCL) kernels in the measured steps")
        exposed = comm.comm_exposed_us
        if ctx.ranks is not None and len(ctx.ranks) >= 2:
            return self._across_ranks(ctx, t, exposed)
        share = budget.share(exposed)
        if share < t["min_exposed_share"]:
            return Quiet(f"exposed communication {share:.1%} of the step < {t['min_exposed_share']:.0%} "
                         f"({comm.comm_kernels_per_step:g} collectives per step, "
                         f"{comm.overlap_fraction:.0%} of their time overlapped with compute)")
        return self._finding(ctx, t, exposed, share, [])

    def _finding(self, ctx, t, exposed: float, share: float, extra: list, ranks=None, basis_note: str = ""):
        """The finding for `exposed` µs per step of exposed communication (`share` of the step)."""
        comm, budget = ctx.metrics.comm, ctx.metrics.budget
        new_step = max(budget.step_us - exposed, comm.compute_us, 1e-9)
        evidence = [
            Evidence("exposed communication per step", round(share * 100, 1), ">=",
                     t["min_exposed_share"] * 100, "%"),
            Evidence("exposed communication time per step", round(exposed, 1), unit="µs"),
            Evidence("collective time overlapped with compute", round(comm.overlap_fraction * 100, 1), unit="%"),
            Evidence("collectives per step", round(comm.comm_kernels_per_step, 1)),
            Evidence("GPU compute per step", round(budget.share(comm.compute_us) * 100, 1), unit="%"),
            *extra,
        ]
        return Finding(
            rule=self.id,
            severity="high" if share >= t["high_share"] else "medium" if share >= 0.15 else "low",
            title=self.title,
            evidence=evidence,
            offenders=[{"collective": row.name.split("(")[0], "calls_per_step": round(row.calls_per_step, 1),
                        "us_per_step": round(row.us_per_step, 1),
                        "exposed_us_per_step": round(row.exposed_us_per_step, 1)}
                       for row in comm.collectives.head(8).itertuples()],
            fixes=[fix("overlap-comm", code=_overlap_code()), fix("grad-accumulation", code=_accumulation_code())],
            est_speedup=round(budget.step_us / new_step, 2),
            recoverable_us=round(budget.step_us - new_step, 1),
            basis=(f"new step = max({budget.step_us:,.0f} − {exposed:,.0f} µs exposed communication, "
                   f"{comm.compute_us:,.0f} µs GPU compute) = {new_step:,.0f} µs; an upper bound (a straggling "
                   f"rank is not fixed by overlap){basis_note}; {budget.basis}"),
            why=("A collective has to finish before anything that needs its result can run. DDP starts "
                 "all-reducing a gradient bucket as soon as backward has filled it, so most of the traffic "
                 "hides under the rest of backward; what is left exposed is usually the last bucket, "
                 "buckets too large to become ready early, or all-reduces run on every micro-batch of "
                 "gradient accumulation. Smaller buckets start sooner, prefetching in FSDP2 gathers the "
                 "next layer's weights while this one computes, and no_sync skips the all-reduce on all "
                 "but the last micro-batch."),
            ranks=ranks,
        )

    # --- issue 12: across ranks, exposed transfer apart from synchronisation wait ---
    def _across_ranks(self, ctx, t, exposed: float):
        """The rule on one rank of several: judge the exposed transfer, with the wait beside it."""
        ranks, budget = ctx.ranks, ctx.metrics.budget
        rank = ranks.reference
        wait = ranks.wait_us(rank)
        transfer_exposed = max(exposed - min(wait, exposed), 0.0)
        share = budget.share(transfer_exposed)
        holds = [p.rank for p in ranks.profiles
                 if p.step_us > 0 and (p.exposed_us - min(ranks.wait_us(p.rank), p.exposed_us)) / p.step_us
                 >= t["min_exposed_share"]]
        if share < t["min_exposed_share"] and not holds:
            return Quiet(f"exposed communication transfer {share:.1%} of the step < {t['min_exposed_share']:.0%} on "
                         f"every rank (rank {rank}: {exposed:,.0f} µs exposed per step, {min(wait, exposed):,.0f} µs "
                         f"of it waiting for the slowest rank)")
        if share < t["min_exposed_share"]:  # holds on other ranks: judge the first of them
            other = ranks.profile(holds[0])
            wait = ranks.wait_us(other.rank)
            transfer_exposed = other.exposed_us - min(wait, other.exposed_us)
            share, rank = transfer_exposed / other.step_us, other.rank
        extra = [Evidence("exposed transfer per step (collective time less the wait for the slowest rank)",
                          round(share * 100, 1), ">=", t["min_exposed_share"] * 100, "%"),
                 Evidence(f"rank {rank}: synchronisation wait / transfer inside collectives per step",
                          round(ranks.wait_us(rank), 1), unit=f"µs wait, {ranks.transfer_us(rank):,.0f} µs transfer")]
        note = (f"; across {len(ranks)} ranks only the exposed transfer counts ({transfer_exposed:,.0f} µs on rank "
                f"{rank}), the wait for the slowest rank is the straggler rule's")
        return self._finding(ctx, t, transfer_exposed, share, extra, ranks=holds, basis_note=note)
    # --- end issue 12 ---


def _overlap_code() -> str:
    return ("# DDP: smaller buckets start all-reducing earlier in backward; no copy into the bucket\n"
            "model = DistributedDataParallel(model, device_ids=[rank],\n"
            "                                bucket_cap_mb=10,              # default 25\n"
            "                                gradient_as_bucket_view=True)\n\n"
            "# FSDP2: gather the next layers' weights while this one computes\n"
            "from torch.distributed.fsdp import fully_shard\n"
            "for layer in model.layers:\n"
            "    fully_shard(layer)\n"
            "fully_shard(model)\n"
            "for prev, nxt in zip(model.layers, model.layers[1:]):\n"
            "    prev.set_modules_to_forward_prefetch([nxt])\n"
            "    nxt.set_modules_to_backward_prefetch([prev])")


def _accumulation_code() -> str:
    return ("# all-reduce once per optimizer step, not once per micro-batch\n"
            "import contextlib\n"
            "for i, batch in enumerate(micro_batches):\n"
            "    last = i == len(micro_batches) - 1\n"
            "    with contextlib.nullcontext() if last else model.no_sync():\n"
            "        loss = model(batch).loss / len(micro_batches)\n"
            "        loss.backward()\n"
            "optimizer.step()\n"
            "optimizer.zero_grad(set_to_none=True)")
