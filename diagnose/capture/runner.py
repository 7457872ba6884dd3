"""The parent side of a capture: start the child, relay its progress, enforce the timeout.

Never imports torch. Whatever the child does (raise, run out of memory, segfault, hang), the
capture folder ends with a meta.json whose `status` says what happened.

The child runs in a session (and process group) of its own, and whatever is left of that group
when the run ends (normally, by a timeout, by Ctrl-C in diagnose, by a crash) is ended with it:
SIGTERM, then SIGKILL after `TERM_GRACE_S`. So a workload's own children (a `subprocess.Popen`,
a multiprocessing pool, a double-forked process that stays in the group) never outlive
diagnose. A process that starts a session of its own (`setsid`, a daemon) has left the group on
purpose and is not followed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from diagnose.capture.guard import guarded, process_table
from diagnose.base import measured_peaks
from diagnose.capture.spec import CaptureSpec, read_meta
from diagnose.base.errors import UsageError
from diagnose.base.safe_files import write_new

ProgressCallback = Callable[[dict], None]

KILL_SETTLE_S = 2.0  # at most this long for SIGKILLed members to be gone
TERM_GRACE_S = 5.0
"""Seconds a workload's process group has between SIGTERM and SIGKILL when a run ends."""

PYTHON_PROBE_TIMEOUT_S = 60.0
"""Seconds `check_python` waits for the --python interpreter to start and print its version."""

TRACE_FILE = "trace.json.gz"


def check_python(python: str | None) -> str:
    """The interpreter that will run the workload: this one, or `python` (--python) checked first.

    Called before anything runs, so that a wrong --python is one line and exit 2 (UsageError),
    not a crashed capture: it must be an executable file (a bare name is looked up on PATH) that
    starts as a Python interpreter.
    """
    if python is None:
        return sys.executable
    found = shutil.which(python)
    if found is None:
        what = "is not an executable file" if Path(python).exists() else "no such file"
        raise UsageError(f"--python {python}: {what}")
    try:
        probe = subprocess.run(
            [found, "-c", "import sys; print(sys.version_info[0])"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=PYTHON_PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"--python {python}: did not start within {PYTHON_PROBE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc.strerror or exc})") from None
    if probe.returncode != 0 or probe.stdout.strip() != b"3":
        raise UsageError(f"--python {python}: does not run as a Python 3 interpreter (exit status {probe.returncode})")
    return found


def run_capture(
    spec: CaptureSpec, timeout_s: float = 900.0, python: str | None = None, on_progress: ProgressCallback | None = None
) -> dict:
    """Run one capture in a child process and return the final meta.json contents."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "spec.json"
    spec_path.write_text(spec.to_json())
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, DIAGNOSE_PROGRESS_FD=str(write_fd), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")]))
    with open(out / "workload.log", "wb") as log:
        try:
            proc = subprocess.Popen(
                [python or sys.executable, "-m", "diagnose.capture.child", str(spec_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(write_fd,),
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_fd)
            raise UsageError(f"--python {python or sys.executable}: cannot run it ({exc.strerror or exc})") from None
        finally:
            os.close(write_fd)
        relay = threading.Thread(target=_relay_progress, args=(read_fd, on_progress), daemon=True)
        relay.start()
        with guarded(proc, out):
            try:
                timed_out = wait_or_kill(proc, timeout_s)
            finally:
                end_group(proc)  # the workload's own children, whatever ended the run
        relay.join(timeout=5)
    meta = _finalise_meta(out, spec, proc.returncode, timed_out, timeout_s)
    if meta.get("trace_cut_short"):  # an OSError: the output folder is discarded, the previous one kept
        raise OSError(
            None,
            "the profiler could not write the whole trace (kineto reports no error; what it wrote ends early): a "
            f"full disk, the output folder's or the temporary folder's ({tempfile.gettempdir()}), or a file-size "
            "limit (ulimit -f): free some space or raise the limit, and run again; the previous output folder, "
            "if any, is left as it was",
            str(out / TRACE_FILE),
        )
    return _add_gpu_probe(out, meta, python)


def _add_gpu_probe(out: Path, meta: dict, python: str | None) -> dict:
    """Put the GPU's measured peaks (`diagnose probe`, cached per device) into a GPU capture's meta.json.

    Measured in a process of its own once the workload is done, so it never shares the workload's memory
    or timing; DIAGNOSE_GPU_PROBE=0 leaves it out. A probe that fails is a warning, not a failed capture."""
    device = meta.get("device") if isinstance(meta.get("device"), dict) else {}
    if (
        meta.get("status") != "ok"
        or not device.get("compute_capability")
        or os.environ.get("DIAGNOSE_GPU_PROBE") == "0"
    ):
        return meta
    record, why = measured_peaks.run_probe(python)
    if record is not None:
        meta["gpu_probe"] = record
    else:
        meta.setdefault("warnings", []).append(
            f"the GPU probe did not run ({why}): the roofline uses datasheet figures"
        )
    write_new(out / "meta.json", json.dumps(meta, indent=2, default=str).encode())
    return meta


def _package_root() -> str:
    """The folder that holds the `diagnose` package, so the child imports this same copy."""
    return str(Path(__file__).resolve().parents[2])


RELAY_LINE_MAX = 1 << 16  # a progress line longer than this is no report of diagnose's: skipped


def _relay_progress(fd: int, on_progress: ProgressCallback | None) -> None:
    """Pass the child's progress reports on; any bytes (undecodable, endless lines, not JSON) are skipped,
    and the pipe is read to its end so the child never blocks on it."""
    with os.fdopen(fd, "rb") as stream:
        while True:
            line = stream.readline(RELAY_LINE_MAX)
            if not line:
                return
            if on_progress is None or not line.endswith(b"\n"):
                continue
            try:
                event = json.loads(line.decode("utf-8", errors="replace"))
                if isinstance(event, dict):
                    on_progress(event)
            except (ValueError, TypeError):
                continue


def wait_or_kill(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for a child started in its own session; past `timeout_s` (or on Ctrl-C) end its whole
    process group (`end_group`). Returns True when it timed out.

    A caller should still call `end_group` once the child has exited (in a `finally`), since the
    child may leave processes of its own behind."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        end_group(proc)
        return True
    except BaseException:
        end_group(proc)
        raise


def end_group(proc: subprocess.Popen, grace_s: float | None = None) -> None:
    """End what is left of the process group of `proc` (started with start_new_session=True).

    SIGTERM to the group, then SIGKILL to whatever is still alive after `grace_s` (default
    `TERM_GRACE_S`; at once on a second Ctrl-C), and `proc` is reaped. Returns at once when the
    group is already empty.
    """
    pgid = proc.pid
    if _signal_group(proc, signal.SIGTERM):
        deadline = time.monotonic() + (TERM_GRACE_S if grace_s is None else grace_s)
        try:
            while group_alive(pgid) and time.monotonic() < deadline:
                proc.poll()  # reap the child itself, so that it does not count as alive
                time.sleep(0.02)
        finally:
            if group_alive(pgid):
                _signal_group(proc, signal.SIGKILL)
                _wait_until_gone(pgid, KILL_SETTLE_S)
    proc.wait()


def _wait_until_gone(pgid: int, limit_s: float) -> None:
    """SIGKILL is delivered asynchronously: give the group's members a moment to die."""
    deadline = time.monotonic() + limit_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group at once (no grace period) and reap the child."""
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Send `sig` to the process group led by `proc`; False when the group no longer exists."""
    try:
        os.killpg(proc.pid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # the group is not ours to signal (it should be): the child at least
        if proc.poll() is None:
            proc.send_signal(sig)
        return proc.poll() is None


def group_alive(pgid: int) -> bool:
    """True while a process of group `pgid` is alive (zombies, which wait to be reaped, do not count)."""
    members = _group_members_from_proc(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_members_from_proc(pgid: int) -> list[int] | None:
    """Pids of the live processes of group `pgid` read from /proc; None where there is no /proc."""
    table = process_table()
    if table is None:
        return None
    return [pid for pid, (_, group, _) in table.items() if group == pgid]


def _finalise_meta(out: Path, spec: CaptureSpec, returncode: int, timed_out: bool, timeout_s: float) -> dict:
    """Fill in what the child could not say itself: a timeout, a hard crash, an early os._exit."""
    meta = _child_meta(out) or {
        "target": spec.target,
        "mode": spec.mode,
        "status": "running",
        "files": {"trace": None, "log": "workload.log"},
    }
    traced = (out / TRACE_FILE).exists()
    if timed_out:
        meta["status"] = "timeout"
        meta["error"] = {
            "type": "Timeout",
            "message": f"the workload ran past the {timeout_s:g} s limit (--timeout) and was stopped",
            "traceback": "",
        }
    elif meta.get("status") in (None, "running") and returncode == 0 and traced:
        # the process ended itself (os._exit(0), a C-level exit) after the profiler wrote its trace
        meta["status"] = "ok"
        meta.setdefault("warnings", []).append(
            "the workload process ended itself with exit status 0 (os._exit?) before diagnose wrote its final "
            "record: the trace is kept, the step count and unprofiled timing may be missing"
        )
    elif meta.get("status") in (None, "running"):
        how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        meta["status"] = "crashed"
        meta["error"] = {
            "type": "Crash",
            "message": f"the workload process died ({how}) before it could report",
            "traceback": _log_tail(out),
        }
    error = meta.get("error") if isinstance(meta.get("error"), dict) else {}
    if error.get("traceback") and meta.get("status") not in ("ok", "crashed"):
        # the child caught the workload's exception: its traceback goes in workload.log too
        with open(out / "workload.log", "ab") as log:
            log.write(b"\n" + str(error["traceback"]).rstrip().encode("utf-8", "replace") + b"\n")
    spec_file = out / "spec.json"
    if spec_file.exists():
        spec_file.unlink()
    meta.setdefault("files", {})["trace"] = TRACE_FILE if traced else None
    write_new(out / "meta.json", json.dumps(meta, indent=2, default=str).encode())
    return meta


def _child_meta(out: Path) -> dict:
    """The meta.json the child wrote, or {} when it wrote none (or the workload clobbered it)."""
    try:
        meta = read_meta(out)
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict) or not isinstance(meta.get("files", {}), dict):
        return {}
    return meta


LOG_TAIL_BYTES = 64 << 10


def _log_tail(out: Path, lines: int = 20) -> str:
    """The last `lines` lines of workload.log, read from its last LOG_TAIL_BYTES whatever its size."""
    try:
        with open(out / "workload.log", "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
