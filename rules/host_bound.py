"""host-bound: the GPU idles while the host does work that launches nothing.

**Signal.** Host-wait gaps (the GPU finished and the next launch had not been issued) are split
into stretches where the host made CUDA calls at most `timeline.host_silence_us` (200 µs) apart,
which is dispatch (the launch-overhead rule), and *silent* stretches longer than that. Host work
is the silent time covered by CPU ops that issue no CUDA call and by DataLoader ranges, minus
anything inside an op that does launch (a slow `aten::linear` under the profiler is dispatch):
data loading and augmentation, CPU-side tensor preprocessing, tokenisation. Silent time that no
recorded op covers is not claimed, since the trace cannot say what the host did then (pure-Python
work shows up there; the report's timeline still shows the idle). The rule fires when host work
is at least `min_host_share` of the step, and names the ops and ranges that fill it (a
DataLoader's `enumerate(DataLoader)#…__next__` range shows up as itself).

**Threshold.** 20 % of the step. Calibrated on the H200 captures: the DataLoader loop that
augments its images in the main process spends 93 % of its step there; the same loop with four
workers and pinned memory 0 %; the training loops with and without per-layer `.item()` logging
2–3 %, the batch-1 decodes and the matmuls 0 % (their silent stretches sit inside
kernel-launching ops).

**Why not CUDA graphs.** A graph removes launch cost, not host work: the batch still has to be
made before the graph can run. Here the fix is to move that work off the critical path.

**Fixes.** `dataloader-workers` (num_workers > 0, persistent workers, prefetching) and
`pinned-memory` (pin_memory=True with non_blocking copies), the latter named first when the
step copies from pageable host memory.

**Estimate.** With the host work overlapped with GPU execution, the step shrinks by that work,
but not below the GPU busy time: new step = max(step − host work, GPU busy); speedup =
step ÷ new step. Host-side time is rescaled to the unprofiled step time when it was measured.
"""
from __future__ import annotations

from diagnose.engine import Quiet, Rule, Threshold
from diagnose.findings import Evidence, Finding
from diagnose.fixes import fix
from diagnose.metrics.host import host_work


class HostBound(Rule):
    """Host work that launches nothing starves the GPU → workers, pinned memory."""

    id = "host-bound"
    title = "Host-bound: the GPU waits while the host prepares data"
    cheat_sheet = {
        "bottleneck": "the host is busy with something other than launching kernels",
        "signal": "GPU idle while the host runs CPU work that issues no CUDA calls (data loading, "
                  "preprocessing, pageable copies)",
        "fix": "DataLoader workers, pinned memory with non-blocking copies",
        "impact": "the step shrinks to the GPU's own time once input preparation overlaps it",
    }
    needs = ("gpu", "launch-links", "steps")
    thresholds = (
        Threshold("min_host_share", 0.20, "fraction", "fire when host work is at least this share of the step"),
        Threshold("high_share", 0.50, "fraction", "host-work share at which severity is high"),
    )

    def check(self, ctx, t):
        """Measure host work inside the GPU's idle time and name what filled it."""
        m = ctx.metrics
        budget = m.budget
        n = budget.n_steps
        work_seen, fillers = host_work(ctx.trace, m.timeline.silent)
        work = work_seen / n * budget.host_scale
        share = budget.share(work)
        pageable = _pageable_copies(m.step_kernels, n)
        if share < t["min_host_share"]:
            return Quiet(f"host work in GPU idle time {share:.0%} of the step < {t['min_host_share']:.0%}")
        new_step = max(budget.step_us - work, budget.busy_us, 1e-9)
        speedup = budget.step_us / new_step
        evidence = [
            Evidence("host work while the GPU idles", round(share * 100, 1), ">=", t["min_host_share"] * 100, "%"),
            Evidence("host work per step", round(work, 1), unit="µs"),
            Evidence("GPU busy per step", round(budget.share(budget.busy_us) * 100, 1), unit="%"),
        ]
        if pageable["count"]:
            evidence.append(Evidence("pageable host-to-device copies per step", pageable["count"]))
            evidence.append(Evidence("time in pageable copies per step", round(pageable["us"], 1), unit="µs"))
        loader = fillers["name"].str.contains("DataLoader").any() if len(fillers) else False
        fixes = [fix("dataloader-workers", code=_loader_code()), fix("pinned-memory", code=_pinned_code())]
        if pageable["count"] and not loader:
            fixes.reverse()
        return Finding(
            rule=self.id,
            severity="high" if share >= t["high_share"] else "medium" if share >= 0.3 else "low",
            title=self.title,
            evidence=evidence,
            offenders=[{"host work": row.name, "us_per_step": round(row.overlap_us / n * budget.host_scale, 1)}
                       for row in fillers.head(8).itertuples()],
            fixes=fixes,
            est_speedup=round(speedup, 2),
            recoverable_us=round(budget.step_us - new_step, 1),
            basis=(f"new step = max({budget.step_us:,.0f} − {work:,.0f} µs of host work, "
                   f"{budget.busy_us:,.0f} µs GPU busy) = {new_step:,.0f} µs; {budget.basis}"),
            why=("The GPU can only run what the host has queued. When the main process spends its time "
                 "decoding, augmenting or copying the next batch, nothing is queued and the GPU idles. "
                 "CUDA graphs do not help here: the batch still has to be made. Doing that work in "
                 "DataLoader worker processes, ahead of time, and copying from pinned memory without "
                 "blocking, lets it overlap with the GPU's work on the current batch."),
        )


def _pageable_copies(ops, n: int) -> dict:
    copies = ops[(ops["cat"] == "memcpy") & ops["name"].str.contains("Pageable")]
    return {"count": round(len(copies) / n, 1), "us": float(copies["dur"].sum()) / n}


def _loader_code() -> str:
    return ("loader = DataLoader(dataset, batch_size=..., num_workers=8,\n"
            "                    persistent_workers=True, prefetch_factor=4, pin_memory=True)")


def _pinned_code() -> str:
    return ("batch = batch.pin_memory()          # or DataLoader(..., pin_memory=True)\n"
            "batch = batch.to(\"cuda\", non_blocking=True)")
