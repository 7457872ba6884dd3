"""Run `--verify`: one child process per fix variant (diagnose/child/verify.py), results joined to a new Diagnosis.

Never imports torch. A variant whose process fails, runs out of memory, times out or crashes is a
FixTrial with status and error: the diagnosis is kept whatever the fixes do.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Callable

from diagnose.capture.launch import CannotStart, run_child
from diagnose.capture.spec import CaptureSpec
from diagnose.model.findings import Diagnosis, Verify
from diagnose.verify import numerics
from diagnose.verify.budget import fixed_budget
from diagnose.verify.drift import IN_PROCESS, drift_note
from diagnose.verify.model import FixTrial, Verification
from diagnose.verify.plan import env_for, plan_trials
from diagnose.base.safe_files import write_new

VERIFY_FOLDER = "verify"
PHASES = {
    "start": "starting",
    "baseline": "running the unchanged step",
    "apply": "applying the fix",
    "fixed": "running the fixed step",
    "profile": "profiling the fixed step",
}


def run_variant(
    spec: CaptureSpec,
    variant: str,
    how: str,
    folder: Path,
    *,
    baseline_us: list[float],
    timeout_s: float,
    python: str | None = None,
    compile_backend: str = "",
) -> FixTrial:
    """Run one variant in its own process and turn what it wrote into a FixTrial.

    `baseline_us` (the capture's unprofiled step times) is the baseline of a process-level variant and
    of every variant in script mode; the others time their own baseline in the same process, just
    before the fixed step."""
    folder.mkdir(parents=True, exist_ok=True)
    env_extra = env_for(variant)
    data = {
        **dataclasses.asdict(spec),
        "out_dir": str(folder),
        "variant": variant,
        "baseline": not env_extra and spec.mode == "function",
        "compile_backend": compile_backend,
    }
    spec_path = folder / "spec.json"
    write_new(spec_path, json.dumps(data).encode())
    command = [python or sys.executable, "-m", "diagnose.child.verify", str(spec_path)]
    with open(folder / "workload.log", "wb") as log:
        try:
            ended = run_child(command, folder=folder, timeout_s=timeout_s, log=log, env=env_extra)
        except CannotStart as exc:
            return FixTrial(variant, how, "failed", numerics.FAILED, f"cannot start: {exc}", folder=str(folder))
    spec_path.unlink(missing_ok=True)
    return read_trial(folder, variant, how, ended.returncode, ended.timed_out, timeout_s, baseline_us)


def read_trial(
    folder: Path, variant: str, how: str, returncode: int, timed_out: bool, timeout_s: float, baseline_us: list[float]
) -> FixTrial:
    """The FixTrial from a variant folder's verify.json (or from how its process ended)."""
    try:
        result = json.loads((folder / "verify.json").read_text())
    except (OSError, ValueError):
        result = {}
    status = result.get("status") or "crashed"
    error = result.get("error") or {}
    message = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ") if error else ""
    if timed_out:
        status, message = "timeout", f"ran past the {timeout_s:g} s limit (--timeout) while {_phase(result)}"
    elif status == "running":
        how_ended = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        status, message = "crashed", f"the process died ({how_ended}) while {_phase(result)}"
    if status == "already applied":  # not an error: say what the step already runs, without the exception's name
        message = error.get("message", "")
    elif message and result.get("phase") and status not in ("timeout", "crashed"):
        message = f"{message} (while {_phase(result)})"
    trial = FixTrial(variant, how, status, error=message, numerics=result.get("numerics"), folder=str(folder))
    base = [float(x) for x in (result.get("baseline_us") or baseline_us) if x and x > 0]
    fixed = [float(x) for x in result.get("fixed_us") or [] if x and x > 0]
    trial.baseline_basis = IN_PROCESS if result.get("baseline_us") else "the capture's own unprofiled steps"
    low = high = None
    if status == "ok" and base and fixed:
        trial.speedup, low, high = numerics.speedup(base, fixed)
        trial.interval = [round(low, 4), round(high, 4)]
        trial.speedup = round(trial.speedup, 4)
        trial.baseline_us, trial.fixed_us = numerics.median(base), numerics.median(fixed)
        trial.n_baseline, trial.n_fixed = len(base), len(fixed)
        trial.budget, why = fixed_budget(folder)
        if why:
            trial.error = why
    elif status == "ok":
        status = trial.status = "failed"
        trial.error = "no baseline step times to compare with"
    trial.verdict = numerics.verdict(status, low, high, trial.numerics)
    return trial


def _phase(result: dict) -> str:
    """What the variant's process was doing, in words ("starting" until it said)."""
    phase = str(result.get("phase") or "starting")
    return PHASES.get(phase, phase)


def verify_diagnosis(
    diagnosis: Diagnosis,
    spec: CaptureSpec,
    out: Path,
    op_names: set[str],
    *,
    timeout_s: float,
    python: str | None = None,
    compile_backend: str = "",
    on_progress: Callable[[dict], None] | None = None,
    skip: frozenset = frozenset(),
) -> tuple[Diagnosis, list[Verification]]:
    """Try every auto-applicable fix of every finding (each variant once, shared between findings that
    name the same fix; none of `skip`); returns a new Diagnosis, each finding with its `verify` list
    (`Diagnosis.verified`; `diagnosis` is left as it is), and the Verifications."""
    report = on_progress or (lambda event: None)
    planned = plan_trials(diagnosis.findings, op_names, skip, script=spec.mode != "function")
    timing = diagnosis.capture.timing
    baseline_us = [float(x) for x in (timing.unprofiled_step_us if timing else None) or []]
    trials: dict[str, FixTrial] = {}
    todo = list(dict.fromkeys(v for p in planned for v in p.variants))
    for done, (variant, how) in enumerate(todo):
        report({"phase": "verify", "done": done, "total": len(todo), "variant": variant})
        trials[variant] = run_variant(
            spec,
            variant,
            how,
            Path(out) / VERIFY_FOLDER / variant,
            baseline_us=baseline_us,
            timeout_s=timeout_s,
            python=python,
            compile_backend=compile_backend,
        )
    verifications = []
    records: list[list[Verify]] = [[] for _ in diagnosis.findings]
    for p in planned:
        v = Verification(p.fix, bool(p.variants), p.why, [trials[name] for name, _ in p.variants], p.snippet)
        records[p.finding].append(v.record())
        verifications.append(v)
    verified = diagnosis.verified(records)
    drift = drift_note(trials.values(), numerics.median(baseline_us))
    return (verified.noted(drift) if drift else verified), verifications
