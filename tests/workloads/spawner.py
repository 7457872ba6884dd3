"""Test workload: starts processes of its own, records their pids, then ends as asked.

On its first step it starts a `sleep 300` (subprocess.Popen), a multiprocessing pool of two
workers, and a double-forked grandchild that stays in the process group (with `stubborn=True`
it ignores SIGTERM, so only SIGKILL ends it). The pids (its own first) go to the file `pids`,
written whole once everything runs. `end` says how the run ends: "normal", "raise" (an
exception on step 3), "hang" (step 2 sleeps 300 s: for --timeout and Ctrl-C) or "crash"
(SIGKILL to itself on step 2).
"""

import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path

import torch


def _double_fork(stubborn: bool) -> int:
    """A grandchild whose parent exits at once: it is orphaned but stays in the process group."""
    read, write = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(read)
        second = os.fork()
        if second == 0:
            os.close(write)
            if stubborn:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                time.sleep(300)
            finally:
                os._exit(0)
        os.write(write, f"{second}\n".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as stream:
        grandchild = int(stream.readline())
    os.waitpid(first, 0)
    return grandchild


def _start_children(pids_file: str, stubborn: bool):
    pids = [os.getpid(), subprocess.Popen(["sleep", "300"]).pid]
    pool = multiprocessing.get_context("fork").Pool(2)
    pool.map(abs, range(4))
    pids += [worker.pid for worker in pool._pool]
    pids.append(_double_fork(stubborn))
    partial = Path(pids_file + ".partial")
    partial.write_text("".join(f"{pid}\n" for pid in pids))
    partial.replace(pids_file)
    return pool


def make_step(pids: str, end: str = "normal", stubborn: bool = False):
    """One tiny torch op per step; children started on the first step."""
    calls = {"n": 0}
    keep = []

    def step():
        calls["n"] += 1
        if calls["n"] == 1:
            keep.append(_start_children(pids, stubborn))
        if end == "raise" and calls["n"] == 3:
            raise RuntimeError("the workload fails after starting children")
        if end == "hang" and calls["n"] == 2:
            time.sleep(300)
        if end == "crash" and calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.ones(4).sum()

    return step
