"""What the machine refuses is one line and exit 2 in every command, never a traceback.

A full disk, a file-size limit (`ulimit -f`), a path longer than the system takes, a folder the
user may not read, the working folder removed, stdout on /dev/full or closed, a stream that
cannot encode UTF-8, a workload that removes the output folder; and inputs that are not JSON at
all (a file of NULs of any size, binary, /proc/self/environ) are refused after their first MiB.
Each case runs diagnose as a process (the streams, limits and working folder are the process's)
and checks: exit code, one line on stderr, no traceback, nothing changed outside the output
folder, the previous output kept.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import CAPTURES, ROOT, SYNTHETIC
from hostile_guard import tree_state, untouched_outside

from diagnose.base import os_errors, safe_files
from diagnose.commands import main

pytestmark = pytest.mark.hostile

SMALL = CAPTURES / "matmul_bf16"
needs_torch = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None,
    reason="capturing needs torch (.ci/run installs the CPU build)",
)


def diagnose(*argv, stdout=subprocess.PIPE, env=None, cwd=None, preexec_fn=None, stdin=subprocess.DEVNULL, shell=None):
    """Run `python -m diagnose ARGV` (or the shell line `shell`); the CompletedProcess, text decoded as UTF-8."""
    command = ["sh", "-c", shell] if shell else [sys.executable, "-m", "diagnose", *map(str, argv)]
    return subprocess.run(
        command,
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=stdin,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=cwd or ROOT,
        preexec_fn=preexec_fn,
        timeout=300,
    )


def one_line(proc, code: int = 2) -> str:
    """The one line diagnose wrote on stderr, after checking the exit code and that there is no traceback."""
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == code, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("diagnose: error: "), lines[0]
    return lines[0]


# -- inputs that are not JSON: refused after their first MiB -------------------------------------


def test_a_3gb_file_of_nuls_is_refused_in_bounded_memory(tmp_path):
    """A sparse 3 GB file of NULs (under the 4 GiB ceiling): refused from its first bytes, peak RSS < 300 MB."""
    nuls = tmp_path / "nuls.json"
    with open(nuls, "wb") as f:
        f.truncate(3 << 30)
    runner = (
        "import resource, subprocess, sys; "
        "p = subprocess.run([sys.executable, '-m', 'diagnose', sys.argv[1], '-o', sys.argv[2]], capture_output=True); "
        "sys.stderr.buffer.write(p.stderr); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", runner, str(nuls), str(tmp_path / "out")],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    line = one_line(proc)
    assert "not a JSON trace" in line and "0x00" in line
    peak_mb = int(proc.stdout.split()[-1]) / 1024
    assert peak_mb < 300, f"peak RSS {peak_mb:.0f} MB"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name, body",
    [
        ("random.bin", lambda: os.urandom(5 << 20)),
        ("nuls.json.gz", lambda: gzip.compress(b"\0" * (100 << 20), compresslevel=1)),
        ("text.json", lambda: b"  \n hello, this is no trace\n" * 1000),
        ("latin1.json", lambda: b'{"traceEvents": [{"name": "caf\xe9"}]}'),
    ],
)
def test_binary_and_non_json_are_one_line(tmp_path, name, body):
    path = tmp_path / name
    path.write_bytes(body())
    with untouched_outside(tmp_path / "out"):
        line = one_line(diagnose(path, "-o", tmp_path / "out"))
    assert "not a JSON trace" in line


def test_nuls_on_standard_input_are_refused_after_the_first_mib(tmp_path):
    # 2 GB through a pipe: only a refusal from the first bytes ends the run in seconds
    proc = diagnose(shell=f"head -c 2000000000 /dev/zero | '{sys.executable}' -m diagnose - -o '{tmp_path / 'out'}'")
    line = one_line(proc)
    assert "standard input: not a JSON trace" in line


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="no /proc")
def test_proc_self_environ_and_a_capture_linking_to_it(tmp_path):
    line = one_line(diagnose("/proc/self/environ", "-o", tmp_path / "o1"))
    assert "/proc/self/environ: not a JSON trace" in line
    capture = tmp_path / "capture"
    capture.mkdir()
    shutil.copy(SMALL / "meta.json", capture)
    (capture / "trace.json.gz").symlink_to("/proc/self/environ")
    with untouched_outside(tmp_path / "o2"):
        line = one_line(diagnose(capture, "-o", tmp_path / "o2"))
    assert "trace.json.gz" in line and "not a JSON trace" in line


# -- stdout and stderr ---------------------------------------------------------------------------

COMMANDS = {
    "trace": lambda tmp: [SMALL, "-o", tmp / "out"],
    "diff": lambda tmp: ["diff", SMALL, CAPTURES / "matmul_fp32", "-o", tmp / "out"],
    "ranks": lambda tmp: [SYNTHETIC / "ranks_straggler", "-o", tmp / "out"],
    "schema": lambda tmp: ["schema"],
    "rules": lambda tmp: ["rules"],
}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_stdout_on_dev_full_is_one_line_in_every_command(tmp_path, command):
    with open("/dev/full", "wb") as full:
        line = one_line(diagnose(*COMMANDS[command](tmp_path), stdout=full))
    assert "standard output: No space left on device" in line


@pytest.mark.parametrize("command", ["trace", "diff", "schema"])
def test_a_closed_stdout_drops_the_output_quietly(tmp_path, command):
    argv = " ".join(f"'{a}'" for a in COMMANDS[command](tmp_path))
    proc = diagnose(shell=f"exec '{sys.executable}' -m diagnose {argv} >&-")
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    if command != "schema":
        assert (tmp_path / "out" / "diagnose-output.json").is_file(), "the output folder is written all the same"


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}, {"LC_ALL": "C", "PYTHONIOENCODING": ""}],
    ids=["ascii", "latin-1", "C-locale"],
)
@pytest.mark.parametrize("fmt", ["text", "md"])
def test_a_narrow_stream_gets_ascii_spellings(tmp_path, env, fmt):
    proc = diagnose(SMALL, "-o", tmp_path / "out", "--format", fmt, env=env)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    encoding = env.get("PYTHONIOENCODING") or "utf-8"
    text = proc.stdout.decode(encoding)  # what the stream took is valid in its encoding
    if encoding == "ascii":
        assert "findings:" in text or "findings.json" in text


def test_ascii_spellings_of_the_report_words():
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    os_errors.ascii_spellings(stream)
    stream.write("12.5 µs · 3.0× → ≥ 50 % … ┃ é ✓")
    stream.flush()
    assert stream.buffer.getvalue().decode("ascii") == "12.5 us - 3.0x -> >= 50 % ... | e ok"


# -- the filesystem ------------------------------------------------------------------------------


def test_a_path_longer_than_the_system_takes(tmp_path):
    deep = tmp_path.joinpath(*["d" * 200] * 21)  # every name under 255 bytes, the whole over 4,096
    with untouched_outside(deep):
        line = one_line(diagnose(SMALL, "-o", deep))
    assert "File name too long" in line
    assert len(line) < 400 and "characters)" in line, "a very long path is shown by its ends, not whole"
    assert list(tmp_path.iterdir()) == []


def _limit_file_size(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_a_file_size_limit_keeps_the_previous_output(tmp_path, fmt):
    out = tmp_path / "out"
    assert diagnose(SMALL, "-o", out, "-q").returncode == 0
    before = tree_state(out)
    with untouched_outside(out):
        line = one_line(diagnose(SMALL, "-o", out, "--format", fmt, preexec_fn=_limit_file_size(8000)))
    assert "File too large" in line and "ulimit -f" in line and str(out) in line
    assert tree_state(out) == before, "the previous output folder is left as it was"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no staging folder left"


class _NoSpace(io.RawIOBase):
    def writable(self):
        return True

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("argv", [[], ["--format", "md"], ["--no-html"]])
def test_a_full_disk_is_one_line_and_keeps_the_previous_output(tmp_path, capsys, monkeypatch, argv):
    out = tmp_path / "out"
    assert main([str(SMALL), "-o", str(out), "-q"]) == 0
    before = tree_state(out)
    capsys.readouterr()
    real_fdopen = os.fdopen

    def full_fdopen(fd, mode="r", *args, **kwargs):
        os.close(fd)
        return io.BufferedWriter(_NoSpace()) if "w" in mode else real_fdopen(fd, mode, *args, **kwargs)

    monkeypatch.setattr(safe_files, "os", types.SimpleNamespace(**{**vars(os), "fdopen": full_fdopen}))
    with untouched_outside(out):
        code = main([str(SMALL), "-o", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"diagnose: error: {out}/") and "No space left on device" in err
    assert "the previous output folder, if any, is left as it was" in err
    assert tree_state(out) == before


def _as_nobody() -> list[str]:
    """The command prefix that runs as an ordinary user, so that mode 0 is refused: none when not
    root; as root, setpriv to nobody (skipped where that cannot run this Python)."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    try:
        trial = subprocess.run([*prefix, sys.executable, "-c", "pass"], capture_output=True, timeout=60)
    except OSError:
        trial = None
    if trial is None or trial.returncode != 0:
        pytest.skip("running as root, which reads mode 0, and setpriv cannot run this Python as nobody")
    return prefix


@pytest.mark.parametrize("what", ["folder", "trace", "meta"])
def test_a_capture_the_user_cannot_read(tmp_path, what):
    prefix = _as_nobody()
    tmp_path.chmod(0o755)
    for parent in tmp_path.parents:  # nobody must reach the folder (pytest's base is private)
        if parent == Path("/tmp") or parent == parent.parent:
            break
        parent.chmod(parent.stat().st_mode | 0o005)
    capture = tmp_path / "capture"
    shutil.copytree(SMALL, capture)
    target = {"folder": capture, "trace": capture / "trace.json.gz", "meta": capture / "meta.json"}[what]
    target.chmod(0)
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    try:
        argv = " ".join(f"'{a}'" for a in [*prefix, sys.executable, "-m", "diagnose", capture, "-o", out / "o"])
        line = one_line(diagnose(shell=f"cd '{out}' && exec {argv}"))
    finally:
        capture.chmod(0o755)
        target.chmod(0o644)
    assert "Permission denied" in line


@pytest.mark.parametrize("with_out", [True, False])
def test_a_deleted_working_folder(tmp_path, with_out):
    gone = tmp_path / "gone"
    gone.mkdir()
    out = f"-o '{tmp_path / 'out'}'" if with_out else ""
    line = one_line(
        diagnose(shell=f"cd '{gone}' && rmdir '{gone}' && exec '{sys.executable}' -m diagnose '{SMALL}' {out}")
    )
    assert "the current folder no longer exists" in line
    assert list(tmp_path.iterdir()) == []


@needs_torch
def test_a_workload_that_removes_the_output_folder(tmp_path):
    """The workload removes the staging folder its capture is written into: one line, nothing else touched."""
    (tmp_path / "p").mkdir()
    out = tmp_path / "p" / "out"
    fast = ["--warmup", "1", "--steps", "2", "--timed-steps", "2", "--no-html"]
    workload = ROOT / "tests" / "workloads" / "removes_output.py"
    with untouched_outside(out):
        line = one_line(diagnose("-o", out, *fast, workload, tmp_path / "p", cwd=tmp_path))
    assert "No such file or directory" in line and "went away while diagnose ran" in line
    assert list((tmp_path / "p").iterdir()) == []


# -- the relayed progress of a workload ----------------------------------------------------------


def test_hostile_progress_reports_are_inert_and_harmless():
    """A workload writes what it likes to the progress pipe: escapes in the phase, strings, NaN or
    huge numbers as counts. The progress line shows them inert and nothing is raised."""
    from rich.console import Console

    from diagnose.commands.progress import ProgressLine

    shown = io.StringIO()
    console = Console(file=shown, force_terminal=True, width=100)
    events = [
        {"phase": "warmup\x1b[2J\x9b31m\u202e\x08", "done": 1, "total": "\x1b[2J5"},
        {"phase": "timing", "done": "\x1b]0;title\x07", "total": 5},
        {"phase": "profile", "done": float("nan"), "total": float("inf")},
        {"phase": "profile", "done": 10**30, "total": 3},
        {"phase": "sweep", "value": "\x1b[31m", "done": True, "total": [1]},
    ]
    with ProgressLine(console, quiet=False) as update:
        for event in events:
            update(event)
    text = shown.getvalue()
    for raw in ("\x1b[2J", "\x9b", "\u202e", "\x08", "\x1b]0", "\x07", "\x1b[31m"):
        assert raw not in text, repr(raw)
    assert "\\x1b[2J" in text, "the workload's escape is shown, escaped"


def test_describe_names_the_path_and_what_to_do():
    assert os_errors.describe(OSError(errno.ENOSPC, "No space left on device", "/o/findings.json")) == (
        "/o/findings.json: No space left on device: free some space, or give -o a folder on another "
        "filesystem; the previous output folder, if any, is left as it was"
    )
    assert os_errors.describe(OSError(errno.ENXIO, "No such device or address", "/x")).startswith(
        "/x: No such device or address: a special file"
    )
    assert "standard output" in os_errors.describe(os_errors.on_stdout(OSError(errno.EIO, "Input/output error")))
    assert json.dumps(os_errors.describe(OSError(errno.EISDIR, "Is a directory", "/d")))  # one line of text


@needs_torch
def test_a_capture_under_a_file_size_limit_keeps_the_previous_output(tmp_path):
    """Kineto writes its trace under the limit without a word: the cut-short trace is caught, one line."""
    out = tmp_path / "out"
    fast = ["--warmup", "1", "--steps", "2", "--timed-steps", "2", "--no-html", "-q"]
    workload = [ROOT / "tests" / "workloads" / "ending.py", "clean"]
    assert diagnose("-o", out, *fast, *workload, cwd=tmp_path).returncode == 0
    before = tree_state(out)
    with untouched_outside(out):
        line = one_line(diagnose("-o", out, *fast, *workload, cwd=tmp_path, preexec_fn=_limit_file_size(16000)))
    assert "ulimit -f" in line and str(out) in line
    assert tree_state(out) == before, "the previous output folder is left as it was"


def test_a_trace_cut_short_is_told_from_a_whole_one(tmp_path):
    from diagnose.child.capture import whole_json_gzip

    whole = json.dumps({"traceEvents": [{"name": "x"}] * 1000}).encode() + b"\n"
    cases = {"whole": whole, "cut": whole[: len(whole) // 2], "empty": b""}
    for name, body in cases.items():
        (tmp_path / name).write_bytes(gzip.compress(body))
    (tmp_path / "truncated-gzip").write_bytes(gzip.compress(whole)[:-20])
    assert whole_json_gzip(tmp_path / "whole")
    assert not any(whole_json_gzip(tmp_path / n) for n in ("cut", "empty", "truncated-gzip", "missing"))


@needs_torch
@pytest.mark.parametrize("ending, code", [("clean", 0), ("raise", 3)])
def test_a_workloads_progress_and_error_text_reach_the_terminal_inert(tmp_path, ending, code):
    """FORCE_COLOR makes stderr a terminal for rich, so the progress line is drawn from the workload's reports."""
    fast = ["--warmup", "1", "--steps", "2", "--timed-steps", "2", "--no-html"]
    workload = [ROOT / "tests" / "workloads" / "hostile_progress.py", *(["raise"] if ending == "raise" else [])]
    proc = diagnose("-o", tmp_path / "out", *fast, *workload, cwd=tmp_path, env={"FORCE_COLOR": "1"})
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == code, err
    assert "Traceback (most recent call last)" not in err.split("the workload's traceback")[0]
    for raw in ("\x1b[2J", "\x1b]0;", "\x07", "\x9b", "\u202e", "\x08"):
        assert raw not in err and raw not in proc.stdout.decode("utf-8", "replace"), repr(raw)
    if ending == "raise":
        assert "\\x1b[2J" in err, "the workload's error is shown, escaped"


@needs_torch
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_sweep_with_stdout_on_dev_full_and_under_a_file_size_limit(tmp_path):
    sweep = [
        f"{ROOT / 'fixtures' / 'workloads' / 'attention.py'}:make_step",
        *("--param", "impl=naive", "--param", "heads=2", "--sweep", "seq=32,64"),
        *("--warmup", "1", "--steps", "2", "--timed-steps", "2"),
    ]
    out = tmp_path / "out"
    with open("/dev/full", "wb") as full:
        line = one_line(diagnose(*sweep, "-o", out, stdout=full, cwd=tmp_path))
    assert "standard output: No space left on device" in line
    assert (out / "sweep.json").is_file(), "the output folder is written before stdout"
    before = tree_state(out)
    with untouched_outside(out):
        line = one_line(diagnose(*sweep, "-o", out, cwd=tmp_path, preexec_fn=_limit_file_size(16000)))
    assert "ulimit -f" in line
    assert tree_state(out) == before, "the previous output folder is left as it was"


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (root only, where mounts are allowed; skipped elsewhere), unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a tmpfs needs root (the monkeypatched full disk above runs everywhere)")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.parametrize("what", ["trace", "md", pytest.param("capture", marks=needs_torch)])
def test_a_real_full_disk(tiny_disk, tmp_path, what):
    (tiny_disk / "filler").write_bytes(b"\0" * 56_000)
    out = tiny_disk / "out"
    argv = {
        "trace": [SMALL, "-o", out],
        "md": [SMALL, "-o", out, "--format", "md"],
        "capture": [
            "-o",
            out,
            "--warmup",
            "1",
            "--steps",
            "2",
            "--timed-steps",
            "2",
            ROOT / "tests" / "workloads" / "ending.py",
            "clean",
        ],
    }[what]
    with untouched_outside(out, tiny_disk):
        line = one_line(diagnose(*argv, cwd=tmp_path))
    assert "No space left on device" in line and str(out) in line
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler"]
