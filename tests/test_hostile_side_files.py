"""Every file diagnose reads beside a trace has a ceiling, like traces: --ncu-csv,
meta.json, memory.json, compile.json, sweep.json, Python samples, pyproject.toml's
[tool.diagnose] and the source files a compile record points at. Past it (or gzip inflating past
it, or a FIFO or device in its place): exit 2 with one line, fast, nothing read into memory.

Large files are sparse (their size is what is checked first), at the real ceilings; gzip bombs
run against a ceiling lowered to SMALL_CEILING, to stay fast (test_hostile_input.py inflates one
against the real one).
"""

from __future__ import annotations

import gzip
import os
import shutil
import time
import zlib

import pytest
from conftest import CAPTURES
from hostile_guard import untouched_outside

from diagnose.commands import main
from diagnose.ncu import csv as ncu_csv
from diagnose.trace import schemas

pytestmark = pytest.mark.hostile

SMALL = CAPTURES / "matmul_bf16"
BEYOND = schemas.SIDE_FILE_MAX_BYTES + 1
SMALL_CEILING = 4 << 20


def one_line(capsys, *argv) -> tuple[int, str]:
    """`diagnose ARGV -q`: exit code and its one stderr line (asserted to be one line, no traceback)."""
    started = time.monotonic()
    code = main([*map(str, argv), "-q"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("diagnose: error: "), err
    assert time.monotonic() - started < 30
    return code, err


def sparse(path, size: int = BEYOND) -> None:
    """A file of `size` bytes that takes no disk (a hole)."""
    with open(path, "wb") as f:
        f.truncate(size)


def gzip_bomb(path, inflated: int = 2 * SMALL_CEILING) -> None:
    deflate = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = b" " * (1 << 20)
    with open(path, "wb") as f:
        for _ in range(inflated // len(block)):
            f.write(deflate.compress(block))
        f.write(deflate.flush())


def capture(tmp_path, src=SMALL):
    folder = tmp_path / "capture"
    shutil.copytree(src, folder)
    return folder


# -- Nsight Compute -------------------------------------------------------------------------------


def test_a_huge_ncu_csv_is_refused_by_its_size(tmp_path, capsys):
    csv_path = tmp_path / "ncu.csv"
    sparse(csv_path, ncu_csv.NCU_MAX_BYTES + 1)
    with untouched_outside(tmp_path / "out"):
        code, err = one_line(capsys, SMALL / "trace.json.gz", "--ncu-csv", csv_path, "-o", tmp_path / "out")
    assert code == 2 and "limit on an Nsight Compute CSV" in err


def test_an_ncu_csv_gzip_bomb_stops_at_the_ceiling(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ncu_csv, "NCU_MAX_BYTES", SMALL_CEILING)
    csv_path = tmp_path / "ncu.csv.gz"
    gzip_bomb(csv_path)
    code, err = one_line(capsys, SMALL / "trace.json.gz", "--ncu-csv", csv_path, "-o", tmp_path / "out")
    assert code == 2 and "inflates past" in err


def test_an_ncu_csv_that_is_a_fifo_is_refused_without_waiting(tmp_path, capsys):
    csv_path = tmp_path / "ncu.csv"
    os.mkfifo(csv_path)
    code, err = one_line(capsys, SMALL / "trace.json.gz", "--ncu-csv", csv_path, "-o", tmp_path / "out")
    assert code == 2 and "not a regular file" in err


def test_an_ncu_report_past_its_ceiling_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ncu_csv, "NCU_REPORT_MAX_BYTES", 1000)
    report = tmp_path / "x.ncu-rep"
    sparse(report, 1001)
    code, err = one_line(capsys, SMALL / "trace.json.gz", "--ncu-csv", report, "-o", tmp_path / "out")
    assert code == 2 and "limit on an Nsight Compute report" in err


# -- the files of a capture folder ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name,src,what",
    [
        ("meta.json", SMALL, "capture metadata"),
        ("compile.json", CAPTURES / "compile_graphs_cpu_scalar", "torch.compile record"),
        ("pysamples.json.gz", CAPTURES / "compile_graphs_cpu_scalar", "Python stack samples"),
        ("memory.json.gz", CAPTURES / "compile_graphs_cpu_scalar", "memory record"),
    ],
)
@pytest.mark.parametrize("how", ["sparse", "bomb"])
def test_a_capture_side_file_past_the_ceiling_is_one_line(name, src, what, how, tmp_path, capsys, monkeypatch):
    if how == "bomb":
        monkeypatch.setattr(schemas, "SIDE_FILE_MAX_BYTES", SMALL_CEILING)
    folder = capture(tmp_path, src)
    target = folder / name
    target.unlink()
    if how == "sparse":
        sparse(target)
    else:
        gzip_bomb(target)
    with untouched_outside(tmp_path / "out", folder):
        code, err = one_line(capsys, folder, "-o", tmp_path / "out")
    assert code == 2, err
    assert name in err and what in err
    assert ("limit on" if how == "sparse" else "inflates past") in err


def test_a_sweep_record_past_the_ceiling_is_one_line(tmp_path, capsys):
    folder = capture(tmp_path, CAPTURES / "sweep_attention_sdpa")
    (folder / "sweep.json").unlink()
    sparse(folder / "sweep.json")
    code, err = one_line(capsys, folder, "-o", tmp_path / "out")
    assert code == 2 and "sweep.json" in err and "limit on sweep record" in err


@pytest.mark.parametrize("name", ["compile.json", "pysamples.json.gz", "memory.json.gz", "meta.json"])
def test_a_side_file_replaced_by_a_fifo_is_never_waited_on(name, tmp_path, capsys):
    """Nobody writes to the FIFO: opening it to read would block forever. It is left out (exit 0
    or 1) or refused (exit 2, one line), at once."""
    folder = capture(tmp_path, CAPTURES / "compile_graphs_cpu_scalar")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    started = time.monotonic()
    code = main([str(folder), "-o", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert time.monotonic() - started < 30
    assert "Traceback" not in err
    assert code in (0, 1) or (code == 2 and len(err.splitlines()) == 1), err


def test_a_source_line_from_a_device_or_a_huge_file_is_left_out(tmp_path):
    from diagnose.rules.compile_breaks import SOURCE_MAX_BYTES, _source_line

    huge = tmp_path / "model.py"
    sparse(huge, SOURCE_MAX_BYTES + 1)
    started = time.monotonic()
    assert _source_line("/dev/zero", 1) == "" and _source_line(str(huge), 1) == ""
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    assert _source_line(str(fifo), 1) == ""
    assert time.monotonic() - started < 5
    small = tmp_path / "ok.py"
    small.write_text("a = 1\n  b = torch.compile(f)  \n")
    assert _source_line(str(small), 2) == "b = torch.compile(f)"


# -- pyproject.toml [tool.diagnose] ---------------------------------------------------------------


def _with_pyproject(tmp_path, monkeypatch, text: str | None = None, size: int | None = None):
    project = tmp_path / "project"
    project.mkdir()
    if size is not None:
        sparse(project / "pyproject.toml", size)
    else:
        (project / "pyproject.toml").write_text(text)
    monkeypatch.chdir(project)
    return project


@pytest.mark.parametrize("case", ["huge", "deep arrays", "deep inline tables", "deep tables"])
def test_a_hostile_pyproject_is_one_line(case, tmp_path, monkeypatch, capsys):
    from diagnose.model import config

    if case == "huge":
        _with_pyproject(tmp_path, monkeypatch, size=config.PYPROJECT_MAX_BYTES + 1)
    elif case == "deep arrays":
        _with_pyproject(tmp_path, monkeypatch, "[tool.diagnose]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    elif case == "deep inline tables":
        _with_pyproject(tmp_path, monkeypatch, "[tool.diagnose]\nx = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n")
    else:
        dotted = ".".join(f"k{i}" for i in range(200))
        _with_pyproject(tmp_path, monkeypatch, f"[tool.diagnose.thresholds]\n{dotted} = 1\n")
    code, err = one_line(capsys, SMALL / "trace.json.gz", "-o", tmp_path / "out")
    assert code == 2 and "pyproject.toml" in err
    assert {
        "huge": "limit on a pyproject.toml",
        "deep arrays": "nested too deeply",
        "deep inline tables": "nested too deeply",
        "deep tables": "nest more than",
    }[case] in err


def test_a_pyproject_nested_as_documented_still_works(tmp_path, monkeypatch, capsys):
    _with_pyproject(tmp_path, monkeypatch, "[tool.diagnose.thresholds.launch-overhead]\nmin_recoverable_share = 0.3\n")
    assert main([str(SMALL / "trace.json.gz"), "-o", str(tmp_path / "out"), "-q"]) in (0, 1)


def test_bundled_side_files_are_far_below_the_ceiling():
    for path in list(CAPTURES.glob("*/*.json")) + list(CAPTURES.glob("*/*.json.gz")):
        if path.name.startswith("trace"):
            continue
        raw = path.read_bytes()
        size = len(gzip.decompress(raw)) if raw[:2] == b"\x1f\x8b" else len(raw)
        assert size < schemas.SIDE_FILE_MAX_BYTES // 10, path
