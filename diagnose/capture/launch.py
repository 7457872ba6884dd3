"""Start a child process of diagnose and see it to its end: the one launcher of every workload run.

A capture (runner.py), a distributed capture (torchrun, distributed.py), a fix variant
(verify/run.py) and the Nsight Compute rerun (ncu/run.py) all run the workload the same way, through
`run_child`: in a session (and process group) of its own, with this copy of diagnose first on its
PYTHONPATH, under the watchdog of guard.py, within a time limit, and whatever is left of its group
when the run ends (normally, by the time limit, by Ctrl-C in diagnose, by a crash) is ended with it:
SIGTERM, then SIGKILL after `TERM_GRACE_S`. So a workload's own children (a `subprocess.Popen`, a
multiprocessing pool, a double-forked process that stays in the group) never outlive diagnose. A
process that starts a session of its own (`setsid`, a daemon) has left the group on purpose: the
guard ends it when the run ends.

Never imports torch.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, BinaryIO, Callable, Mapping, Sequence

from diagnose.capture.guard import guarded, process_table

PROGRESS_FD_ENV = "DIAGNOSE_PROGRESS_FD"
"""The variable that tells a child which inherited descriptor takes its progress lines."""

KILL_SETTLE_S = 2.0  # at most this long for SIGKILLed members to be gone
TERM_GRACE_S = 5.0
"""Seconds a workload's process group has between SIGTERM and SIGKILL when a run ends."""

READER_JOIN_S = 5.0  # how long the readers of a child's output may take once it has ended


class CannotStart(Exception):
    """The child could not be started at all; `reason` is the OSError that said why."""

    def __init__(self, reason: OSError):
        super().__init__(str(reason))
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a child run by `run_child` ended."""

    returncode: int
    timed_out: bool


def package_root() -> str:
    """The folder that holds the `diagnose` package, so that a child imports this same copy."""
    return str(Path(__file__).resolve().parents[2])


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child: unbuffered, `extra` added, this diagnose first on PYTHONPATH.

    The progress descriptor of diagnose's own parent (if any) is not passed on: `run_child` sets
    its own when the child reports progress."""
    env = {k: v for k, v in os.environ.items() if k != PROGRESS_FD_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root(), env.get("PYTHONPATH")]))
    return env


def run_child(
    command: Sequence[str],
    *,
    folder: str | Path,
    timeout_s: float,
    log: BinaryIO | None = None,
    env: Mapping[str, str] | None = None,
    on_progress_fd: Callable[[int], None] | None = None,
    on_output: Callable[[IO[str]], None] | None = None,
) -> Ended:
    """Run `command` to its end in a session of its own, and end its whole process group after it.

    - `folder`: where the child writes; when it lies in a staging folder, the guard removes that
      folder if diagnose dies while the child runs.
    - `timeout_s`: past it the group is ended and `Ended.timed_out` is True.
    - `log`: a binary file that takes the child's stdout and stderr; or `on_output`, called in a
      thread of its own with the child's stdout and stderr as text (undecodable bytes replaced).
    - `env`: variables added to `child_env()`.
    - `on_progress_fd`: when given, the child gets a pipe in DIAGNOSE_PROGRESS_FD, and this is
      called in a thread of its own with the pipe's read end (its to close), from the start.

    The readers are given `READER_JOIN_S` to finish once the child has ended. Raises CannotStart
    when the child cannot be started, with no descriptor left open.
    """
    environment = child_env(env)
    read_fd = write_fd = None
    if on_progress_fd is not None:
        read_fd, write_fd = os.pipe()
        environment[PROGRESS_FD_ENV] = str(write_fd)
    try:
        proc = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE if on_output is not None else log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,
            pass_fds=() if write_fd is None else (write_fd,),
            text=on_output is not None,
            errors="replace" if on_output is not None else None,
        )
    except OSError as exc:
        if read_fd is not None:
            os.close(read_fd)
        raise CannotStart(exc) from None
    finally:
        if write_fd is not None:
            os.close(write_fd)
    readers = []
    if on_progress_fd is not None:
        readers.append(threading.Thread(target=on_progress_fd, args=(read_fd,), daemon=True))
    if on_output is not None:
        readers.append(threading.Thread(target=on_output, args=(proc.stdout,), daemon=True))
    for reader in readers:
        reader.start()
    with guarded(proc, folder):
        try:
            timed_out = wait_or_kill(proc, timeout_s)
        finally:
            end_group(proc)  # the workload's own children, whatever ended the run
    for reader in readers:
        reader.join(timeout=READER_JOIN_S)
    return Ended(proc.returncode, timed_out)


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
