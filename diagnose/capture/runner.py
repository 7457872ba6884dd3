"""The parent side of a capture: start the child, relay its progress, enforce the timeout.

Never imports torch. Whatever the child does (raise, run out of memory, segfault, hang), the
capture folder ends with a meta.json whose `status` says what happened.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from diagnose.capture.spec import CaptureSpec, read_meta

ProgressCallback = Callable[[dict], None]


def run_capture(spec: CaptureSpec, timeout_s: float = 900.0, python: str | None = None,
                on_progress: ProgressCallback | None = None) -> dict:
    """Run one capture in a child process and return the final meta.json contents."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "spec.json"
    spec_path.write_text(spec.to_json())
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, DIAGNOSE_PROGRESS_FD=str(write_fd), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")]))
    with open(out / "workload.log", "wb") as log:
        proc = subprocess.Popen(
            [python or sys.executable, "-m", "diagnose.capture.child", str(spec_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            pass_fds=(write_fd,), env=env, start_new_session=True,
        )
        os.close(write_fd)
        relay = threading.Thread(target=_relay_progress, args=(read_fd, on_progress), daemon=True)
        relay.start()
        timed_out = wait_or_kill(proc, timeout_s)
        relay.join(timeout=5)
    return _finalise_meta(out, spec, proc.returncode, timed_out, timeout_s)


def _package_root() -> str:
    """The folder that holds the `diagnose` package, so the child imports this same copy."""
    return str(Path(__file__).resolve().parents[2])


def _relay_progress(fd: int, on_progress: ProgressCallback | None) -> None:
    with os.fdopen(fd, "r") as stream:
        for line in stream:
            if on_progress is None:
                continue
            try:
                on_progress(json.loads(line))
            except (ValueError, TypeError):
                continue


def wait_or_kill(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for a child started in its own session; past `timeout_s` (or on Ctrl-C) kill its whole
    process group. Returns True when it timed out."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return True
    except KeyboardInterrupt:
        kill_group(proc)
        raise


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group (the child itself where that is not allowed)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _finalise_meta(out: Path, spec: CaptureSpec, returncode: int, timed_out: bool,
                   timeout_s: float) -> dict:
    """Fill in what the child could not say itself: a timeout, a hard crash."""
    meta = read_meta(out) or {"target": spec.target, "mode": spec.mode, "status": "running",
                              "files": {"trace": None, "log": "workload.log"}}
    if timed_out:
        meta["status"] = "timeout"
        meta["error"] = {"type": "Timeout", "message": f"the workload ran past the {timeout_s:g} s limit "
                         "(--timeout) and was stopped", "traceback": ""}
    elif meta.get("status") in (None, "running"):
        how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        meta["status"] = "crashed"
        meta["error"] = {"type": "Crash", "message": f"the workload process died ({how}) before "
                         "it could report", "traceback": _log_tail(out)}
    spec_file = out / "spec.json"
    if spec_file.exists():
        spec_file.unlink()
    if not (out / "trace.json.gz").exists():
        meta.setdefault("files", {})["trace"] = None
    (out / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
    return meta


def _log_tail(out: Path, lines: int = 20) -> str:
    try:
        return "\n".join((out / "workload.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
