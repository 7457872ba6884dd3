"""A folder of one process's kineto traces (tensorboard_trace_handler's) is analysed as its latest trace,
not compared as ranks nor refused as "not a capture folder"."""

from __future__ import annotations

import os
import shutil

import pytest

from diagnose import analyze
from diagnose.base.errors import EXIT_BAD_INPUT
from diagnose.commands import main
from diagnose.trace.rank_files import header_rank, is_rank_folder, rank_sources
from diagnose.trace.source import head_bytes
from diagnose.trace.trace_folder import folder_trace

from conftest import PEER_TRACES, SYNTHETIC

HANDLER_DIR = PEER_TRACES / "kineto" / "resnet50_num_workers_0"  # kineto's own sample, as the handler wrote it
HANDLER_FILE = HANDLER_DIR / "worker0.1623143089861.pt.trace.json.gz"


def _first(diagnosis) -> list[tuple]:
    return [(f.rule, f.fixes[0].id, f.est_speedup) for f in diagnosis.findings]


def test_the_handlers_folder_of_one_trace_is_that_trace():
    assert not is_rank_folder(HANDLER_DIR)
    found = folder_trace(HANDLER_DIR)
    assert found.path == HANDLER_FILE and found.note == ""
    folder, alone = analyze(HANDLER_DIR), analyze(HANDLER_FILE)
    assert _first(folder) == _first(alone) and folder.findings[0].rule == "host-bound"
    assert not any("kineto traces" in w for w in folder.warnings)


def test_several_cycles_of_one_process_are_not_ranks_and_the_latest_is_analysed(tmp_path):
    for stamp in ("1623143089861", "1623143099999", "1623143090000"):
        shutil.copy(HANDLER_FILE, tmp_path / f"worker0.{stamp}.pt.trace.json.gz")
    (tmp_path / "timing.json").write_text('{"median_us": 1.0}')  # beside the traces, not one of them
    (tmp_path / "notes.txt").write_text("not a trace")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.iterdir())
    assert rank_sources(tmp_path) == []
    found = folder_trace(tmp_path)
    assert found.path.name == "worker0.1623143099999.pt.trace.json.gz" and len(found.others) == 2
    diagnosis = analyze(tmp_path)
    note = next(w for w in diagnosis.warnings if "kineto traces" in w)
    assert "3 kineto traces and none names a rank" in note and "worker0.1623143099999" in note
    assert _first(diagnosis) == _first(analyze(HANDLER_FILE))
    assert sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.iterdir()) == before  # nothing written there


def test_without_the_handlers_names_the_newest_file_is_the_latest(tmp_path):
    for name, when in (("b.json.gz", 2_000_000_000), ("a.json.gz", 3_000_000_000), ("c.json.gz", 1_000_000_000)):
        shutil.copy(HANDLER_FILE, tmp_path / name)
        os.utime(tmp_path / name, ns=(when, when))
    assert folder_trace(tmp_path).path.name == "a.json.gz"


def test_traces_that_name_their_rank_stay_ranks():
    ranks = SYNTHETIC / "ranks_balanced"  # worker0/worker1: no rank in the names, distributedInfo in the files
    assert [header_rank(p) for p in sorted(ranks.iterdir())] == [0, 1]
    assert [s.rank for s in rank_sources(ranks)] == [0, 1]


def test_a_folder_with_no_trace_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "timing.json").write_text("{}")
    assert main([str(tmp_path / "in"), "-q", "--no-html", "-o", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a capture folder" in err[0] and "no kineto trace file in it" in err[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_looking_at_a_files_start_never_opens_a_pipe(tmp_path):
    fifo = tmp_path / "trace.pt.trace.json"
    os.mkfifo(fifo)
    assert head_bytes(fifo) == b""  # opening a FIFO would block until a writer came
    assert folder_trace(tmp_path) is None


def test_a_log_root_names_the_sub_folders_that_can_be_read(tmp_path, capsys):
    root = tmp_path / "log"
    (root / "resnet18").mkdir(parents=True)
    (root / "empty").mkdir()
    locked = root / "locked"
    locked.mkdir()
    shutil.copy(HANDLER_FILE, root / "resnet18" / HANDLER_FILE.name)
    locked.chmod(0)
    try:
        assert main([str(root), "-q", "--no-html", "-o", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    finally:
        locked.chmod(0o755)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"its sub-folder {root / 'resnet18'} can be read"), err
