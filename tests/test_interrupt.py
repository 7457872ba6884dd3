"""Ctrl-C or SIGTERM ends diagnose within a second or two wherever it is, its helper processes too:
mid-way through a folder of rank traces (worker processes with ranks still queued) and mid-way
through decoding a trace large enough to be decoded by two processes.

The signal goes to diagnose alone (as `kill PID` sends it), once diagnose has started its helper
processes; the bound leaves room for a busy 2-core machine.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PEER_TRACES, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import make_large_trace  # noqa: E402

from diagnose.trace import parallel  # noqa: E402

ENDS_WITHIN_S = 5.0
RANK = PEER_TRACES / "hta" / "nccl_parser_config" / "nccl_data.json.gz"  # 7.7 MB of JSON, 40,573 events


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults, as a terminal gives them. A shell
    starts background jobs with SIGINT ignored, and an ignored SIGINT is inherited: diagnose would then
    never see Ctrl-C and run to its end (the suite run as `pytest &` failed so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _interrupt_mid_run(target: Path, out: Path, sig: int) -> tuple[int, float, list[int]]:
    """Start `diagnose target`, wait for its first helper process, send `sig`: (exit code, seconds
    from the signal to the exit, the helpers seen)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "diagnose", str(target), "-o", str(out), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_default_signals,
    )
    try:
        deadline = time.monotonic() + 120
        helpers: list[int] = []
        while not helpers and proc.poll() is None and time.monotonic() < deadline:
            helpers = _children(proc.pid)
            time.sleep(0.02)
        assert helpers, f"diagnose started no helper process (exit {proc.poll()})"
        time.sleep(0.3)  # into the work, not its first instant
        assert proc.poll() is None, "diagnose finished before it could be interrupted: make the input larger"
        start = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(60)
        if code != (130 if sig == signal.SIGINT else 128 + sig):
            print(proc.stderr.read().decode(errors="replace")[-4000:], file=sys.stderr)  # shown with the failure
        return code, time.monotonic() - start, helpers
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.fixture(scope="module")
def rank_folder(tmp_path_factory) -> Path:
    """64 copies of a real DDP rank: most of them still queued when the signal comes."""
    folder = tmp_path_factory.mktemp("ranks")
    for rank in range(64):
        shutil.copyfile(RANK, folder / f"rank_{rank}.pt.trace.json.gz")
    return folder


@pytest.fixture(scope="module")
def large_trace(tmp_path_factory) -> Path:
    """A tiled trace above the size decoded by two processes."""
    path = tmp_path_factory.mktemp("large") / "trace.json"
    make_large_trace.make(RANK, path, size_mb=2 * parallel.MIN_BYTES / 1e6)
    return path


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_an_interrupt_ends_a_rank_folder_and_its_workers(rank_folder, tmp_path, sig, code):
    got, seconds, workers = _interrupt_mid_run(rank_folder, tmp_path / "out", sig)
    assert got == code
    assert seconds < ENDS_WITHIN_S, f"diagnose took {seconds:.1f} s to end after {signal.Signals(sig).name}"
    time.sleep(0.5)
    assert not [w for w in workers if _alive(w)], "worker processes outlived diagnose"


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_an_interrupt_ends_a_two_process_decode(large_trace, tmp_path, sig, code):
    got, seconds, children = _interrupt_mid_run(large_trace, tmp_path / "out", sig)
    assert got == code
    assert seconds < ENDS_WITHIN_S, f"diagnose took {seconds:.1f} s to end after {signal.Signals(sig).name}"
    time.sleep(0.5)
    assert not [c for c in children if _alive(c)], "the decoding child outlived diagnose"
