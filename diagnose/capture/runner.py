"""The parent side of a capture: start the child, relay its progress, enforce the timeout.

Never imports torch. Whatever the child does (raise, run out of memory, segfault, hang), the
capture folder ends with a meta.json whose `status` says what happened.

The child runs through launch.py, in a session (and process group) of its own, and whatever is
left of that group when the run ends (normally, by a timeout, by Ctrl-C in diagnose, by a crash)
is ended with it, so a workload's own children never outlive diagnose.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from diagnose.base import measured_peaks
from diagnose.capture.launch import CannotStart, run_child
from diagnose.capture.spec import CaptureSpec, read_meta
from diagnose.base.errors import UsageError
from diagnose.base.safe_files import write_new

ProgressCallback = Callable[[dict], None]

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
    command = [python or sys.executable, "-m", "diagnose.child.capture", str(spec_path)]
    with open(out / "workload.log", "wb") as log:
        try:
            ended = run_child(
                command,
                folder=out,
                timeout_s=timeout_s,
                log=log,
                on_progress_fd=lambda fd: _relay_progress(fd, on_progress),
            )
        except CannotStart as exc:
            why = exc.reason.strerror or exc.reason
            raise UsageError(f"--python {python or sys.executable}: cannot run it ({why})") from None
    meta = _finalise_meta(out, spec, ended.returncode, ended.timed_out, timeout_s)
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
    device = meta.get("device")
    if not isinstance(device, dict):
        device = {}
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
    error = meta.get("error")
    if not isinstance(error, dict):
        error = {}
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
