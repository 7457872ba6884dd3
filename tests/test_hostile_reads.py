"""A trace that changes while diagnose reads it: exit 2 with one line, never a signal.

Plain traces were memory-mapped, and a mapped file that another process truncates kills the
reader with SIGBUS (no message, staging left behind). They are read into memory now, with the
file's size and modification time compared before and after. The deterministic cases change the
file between two reads of the loader's own (source._read_block); the last one races a real
writer that truncates and rewrites the file while a diagnose process analyses it.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import CAPTURES, ROOT
from hostile_guard import untouched_outside

from diagnose.commands import main
from diagnose.base.errors import InputError
from diagnose.trace import load_target, source

pytestmark = pytest.mark.hostile

SMALL = CAPTURES / "matmul_bf16"


@pytest.fixture
def plain_trace(tmp_path):
    path = tmp_path / "trace.json"
    path.write_bytes(gzip.decompress((SMALL / "trace.json.gz").read_bytes()))
    return path


def _after_first_read(monkeypatch, path, change):
    """Run `change(path)` once, right after the loader's first read into the trace's buffer."""
    real = source._read_into
    calls = []

    def read(f, view):
        n = real(f, view)
        if not calls:
            calls.append(n)
            change(path)
        return n

    monkeypatch.setattr(source, "_read_into", read)
    monkeypatch.setattr(source, "FILE_BLOCK_BYTES", 4096)
    monkeypatch.setattr(source, "SNIFF_BYTES", 4096)  # the first bytes looked at come before the buffer


def _truncate(path):
    os.truncate(path, path.stat().st_size // 2)


def _grow(path):
    with open(path, "ab") as f:
        f.write(b" " * 10_000)


def _rewrite(path):
    data = path.read_bytes()
    with open(path, "r+b") as f:  # same size, other bytes, a later modification time
        f.write(data[:100].replace(b"e", b"E"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))


@pytest.mark.parametrize("change,how", [(_truncate, "shrank"), (_grow, "grew"), (_rewrite, "was rewritten")])
def test_a_plain_trace_that_changes_while_read_is_one_line(change, how, plain_trace, monkeypatch, capsys, tmp_path):
    _after_first_read(monkeypatch, plain_trace, change)
    out = tmp_path / "out"
    with untouched_outside(out, tmp_path / "elsewhere"):
        code = main([str(plain_trace), "-o", str(out), "-q"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("diagnose: error: ") and f"the file {how} while it was read" in err
    assert not out.exists(), "no output for a torn read"


@pytest.mark.parametrize("change,how", [(_truncate, "shrank"), (_grow, "grew")])
def test_a_gzip_trace_that_changes_while_read_is_an_input_error(change, how, tmp_path, monkeypatch):
    path = tmp_path / "trace.json.gz"
    path.write_bytes((SMALL / "trace.json.gz").read_bytes())
    real = source._read_block
    monkeypatch.setattr(source, "_read_block", lambda f, n: (change(path), real(f, n))[1])
    with pytest.raises(InputError, match="gzip|while it was read"):
        load_target(path)


def test_an_unchanged_plain_trace_reads_as_before(plain_trace, monkeypatch):
    monkeypatch.setattr(source, "FILE_BLOCK_BYTES", 4096)  # many blocks
    assert len(load_target(plain_trace).gpu) == len(load_target(SMALL / "trace.json.gz").gpu)


def test_a_real_writer_truncating_the_trace_never_kills_diagnose(tmp_path):
    """A writer truncates and rewrites a 40 MB plain trace in a loop while diagnose runs on it.
    Every run ends in 0 (it read a whole copy) or 2 (one line), never a signal such as SIGBUS."""
    doc = gzip.decompress((CAPTURES / "host_loader_inline" / "trace.json.gz").read_bytes())
    path = tmp_path / "trace.json"
    full = doc + b" " * max(0, (40 << 20) - len(doc))  # padded after the document: still valid JSON
    path.write_bytes(full)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(len(full))])
    try:
        for attempt in range(3):
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "diagnose",
                    str(path),
                    "-o",
                    str(tmp_path / f"o{attempt}"),
                    "-q",
                    "--json",
                    "--no-html",
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=300,
            )
            assert r.returncode in (0, 1, 2), (r.returncode, r.stderr[-2000:])
            assert r.returncode != -signal.SIGBUS
            assert "Traceback" not in r.stderr
            if r.returncode == 2:
                assert len(r.stderr.splitlines()) == 1, r.stderr
    finally:
        writer.kill()
        writer.wait()


# Truncates the file to a tenth, waits, and writes it back whole, forever (until killed).
_WRITER = """
import os, sys, time
path, size = sys.argv[1], int(sys.argv[2])
data = open(path, "rb").read()
while True:
    os.truncate(path, size // 10)
    time.sleep(0.05)
    with open(path, "r+b") as f:
        f.write(data)
    time.sleep(0.05)
"""
