"""The two paths of a run: capture a workload then analyse it, or analyse an existing trace.

Both end in `write_outputs`: report.html, findings.json (and, for a capture, the capture folder
itself: trace.json.gz, meta.json, workload.log, and with `--ncu` ncu.csv and ncu.log), so a run
can be re-analysed anywhere. Nsight Compute measurements join the trace before the rules run:
from the `--ncu` pass, from `--ncu-csv FILE`, or from an ncu.csv (.gz, .ncu-rep) found in the
capture folder; `finish` adds the roofline and the measured kernels to the report data.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

from diagnose.capture.spec import CaptureSpec
from diagnose.config import Config
from diagnose.engine import diagnose_trace
from diagnose.errors import UsageError
from diagnose.findings import Diagnosis
from diagnose.metrics import Metrics, metrics_of
from diagnose.ncu import attach, read_ncu
from diagnose.report.json_report import render_json
from diagnose.trace.load import load_capture_folder, load_target
from diagnose.trace.model import Trace

NCU_FILES = ("ncu.csv", "ncu.csv.gz", "ncu.ncu-rep")

FUNCTION_TARGET = re.compile(r"^(?P<path>.+\.py):(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")


@dataclasses.dataclass
class Target:
    """What the user pointed diagnose at."""

    kind: str  # "script" | "function" | "trace"
    path: Path
    function: str | None = None


def parse_target(text: str) -> Target:
    """Tell a script, a `file.py:NAME` function, and a trace or capture folder apart."""
    match = FUNCTION_TARGET.match(text)
    if match:
        path = Path(match["path"])
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        return Target("function", path, match["name"])
    path = Path(text)
    if text.endswith(".py"):
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        return Target("script", path)
    return Target("trace", path)


def analyse(path: Path, config: Config, ncu_csv: Path | None = None, on_progress=None) -> Diagnosis:
    """Analysis mode: a trace file, capture folder (with its ncu.csv, if any) or sweep folder; no torch.

    `on_progress` (optional) receives {"phase": ...} events: "decode" (with done and total), "rules"."""
    from diagnose.memory import diagnose_sweep
    from diagnose.memory.sweep import is_sweep_folder

    if is_sweep_folder(path):
        return diagnose_sweep(path, config)
    report = on_progress or (lambda event: None)
    trace = load_target(path, on_progress)
    report({"phase": "rules"})
    found = ncu_csv or capture_ncu_file(Path(path))
    label = "--ncu-csv" if ncu_csv else (found.name if found else "")
    table, notes = attach_ncu_file(trace, found, label)
    return finish(trace, diagnose_trace(trace, config), notes, table, label)


def capture_ncu_file(folder: Path) -> Path | None:
    """The Nsight Compute file a capture folder holds (ncu.csv, ncu.csv.gz or ncu.ncu-rep), if any."""
    if not folder.is_dir():
        return None
    return next((folder / name for name in NCU_FILES if (folder / name).is_file()), None)


def attach_ncu_file(trace: Trace, path: Path | None, label: str = "--ncu-csv"):
    """Read an Nsight Compute file and attach it to `trace`; (table or None, problems as sentences)."""
    if path is None:
        return None, []
    table = read_ncu(path)
    attach(trace, table)
    return (table if len(table.kernels) else None), [f"{label}: {p}" for p in table.problems]


def finish(trace: Trace, diagnosis: Diagnosis, notes: list[str], table=None, label: str = "--ncu",
           seconds: float | None = None) -> Diagnosis:
    """Add the roofline, the Nsight Compute details and `notes` (first among the warnings) to a diagnosis."""
    from diagnose.ncu.details import enrich_top_kernels, join_warnings, ncu_details
    from diagnose.ncu.roofline import roofline

    if trace.has_gpu_activity:
        metrics = metrics_of(trace)
        chart = roofline(metrics)
        if chart:
            diagnosis.details["roofline"] = chart
        if metrics.ncu is not None:
            diagnosis.details["ncu"] = ncu_details(metrics, table, seconds)
            diagnosis.details["top_kernels"] = enrich_top_kernels(diagnosis.details.get("top_kernels") or [],
                                                                  metrics)
            notes = notes + join_warnings(metrics, label)
    diagnosis.warnings = list(notes) + list(diagnosis.warnings)
    return diagnosis


def capture_and_analyse(target: Target, out: Path, config: Config, *, params: dict, argv: list[str],
                        warmup: int, steps: int, timed_steps: int, timeout_s: float,
                        python: str | None, on_progress, ncu: bool = False, ncu_csv: Path | None = None,
                        ncu_timeout_s: float = 600.0) -> Diagnosis:
    """Capture mode: run the workload in a child process (then under ncu with `ncu`), analyse the folder."""
    if python is None and importlib.util.find_spec("torch") is None:
        raise UsageError("capturing a workload needs PyTorch in this Python (pip install torch), or "
                         "--python PATH of one that has it; a trace file can be analysed without it")
    spec = CaptureSpec(path=str(target.path), function=target.function, mode=target.kind,
                       out_dir=str(out), params=params, argv=argv, warmup=warmup, steps=steps,
                       timed_steps=timed_steps)
    from diagnose.capture.runner import run_capture

    meta = run_capture(spec, timeout_s=timeout_s, python=python, on_progress=on_progress)
    trace = load_capture_folder(out)
    table, notes, label, seconds = None, [], "--ncu-csv", None
    if ncu_csv is not None:
        table, notes = attach_ncu_file(trace, ncu_csv)
    elif ncu:
        table, notes, seconds = _ncu_pass(spec, out, trace, meta, ncu_timeout_s, python, on_progress)
        label = "--ncu"
    return finish(trace, diagnose_trace(trace, config), notes, table, label, seconds)


def _ncu_pass(spec: CaptureSpec, out: Path, trace: Trace, meta: dict, timeout_s: float, python: str | None,
              on_progress):
    """Run the workload under Nsight Compute and attach what it measured; (table, notes, seconds)."""
    from diagnose.ncu import run

    if run.find_ncu() is None:
        return None, [run.MISSING], None
    if meta.get("status") != "ok":
        return None, ["--ncu: the workload did not finish its capture, so no Nsight Compute pass was made"], None
    outcome = run.measure(spec, out, Metrics(trace).kernels_in_steps, timeout_s=timeout_s, python=python,
                          on_progress=on_progress)
    attach(trace, outcome.table)
    return outcome.table, outcome.warnings, outcome.seconds


def default_out(target: Target) -> Path:
    """diagnose-out/<name of the target> in the current folder."""
    name = target.path.name
    for suffix in (".gz", ".json", ".py"):
        name = name.removesuffix(suffix)
    if target.function:
        name = f"{name}-{target.function}"
    return Path("diagnose-out") / (name or "trace")


def write_outputs(diagnosis: Diagnosis, out: Path, html: bool = True) -> dict[str, str]:
    """Write findings.json and report.html into `out`; returns what was written."""
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    (out / "findings.json").write_text(render_json(diagnosis))
    written["findings"] = str(out / "findings.json")
    if html:
        from diagnose.report.html import render_html

        (out / "report.html").write_text(render_html(diagnosis), encoding="utf-8")
        written["report"] = str(out / "report.html")
    return written



def sweep_and_analyse(target: Target, out: Path, config: Config, sweep: str, *, params: dict, warmup: int,
                      steps: int, timed_steps: int, timeout_s: float, python: str | None,
                      on_progress) -> Diagnosis:
    """`--sweep NAME=V1,V2,...`: one capture per value into `out`, then the sweep's diagnosis."""
    from diagnose.capture.sweep import parse_sweep, run_sweep
    from diagnose.memory import diagnose_sweep

    if target.kind != "function":
        raise UsageError("--sweep needs a function target (model.py:NAME): the value is passed as NAME(**params)")
    if python is None and importlib.util.find_spec("torch") is None:
        raise UsageError("capturing a workload needs PyTorch in this Python (pip install torch), or --python PATH")
    try:
        name, values = parse_sweep(sweep)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    spec = CaptureSpec(path=str(target.path), function=target.function, mode="function", out_dir="",
                       params=params, warmup=warmup, steps=steps, timed_steps=timed_steps)
    run_sweep(spec, name, values, out, timeout_s=timeout_s, python=python, on_progress=on_progress)
    return diagnose_sweep(out, config)
