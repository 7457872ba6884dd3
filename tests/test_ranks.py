"""Several ranks of one job: discovery, the cross-rank model and rules, rank folders in trace
mode, bounded memory, and the `--nproc-per-node` capture path on CPU with gloo.

The two-rank folders are made at test time: HTA's real A100 DDP rank (rank 0) beside a SYNTHETIC
copy of it whose compute is slower (rank 1), and the hand-made SYNTHETIC folders of
fixtures/synthetic/ranks_*.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import PEER_TRACES, ROOT, SYNTHETIC
from diagnose.commands import main
from diagnose.model.config import Config
from diagnose.base.errors import InputError
from diagnose.ranks.analyse import analyse_ranks
from diagnose.trace.rank_files import is_rank_folder, rank_sources
from diagnose.rankset.model import RankSet
from diagnose.rankset.profile import RankProfile

sys.path[:0] = [str(ROOT / "fixtures" / "synthetic"), str(ROOT / "benchmarks")]
import make_synthetic_ranks  # noqa: E402

HTA_RANK = PEER_TRACES / "hta" / "nccl_parser_config" / "nccl_data.json.gz"


@pytest.fixture(scope="module")
def hta_pair(tmp_path_factory) -> Path:
    """HTA's real rank 0 and a SYNTHETIC slowed copy of it as rank 1 (names carry no rank)."""
    folder = tmp_path_factory.mktemp("hta_pair")
    real = make_synthetic_ranks.read(HTA_RANK)
    (folder / "a.pt.trace.json").write_text(json.dumps(make_synthetic_ranks.slowed_copy(real, 1)))
    shutil.copy(HTA_RANK, folder / "b.pt.trace.json.gz")
    return folder


@pytest.fixture(scope="module")
def hta_diagnosis(hta_pair):
    return analyse_ranks(hta_pair, Config(), workers=2)


def _profile(rank, compute, collectives, steps=2, ops=None):
    return RankProfile(
        rank=rank,
        source=f"r{rank}",
        step_us=1000.0,
        compute_us=compute,
        comm_us=0.0,
        exposed_us=sum(d for _, d in collectives),
        steps_compute_us=[compute] * steps,
        steps_collectives=[list(collectives)] * steps,
        op_us=ops or {},
        buckets=[],
    )


# --- discovery ---
def test_ranks_come_from_distributed_info_not_from_file_order(hta_diagnosis):
    per_rank = hta_diagnosis.summary.ranks.per_rank
    assert [(r.rank, r.rank_from) for r in per_rank] == [(0, "distributedInfo"), (1, "distributedInfo")]
    assert per_rank[0].source.endswith("b.pt.trace.json.gz")  # the real one is rank 0 by its distributedInfo


def test_rank_folders_and_file_names(tmp_path):
    for k in (0, 1, 10):
        (tmp_path / "caps" / f"rank-{k}").mkdir(parents=True)
    assert [s.rank for s in rank_sources(tmp_path / "caps")] == [0, 1, 10]
    files = tmp_path / "files"
    files.mkdir()
    for name in ("trace_rank3.json", "trace_rank_1.json.gz", "notes.txt"):
        (files / name).write_text("{}")
    assert [(s.rank, s.how) for s in rank_sources(files)] == [(1, "name"), (3, "name")]
    single = tmp_path / "single"
    single.mkdir()
    (single / "trace.json").write_text("{}")
    assert not is_rank_folder(single)


# --- the cross-rank model ---
def test_wait_is_a_collectives_duration_above_its_shortest_over_the_ranks():
    ranks = RankSet(
        [
            _profile(0, 1000, [["ncclAllReduce", 500.0], ["ncclAllReduce", 100.0]]),
            _profile(1, 1400, [["ncclAllReduce", 100.0], ["ncclAllReduce", 100.0]]),
        ]
    )
    assert ranks.wait_us(0) == pytest.approx(400.0) and ranks.wait_us(1) == 0.0
    assert ranks.transfer_us(0) == ranks.transfer_us(1) == pytest.approx(200.0)
    assert ranks.slowest().rank == 1


def test_uneven_collective_counts_compare_what_every_rank_ran_and_say_so():
    ranks = RankSet(
        [
            _profile(0, 1000, [["ncclAllReduce", 300.0], ["ncclBroadcast", 50.0]]),
            _profile(1, 1000, [["ncclAllReduce", 100.0]]),
        ]
    )
    assert ranks.wait_us(0) == pytest.approx(200.0)
    assert any("different numbers of collectives" in w for w in ranks.warnings)


def test_slow_ops_name_the_extra_work_and_leave_out_collectives():
    ranks = RankSet(
        [
            _profile(0, 1000, [], ops={"aten::mm": 900.0, "c10d::allreduce_": 500.0}),
            _profile(1, 1400, [], ops={"aten::mm": 900.0, "aten::extra": 400.0, "c10d::allreduce_": 10.0}),
        ]
    )
    assert [r["op"] for r in ranks.slow_ops(1)] == ["aten::extra"]


# --- the rules across ranks, on a real rank and its slowed copy ---
def test_straggler_names_the_slowed_rank_on_the_real_pair(hta_diagnosis):
    straggler = next(f for f in hta_diagnosis.findings if f.rule == "straggler")
    assert straggler.ranks == [1] and straggler.offenders[0].rank == 1
    assert straggler.fixes[0].id == "balance-ranks"
    assert "aten::convolution_backward" in [o.name for o in straggler.offenders if o.label == "op"]
    assert hta_diagnosis.findings[0].rule == "straggler"


def test_exposed_comm_counts_only_transfer_across_ranks(hta_diagnosis):
    # alone, HTA's rank already stays quiet (5.9 % exposed); across ranks its exposed time is mostly wait
    assert not any(f.rule == "exposed-comm" for f in hta_diagnosis.findings)
    detail = next(c.detail for c in hta_diagnosis.checked if c.rule == "exposed-comm")
    assert "the wait for the slowest rank is the straggler rule's" in detail
    rank0 = hta_diagnosis.summary.ranks.per_rank[0]
    assert rank0.wait_us > 0.8 * rank0.exposed_comm_us


def test_single_rank_rules_say_on_which_ranks_they_hold(tmp_path):
    d = analyse_ranks(SYNTHETIC / "ranks_exposed", Config(), workers=1)
    exposed = next(f for f in d.findings if f.rule == "exposed-comm")
    assert exposed.ranks == [0, 1]
    assert any("synchronisation wait" in e.metric for e in exposed.evidence)


def test_one_worker_and_two_workers_agree(hta_pair, hta_diagnosis):
    one = analyse_ranks(hta_pair, Config(), workers=1)
    assert one.to_dict()["findings"] == hta_diagnosis.to_dict()["findings"]
    assert one.summary.ranks == hta_diagnosis.summary.ranks


# --- findings.json stays diagnose.model.findings/1, additive only ---
def test_findings_json_is_additive(hta_diagnosis, tmp_path):
    data = hta_diagnosis.to_dict()
    assert data["schema"] == "diagnose.model.findings/1"
    assert data["summary"]["ranks"]["count"] == 2 and len(data["details"]["ranks"]) == 2
    assert all("ranks" in f for f in data["findings"])
    single = analyse_single = __import__("diagnose").analyze(str(HTA_RANK)).to_dict()
    assert "ranks" not in single["summary"] and "ranks" not in single["details"]
    assert all("ranks" not in f for f in analyse_single["findings"])


# --- the command line on a rank folder ---
def test_cli_on_a_rank_folder_writes_the_ranks_side_by_side(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(SYNTHETIC / "ranks_straggler"), "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    straggler = next(f for f in data["findings"] if f["rule"] == "straggler")  # launch-overhead may rank above it
    assert straggler["ranks"] == [1] and straggler["fixes"][0]["id"] == "balance-ranks"
    assert len(data["summary"]["ranks"]["per_rank"]) == 2
    html = (out / "report.html").read_text()
    assert "rank-budget" in html and "holds on rank 1" in html


def test_a_folder_of_one_rank_is_a_clear_input_error(tmp_path, capsys):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("x.json", "y.json"):
        shutil.copy(SYNTHETIC / "ranks_balanced" / "worker0.pt.trace.json", ranks / name)
    with pytest.raises(InputError, match="all of rank 0"):
        analyse_ranks(ranks, Config(), workers=1)
    assert main([str(ranks), "-o", str(tmp_path / "o"), "-q"]) == 2
    assert "all of rank 0" in capsys.readouterr().err


def test_a_broken_rank_file_is_one_line_exit_2(tmp_path, capsys):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copy(SYNTHETIC / "ranks_balanced" / "worker0.pt.trace.json", ranks / "rank0.json")
    (ranks / "rank1.json").write_text("{not json")
    assert main([str(ranks), "-o", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "rank1.json" in err and "Traceback" not in err


# --- bounded memory: peak does not grow with the rank count ---
def test_peak_memory_does_not_grow_with_the_rank_count(tmp_path):
    import bench_ranks

    peaks = {}
    for n in (2, 5):  # 5 ranks through 2 workers: a parent that kept every rank would hold 2.5x
        bench_ranks.make_rank_folder(tmp_path / f"r{n}", n)
        result = bench_ranks.measure(tmp_path / f"r{n}", workers=2)
        assert result["ranks"] == n and ["straggler", [1]] in result["findings"]
        peaks[n] = result["peak_mib"]
    assert peaks[5] <= peaks[2] * 1.10 + 16, peaks


# --- capture: --nproc-per-node through torch.distributed.run, CPU and gloo ---
torch = pytest.importorskip("torch")
TINY = [
    "--param",
    "d_model=32",
    "--param",
    "layers=1",
    "--param",
    "heads=2",
    "--param",
    "seq=8",
    "--param",
    "batch=2",
    "--warmup",
    "1",
    "--steps",
    "2",
    "--timed-steps",
    "2",
    "--timeout",
    "240",
    "-q",
]


def test_nproc_per_node_captures_every_rank_with_gloo(tmp_path):
    out = tmp_path / "ddp"
    code = main(
        [
            "--nproc-per-node",
            "2",
            f"{ROOT}/fixtures/workloads/ddp_train.py:make_step",
            *TINY,
            "--param",
            "straggler=true",
            "-o",
            str(out),
        ]
    )
    assert code == 0, (out / "workload.log").read_text()[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "ok" and [r["rank"] for r in meta["ranks"]] == [0, 1]
    assert meta["distributed"]["launcher"] == "torch.distributed.run"
    for k in (0, 1):
        rank_meta = json.loads((out / f"rank-{k}" / "meta.json").read_text())
        assert rank_meta["status"] == "ok" and rank_meta["timing"]["median_us"] > 0
        assert (out / f"rank-{k}" / "trace.json.gz").exists()
    findings = json.loads((out / "findings.json").read_text())
    assert findings["summary"]["ranks"]["count"] == 2
    assert findings["target"].endswith("ddp_train.py:make_step")
    assert findings["capture"]["distributed"]["launcher"] == "torch.distributed.run"  # built in, not patched after
    # the folder re-analyses as a rank folder
    assert main([str(out), "-o", str(tmp_path / "again"), "-q"]) == 0


def test_a_failing_rank_is_exit_3_with_its_error(tmp_path):
    out = tmp_path / "fails"
    code = main(
        [
            "--nproc-per-node",
            "2",
            f"{ROOT}/tests/workloads/rank_raises.py:make_step",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--timed-steps",
            "1",
            "--timeout",
            "120",
            "-q",
            "-o",
            str(out),
        ]
    )
    assert code == 3
    findings = json.loads((out / "findings.json").read_text())
    assert "rank 1: rank one refuses" in findings["capture"]["error"]["message"]
    assert "rank 1" in findings["verdict"]


def test_profile_function_mode_with_ranks(tmp_path):
    import diagnose

    d = diagnose.profile(
        f"{ROOT}/fixtures/workloads/ddp_train.py:make_step",
        out=tmp_path / "api",
        warmup=1,
        steps=2,
        timed_steps=2,
        timeout_s=240,
        nproc_per_node=2,
        d_model=32,
        layers=1,
        heads=2,
        seq=8,
        batch=2,
    )
    assert not d.workload_failed and d.summary.ranks.count == 2
    assert all((tmp_path / "api" / f"rank-{k}" / "trace.json.gz").exists() for k in (0, 1))


def test_torchrun_arguments_pass_through():
    from diagnose.capture.distributed import Launch, torchrun_command

    single = torchrun_command(Path("s.json"), Launch(2), python="py")
    assert single == [
        "py",
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--standalone",
        "-m",
        "diagnose.child.capture",
        "s.json",
    ]
    multi = torchrun_command(Path("s.json"), Launch(8, "2", "node0:29500", 1), python="py")
    assert multi[3:8] == [
        "--nproc-per-node=8",
        "--nnodes=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node0:29500",
        "--node-rank=1",
    ]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--nnodes", "2", "m.py:f"], "needs --nproc-per-node"),
        (["--nproc-per-node", "2", "--nnodes", "2", "m.py:f"], "needs --rdzv-endpoint"),
        (["--nproc-per-node", "0", "m.py:f"], "at least 1"),
    ],
)
def test_distributed_usage_errors_are_exit_2(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("def f():\n    return lambda: None\n")
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_trace_target_refuses_nproc_per_node(capsys):
    assert main(["--nproc-per-node", "2", str(HTA_RANK), "-q", "-o", "/tmp/never"]) == 2
    assert "--nproc-per-node" in capsys.readouterr().err


@pytest.mark.gpu
def test_nproc_per_node_on_two_gpus(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    out = tmp_path / "ddp_gpu"
    code = main(
        [
            "--nproc-per-node",
            "2",
            f"{ROOT}/fixtures/workloads/ddp_train.py:make_step",
            "--param",
            "straggler=true",
            "-q",
            "-o",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads((out / "findings.json").read_text())
    straggler = next(f for f in data["findings"] if f["rule"] == "straggler")  # launch-overhead may rank above it
    assert straggler["ranks"] == [1] and straggler["fixes"][0]["id"] == "balance-ranks"
    assert len(data["summary"]["ranks"]["per_rank"]) == 2
