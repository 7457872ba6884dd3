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

from diagnose.front import output
from diagnose.base.errors import UsageError
from diagnose.front.output import OutputFolder, check_out_path

from conftest import ROOT

WRITER = textwrap.dedent("""
    import sys, time
    from diagnose.front import output
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
    assert sorted(p.name for p in final.iterdir()) == [output.MANIFEST, "findings.json", "report.html"]
    assert {p.read_text() for p in final.iterdir() if p.name != output.MANIFEST} == {"second"}
    assert output.read_manifest(final) == ["findings.json", "report.html"]
    assert leftovers(tmp_path) == []


def test_an_exception_leaves_the_previous_folder_as_it_was(tmp_path):
    final = tmp_path / "out"
    write_folder(final, "before")
    with pytest.raises(RuntimeError):
        with OutputFolder(final) as folder:
            (folder.path / "findings.json").write_text("half")
            raise RuntimeError("the analysis broke")
    assert {p.read_text() for p in final.iterdir() if p.name != output.MANIFEST} == {"before"}
    assert leftovers(tmp_path) == []


def test_keep_on_error_commits_what_was_captured(tmp_path):
    final = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with OutputFolder(final) as folder:
            (folder.path / "meta.json").write_text('{"status": "failed"}')
            folder.keep_on_error = True
            raise RuntimeError("the analysis after the capture broke")
    assert (final / "meta.json").read_text() == '{"status": "failed"}'


@pytest.mark.parametrize(
    "interrupt", [KeyboardInterrupt, OSError(28, "No space left on device")], ids=["ctrl-c", "disk-full"]
)
def test_an_interrupt_or_a_failed_write_leaves_the_previous_folder_even_with_keep_on_error(tmp_path, interrupt):
    final = tmp_path / "out"
    write_folder(final, "before")
    with pytest.raises((KeyboardInterrupt, OSError)):
        with OutputFolder(final) as folder:
            folder.keep_on_error = True
            (folder.path / "meta.json").write_text("half")
            raise interrupt
    assert sorted(p.name for p in final.iterdir()) == [output.MANIFEST, "findings.json", "report.html"]
    assert leftovers(tmp_path) == []


def test_files_the_user_added_survive_a_replacement(tmp_path):
    final = tmp_path / "out"
    write_folder(final, "first", names=("findings.json", "report.html", "trace.json.gz"))
    (final / "notes.txt").write_text("mine")
    (final / "sub").mkdir()
    (final / "sub" / "x.py").write_text("also mine")
    write_folder(final, "second")
    assert (final / "notes.txt").read_text() == "mine" and (final / "sub" / "x.py").read_text() == "also mine"
    assert not (final / "trace.json.gz").exists()  # diagnose's own old file is gone
    assert output.read_manifest(final) == ["findings.json", "report.html"]  # the user's files stay unlisted
    write_folder(final, "third")
    assert (final / "notes.txt").read_text() == "mine"


def test_links_planted_in_the_staging_folder_are_dropped_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    final = tmp_path / "out"
    with OutputFolder(final) as folder:
        (folder.path / "trace.json.gz").symlink_to(victim)
        output.write_new(folder.path / "trace.json.gz", b"trace")  # replaces the link, not the victim
        (folder.path / "elsewhere").symlink_to(tmp_path)
    assert victim.read_text() == "precious"
    assert (final / "trace.json.gz").read_bytes() == b"trace" and not os.path.lexists(final / "elsewhere")
    assert folder.dropped_links == ["elsewhere"]


def test_a_staging_folder_left_by_a_killed_run_is_removed_by_the_next(tmp_path):
    final = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".out{output.STAGING_MARK}{dead.stdout.strip()}-abcd1234"
    stale.mkdir()
    (stale / "trace.json.gz").write_text("half")
    live = tmp_path / f".out{output.STAGING_MARK}{os.getpid()}-feedbeef"  # a run still going: kept
    live.mkdir()
    write_folder(final, "new")
    assert not stale.exists() and live.exists()


def test_a_killed_writer_leaves_the_previous_folder(tmp_path):
    final = tmp_path / "out"
    write_folder(final, "before")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(final), "killed", "100000", "1"], stdout=subprocess.PIPE, cwd=ROOT, text=True
    )
    assert proc.stdout.readline().strip() == "staged"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert {p.read_text() for p in final.iterdir() if p.name != output.MANIFEST} == {"before"}


@pytest.mark.parametrize("exchange", ["1", "0"], ids=["renameat2-exchange", "move-aside"])
def test_two_concurrent_writers_leave_one_whole_folder(tmp_path, exchange):
    """Ten rounds of two processes writing the same folder at once: each round ends whole, one writer's."""
    final = tmp_path / "out"
    parts = 25
    for round_ in range(10):
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(final), f"{tag}{round_}", str(parts), exchange],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=ROOT,
                text=True,
            )
            for tag in "AB"
        ]
        for writer in writers:
            _, err = writer.communicate(timeout=60)
            assert writer.returncode == 0, err
        tags = {p.read_text() for p in final.iterdir() if p.name != output.MANIFEST}
        assert len(list(final.iterdir())) == parts + 2, f"round {round_}: {sorted(os.listdir(final))}"
        assert tags in ({f"A{round_}"}, {f"B{round_}"}), f"round {round_}: a mixed folder {tags}"
        assert leftovers(tmp_path) == []


# -- --out validation ---------------------------------------------------------------------------


def test_a_new_folder_is_accepted_and_nothing_is_created(tmp_path):
    final = tmp_path / "a" / "b" / "out"
    assert check_out_path(final) == final
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda tmp: (tmp / "f").write_text("x") and tmp / "f", "is a file, not a folder"),
        (lambda tmp: (tmp / "f").write_text("x") and tmp / "f" / "out", "is a file, so no folder can be made under it"),
        (lambda tmp: Path("/dev/null"), "a device or special file"),
        (lambda tmp: Path("/dev/null/out"), "is a file, so no folder can be made under it"),
        (lambda tmp: Path("/"), "filesystem root"),
    ],
    ids=["existing-file", "under-a-file", "dev-null", "under-dev-null", "root"],
)
def test_paths_that_cannot_be_an_output_folder(tmp_path, make, expected):
    path = make(tmp_path)
    with pytest.raises(UsageError, match=expected) as caught:
        check_out_path(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "names",
    [
        ("model.py",),
        ("meta.json", "src/train.py"),
        ("index.html", "report.html"),
        ("findings.json",),
        ("sweep.json", "diff.json"),
    ],
    ids=["project", "project-with-meta", "site", "old-findings", "look-alike"],
)
def test_a_folder_without_the_manifest_is_never_replaced(tmp_path, names):
    """Whatever files it holds (even the names diagnose writes), a folder without diagnose's manifest stays."""
    folder = tmp_path / "project"
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("user's")
    with pytest.raises(UsageError, match="did not write") as caught:
        check_out_path(folder)
    assert "\n" not in str(caught.value)
    (folder / output.MANIFEST).write_text('{"schema": "someone else\'s", "files": []}')
    with pytest.raises(UsageError, match="did not write"):
        check_out_path(folder)


def test_a_symbolic_link_is_no_output_folder(tmp_path):
    target = tmp_path / "real"
    write_folder(target, "mine")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        check_out_path(tmp_path / "link")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UsageError, match="symbolic link"):
        check_out_path(tmp_path / "loop" / "out")


@pytest.mark.parametrize("where", ["same", "inside", "above"])
def test_an_output_folder_that_is_holds_or_lies_in_an_input_is_refused(tmp_path, where):
    capture = tmp_path / "cap"
    write_folder(capture, "capture", names=("trace.json.gz", "meta.json"))
    out = {"same": capture, "inside": capture / "rank-0", "above": tmp_path}[where]
    with pytest.raises(UsageError, match="input") as caught:
        check_out_path(out, inputs=[capture])
    assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match="input"):
        check_out_path(tmp_path / "x" / ".." / "cap", inputs=[capture / "trace.json.gz"])


def test_a_name_too_long_for_the_filesystem_is_one_line(tmp_path):
    for name in ("a" * 256, "é" * 128):  # 256 bytes either way
        with pytest.raises(UsageError, match="longer than 255 bytes") as caught:
            check_out_path(tmp_path / name)
        assert "\n" not in str(caught.value)
    assert check_out_path(tmp_path / ("é" * 127)) == tmp_path / ("é" * 127)


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
