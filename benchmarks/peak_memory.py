"""Run a command and report the peak memory of it and its child processes together (Linux only):

    python benchmarks/peak_memory.py [--every 0.02] [--timeline OUT.json] -- diagnose TRACE -o OUT -q

Every `--every` seconds it reads /proc/<pid>/smaps_rollup of the command and of every process
below it and sums their proportional set size (PSS: a page shared by n processes counts 1/n in
each, so the sum counts the page once; diagnose forks a decoding child that shares the parent's
pages) and their resident set size (RSS: shared pages counted in every process, an upper bound).
Prints one JSON line: wall seconds, exit status, the peak PSS sum and peak RSS sum in bytes,
the largest single process's maximum resident set (`/usr/bin/time -v`'s figure), and the peak
process count. A sampler misses peaks shorter than its period; the maximum RSS does not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return out


def _rollup(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in bytes; (0, 0) once it has gone."""
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
            elif line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return pss, rss


def measure(command: list[str], every: float = 0.02) -> dict:
    """Run `command` to its end, sampling its process tree; the peaks and the timeline."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # cumulative over every child this process reaped
    start = time.perf_counter()
    proc = subprocess.Popen(command)
    peak_pss = peak_rss = peak_procs = 0
    timeline = []
    while proc.poll() is None:
        pids = _tree(proc.pid)
        pss, rss = map(sum, zip(*map(_rollup, pids)))
        peak_pss, peak_rss, peak_procs = max(peak_pss, pss), max(peak_rss, rss), max(peak_procs, len(pids))
        timeline.append((round(time.perf_counter() - start, 3), pss, rss, len(pids)))
        time.sleep(every)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = usage.ru_utime - before.ru_utime, usage.ru_stime - before.ru_stime
    return {
        "command": command,
        "rc": proc.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(user + system, 2),
        "user_s": round(user, 2),
        "system_s": round(system, 2),
        "peak_pss_sum": peak_pss,
        "peak_rss_sum": peak_rss,
        # the largest of any child reaped so far (getrusage keeps no per-run maximum): an upper bound after the first run
        "max_rss_one_process": usage.ru_maxrss * 1024,
        "peak_processes": peak_procs,
        "timeline": timeline,
    }


def main() -> None:
    """Command line: the command after `--`."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=float, default=0.02, help="seconds between samples (default 0.02)")
    p.add_argument("--timeline", type=Path, help="write every sample (seconds, PSS, RSS, processes) here")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given")
    result = measure(command, args.every)
    timeline = result.pop("timeline")
    if args.timeline:
        args.timeline.write_text(json.dumps(timeline))
    print(json.dumps(result))
    sys.exit(result["rc"])


if __name__ == "__main__":
    main()
