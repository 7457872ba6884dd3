"""Who waits for whom: collectives matched across ranks, arrivals on aligned clocks, the straggler by
arrival (GPU work or host time as its cause), and bounded overlap estimates.

The rank folders here are SYNTHETIC (tests/synthetic_arrivals.py): copies of one real 2×H200 rank
(ddp_heavy_healthy rank 0) with their own clocks, one of them held up by a named host range at the
start of every step, another given extra GPU work that does not delay its arrival. The real rank
folders of fixtures/captures are analysed as they are.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT, diagnosis_of
from diagnose.model.config import Config
from diagnose.model.invariants import violations
from diagnose.metrics.accounting import exposed_comm_split, with_rank_wait
from diagnose.ranks.analyse import analyse_ranks
from diagnose.trace.rank_files import rank_sources

sys.path.insert(0, str(Path(__file__).parent))
import synthetic_arrivals  # noqa: E402

CAPTURES = ROOT / "fixtures" / "captures"
SOURCE = CAPTURES / "ddp_heavy_healthy" / "rank-0" / "trace.json.gz"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DELAY_US = 20_000.0
RANK_FOLDERS = sorted(p for p in CAPTURES.iterdir() if p.name.startswith(("ddp_", "fsdp_")) and rank_sources(p))


def _real(name: str):
    """The Diagnosis of one real rank folder of fixtures/captures, made once per session (conftest)."""
    return diagnosis_of(CAPTURES / name)


def _straggler(d):
    return next((f for f in d.findings if f.rule == "straggler"), None)


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory):
    """8 SYNTHETIC ranks: rank 5's host loads data 20 ms longer at every step's start; rank 3 runs
    16 ms of extra GPU work per step while it waits (the most GPU work, never the last to arrive)."""
    folder = tmp_path_factory.mktemp("eight") / "ranks"
    synthetic_arrivals.make_folder(
        folder, SOURCE, 8, late=5, delay_us=DELAY_US, range_name=LOADER, extra_gpu={3: 16_000.0}
    )
    return analyse_ranks(folder, Config(), workers=2)


def test_eight_ranks_name_the_late_arriver_not_the_rank_that_works_most(eight_ranks):
    per_rank = {r.rank: r for r in eight_ranks.summary.ranks.per_rank}
    assert max(per_rank, key=lambda r: per_rank[r].work_us) == 3  # the most GPU work is rank 3's
    f = _straggler(eight_ranks)
    assert f is not None and f.ranks == [5] and f.offenders[0].rank == 5
    assert f.offenders[0].label == "rank" and f.offenders[0].get("cause") == "input"
    assert "basis: arrivals" in f.basis and LOADER in f.basis
    # wait per rank: every other rank waits the hold-up, rank 5 (almost) nothing
    waits = f.offenders[0].get("wait_us_per_step")
    assert all(waits[str(r)] == pytest.approx(DELAY_US, rel=0.02) for r in range(8) if r != 5)
    assert waits["5"] < 0.1 * DELAY_US
    assert sum("wait in collectives" in e.metric for e in f.evidence) == 8
    assert "DataLoader" in f.fixes[0].how and "Rank 5" in f.fixes[0].how


def test_arrivals_align_the_ranks_clocks_by_collective_ends(eight_ranks):
    arrivals = eight_ranks.summary.ranks.arrivals
    offsets = arrivals.clock_offset_us
    # the synthetic clocks: rank k's ts shifted by 1000 k − 3000 (k mod 3) µs
    for k in range(8):
        assert offsets[str(k)] == pytest.approx(1000.0 * k - 3000.0 * (k % 3), abs=1.0)
    assert arrivals.end_spread_us < 1.0 and arrivals.matched == 39
    assert "kernel end times" in arrivals.basis


def test_a_host_only_straggler_is_found_with_its_host_cause(tmp_path):
    folder = synthetic_arrivals.make_folder(
        tmp_path / "ranks", SOURCE, 2, late=1, delay_us=DELAY_US, range_name="log_metrics"
    )
    d = analyse_ranks(folder, Config(), workers=1)
    f = _straggler(d)
    assert f is not None and f.ranks == [1]
    assert f.offenders[0].get("cause") == "logging" and f.offenders[0].get("extra_gpu_work_us") < 0.01 * DELAY_US
    assert "host time outside CUDA calls" in f.basis and "log_metrics" in f.basis
    assert "asynchronous" in f.fixes[0].how
    assert f.recoverable_us == pytest.approx(DELAY_US, rel=0.02)


def test_a_healthy_synthetic_control_stays_quiet(tmp_path):
    folder = synthetic_arrivals.make_folder(tmp_path / "ranks", SOURCE, 8)
    d = analyse_ranks(folder, Config(), workers=2)
    assert _straggler(d) is None
    detail = next(c.detail for c in d.checked if c.rule == "straggler")
    assert "no rank arrived last" in detail


@pytest.mark.parametrize("name", ["ddp_healthy", "ddp_heavy_healthy", "fsdp_prefetch", "fsdp_no_prefetch"])
def test_real_controls_stay_quiet_and_say_why(name):
    d = _real(name)
    assert _straggler(d) is None
    detail = next(c.detail for c in d.checked if c.rule == "straggler")
    assert "arrived last" in detail and "neither explains it" in detail


def test_real_stragglers_name_their_rank_and_basis():
    heavy = _straggler(_real("ddp_heavy_straggler"))
    assert heavy.ranks == [1] and "basis: arrivals" in heavy.basis and heavy.offenders[0].get("cause") == "gpu"
    paced = _straggler(_real("ddp_straggler"))
    # the rank with the extra work is not the last to arrive under the profiler: judged by work
    assert paced.ranks == [1] and "basis: work" in paced.basis and "rank 0 arrived last" in paced.basis


@pytest.mark.parametrize("folder", RANK_FOLDERS, ids=lambda p: p.name)
def test_no_estimate_exceeds_its_bound(folder):
    data = _real(folder.name).to_dict()
    assert violations(data) == []
    step = data["summary"]["step_time_us"]
    buckets = {b["id"]: b for b in data["summary"]["accounting"]["buckets"]}
    for f in data["findings"]:
        if f.get("est_speedup") and f.get("recoverable_us") is not None:
            assert f["est_speedup"] <= step / (step - f["recoverable_us"]) + 0.006, f["rule"]
    comm = next((f for f in data["findings"] if f["rule"] == "exposed-comm"), None)
    if comm is not None:
        assert comm["recoverable_us"] <= buckets["comm_exposed"]["us_per_step"] + 0.05
        bound = next(e for e in comm["evidence"] if e["metric"].startswith("most that overlap can still hide"))
        assert "bounded by min(communication" in comm["basis"] and bound["value"] >= 0


def test_the_breakdown_and_exposed_comm_show_the_same_exposed_time():
    d = _real("ddp_exposed")
    ranks = d.summary.ranks
    reference = next(r for r in ranks.per_rank if r.rank == ranks.reference)
    buckets = {b.id: b for b in d.summary.accounting.buckets}
    detail = next((c.detail for c in d.checked if c.rule == "exposed-comm"), None) or next(
        f.basis for f in d.findings if f.rule == "exposed-comm"
    )
    transfer, wait = exposed_comm_split(reference.exposed_comm_us, reference.wait_us)
    assert f"({transfer:,.0f} µs on rank {ranks.reference})" in detail
    if wait:
        assert buckets["comm_wait"].us_per_step > 0
    assert sum(b.share for b in buckets.values() if b.in_sum) == pytest.approx(1.0, abs=1e-9)


def test_overlap_hides_at_most_min_of_communication_and_compute():
    """The MI300X case of the issue: 15.6 ms of communication a step against 9.6 ms of compute."""
    buckets = [
        {"id": "compute", "us_per_step": 9600.0, "share": 0.38, "in_sum": True},
        {"id": "comm_exposed", "us_per_step": 15600.0, "share": 0.62, "in_sum": True},
    ]
    split = with_rank_wait(buckets, 4000.0)
    assert [b["id"] for b in split] == ["compute", "comm_exposed", "comm_wait"]
    assert split[1]["us_per_step"] == 11600.0 and split[2]["us_per_step"] == 4000.0
    assert sum(b["share"] for b in split) == 1.0
    assert exposed_comm_split(100.0, 250.0) == (0.0, 100.0)


def test_findings_json_carries_the_arrivals(eight_ranks, tmp_path):
    data = json.loads(json.dumps(eight_ranks.to_dict()))
    arrivals = data["summary"]["ranks"]["arrivals"]
    rows = {r["rank"]: r for r in arrivals["per_rank"]}
    assert rows[5]["last_share"] == 1.0 and rows[5]["late_steps"] == 1.0
    assert rows[5]["lateness_us"] == pytest.approx(DELAY_US, rel=0.02)


def _arrival_profile(rank, rows, clock=0.0):
    """A profile with one step of arrivals: rows of (key, host, start, end) on this rank's clock."""
    from diagnose.rankset.profile import RankProfile

    return RankProfile(
        rank=rank,
        source=f"r{rank}",
        step_us=10_000.0,
        compute_us=5000.0,
        comm_us=0.0,
        exposed_us=0.0,
        steps_compute_us=[5000.0],
        steps_collectives=[[]],
        op_us={},
        buckets=[],
        profiled_step_us=10_000.0,
        steps_arrivals=[[[k, h + clock, s + clock, e + clock, 0.0, 0.0] for k, h, s, e in rows]],
    )


def test_collectives_are_matched_by_key_not_by_time():
    """Rank 1 runs an extra collective of its own between the two shared ones, and its clock is 50 ms
    ahead: matching by key pairs the shared ones, the extra one is left out with a warning."""
    from diagnose.rankset.model import RankSet

    a = [("pg0|0|AllReduce|[4]", 0.0, 100.0, 600.0), ("pg0|1|AllReduce|[8]", 900.0, 1000.0, 1300.0)]
    b = [
        ("pg0|0|AllReduce|[4]", 350.0, 400.0, 600.0),
        ("pg1|0|Broadcast|[2]", 500.0, 650.0, 700.0),
        ("pg0|1|AllReduce|[8]", 950.0, 1000.0, 1300.0),
    ]
    ranks = RankSet([_arrival_profile(0, a), _arrival_profile(1, b, clock=50_000.0)])
    arr = ranks.arrival
    assert arr.matched == 2 and arr.offsets_us[1] == pytest.approx(50_000.0)
    assert any("some ranks only" in w for w in ranks.warnings)
    assert arr.wait_us == {0: 300.0, 1: 0.0} and arr.last_share == {0: 0.0, 1: 1.0}
    assert arr.transfer_us[0] == pytest.approx(200.0 + 300.0) and arr.latest() == 1
    assert ranks.wait_us(0) == 300.0  # the model's wait split is the arrivals'
