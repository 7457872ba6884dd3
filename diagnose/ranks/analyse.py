"""Analyse a folder of rank traces: each rank measured on its own, then the cross-rank view.

The parent analyses the first rank itself while worker processes (`workers` in all, the parent
counted, so at most that many traces are in memory at once) take the others; a worker sends back
only the rank's compact profile (profile.py) and the single-rank findings, never the trace. The
parent builds the RankSet (model.py) and runs every rule on the reference rank's trace (the lowest)
with the RankSet in the context: the single-rank rules as on one trace, the cross-rank rules
(straggler, exposed-comm across ranks) on all ranks. When the reference is the rank the parent
measured, its trace and views are reused; else its trace is loaded again. Each finding says on
which ranks it holds; a finding that holds on other ranks but not on the reference is taken from
the first of them. Peak memory is one trace per worker plus one in the parent, whatever the number
of ranks. A rank whose trace cannot be read is a failed rank: named (details.failed_ranks), the
others compared without it. With an `engine` (cluster.py: Dask), the engine measures every rank and
runs the reference's rules, and the parent holds only the ranks' results.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from diagnose.base.typed import typed
from diagnose.capture.guard import die_with_parent
from diagnose.ruleset.assemble import capture_summary, diagnose_trace
from diagnose.model.config import Config
from diagnose.rulebook.engine import Context, ordered, run_rules, verdict
from diagnose.base.errors import DiagnoseError, InputError
from diagnose.model.findings import Accounting, Bucket, Checked, Diagnosis, Finding, RankSummary
from diagnose.model.details import Capture, FailedRank, RankBudget, capture_of
from diagnose.metrics.accounting import largest_non_compute, with_rank_wait
from diagnose.trace.rank_files import RankSource, rank_sources
from diagnose.rankset.model import RankSet
from diagnose.rankset.profile import RankProfile, distributed_rank, rank_profile
from diagnose.rankset.timed import read_timed
from diagnose.rules import ALL_RULES
from diagnose.trace.load import load_target

CROSS_RANK_RULES = ("straggler", "exposed-comm")  # judged across ranks, not rank by rank
MAX_WORKERS = 4


def default_workers() -> int:
    """Worker processes: the cores this process may use, at most MAX_WORKERS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def analyse_rank(source: RankSource, config: Config, max_bytes: int | None = None) -> dict:
    """One rank, in a worker: its profile, its single-rank findings and what its capture said."""
    return _analysed_rank(source, config, max_bytes)[0]


def failed_rank(source: RankSource, why: str) -> dict:
    """analyse_rank's result for a rank that could not be analysed: the line that names it."""
    return {"failed": f"rank {source.rank}: {why}", "rank": source.rank, "path": str(source.path)}


def reference_diagnosis(path: str, config: Config, ranks: RankSet, max_bytes: int | None = None) -> Diagnosis:
    """Every rule on the reference rank's trace (loaded again), the cross-rank ones with `ranks`."""
    trace = load_target(Path(path), max_bytes=max_bytes or None)
    return diagnose_trace(trace, config, ranks=ranks)


def _analysed_rank(source: RankSource, config: Config, max_bytes: int | None) -> tuple[dict, Context | None]:
    """analyse_rank's result, with the Context it was measured in (trace and Metrics); a trace that
    cannot be read (missing, truncated, not a trace) is a failed rank, with no Context."""
    try:
        trace = load_target(source.path, max_bytes=max_bytes or None)
    except DiagnoseError as exc:
        return failed_rank(source, str(exc)), None
    rank, how = source.rank, source.how
    if how != "folder":
        found, _ = distributed_rank(trace)
        if found is not None:
            rank, how = found, "distributedInfo"
    ctx = Context(trace, config)
    results = run_rules(ctx, [r for r in ALL_RULES if r.id not in CROSS_RANK_RULES])
    profile = rank_profile(ctx.metrics, rank, str(source.path), how)
    profile.findings = [f.rule for f in results.findings]
    profile.timed_arrivals = read_timed(source.path)
    result = {
        "profile": profile.to_dict(),
        "findings": {f.rule: f for f in results.findings},
        "capture": capture_summary(trace),
        "path": str(source.path),
        "how": how,
    }
    return result, ctx


def analyse_ranks(
    folder: Path,
    config: Config | None = None,
    *,
    workers: int | None = None,
    on_progress=None,
    max_bytes: int | None = None,
    engine=None,
    target: str | None = None,
    distributed: dict | None = None,
) -> Diagnosis:
    """The Diagnosis of a rank folder (see the module docstring); InputError when it holds no ranks,
    or fewer than two that could be read. `engine` (cluster.py's RankEngine, e.g. a Dask cluster)
    measures the ranks and runs the reference's rules in place of the local pool. A run diagnose
    launched on the ranks names its own `target` (the workload, not the folder) and how torchrun
    launched it (`distributed`, into the capture)."""
    config = config or Config()
    sources = rank_sources(Path(folder))
    if not sources:
        raise InputError(f"{folder}: no rank traces in it (rank-K/ folders or several kineto trace files)")
    report = on_progress or (lambda event: None)
    if engine is None:
        results, kept = _run_workers(sources, config, workers or default_workers(), max_bytes, report)
    else:
        results, kept = engine.map_ranks(sources, config, max_bytes, report), None
    failed = sorted((r for r in results if "failed" in r), key=lambda r: (r["rank"], r["path"]))
    chosen, warnings = _one_per_rank([r for r in results if "failed" not in r], failed)
    profiles = [RankProfile.from_dict(r["profile"]) for r in chosen]
    reference = chosen[0]
    ranks = RankSet(profiles, reference=profiles[0].rank)
    report({"phase": "rules"})
    if kept is not None and reference is results[0]:  # the parent measured the reference: its views are reused
        ref = diagnose_trace(kept.trace, config, ranks=ranks, context=kept)
    else:
        del kept  # one trace in the parent at a time
        ref = (engine or _Here).reference(reference["path"], config, ranks, max_bytes)
    findings, checked = _merged_findings(ref, chosen)
    summary = msgspec.structs.replace(
        ref.summary,
        ranks=typed(ranks.summary(), RankSummary),
        accounting=_with_rank_wait(ref.summary.accounting, ranks),
    )
    failed_ranks = [FailedRank(rank=r["rank"], source=r["path"], error=r["failed"]) for r in failed] or None
    lost = [f"{r['failed']} (not analysed; the other {len(chosen)} ranks were)" for r in failed]
    # the reference's diagnosis with the ranks in it, made anew: the merged findings and the rank rows are
    # held to diagnose/model/invariants.py again and the verdict written of them
    capture = _failed_capture(chosen) or ref.capture
    if distributed is not None and capture is not None:
        capture = msgspec.structs.replace(capture, distributed=distributed)
    return Diagnosis.assemble(
        target=target or str(folder),
        device=ref.device,
        summary=summary,
        findings=findings,
        skipped=ref.skipped,
        checked=checked,
        capture=capture,
        details=msgspec.structs.replace(
            ref.details, ranks=typed(ranks.budgets(), list[RankBudget]), failed_ranks=failed_ranks
        ),
        warnings=[*lost, *warnings, *ranks.warnings, *ref.warnings],
        verdict=verdict,
    )


def _with_rank_wait(accounting: Accounting | None, ranks: RankSet) -> Accounting | None:
    """The reference's step accounting with its exposed communication split into transfer and the wait
    for other ranks: the same exposed time as exposed-comm's (metrics/accounting.py with_rank_wait)."""
    if not accounting or not accounting.buckets:
        return accounting
    buckets = with_rank_wait(msgspec.to_builtins(accounting.buckets), ranks.wait_us(ranks.reference))
    return msgspec.structs.replace(
        accounting, buckets=typed(buckets, list[Bucket]), largest_non_compute=largest_non_compute(buckets)
    )


def _run_workers(sources, config, workers: int, max_bytes, report) -> tuple[list[dict], Context | None]:
    """analyse_rank on every source, with the Context of the first (None when it failed): the parent analyses the first source
    itself (the reference rank, as a rule, whose views the cross-rank pass then reuses) while
    `workers` - 1 processes take the others (none when `workers` is 1: all in this process)."""
    total = len(sources)
    report({"phase": "ranks", "done": 0, "total": total})
    out: list = [None] * total
    if workers <= 1 or total == 1:
        out[0], kept = _analysed_rank(sources[0], config, max_bytes)
        report({"phase": "ranks", "done": 1, "total": total})
        for i, source in enumerate(sources[1:], start=1):
            out[i] = analyse_rank(source, config, max_bytes)
            report({"phase": "ranks", "done": i + 1, "total": total})
        return out, kept
    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=max(1, workers - 1), mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),)
    )
    try:
        futures = {pool.submit(analyse_rank, s, config, max_bytes): i for i, s in enumerate(sources) if i}
        out[0], kept = _analysed_rank(sources[0], config, max_bytes)
        report({"phase": "ranks", "done": 1, "total": total})
        for done, future in enumerate(concurrent.futures.as_completed(futures), start=2):
            out[futures[future]] = future.result()  # an InputError is re-raised here, as one line
            report({"phase": "ranks", "done": done, "total": total})
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)
    return out, kept


def _stop_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """End the pool at once (Ctrl-C, SIGTERM, a rank that failed): leaving its `with` block would wait
    for every rank still queued. The workers are killed: they only read traces, and a worker that a
    signal interrupts takes the next rank from the queue rather than stopping."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.kill()
    for worker in workers:
        worker.join(5)


class _Here:
    """The local path's reference: the parent loads the reference rank's trace again."""

    reference = staticmethod(reference_diagnosis)


def _one_per_rank(results: list[dict], failed: Sequence[dict] = ()) -> tuple[list[dict], list[str]]:
    """One result per rank, sorted; of several files of one rank (one per step), the one with the most
    steps, else the last. InputError, naming the failed ranks, when fewer than two ranks remain."""
    if failed and len({r["profile"]["rank"] for r in results}) < 2:
        more = f" (and {len(failed) - 1} more failed ranks)" if len(failed) > 1 else ""
        raise InputError(f"{failed[0]['failed']}{more}: comparing ranks needs at least two that can be read")
    by_rank: dict[int, list[dict]] = {}
    for r in results:
        by_rank.setdefault(r["profile"]["rank"], []).append(r)
    warnings, chosen = [], []
    for rank in sorted(by_rank):
        group = by_rank[rank]
        if len(group) > 1:
            warnings.append(
                f"{len(group)} traces of rank {rank} (one per step?): the one with the most steps is "
                "compared with the other ranks"
            )
        chosen.append(max(enumerate(group), key=lambda x: (len(x[1]["profile"]["steps_compute_us"]), x[0]))[1])
    if len(chosen) < 2:
        raise InputError(
            f"{len(results)} traces, all of rank {chosen[0]['profile']['rank']}: comparing ranks needs "
            "at least two (analyse one file on its own with `diagnose FILE`)"
        )
    return chosen, warnings


def _merged_findings(d: Diagnosis, chosen: list[dict]) -> tuple[list[Finding], list[Checked]]:
    """The reference's findings, each saying on which ranks it holds, with those that hold only on other
    ranks added (and no longer quiet), by impact; and the quiet rules left."""
    fired: dict[str, list[int]] = {}
    for r in chosen:
        for rule in r["findings"]:
            fired.setdefault(rule, []).append(r["profile"]["rank"])
    present = {f.rule for f in d.findings}
    findings = [
        f if f.ranks is not None else msgspec.structs.replace(f, ranks=fired.get(f.rule, [])) for f in d.findings
    ]
    checked = list(d.checked)
    for rule, ranks in fired.items():
        if rule in present:
            continue
        first = next(r for r in chosen if r["profile"]["rank"] == ranks[0])
        theirs: Finding = first["findings"][rule]
        findings.append(msgspec.structs.replace(theirs, ranks=ranks))
        checked = [c for c in checked if c.rule != rule]
    return ordered(findings), checked


def _failed_capture(chosen: list[dict]) -> Capture | None:
    """When a rank's workload failed, that rank's capture, its error named by rank (None when none failed)."""
    for r in chosen:
        capture = r["capture"] or {}
        if capture.get("status") not in (None, "ok"):
            error = dict(capture.get("error") or {})
            error["message"] = f"rank {r['profile']['rank']}: {error.get('message', '')}"
            return capture_of(capture, error=error, rank=r["profile"]["rank"])
    return None
