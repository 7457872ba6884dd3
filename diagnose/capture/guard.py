"""No process of a workload outlives diagnose, however diagnose ends.

The workload runs in a process group of its own, which the launcher ends (launch.end_group). Two
things escape that: processes that leave the group (`setsid`, a daemon's double fork), and
everything, when diagnose itself is killed outright (SIGKILL, or a signal it cannot unwind from)
and nothing is left to end the group. So:

- `adopt_orphans()` makes diagnose (the command line) a child subreaper on Linux: a workload's
  orphaned descendants are re-parented to diagnose instead of init, so they stay in its tree;
- `guarded(proc, folder)` starts a watchdog process beside the workload. It reads a pipe that
  only diagnose holds, and follows the workload's tree from /proc while it runs. When the pipe
  closes without a word (diagnose died), it kills the workload's group and every descendant it
  saw (matched by start time, so a reused pid is never hit) and removes the staging folder the
  capture was being written into. On a normal end, diagnose ends the escaped descendants itself,
  then tells the watchdog to leave.

Without /proc (not Linux) the watchdog still ends the process group; escaped descendants are not
followed there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Set as AbstractSet
from pathlib import Path

STAGING_MARK = ".diagnose-staging-"  # as diagnose/front/output.py names its staging folders
POLL_S = 0.1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1


def adopt_orphans() -> bool:
    """Make this process a child subreaper (Linux), so a workload's orphans stay its descendants."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent dies, however the parent ends (SIGKILL
    included; Linux PR_SET_PDEATHSIG). For helper processes of diagnose (the rank pool's workers):
    called first thing in the child, with the pid of the diagnose that started it. A parent that
    is already gone (it died before the call) ends the child at once."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def process_table() -> dict[int, tuple[int, int, int]] | None:
    """pid -> (parent pid, process group, start time in clock ticks) of every live process; None without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    if "self" not in names:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 19 and fields[0] not in (b"Z", b"X"):
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def start_time(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot (None when it is gone or there is no /proc)."""
    row = (process_table() or {}).get(pid)
    return row[2] if row else None


def descendants(root: int, born: int | None, adopter: int, exclude: set[int], table=None) -> dict[int, int]:
    """pid -> start time of the processes below `root` (started at `born`), and of orphans that `adopter`
    (a subreaper) took in since then, with their own descendants; `exclude` and theirs are left out."""
    table = process_table() if table is None else table
    if not table or born is None:
        return {}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    roots = ([root] if root in table else []) + [
        pid for pid in children.get(adopter, []) if pid != root and pid not in exclude and table[pid][2] >= born
    ]
    found, stack = {}, list(roots)
    while stack:
        pid = stack.pop()
        if pid in found or pid in exclude:
            continue
        found[pid] = table[pid][2]
        stack.extend(children.get(pid, []))
    found.pop(root, None)
    return found


def kill_seen(seen: dict[int, int]) -> None:
    """SIGKILL every process of `seen` that still runs with the same start time (never a reused pid)."""
    table = process_table() or {}
    for pid, born in seen.items():
        if pid in table and table[pid][2] == born:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # an adopted orphan is ours to reap


def end_escaped(root: int, born: int | None, exclude: AbstractSet[int] = frozenset()) -> None:
    """End the descendants of the workload `root` (started at `born`) that left its process group,
    and the orphans this process (a subreaper) adopted since it started."""
    kill_seen(descendants(root, born, os.getpid(), set(exclude) | {os.getpid()}))


def staging_root(folder: str | Path) -> Path | None:
    """The staging folder `folder` lies in (itself or an ancestor named with STAGING_MARK), if any."""
    for path in (Path(folder), *Path(folder).parents):
        if STAGING_MARK in path.name:
            return path
    return None


@contextlib.contextmanager
def guarded(proc: subprocess.Popen, folder: str | Path):
    """While the block runs, a watchdog ends `proc`'s processes (and removes the staging folder
    `folder` lies in) if diagnose dies; on leaving, the descendants that escaped the group are ended."""
    born = start_time(proc.pid)
    watchdog = _start_watchdog(proc.pid, folder)
    try:
        yield
    finally:
        end_escaped(proc.pid, born, exclude={watchdog.pid} if watchdog else set())
        if watchdog is not None:
            if watchdog.stdin is not None:  # a pipe: _start_watchdog opens it
                with contextlib.suppress(OSError, ValueError):
                    watchdog.stdin.write(b"done\n")
                    watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(timeout=5)
            if watchdog.poll() is None:
                watchdog.kill()
                watchdog.wait()


def _start_watchdog(pid: int, folder: str | Path) -> subprocess.Popen | None:
    staging = staging_root(folder)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "diagnose.capture.guard", str(pid), str(os.getpid()), str(staging or "")],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(
                os.environ,
                PYTHONPATH=os.pathsep.join(
                    filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")])
                ),
            ),
        )
    except OSError:
        return None


def watch(pid: int, adopter: int, staging: str) -> int:
    """The watchdog's loop: follow `pid`'s tree until diagnose says done or dies (its pipe closes)."""
    seen: dict[int, int] = {}
    me = os.getpid()
    born = start_time(pid)
    if born is not None:
        seen[pid] = born
    while True:
        ready, _, _ = select.select([0], [], [], POLL_S)
        if ready:
            data = os.read(0, 64)
            if data.startswith(b"done"):
                return 0
            if not data:
                break
        seen.update(descendants(pid, born, adopter, {me}))
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    kill_seen(seen)
    if staging and STAGING_MARK in Path(staging).name:
        time.sleep(POLL_S)
        shutil.rmtree(staging, ignore_errors=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole terminal group: diagnose unwinds
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.exit(watch(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
