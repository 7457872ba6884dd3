"""The command line behaves like the tools people know: each item a new user tripped over, with its exit code.

Every case checks the exit code and that no traceback reaches the user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from diagnose.commands import main
from diagnose.commands.progress import CountedOf
from diagnose.base.errors import EXIT_BAD_INPUT

from conftest import CAPTURES, ROOT, diagnosis_of

W = ROOT / "tests" / "workloads"
EAGER = str(CAPTURES / "decode_eager")
FAST = ["--warmup", "1", "--steps", "2", "--timed-steps", "3"]


def run_cli(*args, cwd=None, env=None, timeout=120):
    """`python -m diagnose ARGS` as a user runs it (stdout piped): (exit code, stdout, stderr)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "diagnose", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=full_env,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("diagnose: error:"), stderr
    return lines[0]


# --- --out ------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["existing-file", "under-a-file", "dev-null", "read-only-dir"])
def test_out_at_a_bad_place_is_exit_2_one_line(tmp_path, where):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir()
    out = {
        "existing-file": a_file,
        "under-a-file": a_file / "out",
        "dev-null": "/dev/null",
        "read-only-dir": locked / "out",
    }[where]
    if where == "read-only-dir":
        locked.chmod(0o500)
        if os.access(locked, os.W_OK):  # root ignores the mode bits: nothing to test on this machine
            locked.chmod(0o700)
            pytest.skip("running as root: a read-only directory is still writable")
    try:
        code, _, err = run_cli(EAGER, "-o", out)
    finally:
        locked.chmod(0o700)
    assert code == EXIT_BAD_INPUT
    one_line_error(err)
    assert a_file.read_text() == "x"


# --- targets ----------------------------------------------------------------------------------


def test_function_target_naming_nothing_is_a_usage_error_before_running(tmp_path):
    code, _, err = run_cli(f"{W / 'tiny_cpu.py'}:nosuch", "-o", tmp_path / "o", timeout=20)
    assert code == EXIT_BAD_INPUT
    assert "defines no 'nosuch'" in one_line_error(err) and "make_step" in err
    assert not (tmp_path / "o").exists()


def test_demo_and_rules_are_subcommands_even_beside_folders_of_those_names(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "rules").mkdir()
    code, out, _ = run_cli("rules", cwd=tmp_path)
    assert code == 0 and "launch-overhead" in out and "timeline" in out
    code, out, err = run_cli("demo", "--format", "json", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert code == 0 and json.loads(out)["findings"][0]["rule"] == "launch-overhead"
    assert (tmp_path / "diagnose-out" / "demo" / "findings.json").is_file()


def test_run_subcommand_reaches_a_folder_called_demo(tmp_path):
    shutil.copytree(EAGER, tmp_path / "demo")
    code, out, _ = run_cli("run", "demo", "--json", "-o", tmp_path / "again", cwd=tmp_path)
    assert code == 0 and json.loads(out)["findings"][0]["rule"] == "launch-overhead"


@pytest.mark.parametrize("suffix", [".nsys-rep", ".qdrep"])
def test_nsight_systems_reports_are_named_for_what_they_are(tmp_path, suffix):
    report = tmp_path / f"profile{suffix}"
    report.write_bytes(b"\x00NSYS")
    code, _, err = run_cli(report)
    assert code == EXIT_BAD_INPUT
    assert "Nsight Systems" in one_line_error(err) and "torch.profiler" in err


# --- scripts, modules, their arguments ------------------------------------------------------------


def test_script_arguments_pass_through_without_a_separator(tmp_path):
    out = tmp_path / "cap"
    code, stdout, _ = run_cli("-o", out, *FAST, W / "echo_args.py", "--epochs", "9", "--lr", "3", timeout=300)
    assert code == 0
    assert "ARGS ['--epochs', '9', '--lr', '3']" in (out / "workload.log").read_text()
    assert "the script was stopped after 1 warm-up step and 2 profiled steps" in stdout


def test_dash_m_runs_a_module_with_its_arguments(tmp_path):
    out = tmp_path / "cap"
    code, _, _ = run_cli("run", "-o", out, *FAST, "-m", "echo_module", "--flag", cwd=W, timeout=300)
    assert code == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["mode"] == "module" and meta["status"] == "ok"
    assert "MODULE __main__ ['--flag']" in (out / "workload.log").read_text()


def test_options_after_a_trace_are_diagnoses_own(tmp_path):
    code, out, _ = run_cli(EAGER, "--json", "-o", tmp_path / "o", "--no-html")
    assert code == 0 and json.loads(out)["schema"] == "diagnose.model.findings/1"
    assert not (tmp_path / "o" / "report.html").exists()


def test_open_opens_the_report(tmp_path, monkeypatch, capsys):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url))
    assert main([EAGER, "-q", "--open", "-o", str(tmp_path / "o")]) == 0
    assert opened == [(tmp_path / "o" / "report.html").resolve().as_uri()]


@pytest.mark.parametrize("flag", [["--sweep", "seq=1,2"], ["--param", "batch=2"]])
def test_workload_options_on_a_trace_are_rejected(tmp_path, flag):
    code, _, err = run_cli(EAGER, *flag, "-o", tmp_path / "o")
    assert code == EXIT_BAD_INPUT and "needs a workload" in one_line_error(err)


# --- output ------------------------------------------------------------------------------------


def test_piped_output_does_not_wrap(tmp_path):
    code, out, _ = run_cli(EAGER, "-o", tmp_path / "o")
    assert code == 0
    verdict = next(line for line in out.splitlines() if line.startswith("Verdict:"))
    assert verdict.rstrip().endswith("cuda-graphs)."), "the verdict is one line, not wrapped at 80 columns"
    assert max(map(len, out.splitlines())) > 100
    assert "\x1b[" not in out, "no colour codes when piped"


def test_repr_of_a_diagnosis_is_one_short_line():
    text = repr(diagnosis_of(CAPTURES / "decode_eager"))  # diagnose.analyze(EAGER), once a session
    assert "\n" not in text and len(text) < 200 and "launch-overhead" in text


@pytest.mark.parametrize(
    "fmt_name, marker",
    [("md", "**Verdict:**"), ("text", "Verdict:"), ("json", '"schema"'), ("html", "<!doctype html>")],
)
def test_format_picks_any_renderer(tmp_path, fmt_name, marker):
    code, out, _ = run_cli(EAGER, "--format", fmt_name, "-o", tmp_path / "o")
    assert code == 0 and marker in out


def test_counts_are_shown_only_where_there_is_a_total():
    from rich.progress import Progress

    with Progress(CountedOf(), transient=True, disable=True) as progress:
        unknown = progress._tasks[progress.add_task("x", total=None)]
        known = progress._tasks[progress.add_task("y", total=5, completed=2)]
        column = CountedOf()
        assert str(column.render(unknown)) == ""
        assert str(column.render(known)) == "2/5"


def test_errors_are_one_line_without_a_blank_line_first(tmp_path):
    code, _, err = run_cli(tmp_path / "missing.json")
    assert code == EXIT_BAD_INPUT and err.startswith("diagnose: error:")
    one_line_error(err)


def test_one_step_is_not_one_steps(tmp_path):
    code, out, _ = run_cli(
        CAPTURES.parent
        / "peer"
        / "hta"
        / "critical_path"
        / "alexnet"
        / "benchmark_result_2869224_1695835535_trace.json.gz",
        "-o",
        tmp_path / "o",
    )
    step_line = next(line for line in out.splitlines() if line.strip().startswith("step "))
    assert code == 0 and step_line.rstrip().endswith("· 1 step")


# --- thresholds -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, expected",
    [
        ("launch-overhead.min_recoverable_shar=0.3", "did you mean 'launch-overhead.min_recoverable_share'"),
        ("launch-overhead.min_recoverable_share=1.5", "must lie in [0, 1]"),
        ("launch-overhead.min_recoverable_share=nan", "finite number"),
        ("memory-bound.min_chain_ops=inf", "finite number"),
        ("memory-bound.min_chain_ops=2.5", "whole number"),
        ("attention-memory.min_tokens=0", "whole number ≥ 1"),
        ("launch-overhead.small_kernel_us=-1", "must be ≥ 0"),
        ("launch-overhead.min_recoverable_share=lots", "must be a number"),
    ],
)
def test_bad_thresholds_are_exit_2_naming_the_range(tmp_path, setting, expected):
    code, _, err = run_cli(EAGER, "--set", setting, "-o", tmp_path / "o")
    assert code == EXIT_BAD_INPUT and expected in one_line_error(err)


def test_every_key_a_hint_names_is_listed_by_diagnose_rules(tmp_path):
    _, listing, _ = run_cli("rules")
    code, _, err = run_cli(EAGER, "--set", "timeline.kernel_wait_max=5", "-o", tmp_path / "o")
    assert code == EXIT_BAD_INPUT
    suggested = err.split("did you mean '")[1].split("'")[0]
    assert suggested.split(".", 1)[1] in listing


@pytest.mark.parametrize(
    "toml",
    [
        '[tool.diagnose]\nthresholds = "x"\n',
        'tool = "x"\n',
        '[[tool.diagnose]]\nfail-on = "high"\n',
        b"[tool.diagnose]\n\xff\xfe = 1\n",
    ],
)
def test_bad_pyproject_is_exit_2_one_line(tmp_path, toml):
    (tmp_path / "pyproject.toml").write_bytes(toml if isinstance(toml, bytes) else toml.encode())
    code, _, err = run_cli(EAGER, "-o", tmp_path / "o", cwd=tmp_path)
    assert code == EXIT_BAD_INPUT
    one_line_error(err)


def test_python_api_overrides_are_checked_too():
    import diagnose
    from diagnose.base.errors import UsageError

    with pytest.raises(UsageError, match="must lie in"):
        diagnose.analyze(EAGER, overrides={"launch-overhead.min_recoverable_share": 2.0})


def test_wording_a_new_user_tripped_over():
    """The cheat-sheet row is introduced, an AMD GPU's FP32 ceiling is not "CUDA cores", and a trace
    without steps does not read "the capture marked steps at none found"."""
    from diagnose.report.html import render_html

    # diagnose.analyze() of each target, made once a session (conftest.diagnosis_of)
    page = render_html(diagnosis_of(CAPTURES / "decode_eager"))
    assert "Cheat-sheet row" not in page and "The textbook case" in page
    amd = diagnosis_of(ROOT / "fixtures" / "peer" / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    labels = [c.label for c in amd.details.roofline.ceilings.compute] if amd.details.roofline else []
    assert labels and not any("CUDA cores" in label for label in labels) and "FP32 vector units" in labels
    alexnet = diagnosis_of(
        ROOT
        / "fixtures"
        / "peer"
        / "hta"
        / "critical_path"
        / "alexnet"
        / "benchmark_result_2869224_1695835535_trace.json.gz"
    )
    assert "marked steps at none found" not in alexnet.summary.steps_found_by
