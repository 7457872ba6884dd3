"""Who waits for whom in the steps diagnose times without the profiler (arrivals.json of every rank).

The gloo_* captures are REAL CPU captures (gloo backend, fixtures/workloads/rank_skew.py, recorded by
fixtures/record_gloo.py on a 2-core CPU machine, 2026-12-06): rank 1 sleeps 20 ms in `load_batch`
before every step (host-only straggler), or runs 60 extra 256² matmuls (work), or nothing (control).
The 8-rank folder is SYNTHETIC (tests/synthetic_arrivals.py plus arrivals.json written here).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from conftest import ROOT, diagnosis_of
from diagnose.base.errors import InputError
from diagnose.model.config import Config
from diagnose.model.invariants import violations
from diagnose.ranks.analyse import analyse_ranks
from diagnose.trace.rank_files import rank_sources
from diagnose.rankset.timed import read_timed

sys.path.insert(0, str(Path(__file__).parent))
import synthetic_arrivals  # noqa: E402

CAPTURES = ROOT / "fixtures" / "captures"
SYNTHETIC = ROOT / "fixtures" / "synthetic"
RANK_FOLDERS = sorted(p for base in (CAPTURES, SYNTHETIC) for p in base.iterdir() if p.is_dir() and rank_sources(p))


def _straggler(d):
    return next((f for f in d.findings if f.rule == "straggler"), None)


def _check_bound(d, f):
    """The estimate is under its bound: no more than the least any other rank waits per timed step."""
    timed = {r.rank: r for r in d.summary.ranks.timed_arrivals.per_rank}
    others = min(timed[r].wait_us for r in timed if r != f.ranks[0])
    assert 0 < f.recoverable_us <= others + 0.1


def test_host_only_straggler_is_named_with_its_host_cause():
    d = diagnosis_of(CAPTURES / "gloo_host_straggler")
    f = _straggler(d)
    assert f is not None and f.ranks == [1] and "basis: timed arrivals" in f.basis
    first = f.offenders[0]
    assert first.get("cause") == "input" and first.get("extra_work_us") < 0.1 * first.get("extra_host_us")
    assert "load_batch" in f.basis and any("load_batch" in (o.get("host_range") or "") for o in f.offenders)
    assert [x.id for x in f.fixes] == ["balance-ranks", "dataloader-workers"] and "Rank 1" in f.fixes[0].how
    _check_bound(d, f)


def test_work_straggler_is_named_on_its_work():
    d = diagnosis_of(CAPTURES / "gloo_work_straggler")
    f = _straggler(d)
    assert f is not None and f.ranks == [1] and f.offenders[0].get("cause") == "work"
    assert f.offenders[0].get("extra_work_us") > f.offenders[0].get("extra_host_us")
    assert [x.id for x in f.fixes] == ["balance-ranks", "shape-bucketing"]
    _check_bound(d, f)


def test_four_ranks_name_the_late_one_and_who_waits():
    d = diagnosis_of(CAPTURES / "gloo4_host_straggler")
    f = _straggler(d)
    assert f is not None and f.ranks == [1] and "ranks 0, 2, 3 wait for it" in f.basis
    _check_bound(d, f)


def test_healthy_control_is_quiet_and_says_why():
    d = diagnosis_of(CAPTURES / "gloo_healthy")
    assert _straggler(d) is None
    detail = next(c.detail for c in d.checked if c.rule == "straggler")
    assert detail.startswith("timed arrivals:")


@pytest.mark.parametrize("folder", RANK_FOLDERS, ids=lambda p: p.name)
def test_no_wait_is_longer_than_its_step(folder):
    """Every rank folder of fixtures: each wait on the basis of the step printed beside it."""
    data = diagnosis_of(folder).to_dict()
    assert violations(data) == []
    for r in data["summary"]["ranks"]["per_rank"]:
        assert r["wait_us"] <= (r.get("profiled_step_us") or r["step_us"]) + 0.1
        if r.get("timed_wait_us") is not None:
            assert r["timed_wait_us"] <= r["timed_step_us"] + 0.1
    for r in data["details"]["ranks"]:  # each rank's budget: its wait on the basis of its step
        assert r["wait_us"] <= r["step_us"] + 0.1, r
    timed = data["summary"]["ranks"].get("timed_arrivals")
    for r in (timed or {}).get("per_rank", []):
        assert r["wait_us"] <= r["step_us"] + 0.1 and r["lateness_us"] <= r["step_us"] + 0.1


def test_a_bad_arrivals_file_is_one_line(tmp_path):
    (tmp_path / "arrivals.json").write_text(json.dumps({"schema": "x", "rank": "one"}))
    with pytest.raises(InputError, match="arrivals.json"):
        read_timed(tmp_path)
    assert read_timed(tmp_path / "nowhere") is None


def _write_timed(folder: Path, world: int, behind_us: dict, steps: int = 10, calls: int = 4) -> None:
    """SYNTHETIC arrivals.json per rank: every rank's clock offset at random, rank r entering each call
    `behind_us[r]` after the others; steps of 60 ms."""
    rng = random.Random(0)
    for r in range(world):
        offset = 0.0 if r == 0 else rng.uniform(-5000, 5000)
        rows = []
        for s in range(steps):
            start = 1e6 + s * 60_000.0
            rows.append(
                {
                    "start_us": start + offset,
                    "end_us": start + 60_000.0 + offset,
                    "calls": [
                        [
                            f"0|{s * calls + c}|allreduce|1000",
                            start + 10_000 + 5000 * c + behind_us.get(r, 0) + offset,
                            None,
                        ]
                        for c in range(calls)
                    ],
                }
            )
        doc = {"schema": "diagnose.arrivals/1", "rank": r, "world_size": world, "offset_us": offset, "steps": rows}
        (folder / f"rank-{r}" / "arrivals.json").write_text(json.dumps(doc))


def test_eight_dlrm_style_ranks_name_the_late_ranks_not_the_busiest(tmp_path):
    """8 SYNTHETIC ranks: rank 3 runs the most GPU work (16 ms extra per step, while it waits) but arrives
    with the rest; ranks 7, 2 and 6 arrive 20, 14 and 9 ms late in the timed steps, rank 7 held up by
    its input pipeline in the profiled ones too."""
    folder = synthetic_arrivals.make_folder(
        tmp_path / "ranks",
        CAPTURES / "ddp_heavy_healthy" / "rank-0" / "trace.json.gz",
        8,
        late=7,
        delay_us=20_000.0,
        range_name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        extra_gpu={3: 16_000.0},
    )
    _write_timed(folder, 8, {7: 20_000.0, 2: 14_000.0, 6: 9000.0})
    d = analyse_ranks(folder, Config(), workers=2)
    per_rank = {r.rank: r for r in d.summary.ranks.per_rank}
    assert max(per_rank, key=lambda r: per_rank[r].work_us) == 3
    f = _straggler(d)
    assert f is not None and f.ranks == [7, 2, 6] and f.offenders[0].get("cause") == "input"
    waits = f.offenders[0].get("wait_us_per_step")
    assert waits["7"] == 0 and waits["2"] == pytest.approx(6000.0) and waits["0"] == pytest.approx(20_000.0)
    assert 0 < f.recoverable_us <= 6000.0 + 0.1  # at most what the least-waiting other rank (2) waits
    assert violations(d.to_dict()) == []


def test_a_fresh_two_rank_gloo_capture_end_to_end(tmp_path):
    """Through diagnose's own --nproc-per-node 2 path: rank 1's 30 ms host delay is found (~10 s here)."""
    pytest.importorskip("torch")
    from diagnose.capture.distributed import Launch, run_distributed
    from diagnose.capture.spec import CaptureSpec

    spec = CaptureSpec(
        path=str(ROOT / "fixtures" / "workloads" / "rank_skew.py"),
        function="make_step",
        mode="function",
        out_dir=str(tmp_path / "cap"),
        params={"host_delay_ms": 30, "layers": 2, "dim": 128},
        warmup=1,
        steps=2,
        timed_steps=10,
    )
    meta = run_distributed(spec, Launch(2), timeout_s=120)
    assert meta["status"] == "ok", meta.get("error")
    assert all((tmp_path / "cap" / f"rank-{r}" / "arrivals.json").exists() for r in (0, 1))
    f = _straggler(analyse_ranks(tmp_path / "cap", Config(), workers=1))
    assert f is not None and f.ranks[0] == 1 and f.offenders[0].get("cause") == "input"


def _gpu_profile(rank: int, gpu_late_us: float, host_late_us: float, work_us: float, clock: float):
    """A SYNTHETIC rank profile of 6 steps × 3 collectives: its kernels start `gpu_late_us` after the
    others' (its launches `host_late_us` after), every collective ending together."""
    from diagnose.rankset.profile import RankProfile

    steps = []
    for s in range(6):
        base = s * 100_000.0
        rows = []
        for c in range(3):
            at = base + 10_000.0 + 20_000.0 * c
            end = at + 15_000.0  # after the latest start: every collective ends together
            rows.append(
                [f"pg0|{c}|AllReduce|[4]", at - 500 + host_late_us + clock, at + gpu_late_us + clock, end + clock, 0, 0]
            )
        steps.append(rows)
    return RankProfile(
        rank=rank,
        source=f"r{rank}",
        step_us=100_000.0,
        compute_us=work_us,
        comm_us=0.0,
        exposed_us=0.0,
        steps_compute_us=[work_us] * 6,
        steps_collectives=[[]] * 6,
        op_us={},
        buckets=[],
        profiled_step_us=100_000.0,
        steps_arrivals=steps,
    )


def test_trace_only_gpu_lateness_survives_host_skew_and_names_the_late_ranks():
    """8 SYNTHETIC ranks of a trace from elsewhere (no timed arrivals), DLRM-style: rank 3 has the most
    GPU work but starts its collectives in time; ranks 7, 2 and 6 start theirs 12, 9 and 6 ms late on
    the GPU (of a 100 ms step) while their hosts launched them in time; rank 5's GPU is 8 ms late only
    because its host launched 8 ms late (what the profiler's pace of a host does): the finding names 7, 2
    and 6, not 3 or 5."""
    from types import SimpleNamespace

    from diagnose.rankset.model import RankSet
    from diagnose.rules.straggler import Straggler

    late = {7: 12_000.0, 2: 9000.0, 6: 6000.0}
    profiles = [
        _gpu_profile(
            r,
            gpu_late_us=late.get(r, 8000.0 if r == 5 else 0.0),
            host_late_us=8000.0 if r == 5 else 0.0,
            work_us=60_000.0 if r == 3 else 50_000.0,
            clock=1000.0 * r,
        )
        for r in range(8)
    ]
    ranks = RankSet(profiles)
    assert ranks.slowest().rank == 3
    t = {th.name: th.default for th in Straggler.thresholds}
    f = Straggler().check(SimpleNamespace(ranks=ranks), t)
    assert f.rule == "straggler" and f.ranks == [7, 2, 6] and "basis: GPU arrivals" in f.basis
    rows = {o.rank: o for o in f.offenders}
    assert rows[7].get("gpu_late_us_per_step") == pytest.approx(12_000.0, abs=1.0)
    assert rows[7].get("host_explains_us") == pytest.approx(0.0, abs=1.0) and 5 not in rows
    assert 0 < f.recoverable_us <= min(ranks.arrival.wait_us[r] for r in range(8) if r != 7) + 0.1
