"""How a workload's run ends: no process it started outlives diagnose, whatever ended it; os._exit,
a script without torch and a wrong --python get honest outcomes; sweep points stay in their folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnose.capture import launch, runner, sweep
from diagnose.capture.spec import CaptureSpec
from diagnose.commands import main
from diagnose.base.errors import UsageError

from conftest import ROOT

W = ROOT / "tests" / "workloads"
FAST = ["--warmup", "1", "--steps", "2", "--timed-steps", "3"]
needs_torch = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None,
    reason="capturing needs torch (.ci/run installs the CPU build)",
)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its parent to reap it has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in (b"Z", b"X")


@pytest.fixture
def pids_file(tmp_path):
    """Where the spawner workload lists its processes; whatever a failing test leaves alive is killed."""
    path = tmp_path / "pids.txt"
    yield path
    for pid in read_pids(path):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def assert_none_alive(path: Path) -> None:
    pids = read_pids(path)
    assert len(pids) == 5, f"the workload did not record its processes: {pids}"  # itself, sleep, 2 workers, grandchild
    survivors = [pid for pid in pids if alive(pid)]
    assert not survivors, f"still alive after diagnose returned: {survivors}"


def spawner(pids_file: Path, end: str, *extra: str) -> list[str]:
    return [f"{W / 'spawner.py'}:make_step", "--param", f"pids={pids_file}", "--param", f"end={end}", *extra]


# -- no orphans ---------------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize(
    "end, code, status",
    [
        ("normal", 0, "ok"),
        ("raise", 3, "failed"),
        ("crash", 3, "crashed"),
    ],
)
def test_no_child_outlives_the_run(tmp_path, capsys, pids_file, end, code, status):
    out = tmp_path / "cap"
    assert main([*spawner(pids_file, end), "-o", str(out), "-q", *FAST]) == code
    capsys.readouterr()
    assert json.loads((out / "meta.json").read_text())["status"] == status
    assert_none_alive(pids_file)


@needs_torch
def test_no_child_outlives_a_timeout(tmp_path, capsys, pids_file):
    out = tmp_path / "cap"
    # The workload has written its five pids within 2.7 s of the start under two busy loops on a 2-core
    # machine (1.1-2.7 s in five runs); 8 s leaves three times that before the timeout ends the run.
    assert main([*spawner(pids_file, "hang"), "-o", str(out), "-q", "--timeout", "8", *FAST]) == 3
    capsys.readouterr()
    assert json.loads((out / "meta.json").read_text())["status"] == "timeout"
    assert_none_alive(pids_file)


@needs_torch
def test_a_child_that_ignores_sigterm_gets_sigkill(tmp_path, capsys, pids_file, monkeypatch):
    monkeypatch.setattr(launch, "TERM_GRACE_S", 1.0)
    started = time.monotonic()
    assert (
        main([*spawner(pids_file, "normal", "--param", "stubborn=true"), "-o", str(tmp_path / "cap"), "-q", *FAST]) == 0
    )
    capsys.readouterr()
    assert_none_alive(pids_file)
    assert time.monotonic() - started < 60


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults, as a terminal gives them (a test
    runner's worker may ignore SIGINT, and an ignored SIGINT is inherited: Python then never raises
    KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _signal_masks(pid: int) -> str:
    """The SigIgn and SigCgt lines of /proc/PID/status, for a message when the process did not end."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "(gone)"
    return " ".join(line for line in lines if line.startswith(("SigIgn", "SigCgt", "State")))


def diagnose_until_started(workload: list[str], tmp_path, pids_file) -> subprocess.Popen:
    """`python -m diagnose WORKLOAD` into tmp_path/cap, returned once the workload wrote `pids_file`
    (or ended, or 120 s passed)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "diagnose", *workload, "-o", str(tmp_path / "cap"), "-q", *FAST],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )
    deadline = time.monotonic() + 120
    while not pids_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc


@needs_torch
@pytest.mark.parametrize(
    "sig, code, said",
    [(signal.SIGINT, 130, "diagnose: interrupted"), (signal.SIGTERM, 143, "diagnose: terminated")],
    ids=["ctrl-c", "sigterm"],
)
def test_no_child_outlives_ctrl_c_or_sigterm(tmp_path, pids_file, sig, code, said):
    """SIGINT or SIGTERM to a `python -m diagnose` process while its workload hangs with children running."""
    proc = diagnose_until_started(spawner(pids_file, "hang"), tmp_path, pids_file)
    try:
        assert pids_file.exists(), f"the workload never started its children: {proc.communicate(timeout=30)}"
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"diagnose did not end within 120 s of {sig.name}: {_signal_masks(proc.pid)}; this worker's "
                f"SIGINT handler: {signal.getsignal(signal.SIGINT)}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code
    assert err.strip() == said and "Traceback" not in err
    assert_none_alive(pids_file)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a staging folder was left behind"


SPAWN_AND_LEAVE = (
    "import subprocess, sys, time; p = subprocess.Popen(['sleep', '300']); "
    "print(p.pid, flush=True); time.sleep(float(sys.argv[1]))"
)


@pytest.mark.parametrize("lives_s, timeout_s", [(0, 60), (300, 1)], ids=["exits", "times-out"])
def test_the_ncu_pass_leaves_no_child(lives_s, timeout_s, tmp_path):
    """The ncu pass's process group (here a stand-in for ncu that starts a child) ends with it."""
    from diagnose.ncu import run

    text, _, timed_out = run._run([sys.executable, "-c", SPAWN_AND_LEAVE, str(lives_s)], timeout_s, 0, None, tmp_path)
    assert timed_out == (lives_s > timeout_s)
    pid = int(text.split()[0])
    try:
        assert not alive(pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_end_group_escalates_to_sigkill():
    """A group member that ignores SIGTERM is killed once the grace period is over."""
    code = (
        "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); time.sleep(300)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(proc.stdout.readline())
    started = time.monotonic()
    launch.end_group(proc, grace_s=0.5)
    assert 0.4 < time.monotonic() - started < 10
    assert proc.returncode == -signal.SIGKILL and not alive(child) and not launch.group_alive(proc.pid)


# -- outcomes -----------------------------------------------------------------------------------


def capture_script(tmp_path, capsys, script, *args):
    """Capture a script with 1 warm-up, 2 profiled and 3 timed steps: 6 iterations end just before diagnose
    would stop the script itself, 3 end inside the profiled steps."""
    out = tmp_path / "cap"
    code = main(["-o", str(out), "--json", *FAST, str(W / script), "--", *args])  # options before a script
    data = json.loads(capsys.readouterr().out)
    return code, data, json.loads((out / "meta.json").read_text())


@needs_torch
def test_os_exit_0_after_the_profiled_steps_keeps_the_trace_and_is_no_crash(tmp_path, capsys):
    code, data, meta = capture_script(tmp_path, capsys, "exits_early.py", "6", "os", "0")
    assert code == 0 and meta["status"] == "ok" and meta["error"] is None
    assert meta["files"]["trace"] == "trace.json.gz" and data["summary"]["steps_analysed"] >= 1
    assert any("os._exit(0)" in w for w in data["warnings"])


@needs_torch
def test_os_exit_0_while_profiled_is_a_failure_that_keeps_the_trace(tmp_path, capsys):
    code, data, meta = capture_script(tmp_path, capsys, "exits_early.py", "3", "os", "0")
    assert code == 3 and meta["status"] == "failed" and "os._exit(0)" in meta["error"]["message"]
    assert "profiled steps" in meta["error"]["message"] and meta["files"]["trace"] == "trace.json.gz"


@needs_torch
def test_os_exit_nonzero_is_a_failure(tmp_path, capsys):
    code, data, meta = capture_script(tmp_path, capsys, "exits_early.py", "6", "os", "5")
    assert code == 3 and meta["status"] == "failed" and "os._exit(5)" in meta["error"]["message"]
    assert meta["files"]["trace"] == "trace.json.gz"


@needs_torch
def test_an_exit_that_bypasses_the_child_keeps_the_trace(tmp_path, capsys):
    """posix._exit(0) skips even diagnose's os._exit hook: the parent still keeps the exported trace."""
    code, data, meta = capture_script(tmp_path, capsys, "exits_early.py", "6", "posix", "0")
    assert code == 0 and meta["status"] == "ok" and meta["files"]["trace"] == "trace.json.gz"
    assert any("ended itself with exit status 0" in w for w in data["warnings"])


@needs_torch
def test_a_script_without_torch_gets_a_report_saying_so(tmp_path, capsys):
    code, data, meta = capture_script(tmp_path, capsys, "no_torch.py")
    assert code == 0 and meta["status"] == "ok"
    assert any("no PyTorch operation" in w for w in data["warnings"])
    assert (tmp_path / "cap" / "report.html").exists()


@pytest.mark.parametrize(
    "python, expected",
    [
        ("/nonexistent/python", "no such file"),
        (__file__, "not an executable file"),
        ("/bin/false", "does not run as a Python 3 interpreter"),
    ],
    ids=["missing", "not-executable", "not-python"],
)
def test_check_python_refuses_what_cannot_run_the_workload(python, expected):
    with pytest.raises(UsageError, match=expected) as caught:
        runner.check_python(python)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"--python {python}")


def test_check_python_accepts_a_python():
    assert runner.check_python(None) == sys.executable
    assert Path(runner.check_python(sys.executable)).resolve() == Path(sys.executable).resolve()


def test_a_missing_python_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(
        [f"{W / 'tiny_cpu.py'}:make_step", "--python", "/nonexistent/python", "-o", str(tmp_path / "o"), "-q", *FAST]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "/nonexistent/python" in err and "Traceback" not in err


# -- sweep folders ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["width=8,8", "width=8,8.0", "width=a/b,a_b", "width=X,x", "../w=1,2"])
def test_sweeps_that_would_share_or_escape_a_folder_are_refused(text):
    with pytest.raises(ValueError, match="--sweep"):
        sweep.parse_sweep(text)


def test_duplicate_sweep_values_are_a_usage_error(tmp_path, capsys):
    code = main([f"{W / 'tiny_cpu.py'}:make_step", "--sweep", "width=8,8", "-o", str(tmp_path / "s"), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "listed twice" in err and err.count("\n") == 1


def test_sweep_points_stay_inside_the_sweep_folder(tmp_path, monkeypatch):
    """`width=../../x,16`: each point's folder is one sanitised name directly inside the sweep folder."""
    made = []

    def fake_capture(spec: CaptureSpec, **_):
        made.append(Path(spec.out_dir))
        Path(spec.out_dir).mkdir(parents=True)
        return {"status": "ok"}

    monkeypatch.setattr(sweep, "run_capture", fake_capture)
    out = tmp_path / "a" / "b" / "sweep"
    name, values = sweep.parse_sweep("width=../../x,16,.hidden")
    spec = CaptureSpec(path="m.py", mode="function", out_dir="", function="make_step")
    doc = sweep.run_sweep(spec, name, values, out)
    assert [p.parent for p in made] == [out] * 3
    assert [p.name for p in made] == ["width=.._.._x", "width=16", "width=.hidden"]
    assert sorted(os.listdir(tmp_path / "a")) == ["b"] and sorted(os.listdir(tmp_path / "a" / "b")) == ["sweep"]
    assert [p["folder"] for p in doc["points"]] == [p.name for p in made]


def test_run_sweep_checks_its_points_too(tmp_path):
    spec = CaptureSpec(path="m.py", mode="function", out_dir="", function="make_step")
    with pytest.raises(ValueError, match="listed twice"):
        sweep.run_sweep(spec, "width", [8, 8], tmp_path / "s")
    assert not (tmp_path / "s").exists()


# -- processes that leave the group, and diagnose killed outright ---------------------------------


def escaper(pids_file: Path, end: str) -> list[str]:
    return [f"{W / 'escaper.py'}:make_step", "--param", f"pids={pids_file}", "--param", f"end={end}"]


def wait_gone(pids: list[int], limit_s: float = 10.0) -> list[int]:
    """The pids still alive after up to `limit_s`."""
    deadline = time.monotonic() + limit_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@needs_torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="descendants are followed through /proc")
def test_processes_that_left_the_group_are_ended_with_the_run(tmp_path, pids_file):
    """A setsid child and a daemon started by the workload do not outlive a normal run."""
    done = subprocess.run(
        [sys.executable, "-m", "diagnose", *escaper(pids_file, "normal"), "-o", str(tmp_path / "cap"), "-q", *FAST],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    pids = read_pids(pids_file)
    assert len(pids) == 2 and wait_gone(pids, 2.0) == []


@needs_torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="descendants are followed through /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP], ids=["sigkill", "sighup"])
def test_nothing_outlives_diagnose_killed_outright(tmp_path, pids_file, sig):
    """SIGKILL (nothing can unwind) or SIGHUP to diagnose while its workload hangs: the workload, the
    processes that left its group and the staging folder are all gone within seconds."""
    proc = diagnose_until_started(escaper(pids_file, "hang"), tmp_path, pids_file)
    try:
        assert pids_file.exists(), f"the workload never started: {proc.communicate(timeout=30)}"
        time.sleep(0.5)  # the watchdog polls the tree every 0.1 s
        children = [
            int(line.split()[0])
            for line in subprocess.run(
                ["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True
            ).stdout.split()
        ]
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"diagnose did not end within 120 s of {sig.name}: {_signal_masks(proc.pid)}; this worker's "
                f"SIGINT handler: {signal.getsignal(signal.SIGINT)}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
    if sig == signal.SIGHUP:
        assert proc.returncode == 129 and err.strip() == "diagnose: hung up"
    survivors = wait_gone(read_pids(pids_file) + children)
    assert survivors == [], f"still alive after diagnose died: {survivors}"
    deadline = time.monotonic() + 5
    while [p for p in tmp_path.iterdir() if ".diagnose-staging-" in p.name] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in tmp_path.iterdir() if ".diagnose-staging-" in p.name], "a staging folder was left"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the rank pool's guard is Linux's PR_SET_PDEATHSIG")
def test_rank_workers_die_with_diagnose_on_sigkill(tmp_path):
    """SIGKILL to diagnose while its rank pool analyses a rank folder: no worker is alive 2 s later."""
    from diagnose.capture.guard import process_table
    from diagnose.ranks.analyse import default_workers

    if default_workers() < 2:
        pytest.skip("one core: the ranks are analysed in diagnose's own process, with no pool")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_ranks

    bench_ranks.make_rank_folder(tmp_path / "ranks", 24)
    proc = subprocess.Popen(
        [sys.executable, "-m", "diagnose", str(tmp_path / "ranks"), "-o", str(tmp_path / "out"), "-q", "--no-html"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while not workers and proc.poll() is None and time.monotonic() < deadline:
        workers = {pid for pid, (ppid, _, _) in (process_table() or {}).items() if ppid == proc.pid}
        time.sleep(0.05)
    assert workers, "the rank pool started no worker process"
    time.sleep(0.5)  # the workers are analysing ranks now
    proc.kill()
    proc.wait()
    left = wait_gone(sorted(workers), 2.0)  # none may be alive 2 s later; done as soon as all are gone
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"rank workers {left} outlived diagnose"
