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
waiting for the slowest rank; diagnose/rankset/model.py). Wait is counted as exposed first (the
kernel starts waiting as soon as it is launched), and the rule then judges only the exposed
*transfer*, the part overlap can hide; the wait is the straggler rule's. The finding says on which
ranks it holds.

**Fixes.** `overlap-comm`: start communication earlier so compute hides it: DDP with a smaller
`bucket_cap_mb` (the first bucket is ready sooner in backward) and `gradient_as_bucket_view=True`
(no copy into the bucket), FSDP2 with forward and backward prefetch. `grad-accumulation`: with
gradient accumulation, skip the all-reduce on all but the last micro-batch (`model.no_sync()`),
so there is one all-reduce per optimizer step instead of one per micro-batch.

**Estimate.** Hiding the exposed part: new step = step − exposed communication (less the GPU's idle
for the host, which already hides it), never below the GPU compute time, and never more saved than
the exposed communication in the step's own accounting (so the estimate is at most step ÷ (step −
communication)). Overlap hides communication under compute, so it can hide at most
min(communication, compute) per step, less what it hides already: a rank whose communication
exceeds its compute (15.6 ms against 9.6 ms a step) gains at most its compute from overlap, not its
communication. The basis states that bound and the estimate never exceeds it; speedup = step ÷ new
step. Across ranks the exposed time is the exposed transfer (`exposed_comm_split`, the one function
the step breakdown also uses: it shows the rest as `comm_wait`). It is an upper bound: overlapping
needs compute to overlap with, and a straggling rank is not fixed by overlap.
"""

from __future__ import annotations

import dataclasses

from diagnose.rulebook.engine import Quiet, Rule, Threshold, severity_ladder, top_offenders
from diagnose.model.findings import Evidence, Finding, Offender, Severity
from diagnose.model.fixes import fix
from diagnose.metrics import Metrics
from diagnose.metrics.accounting import HOST_PACED, exposed_comm_split
from diagnose.metrics.comm import Communication
from diagnose.vocabulary.units import percent


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
        Threshold(
            "min_exposed_share", 0.10, "fraction", "fire when exposed communication is at least this share of the step"
        ),
        Threshold(
            "min_saving_share", 0.05, "fraction", "and hiding or skipping it gains at least this share of the step"
        ),
        Threshold("high_share", 0.30, "fraction", "exposed share at which severity is high"),
        Threshold("medium_share", 0.15, "fraction", "exposed share at which severity is medium (below: low)"),
    )

    def check(self, ctx, t):
        """Measure the collectives' time that no compute kernel overlaps, and what hiding or skipping it saves."""
        m = ctx.metrics
        comm = m.comm
        if not comm.comm_kernels_per_step:
            return Quiet("no collective (NCCL/RCCL) kernels in the measured steps")
        if ctx.ranks is not None and len(ctx.ranks) >= 2:
            return self._across_ranks(ctx, t)
        return self._judge(ctx, t, comm.comm_exposed_us, comm.comm_us, m.accounting, m.comm_rounds, [])

    def _judge(
        self,
        ctx,
        t,
        exposed: float,
        comm_us: float,
        accounting,
        rounds,
        extra: list,
        ranks=None,
        rank: int | None = None,
        note: str = "",
        wait_us: float = 0.0,
    ):
        """The finding (or Quiet) for `exposed` µs per step of exposed transfer and `comm_us` of collective
        transfer in all, on a step split as `accounting` (with `rounds` = (forwards, rounds) per step)."""
        x = _measure(ctx.metrics, exposed, comm_us, accounting, rounds, wait_us)
        saving = _estimate(x)
        severity = _decide(x, saving, t, f"rank {rank}: " if rank is not None else "", note)
        if isinstance(severity, Quiet):
            return severity
        return _word(self, x, saving, severity, t, extra, ranks, note)

    # --- across ranks, exposed transfer apart from synchronisation wait ---
    def _across_ranks(self, ctx, t):
        """The rule on one rank of several: judge the exposed transfer (the wait for the slowest rank is
        the straggler rule's), on the reference rank and on every rank for `ranks`."""
        ranks, m = ctx.ranks, ctx.metrics
        rank = ranks.reference
        wait = ranks.wait_us(rank)
        exposed = exposed_comm_split(m.comm.comm_exposed_us, wait)[0]
        transfer = ranks.transfer_us(rank)
        holds = [p.rank for p in ranks.profiles if self._holds(p, ranks, t)]
        extra = [
            Evidence(
                f"rank {rank}: synchronisation wait / transfer inside collectives per step",
                round(wait, 1),
                unit=f"µs wait, {transfer:,.0f} µs transfer",
            )
        ]
        note = (
            f"; across {len(ranks)} ranks only the exposed transfer counts ({exposed:,.0f} µs on rank {rank}), "
            f"the wait for the slowest rank is the straggler rule's"
        )
        result = self._judge(
            ctx,
            t,
            exposed,
            transfer,
            m.accounting,
            m.comm_rounds,
            extra,
            ranks=holds,
            rank=rank,
            note=note,
            wait_us=wait,
        )
        if isinstance(result, Quiet) and holds:
            result.detail += f"; it would hold on rank(s) {', '.join(map(str, holds))} judged alone"
        return result

    @staticmethod
    def _holds(profile, ranks, t) -> bool:
        """Whether a rank's exposed transfer (exposed less its wait) reaches the threshold, and more than
        its GPU's idle for the host, or it runs several rounds of collectives per step."""
        if profile.step_us <= 0:
            return False
        exposed = exposed_comm_split(profile.exposed_us, ranks.wait_us(profile.rank))[0]
        host_idle = profile.host_paced()
        rounds = (profile.forwards_per_step or 0) >= 2 and (profile.comm_rounds_per_step or 0) >= 2
        return exposed / profile.step_us >= t["min_exposed_share"] and (
            (exposed - host_idle) / profile.step_us >= t["min_saving_share"] or rounds
        )


def _overlap_code() -> str:
    return (
        "# DDP: smaller buckets start all-reducing earlier in backward; no copy into the bucket\n"
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
        "    nxt.set_modules_to_backward_prefetch([prev])"
    )


def _accumulation_code() -> str:
    return (
        "# all-reduce once per optimizer step, not once per micro-batch\n"
        "import contextlib\n"
        "for i, batch in enumerate(micro_batches):\n"
        "    last = i == len(micro_batches) - 1\n"
        "    with contextlib.nullcontext() if last else model.no_sync():\n"
        "        loss = model(batch).loss / len(micro_batches)\n"
        "        loss.backward()\n"
        "optimizer.step()\n"
        "optimizer.zero_grad(set_to_none=True)"
    )


@dataclasses.dataclass(frozen=True)
class _Exposed:
    """One rank's exposed transfer and the bounds on hiding or skipping it, per step (what `_measure` found)."""

    comm: Communication
    basis: str  # the step's time base
    step: float  # µs
    exposed: float  # exposed transfer, µs
    comm_us: float  # collective transfer in all, µs
    host_idle: float  # GPU idle waiting for the host, µs (hides communication already)
    compute: float  # compute kernel time, µs
    hide_bound: float  # the most overlap can still hide: min(communication, compute) less what it hides
    hide: float  # what overlap would save: exposed beyond the host idle, within `hide_bound`
    forwards: float  # forward passes per optimizer step
    n_rounds: float  # rounds of collectives per optimizer step
    skip: float  # what no_sync would save: all rounds but one
    removable: float  # the step's exposed transfer on its own base: no saving exceeds it

    @property
    def share(self) -> float:
        """The exposed transfer as a share of the step."""
        return self.exposed / self.step


def _measure(m: Metrics, exposed: float, comm_us: float, accounting, rounds, wait_us: float) -> _Exposed:
    """The step, the GPU's idle for the host and its compute, and what overlap or no_sync could save."""
    budget = m.budget
    step = budget.step_us or 1e-9
    host_idle = sum(b.us for b in accounting.buckets if b.id in HOST_PACED)
    compute = m.comm.compute_us
    # overlap hides at most min(communication, compute) per step, less what it hides already
    hide_bound = max(min(comm_us, compute) - m.comm.comm_overlapped_us, 0.0)
    forwards, n_rounds = rounds
    # removing every collective gives at most the step's exposed transfer (on the step's own base), the
    # same exposed time as the step breakdown's (exposed_comm_split)
    removable = exposed_comm_split(sum(b.us for b in accounting.buckets if b.id == "comm_exposed"), wait_us)[0]
    return _Exposed(
        comm=m.comm,
        basis=budget.basis,
        step=step,
        exposed=exposed,
        comm_us=comm_us,
        host_idle=host_idle,
        compute=compute,
        hide_bound=hide_bound,
        hide=min(max(exposed - host_idle, 0.0), hide_bound),
        forwards=forwards,
        n_rounds=n_rounds,
        skip=(n_rounds - 1) / n_rounds * comm_us if forwards >= 2 and n_rounds >= 2 else 0.0,
        removable=removable,
    )


def _estimate(x: _Exposed) -> float:
    """µs per step saved: the better of hiding and skipping, never more than the step less its compute,
    nor more than the step's exposed transfer."""
    return min(max(x.hide, x.skip), max(x.step - x.compute, 0.0), x.removable)


def _decide(x: _Exposed, saving: float, t: dict[str, float], on: str, note: str) -> Severity | Quiet:
    """Quiet below `min_exposed_share` of exposed transfer, or below `min_saving_share` to gain (the GPU
    waits for the host anyway); else the severity of the exposed share."""
    if x.share < t["min_exposed_share"]:
        return Quiet(
            f"{on}exposed communication {percent(x.share)} of the step < {percent(t['min_exposed_share'])} "
            f"({x.comm.comm_kernels_per_step:g} collectives per step, "
            f"{percent(x.comm.overlap_fraction)} of their time overlapped with compute){note}"
        )
    if saving / x.step < t["min_saving_share"]:
        return Quiet(
            f"{on}exposed communication {percent(x.share)} of the step, but the GPU already waits "
            f"{percent(x.host_idle / x.step)} of the step for the host: hiding the communication would move "
            f"the GPU's idle time, not shorten the step ({percent(saving / x.step)} to gain){note}"
        )
    return severity_ladder(x.share, t)


def _word(
    rule: Rule, x: _Exposed, saving: float, severity: Severity, t: dict[str, float], extra: list, ranks, note: str
) -> Finding:
    """The finding: evidence, the collectives, the fixes (no_sync first when skipping saves more), the basis."""
    fixes = [fix("overlap-comm", code=_overlap_code()), fix("grad-accumulation", code=_accumulation_code())]
    new_step = max(x.step - saving, 1e-9)
    return Finding(
        rule=rule.id,
        severity=severity,
        title=rule.title,
        evidence=_evidence(x, saving, t, extra),
        offenders=_offenders(x.comm),
        fixes=fixes[::-1] if x.skip > x.hide else fixes,
        est_speedup=round(x.step / new_step, 2),
        recoverable_us=round(x.step - new_step, 1),
        basis=_basis(x, saving, new_step, note),
        why=(
            "A collective has to finish before anything that needs its result can run. DDP starts "
            "all-reducing a gradient bucket as soon as backward has filled it, so most of the traffic "
            "hides under the rest of backward; what is left exposed is usually the last bucket, "
            "buckets too large to become ready early, or all-reduces run on every micro-batch of "
            "gradient accumulation. Smaller buckets start sooner, prefetching in FSDP2 gathers the "
            "next layer's weights while this one computes, and no_sync skips the all-reduce on all "
            "but the last micro-batch."
        ),
        ranks=ranks,
    )


def _evidence(x: _Exposed, saving: float, t: dict[str, float], extra: list) -> list[Evidence]:
    """The exposed share and the gain against their thresholds, the bounds, then `extra` and the rounds."""
    evidence = [
        Evidence.share("exposed communication per step", x.share, ">=", t["min_exposed_share"]),
        Evidence.share(
            "step to gain (hiding it beyond the GPU's idle for the host, or skipping all-reduces)",
            saving / x.step,
            ">=",
            t["min_saving_share"],
        ),
        Evidence("exposed communication time per step", round(x.exposed, 1), unit="µs"),
        Evidence(
            "GPU idle waiting for the host per step (hides communication already)", round(x.host_idle, 1), unit="µs"
        ),
        Evidence.share("collective time overlapped with compute", x.comm.overlap_fraction),
        Evidence("collectives per step", round(x.comm.comm_kernels_per_step, 1)),
        Evidence(
            "most that overlap can still hide per step: min(communication, compute) less what it hides already",
            round(x.hide_bound, 1),
            unit="µs",
        ),
        *extra,
    ]
    if x.forwards >= 2:
        evidence.append(
            Evidence(
                "forward passes / rounds of collectives per optimizer step",
                round(x.forwards, 1),
                unit=f"forwards, {x.n_rounds:g} rounds of collectives",
            )
        )
    return evidence


def _offenders(comm: Communication) -> list[Offender]:
    """The collectives of the step, most time first."""
    return top_offenders(
        [
            {
                "collective": row.name.split("(")[0],
                "calls_per_step": round(row.calls_per_step, 1),
                "us_per_step": round(row.us_per_step, 1),
                "exposed_us_per_step": round(row.exposed_us_per_step, 1),
            }
            for row in comm.collectives.head(8).itertuples()
        ],
        "collective",
    )


def _basis(x: _Exposed, saving: float, new_step: float, note: str) -> str:
    """How the new step was reckoned: from skipping all rounds but one, or from hiding the exposed time."""
    how = (
        f"{x.n_rounds:g} rounds of collectives per step, all but one skipped with no_sync: "
        f"({x.n_rounds:g} − 1)/{x.n_rounds:g} × {x.comm_us:,.0f} µs of collective transfer"
        if x.skip > x.hide
        else f"{x.exposed:,.0f} µs exposed − {x.host_idle:,.0f} µs the GPU already waits for the host"
    )
    return (
        f"new step = {x.step:,.0f} − {saving:,.0f} µs ({how}) = {new_step:,.0f} µs, never below the GPU "
        f"compute nor more than the step's exposed communication ({x.removable:,.0f} µs); hiding it is "
        f"bounded by min(communication {x.comm_us:,.0f}, compute {x.compute:,.0f}) − "
        f"{x.comm.comm_overlapped_us:,.0f} µs already hidden = {x.hide_bound:,.0f} µs; an upper "
        f"bound (a straggling rank is not fixed by overlap){note}; {x.basis}"
    )
