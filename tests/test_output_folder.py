"""The output folder is written whole or not at all, and a bad --out is one line before anything runs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from diagnose import output
from diagnose.errors import UsageError
from diagnose.output import OutputFolder, check_out_path

from conftest import ROOT

WRITER = textwrap.dedent("""
    import sys, time
    from diagnose import output
    final, tag, parts, exchange = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    if not exchange:
        output._renameat2 = lambda: None
    with output.OutputFolder(final) as folder:
        print("staged", flush=True)
        for i in range(parts):
            (folder.path / f"part{i}.txt").write_text(tag)
            time.sleep(0.002)
        (folder.path / "findings.json").write_text(tag)
""")


def leftovers(parent: Path) -> list[str]:
    """Staging or moved-aside folders left beside the output folder."""
    return [p.name for p in parent.iterdir() if ".diagnose-" in p.name]


def write_folder(final: Path, tag: str, names=("findings.json", "report.html")) -> None:
    with OutputFolder(final) as folder:
        for name in names:
            (folder.path / name).write_text(tag)


def test_commit_puts_the_folder_in_place_whole(tmp_path):
    final = tmp_path / "out"
    with OutputFolder(final) as folder:
        assert folder.path != final and folder.path.parent == tmp_path and not final.exists()
        (folder.path / "findings.json").write_text("one")
        (folder.path / "point").mkdir()
        (folder.path / "point" / "meta.json").write_text("{}")
        assert folder.public(folder.path / "point" / "meta.json") == final / "point" / "meta.json"
    assert (final / "findings.json").read_text() == "one" and (final / "point" / "meta.json").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "move-aside"])
def test_a_second_run_replaces_the_first_whole(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(output, "_renameat2", lambda: None)
    final = tmp_path / "out"
    write_folder(final, "first", names=("findings.json", "report.html", "trace.json.gz"))
    write_folder(final, "second")
    assert sorted(p.name for p in final.iterdir()) == ["findings.json", "report.html"]
    assert {p.read_text() for p in final.iterdir()} == {"second"}
    assert leftovers(tmp_path) == []


def test_an_exception_leaves_the_previous_folder_as_it_was(tmp_path):
    final = tmp_path / "out"
    write_folder(final, "before")
    with pytest.raises(RuntimeError):
        with OutputFolder(final) as folder:
            (folder.path / "findings.json").write_text("half")
            raise RuntimeError("the analysis broke")
    assert {p.read_text() for p in final.iterdir()} == {"before"}
    assert leftovers(tmp_path) == []


def test_keep_on_error_commits_what_was_captured(tmp_path):
    final = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        with OutputFolder(final) as folder:
            (folder.path / "meta.json").write_text('{"status": "failed"}')
            folder.keep_on_error = True
            raise KeyboardInterrupt
    assert (final / "meta.json").read_text() == '{"status": "failed"}'


def test_carry_keeps_the_input_and_rewrites_the_report(tmp_path):
    """Re-analysing a capture folder into itself: the trace stays, findings.json is the new one."""
    final = tmp_path / "cap"
    write_folder(final, "capture", names=("trace.json.gz", "meta.json", "findings.json"))
    (final / "sub").mkdir()
    (final / "sub" / "x.txt").write_text("nested")
    folder = OutputFolder(final, carry=True)
    assert folder.holds(final / "trace.json.gz") and not folder.holds(tmp_path)
    with folder:
        assert not (folder.path / "findings.json").exists()
        (folder.path / "findings.json").write_text("analysis")
    assert (final / "trace.json.gz").read_text() == "capture" and (final / "sub" / "x.txt").read_text() == "nested"
    assert (final / "findings.json").read_text() == "analysis"


def test_a_killed_writer_leaves_the_previous_folder(tmp_path):
    final = tmp_path / "out"
    write_folder(final, "before")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(final), "killed", "100000", "1"],
                            stdout=subprocess.PIPE, cwd=ROOT, text=True)
    assert proc.stdout.readline().strip() == "staged"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert {p.read_text() for p in final.iterdir()} == {"before"}


@pytest.mark.parametrize("exchange", ["1", "0"], ids=["renameat2-exchange", "move-aside"])
def test_two_concurrent_writers_leave_one_whole_folder(tmp_path, exchange):
    """Ten rounds of two processes writing the same folder at once: each round ends whole, one writer's."""
    final = tmp_path / "out"
    parts = 25
    for round_ in range(10):
        writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(final), f"{tag}{round_}", str(parts), exchange],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, text=True)
                   for tag in "AB"]
        for writer in writers:
            _, err = writer.communicate(timeout=60)
            assert writer.returncode == 0, err
        tags = {p.read_text() for p in final.iterdir()}
        assert len(list(final.iterdir())) == parts + 1, f"round {round_}: {sorted(os.listdir(final))}"
        assert tags in ({f"A{round_}"}, {f"B{round_}"}), f"round {round_}: a mixed folder {tags}"
        assert leftovers(tmp_path) == []


# -- --out validation ---------------------------------------------------------------------------

def test_a_new_folder_is_accepted_and_nothing_is_created(tmp_path):
    final = tmp_path / "a" / "b" / "out"
    assert check_out_path(final) == final
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: (tmp / "f").write_text("x") and tmp / "f", "is a file, not a folder"),
    (lambda tmp: (tmp / "f").write_text("x") and tmp / "f" / "out", "is a file, so no folder can be made under it"),
    (lambda tmp: Path("/dev/null"), "a device or special file"),
    (lambda tmp: Path("/dev/null/out"), "is a file, so no folder can be made under it"),
    (lambda tmp: Path("/"), "filesystem root"),
], ids=["existing-file", "under-a-file", "dev-null", "under-dev-null", "root"])
def test_paths_that_cannot_be_an_output_folder(tmp_path, make, expected):
    path = make(tmp_path)
    with pytest.raises(UsageError, match=expected) as caught:
        check_out_path(path)
    assert "\n" not in str(caught.value)


def test_a_folder_with_other_files_is_not_replaced(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "model.py").write_text("")
    with pytest.raises(UsageError, match="did not write"):
        check_out_path(tmp_path / "project")
    assert check_out_path(tmp_path / "project", carry=True) == tmp_path / "project"


def test_the_current_folder_is_not_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in (".", tmp_path, tmp_path.parent):
        with pytest.raises(UsageError, match="current folder"):
            check_out_path(path)


def unwritable_folder(tmp_path) -> Path:
    """A folder this process cannot create anything in: read-only mode, or (as root, who ignores modes)
    a kernel filesystem that refuses new folders."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir(mode=0o555)
        return folder
    try:
        os.mkdir("/sys/diagnose-probe")
    except OSError:
        return Path("/sys")
    os.rmdir("/sys/diagnose-probe")
    pytest.skip("running as root with a writable /sys: no folder here refuses writes")


def test_an_unwritable_folder_is_refused(tmp_path):
    folder = unwritable_folder(tmp_path)
    for path in (folder / "out", folder / "deeper" / "out"):
        with pytest.raises(UsageError, match="cannot write there") as caught:
            check_out_path(path)
        assert "\n" not in str(caught.value)
