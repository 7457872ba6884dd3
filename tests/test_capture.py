"""Capture on this machine's CPU: function mode, script mode and every way a workload can fail."""

from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("torch", reason="capturing needs torch (.ci/run installs the CPU build)")

from diagnose.commands import main  # noqa: E402

from conftest import ROOT  # noqa: E402

W = ROOT / "tests" / "workloads"
FAST = ["--warmup", "1", "--steps", "2", "--timed-steps", "3"]


def capture(tmp_path, capsys, target, *extra):
    out = tmp_path / "cap"
    code = main(["-o", str(out), "--json", *FAST, target, *extra])  # options before a script
    data = json.loads(capsys.readouterr().out)
    meta = json.loads((out / "meta.json").read_text())
    return code, data, meta, out


def test_function_mode_on_cpu(tmp_path, capsys):
    code, data, meta, out = capture(tmp_path, capsys, f"{W / 'tiny_cpu.py'}:make_step", "--param", "width=32")
    assert code == 0
    assert meta["status"] == "ok" and meta["params"] == {"width": 32}
    assert meta["steps"]["profiled"] == 2
    assert len(meta["timing"]["unprofiled_step_us"]) == 3
    assert (out / "trace.json.gz").exists() and (out / "report.html").exists()
    assert data["summary"]["steps_analysed"] == 2
    assert any("CPU-only" in s["reason"] for s in data["skipped"])
    # the trace says diagnose's harness recorded it, whatever is later done to its events
    head = json.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))
    assert head["diagnose"] == {"capture": "diagnose", "allocator_history": False, "stack_sampler": True}


def test_script_mode_finds_optimizer_steps(tmp_path, capsys):
    code, data, meta, _ = capture(tmp_path, capsys, str(W / "train_script.py"), "--", "50")
    assert code == 0
    assert meta["steps"]["how"] == "each optimizer.step() call"
    assert meta["steps"]["profiled"] == 2
    assert meta["timing"]["unprofiled_step_us"]
    assert data["summary"]["steps_found_by"].startswith("diagnose step ranges")


def test_workload_that_raises_exits_3_with_report(tmp_path, capsys):
    code, data, meta, out = capture(tmp_path, capsys, f"{W / 'raises.py'}:make_step")
    assert code == 3
    assert meta["status"] == "failed"
    assert meta["error"]["type"] == "ValueError" and "step 3" in meta["error"]["message"]
    assert data["capture"]["status"] == "failed"
    assert "failed" in data["verdict"]
    assert (out / "report.html").exists()


def test_out_of_memory_is_reported(tmp_path, capsys):
    code, data, meta, _ = capture(tmp_path, capsys, f"{W / 'oom.py'}:make_step")
    assert code == 3
    assert meta["status"] == "oom"
    assert "out of memory" in data["verdict"]


def test_timeout(tmp_path, capsys):
    # A sleeping step started 1.2-2.2 s after the start in four runs under two busy loops on a 2-core
    # machine: 5 s still stops the run inside its first step (a timeout before it is reported alike).
    code, data, meta, _ = capture(tmp_path, capsys, f"{W / 'misbehaving.py'}:make_sleeper", "--timeout", "5")
    assert code == 3
    assert meta["status"] == "timeout"


def test_hard_crash(tmp_path, capsys):
    code, data, meta, _ = capture(tmp_path, capsys, f"{W / 'misbehaving.py'}:make_crasher")
    assert code == 3
    assert meta["status"] == "crashed"
    assert "signal 9" in meta["error"]["message"]


def test_factory_that_returns_no_callable(tmp_path, capsys):
    code, data, meta, _ = capture(tmp_path, capsys, f"{W / 'misbehaving.py'}:not_a_factory")
    assert code == 3
    assert "zero-argument callable" in meta["error"]["message"]


def test_failure_after_profiling_started_keeps_the_trace(tmp_path, capsys):
    """raises.py fails on its 3rd call: with 1 warm-up and 0 timed steps, that is inside profiling."""
    out = tmp_path / "cap"
    code = main(
        [f"{W / 'raises.py'}:make_step", "-o", str(out), "-q", "--warmup", "1", "--timed-steps", "0", "--steps", "3"]
    )
    capsys.readouterr()
    meta = json.loads((out / "meta.json").read_text())
    assert code == 3 and meta["status"] == "failed"
    assert (out / "trace.json.gz").exists() and meta["files"]["trace"] == "trace.json.gz"


def test_sweep_writes_one_capture_per_value(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(
        [
            f"{ROOT / 'fixtures' / 'workloads' / 'attention.py'}:make_step",
            "--param",
            "impl=naive",
            "--param",
            "heads=2",
            "--sweep",
            "seq=32,64",
            "-o",
            str(out),
            "--json",
            *FAST,
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert [p["value"] for p in sweep["points"]] == [32, 64] and {p["status"] for p in sweep["points"]} == {"ok"}
    assert (out / "seq=64" / "trace.json.gz").exists() and (out / "report.html").exists()
    assert data["details"]["memory"]["sweep"]["param"] == "seq"


def test_sweep_needs_a_function_target(tmp_path, capsys):
    code = main(["--sweep", "seq=1,2", "-o", str(tmp_path), str(W / "train_script.py")])
    assert code == 2 and "function target" in capsys.readouterr().err


def test_script_mode_says_on_the_terminal_that_it_stopped_the_script(tmp_path, capsys):
    out = tmp_path / "cap"
    code = main(["-o", str(out), *FAST, str(W / "train_script.py"), "--", "50"])
    shown = capsys.readouterr().out
    meta = json.loads((out / "meta.json").read_text())
    assert code == 0 and meta["steps"]["stopped_early"] is True
    assert "the script was stopped after 1 warm-up step and 2 profiled steps" in " ".join(shown.split())


def test_a_script_that_ends_by_itself_is_not_said_to_be_stopped(tmp_path, capsys):
    out = tmp_path / "cap"
    code = main(["-o", str(out), *FAST, str(W / "train_script.py"), "--", "3"])
    shown = capsys.readouterr().out
    assert code == 0
    assert "was stopped" not in shown


def test_a_failing_workloads_traceback_reaches_stderr_and_workload_log(tmp_path, capsys):
    out = tmp_path / "cap"
    code = main(["-o", str(out), *FAST, f"{W / 'raises.py'}:make_step"])
    err = capsys.readouterr().err
    assert code == 3
    line = next(i for i, text in enumerate((W / "raises.py").read_text().splitlines(), 1) if "raise ValueError" in text)
    where = f'File "{W / "raises.py"}", line {line}, in step'
    assert where in err and "ValueError: bad batch at step 3" in err
    log = (out / "workload.log").read_text()
    assert "Traceback (most recent call last)" in log and where in log


@pytest.mark.parametrize("fails", [False, True])
def test_the_capture_mark_never_stops_a_capture(tmp_path, monkeypatch, fails):
    """The profiler session writes diagnose's mark into the trace; a torch whose metadata call raises (an older
    or a changed build) still gets its trace, unmarked."""
    import torch

    from diagnose.capture.spec import CaptureSpec
    from diagnose.child.capture import CaptureSession

    def refuse(self, key, value):
        raise TypeError("a changed signature in this build")

    if fails:
        monkeypatch.setattr(torch.profiler.profile, "preset_metadata_json", refuse)
    session = CaptureSession(CaptureSpec(path="x.py", mode="function", out_dir=str(tmp_path)))
    session.torch = torch
    session.start_profiler()
    torch.ones(64) @ torch.ones(64)
    session.stop_profiler()
    head = json.loads(gzip.decompress((tmp_path / "trace.json.gz").read_bytes()))
    assert ("diagnose" in head) is not fails


class _History:
    """A stand-in for MemoryRecorder that writes when the allocator history starts and stops into `log`."""

    enabled = True

    def __init__(self, log: list):
        self.log = log

    def start_history(self):
        self.log.append("history on")

    def stop_history(self):
        self.log.append("history off")

    def finish(self):
        return None


def test_the_allocator_history_runs_in_the_profiled_warm_up_step_only(tmp_path, monkeypatch):
    """Function mode: the history (Python stacks under the GIL at each allocation) is on while the profiled
    warm-up step runs and off before the first measured step; the trace's mark says so."""
    import contextlib

    import torch

    from diagnose.capture.spec import CaptureSpec
    from diagnose.child.capture import CaptureSession

    log: list[str] = []
    spec = CaptureSpec(
        path=str(W / "tiny_cpu.py"),
        function="make_step",
        mode="function",
        out_dir=str(tmp_path),
        warmup=1,
        steps=2,
        timed_steps=1,
    )
    session = CaptureSession(spec)
    session.torch, session.memory = torch, _History(log)
    plain_range = session.step_range

    @contextlib.contextmanager
    def logged(label):
        log.append(label)
        with plain_range(label):
            yield

    monkeypatch.setattr(session, "step_range", logged)
    session.run_function()
    assert log == ["history on", "diagnose/warmup 0", "history off", "diagnose/step 0", "diagnose/step 1"]
    head = json.loads(gzip.decompress((tmp_path / "trace.json.gz").read_bytes()))
    assert head["diagnose"]["allocator_history_steps"] == "warm-up"


def test_script_mode_stops_the_allocator_history_when_the_first_measured_step_opens(tmp_path):
    """Script mode: the profiler and the history run from the start; the boundary that opens the first measured
    step stops the history, after the warm-up steps."""
    import torch

    from diagnose.capture.spec import CaptureSpec
    from diagnose.child.capture import CaptureSession
    from diagnose.child.steps import StepTracker

    log: list[str] = []
    session = CaptureSession(
        CaptureSpec(path="x.py", mode="script", out_dir=str(tmp_path), warmup=2, steps=2, timed_steps=1)
    )
    session.torch, session.memory = torch, _History(log)
    session.step_range = lambda label: _Logged(log, label)
    tracker = StepTracker(session)
    for _ in range(4):
        tracker.boundary()
    tracker.close_annotation()
    assert log == ["diagnose/warmup 0", "diagnose/warmup 1", "history off", "diagnose/step 0", "diagnose/step 1"]


class _Logged:
    """A step range that only writes its label into `log`."""

    def __init__(self, log: list, label: str):
        log.append(label)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
