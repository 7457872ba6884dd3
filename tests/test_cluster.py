"""Rank folders on a Dask cluster (diagnose/ranks/cluster.py): a real LocalCluster of two worker
processes, shared by the module, gives exactly the local pool's findings.json on every rank folder
in fixtures (the 2-rank DDP/FSDP captures and the SYNTHETIC ranks_* folders); a worker killed
mid-rank, a corrupt rank, Ctrl-C, a version mismatch and a missing Dask each end as documented.
"""

from __future__ import annotations

import functools
import gzip
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CAPTURES, ROOT, SYNTHETIC, diagnosis_of, make_golden
from diagnose.commands import main
from diagnose.ranks.analyse import analyse_rank
from diagnose.trace.rank_files import rank_sources

distributed = pytest.importorskip("distributed")

from diagnose.ranks.cluster import DaskEngine  # noqa: E402

RANK_FOLDERS = sorted(
    [p for p in CAPTURES.iterdir() if p.name.startswith(("ddp_", "fsdp_")) and rank_sources(p)]
    + [p for p in SYNTHETIC.iterdir() if p.name.startswith("ranks_") and rank_sources(p)]
)


@pytest.fixture(scope="module")
def cluster():
    """One LocalCluster for the module: two worker processes of one thread (a start costs seconds)."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
    ) as local:
        yield local


def _findings(folder: Path, out: Path, *options: str) -> tuple[int, bytes]:
    """`diagnose FOLDER -q -o OUT [options]`: its exit code and the findings.json it wrote."""
    code = main([str(folder), "-q", "--no-html", "-o", str(out), *options])
    return code, (out / "findings.json").read_bytes() if (out / "findings.json").exists() else b""


def test_there_are_rank_folders_to_compare():
    assert len(RANK_FOLDERS) >= 13, RANK_FOLDERS  # ten 2-rank captures, three SYNTHETIC folders


def _local_findings(folder: Path, out: Path) -> tuple[int, bytes]:
    """The local pool's exit code and findings.json for `folder`. A capture folder's is the session's shared
    analysis (conftest.diagnosis_of: diagnose.analyze at the command line's defaults, the golden test's too)
    as the command line writes it, a successful run's exit code 0: the two are byte for byte the same file
    (diagnose.analyze is what the command line runs). A SYNTHETIC folder is shared at other settings
    (make_golden.overrides), so the command line analyses it here (a second or two)."""
    if make_golden.overrides(folder) is not None:
        return _findings(folder, out)
    from diagnose.report.json_report import RENDERER

    return 0, RENDERER.render(diagnosis_of(folder)).encode("utf-8")


@pytest.mark.parametrize("folder", RANK_FOLDERS, ids=lambda p: p.name)
def test_the_cluster_writes_the_local_pools_findings_json(folder, cluster, tmp_path):
    local = _local_findings(folder, tmp_path / "local")
    on_cluster = _findings(folder, tmp_path / "cluster", "--cluster", cluster.scheduler_address)
    assert local[0] == on_cluster[0] == 0
    assert on_cluster[1] == local[1]


def test_the_local_findings_json_is_the_command_lines(tmp_path):
    """What _local_findings stands for: the command line's local pool writes the shared analysis's file."""
    folder = CAPTURES / "fsdp_prefetch"
    assert _findings(folder, tmp_path / "o") == _local_findings(folder, tmp_path / "unused")


def dies_once(source, config, max_bytes=None, *, marker: str):
    """analyse_rank, except that the first time it meets rank 1 it kills its worker process."""
    if source.rank == 1 and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)
    return analyse_rank(source, config, max_bytes)


def test_a_worker_killed_mid_rank_is_retried_with_the_same_result(cluster, tmp_path):
    from diagnose.model.config import Config
    from diagnose.ranks.analyse import analyse_ranks

    folder, marker = SYNTHETIC / "ranks_straggler", tmp_path / "killed"
    local = analyse_ranks(folder, Config(), workers=1)
    with DaskEngine(cluster.scheduler_address, task=functools.partial(dies_once, marker=str(marker))) as engine:
        retried = analyse_ranks(folder, Config(), engine=engine)
    assert marker.exists()  # a worker did die on rank 1
    assert retried.to_dict() == local.to_dict()


def _corrupt_folder(tmp_path: Path) -> Path:
    """Three ranks: SYNTHETIC ranks 0 and 1, and a rank 2 whose gzip is cut in half."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    for k in (0, 1):
        shutil.copy(SYNTHETIC / "ranks_straggler" / f"worker{k}.pt.trace.json", folder / f"rank{k}.json")
    whole = gzip.compress((folder / "rank1.json").read_bytes())
    (folder / "rank2.json.gz").write_bytes(whole[: len(whole) // 2])
    return folder


def test_a_corrupt_rank_is_named_and_the_others_analysed(cluster, tmp_path, capsys):
    folder = _corrupt_folder(tmp_path)
    local = _findings(folder, tmp_path / "local")
    on_cluster = _findings(folder, tmp_path / "cluster", "--cluster", cluster.scheduler_address)
    assert local[0] == on_cluster[0] == 2  # the report is written; the exit code says a rank was lost
    assert on_cluster[1] == local[1]
    import json

    data = json.loads(on_cluster[1])
    assert [f["rank"] for f in data["details"]["failed_ranks"]] == [2]
    assert data["summary"]["ranks"]["count"] == 2 and data["warnings"][0].startswith("rank 2: ")
    assert any(f["rule"] == "straggler" and f["ranks"] == [1] for f in data["findings"])
    err = capsys.readouterr().err
    assert "rank 2: " in err and "rank2.json.gz" in err and "Traceback" not in err


def test_workers_on_another_diagnose_version_are_one_line(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("diagnose.ranks.cluster.__version__", "0.0.0-driver")
    code, _ = _findings(SYNTHETIC / "ranks_balanced", tmp_path / "o", "--cluster", cluster.scheduler_address)
    err = capsys.readouterr().err
    assert code == 2 and "this driver 0.0.0-driver" in err and len(err.strip().splitlines()) == 1


def test_without_dask_cluster_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)
    code, _ = _findings(SYNTHETIC / "ranks_balanced", tmp_path / "o", "--cluster", "local:2")
    err = capsys.readouterr().err
    assert code == 2 and "diagnose-gpu[cluster]" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--cluster", "local:0", str(SYNTHETIC / "ranks_balanced")], "at least 1"),
        (["--cluster", "local:2", str(SYNTHETIC / "ranks_balanced" / "worker0.pt.trace.json")], "rank traces"),
    ],
)
def test_cluster_usage_errors_are_exit_2(argv, says, tmp_path, capsys):
    assert main([*argv, "-q", "-o", str(tmp_path / "o")]) == 2
    assert says in capsys.readouterr().err


def test_the_environment_names_the_cluster(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", cluster.scheduler_address)
    code, _ = _findings(SYNTHETIC / "ranks_balanced", tmp_path / "o")
    assert code == 0 and cluster.scheduler_address not in capsys.readouterr().err  # -q: no dashboard line
    code = main([str(SYNTHETIC / "ranks_balanced"), "--no-html", "-o", str(tmp_path / "o2")])
    assert code == 0 and f"Dask cluster {cluster.scheduler_address}" in capsys.readouterr().err


def _default_sigint() -> None:
    """In the child before exec: SIGINT at its default, as a terminal gives it. A suite started as a
    shell's background job (`pytest &`, `nohup`) runs with SIGINT ignored, which the child would inherit
    and so never see the Ctrl-C (test_interrupt and test_workload_lifecycle reset it alike)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_within_seconds_and_leaves_no_worker(tmp_path):
    """Ctrl-C at a terminal signals the whole process group: the driver and its LocalCluster's workers."""
    folder = tmp_path / "many"
    folder.mkdir()
    trace = CAPTURES / "ddp_accumulate" / "rank-0" / "trace.json.gz"
    for k in range(12):  # about 3 s a rank on this machine: long enough to be interrupted mid-way
        (folder / f"rank{k}.json.gz").symlink_to(trace)
    log = tmp_path / "err.txt"
    with open(log, "w") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "diagnose", str(folder), "--cluster", "local:2", "-o", str(tmp_path / "o")],
            cwd=ROOT,
            stderr=err,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        deadline = time.monotonic() + 60
        while "dashboard" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # ranks are running on both workers
        assert run.poll() is None, log.read_text()
        os.killpg(run.pid, signal.SIGINT)
        t = time.monotonic()
        code = run.wait(timeout=30)
        took = time.monotonic() - t
    assert code == 130 and took < 10, (code, took, log.read_text()[-2000:])
    assert "Traceback" not in log.read_text() and not (tmp_path / "o").exists()
    deadline = time.monotonic() + 10  # the group empties: no worker (nor its own decoders) outlives the driver
    while time.monotonic() < deadline:
        try:
            os.killpg(run.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    pytest.fail("processes of the interrupted run are still there 10 s after it ended")
