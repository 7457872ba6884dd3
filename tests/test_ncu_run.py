"""The `--ncu` pass (diagnose/ncu/run.py) against a stand-in `ncu` script: command, output, every failure."""

from __future__ import annotations

import gzip
import re
import shlex
import stat
import sys

import pytest

from diagnose.capture.spec import CaptureSpec
from diagnose.metrics import Metrics
from diagnose.ncu import run

from conftest import ROOT, load_capture

NCU = ROOT / "fixtures" / "ncu"


def fake_ncu(tmp_path, monkeypatch, body: str) -> tuple:
    """An executable `ncu` stand-in (a shell script running `body`) that DIAGNOSE_NCU points to."""
    script = tmp_path / "fake-ncu"
    args = tmp_path / "args.txt"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {shlex.quote(str(args))}\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("DIAGNOSE_NCU", str(script))
    return script, args


def swiglu_kernels():
    return Metrics(load_capture("swiglu_eager")).kernels_in_steps


def spec(tmp_path) -> CaptureSpec:
    return CaptureSpec(
        path="fixtures/workloads/swiglu.py",
        function="make_step",
        mode="function",
        out_dir=str(tmp_path / "cap"),
        warmup=2,
        steps=5,
    )


def test_selection_covers_the_step_or_the_hot_kernels():
    kernels = swiglu_kernels()
    whole = run.select_kernels(kernels)
    assert not whole.filtered and whole.launches == 10 and whole.coverage == 1.0
    hot = run.select_kernels(kernels, cover=0.9, max_launches=6)
    assert hot.filtered and hot.launches <= 6 and hot.coverage >= 0.55
    assert "elementwise_kernel" in hot.names
    pattern = re.compile(hot.regex)
    assert pattern.search("at::native::elementwise_kernel") and pattern.search("elementwise_kernel")
    assert not pattern.search("elementwise_kernel_x") and not pattern.search("my_elementwise_kernel")


def test_command_filters_one_step(tmp_path):
    selection = run.select_kernels(swiglu_kernels(), max_launches=4)
    cmd = run.command("ncu", selection, "python3", tmp_path / "spec.json")
    text = " ".join(cmd)
    assert cmd[cmd.index("--nvtx-include") + 1] == "diagnose:step 0/" and "--nvtx" in cmd
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("-k") + 1].startswith("regex:") and "--launch-count" in cmd
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in text
    assert cmd[-4:] == ["python3", "-m", "diagnose.child.capture", str(tmp_path / "spec.json")]


def test_measure_writes_ncu_csv_and_relays_the_childs_phases(tmp_path, monkeypatch):
    csv = tmp_path / "swiglu.csv"
    csv.write_bytes(gzip.decompress((NCU / "swiglu_eager.ncu.csv.gz").read_bytes()))
    child = tmp_path / "child.py"  # stands for the capture child that ncu would start
    child.write_text(
        "import json, os\n"
        "out = os.fdopen(int(os.environ['DIAGNOSE_PROGRESS_FD']), 'w')\n"
        "for phase in ('build', 'warmup', 'profile', 'export'):\n"
        "    out.write(json.dumps({'phase': phase, 'done': 0, 'total': 1}) + '\\n')\n"
    )
    _, args = fake_ncu(
        tmp_path, monkeypatch, f"{shlex.quote(sys.executable)} {shlex.quote(str(child))}\ncat {shlex.quote(str(csv))}"
    )
    events = []
    out = tmp_path / "cap"
    out.mkdir()
    outcome = run.measure(spec(tmp_path), out, swiglu_kernels(), timeout_s=60, on_progress=events.append)
    assert outcome.table is not None and len(outcome.table.kernels) == 10 and outcome.warnings == []
    assert (out / "ncu.csv").read_text().startswith('"ID"') and (out / "ncu.log").exists()
    assert not (out / "ncu-run").exists()
    assert [e["phase"] for e in events] == ["ncu-start", "ncu-build", "ncu-warmup", "ncu-replay", "ncu-finish"]
    assert events[3]["launches"] == 10
    called = args.read_text().split("\n")
    assert "diagnose.child.capture" in called and "diagnose:step 0/" in called
    assert outcome.seconds >= 0


@pytest.mark.parametrize(
    "body,expected",
    [
        (
            'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance '
            'Counters on the target device 0."; exit 1',
            "ERR_NVGPUCTRPERM",
        ),
        (
            'echo "==ERROR== Failed to profile \\"nvjet\\" in process 12"; echo "==WARNING== No kernels were profiled."; '
            "exit 1",
            "could not be replayed",
        ),
        ("echo 'Traceback (most recent call last)'; exit 3", "exited with status 3"),
    ],
)
def test_measure_failures_are_one_line_each(tmp_path, monkeypatch, body, expected):
    fake_ncu(tmp_path, monkeypatch, body)
    out = tmp_path / "cap"
    out.mkdir()
    outcome = run.measure(spec(tmp_path), out, swiglu_kernels(), timeout_s=60)
    assert outcome.table is None and not (out / "ncu.csv").exists()
    assert any(expected in w for w in outcome.warnings)
    assert all(w.startswith("--ncu: ") and "\n" not in w for w in outcome.warnings)


def test_measure_times_out(tmp_path, monkeypatch):
    fake_ncu(tmp_path, monkeypatch, "sleep 30")
    out = tmp_path / "cap"
    out.mkdir()
    outcome = run.measure(spec(tmp_path), out, swiglu_kernels(), timeout_s=1)
    assert outcome.table is None and "ran past its 1 s limit" in outcome.warnings[0]
    assert outcome.seconds < 20


def test_missing_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSE_NCU", str(tmp_path / "not-there"))
    assert run.find_ncu() is None
    outcome = run.measure(spec(tmp_path), tmp_path, swiglu_kernels())
    assert outcome.warnings == [run.MISSING]


def test_no_kernels(tmp_path, monkeypatch):
    fake_ncu(tmp_path, monkeypatch, "exit 0")
    outcome = run.measure(spec(tmp_path), tmp_path, swiglu_kernels().iloc[0:0])
    assert "no CUDA kernel" in outcome.warnings[0]


def test_a_flooding_workload_costs_a_cut_not_memory():
    """ncu's output is kept to a bound: the head and the tail (where the CSV is), with the cut said."""
    import io

    from diagnose.ncu.run import _read

    flood = "x" * 99 + "\n"
    stream = io.StringIO("==PROF== start\n" + flood * 10_000 + '"ID","Kernel Name"\n"0","k"\n')
    lines: list[str] = []
    _read(stream, lines, limit=20_000)
    text = "".join(lines)
    assert len(text) < 21_000
    assert text.startswith("==PROF== start") and text.endswith('"0","k"\n')
    assert "lines of output cut here" in text


def test_a_line_without_end_is_read_in_pieces():
    import io

    from diagnose.ncu.run import _read

    lines: list[str] = []
    _read(io.StringIO("y" * 5_000_000), lines, limit=1_000_000)
    assert sum(map(len, lines)) < 1_100_000
