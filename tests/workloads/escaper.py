"""Test workload: starts processes that leave its process group, records their pids, then ends as asked.

On its first step it starts a `sleep 300` in a session of its own (subprocess start_new_session)
and a daemon (fork, setsid, fork again; the middle process exits, so the daemon is orphaned).
Their pids go to the file `pids`, written whole once both run. `end`: "normal" (the run ends
cleanly) or "hang" (step 2 sleeps 300 s: for signals to diagnose itself).
"""

import os
import subprocess
import time
from pathlib import Path

import torch


def _daemon() -> int:
    """A process that left the group and the session, orphaned by its parent: a classic daemon."""
    read, write = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(read)
        os.setsid()
        second = os.fork()
        if second == 0:
            os.close(write)
            try:
                time.sleep(300)
            finally:
                os._exit(0)
        os.write(write, f"{second}\n".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as stream:
        daemon = int(stream.readline())
    os.waitpid(first, 0)
    return daemon


def make_step(pids: str, end: str = "normal"):
    """One tiny torch op per step; the escaping processes start on the first step."""
    calls = {"n": 0}

    def step():
        calls["n"] += 1
        if calls["n"] == 1:
            started = [subprocess.Popen(["sleep", "300"], start_new_session=True).pid, _daemon()]
            partial = Path(pids + ".partial")
            partial.write_text("".join(f"{pid}\n" for pid in started))
            partial.replace(pids)
        if calls["n"] == 2 and end == "hang":
            time.sleep(300)
        return torch.ones(4).sum()

    return step
