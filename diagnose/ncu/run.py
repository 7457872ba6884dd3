"""The `--ncu` pass: run the workload again under Nsight Compute, one step, its hot kernels only.

After the torch.profiler capture, the kernels of its first measured step are grouped by base name
and ranked by GPU time per launch. The ones that make `COVER` (90 %) of the step's kernel time are
replayed, as long as they stay within `MAX_LAUNCHES` launches (ncu replays each about ten times: 0.3–0.6 s per kernel on the H200);
when the whole step fits, no name filter is used at all (`--launch-count` caps the replays
either way). ncu runs the same capture child
(`python -m diagnose.child.capture`) with one profiled step, filtered to it by NVTX
(`--nvtx --nvtx-include "diagnose:step 0/"`), with `--clock-control none` (the GPU's own clocks,
as in the timed run) and a time limit. Its CSV lands in the capture folder as `ncu.csv`, its
full output as `ncu.log`. Whatever goes wrong (no ncu, no permission for the counters, kernels
that cannot be replayed, the time limit) comes back as one sentence each; the diagnosis goes on.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

from diagnose.capture.launch import CannotStart, run_child
from diagnose.ncu.csv import NO_HEADER, NO_ROWS, NO_TABLE, REQUESTED_METRICS, NcuTable, parse_text
from diagnose.ncu.join import base_name
from diagnose.ncu.tool import find_ncu
from diagnose.base.safe_files import write_new
from diagnose.vocabulary.markers import NVTX_FIRST_STEP_FILTER

COVER = 0.9
MAX_LAUNCHES = 120
STEP_FILTER = NVTX_FIRST_STEP_FILTER
CSV_NAME = "ncu.csv"
LOG_NAME = "ncu.log"
OUTPUT_MAX = 64 * 2**20  # characters of ncu's output kept (its CSV for MAX_LAUNCHES kernels is far smaller)
LINE_MAX = 2**20
MISSING = (
    "--ncu: Nsight Compute (ncu) was not found on PATH (it comes with the CUDA toolkit, or set "
    "DIAGNOSE_NCU=/path/to/ncu); no kernel measurements, the rest of the diagnosis is unaffected"
)


@dataclasses.dataclass
class Selection:
    """Which kernels of one step ncu should replay."""

    names: list[str]
    launches: int
    step_launches: int
    coverage: float
    filtered: bool

    @property
    def regex(self) -> str:
        """`-k regex:` value matching these base names as whole identifiers."""
        names = "|".join(re.escape(n) for n in self.names)
        return rf"(?:^|[^A-Za-z0-9_])(?:{names})(?:$|[^A-Za-z0-9_])"


@dataclasses.dataclass
class Outcome:
    """What the ncu pass produced: the table (or None), problems as sentences, and its cost."""

    table: NcuTable | None
    warnings: list[str]
    seconds: float = 0.0
    selection: Selection | None = None


def select_kernels(kernels, cover: float = COVER, max_launches: int | None = None) -> Selection | None:
    """The base names that make `cover` of the first step's kernel time, within `max_launches`.

    Names are taken in order of time per launch (most time for the fewest replays) until they
    cover `cover` of the step; a name whose launches would exceed the budget is passed over.
    """
    if kernels is None or not len(kernels):
        return None
    max_launches = max_launches or MAX_LAUNCHES
    step = kernels[kernels["step"] == kernels["step"].min()]
    if len(step) <= max_launches:
        return Selection(sorted({base_name(n) for n in step["name"].astype(str)}), len(step), len(step), 1.0, False)
    bases = step["name"].astype(str).map(base_name)
    per_name = step.groupby(bases)["dur"].agg(["sum", "size"])
    per_name = per_name.assign(density=per_name["sum"] / per_name["size"]).sort_values("density", ascending=False)
    total = float(per_name["sum"].sum()) or 1.0
    names, launches, covered = [], 0, 0.0
    for name, row in per_name.iterrows():
        if covered >= cover * total:
            break
        if launches + int(row["size"]) > max_launches:
            continue
        names.append(str(name))
        launches += int(row["size"])
        covered += float(row["sum"])
    if not names:
        return None
    return Selection(names, launches, len(step), covered / total, True)


def command(tool: str, selection: Selection, python: str, spec_path: Path) -> list[str]:
    """The ncu command line that replays the selected kernels of step 0 of the capture child."""
    cmd = [
        tool,
        "--csv",
        "--page",
        "raw",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        STEP_FILTER,
        "--metrics",
        ",".join(REQUESTED_METRICS),
        "--launch-count",
        str(max(MAX_LAUNCHES, selection.launches)),
    ]
    if selection.filtered:
        cmd += ["--kernel-name-base", "function", "-k", f"regex:{selection.regex}"]
    return cmd + [python, "-m", "diagnose.child.capture", str(spec_path)]


def measure(
    spec,
    out: Path,
    kernels,
    *,
    timeout_s: float = 600.0,
    python: str | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> Outcome:
    """Run the ncu pass for a finished capture (`spec`, folder `out`, its step `kernels`)."""
    tool = find_ncu()
    if tool is None:
        return Outcome(None, [MISSING])
    selection = select_kernels(kernels)
    if selection is None:
        return Outcome(None, ["--ncu: no CUDA kernel in the measured steps, nothing for Nsight Compute to measure"])
    run_dir = Path(out) / "ncu-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    rerun = dataclasses.replace(
        spec, out_dir=str(run_dir), steps=1, timed_steps=0, record_shapes=False, profile_memory=False
    )
    spec_path = run_dir / "spec.json"
    write_new(spec_path, rerun.to_json().encode())
    cmd = command(tool, selection, python or sys.executable, spec_path)
    started = time.monotonic()
    text, code, timed_out = _run(cmd, timeout_s, selection.launches, on_progress, run_dir)
    seconds = time.monotonic() - started
    write_new(Path(out) / LOG_NAME, (" ".join(cmd) + "\n" + text).encode("utf-8"))
    status = _rerun_status(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    table = parse_text(text, source=str(Path(out) / CSV_NAME))
    problems = [p for p in table.problems if p not in (NO_TABLE, NO_HEADER, NO_ROWS)]
    warnings = [f"--ncu: {p}" for p in problems]
    if timed_out:
        warnings.insert(
            0,
            f"--ncu: Nsight Compute ran past its {timeout_s:g} s limit (--ncu-timeout) and was "
            "stopped; no kernel measurements",
        )
    elif status not in (None, "ok"):
        warnings.append(f"--ncu: the workload ended with status '{status}' under Nsight Compute (see {LOG_NAME})")
    elif not len(table.kernels) and not problems:
        warnings.append(f"--ncu: Nsight Compute exited with status {code} without measurements (see {LOG_NAME})")
    if len(table.kernels) and not timed_out:
        write_new(Path(out) / CSV_NAME, table.csv_text.encode("utf-8"))
        return Outcome(table, warnings, seconds, selection)
    return Outcome(None, warnings, seconds, selection)


def _run(cmd: list[str], timeout_s: float, expected: int, on_progress, folder: Path) -> tuple[str, int, bool]:
    """Run ncu; relay the capture child's phases as `ncu-*` progress events; (output, exit status, timed out).

    `folder` is where the rerun writes (inside the staging folder, which the guard removes if
    diagnose dies). The output kept is bounded (OUTPUT_MAX): a workload that floods its stdout
    under ncu costs a cut, not memory.

    With --csv, ncu prints nothing per kernel while it replays, so the phases of the child that
    it runs (building, warming up, the replayed step) are what progress can show.
    """
    lines: list[str] = []
    relay = on_progress or (lambda event: None)

    def phases(fd: int) -> None:
        relay({"phase": "ncu-start", "done": 0, "total": 0})
        _relay_phases(fd, relay, expected)

    try:
        ended = run_child(
            cmd,
            folder=folder,
            timeout_s=timeout_s,
            on_progress_fd=phases,
            on_output=lambda stream: _read(stream, lines),
        )
    except CannotStart as exc:
        return f"==ERROR== could not start ncu: {exc}\n", 127, False
    return "".join(lines), ended.returncode, ended.timed_out


def _read(stream, lines: list[str], limit: int | None = None) -> None:
    """Keep `stream`'s lines up to `limit` characters (OUTPUT_MAX); past it, read and drop.

    ncu prints its CSV after the workload ends, so when the workload floods, the cut keeps the
    first OUTPUT_MAX / 2 and then the last lines (a ring), which hold the table."""
    limit = OUTPUT_MAX if limit is None else limit
    head, size, dropped = 0, 0, 0
    tail: collections.deque[str] = collections.deque()
    for line in iter(lambda: stream.readline(LINE_MAX), ""):
        if head + len(line) <= limit // 2 and not dropped:
            lines.append(line)
            head += len(line)
            continue
        tail.append(line)
        size += len(line)
        while size > limit // 2 and tail:
            size -= len(tail.popleft())
            dropped += 1
    if dropped:
        lines.append(f"==WARNING== diagnose: {dropped} lines of output cut here (more than {limit} characters)\n")
    lines.extend(tail)


def _relay_phases(fd: int, relay, expected: int) -> None:
    """The child's progress lines, renamed: build/warmup as they are, the profiled step as the replay."""
    with os.fdopen(fd, "r") as stream:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            phase = event.get("phase")
            if phase in ("build", "warmup", "run"):
                relay({**event, "phase": f"ncu-{phase}"})
            elif phase == "profile":
                relay({"phase": "ncu-replay", "done": 0, "total": 0, "launches": expected})
            elif phase == "export":
                relay({"phase": "ncu-finish", "done": 0, "total": 0})


def _rerun_status(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "meta.json").read_text()).get("status")
    except (OSError, ValueError):
        return None
