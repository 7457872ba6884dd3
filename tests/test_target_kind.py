"""What a path is, told once (diagnose/front/target.py), on real fixtures: each kind, and the paths that are none."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import CAPTURES, ROOT
from diagnose.front import pipeline
from diagnose.model.config import Config
from diagnose.base.errors import InputError, UsageError
from diagnose.front.target import Target, as_target, recorded, resolve_target

W = ROOT / "tests" / "workloads"
TRACE = ROOT / "fixtures" / "peer" / "hta" / "triton_example" / "triton_example.json.gz"


@pytest.mark.parametrize(
    "path, kind",
    [
        (CAPTURES / "decode_eager", "capture"),
        (CAPTURES / "ddp_healthy", "ranks"),
        (CAPTURES / "sweep_attention_naive", "sweep"),
        (CAPTURES / "sweep_attention_naive" / "seq=2048", "capture"),
        (CAPTURES / "decode_eager" / "trace.json.gz", "trace"),
        (TRACE, "trace"),
        (W / "echo_args.py", "script"),
    ],
)
def test_each_fixture_resolves_to_its_kind(path, kind):
    target = resolve_target(str(path))
    assert (target.kind, target.path, target.function) == (kind, path, None)
    assert target.runs == (kind == "script")


def test_a_function_and_a_module():
    function = resolve_target(f"{W / 'tiny_cpu.py'}:make_step")
    assert (function.kind, function.path, function.function) == ("function", W / "tiny_cpu.py", "make_step")
    assert function.runs and function.text == f"{W / 'tiny_cpu.py'}:make_step"
    module = resolve_target("echo_module", module=True)
    assert (module.kind, module.path, module.runs) == ("module", Path("echo_module"), True)


def test_standard_input_is_a_trace():
    assert resolve_target("-") == Target("trace", Path("-"))


def test_a_missing_path_is_a_trace_that_reading_refuses(tmp_path):
    missing = tmp_path / "nothing-here.json.gz"
    target = resolve_target(str(missing))
    assert target == Target("trace", missing) and not target.runs
    with pytest.raises(InputError, match="no such file or folder"):
        pipeline.analyse(target, Config())


def test_a_folder_of_nothing_diagnose_wrote_is_a_capture_that_reading_refuses(tmp_path):
    assert resolve_target(str(tmp_path)).kind == "capture"
    with pytest.raises(InputError, match="not a capture folder"):
        pipeline.analyse(tmp_path, Config())


def test_a_folder_of_kineto_files_is_ranks(tmp_path):
    for rank in (0, 1):
        shutil.copy(TRACE, tmp_path / f"rank{rank}.json.gz")
    assert resolve_target(str(tmp_path)).kind == "ranks"


@pytest.mark.parametrize(
    "text, error, says",
    [
        (str(W / "no_such_script.py"), UsageError, "no such file"),
        (f"{W / 'no_such_script.py'}:make_step", UsageError, "no such file"),
        (f"{W / 'tiny_cpu.py'}:make_stp", UsageError, "defines no 'make_stp'"),
        ("report.nsys-rep", InputError, "Nsight Systems report"),
        ("prof.ncu-rep", InputError, "Nsight Compute report"),
    ],
)
def test_paths_that_are_no_target_say_why(text, error, says):
    with pytest.raises(error, match=says):
        resolve_target(text)


def test_a_bad_module_name():
    with pytest.raises(UsageError, match="not a module name"):
        resolve_target("not a module", module=True)


def test_a_path_given_to_the_analysis_is_read_as_a_recording():
    """diagnose.analyze and diff hand paths: those are recordings, whatever their names end in."""
    assert recorded(W / "echo_args.py").kind == "trace"
    assert as_target(CAPTURES / "ddp_healthy").kind == "ranks"
    target = resolve_target(str(CAPTURES / "decode_eager"))
    assert as_target(target) is target


def test_a_runnable_target_is_not_analysed():
    with pytest.raises(UsageError, match="a workload to run"):
        pipeline.analyse(resolve_target(str(W / "echo_args.py")), Config())
