"""The two paths of a run: capture a workload then analyse it, or analyse an existing trace.

Both end in `write_outputs`: report.html, findings.json (and, for a capture, the capture folder
itself: trace.json.gz, meta.json, workload.log), so a run can be re-analysed anywhere.
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
from diagnose.report.json_report import render_json
from diagnose.trace.load import load_capture_folder, load_target

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


def analyse(path: Path, config: Config) -> Diagnosis:
    """Analysis mode: a trace file or capture folder, no torch needed."""
    return diagnose_trace(load_target(path), config)


def capture_and_analyse(target: Target, out: Path, config: Config, *, params: dict, argv: list[str],
                        warmup: int, steps: int, timed_steps: int, timeout_s: float,
                        python: str | None, on_progress) -> Diagnosis:
    """Capture mode: run the workload in a child process, then analyse the capture folder."""
    if python is None and importlib.util.find_spec("torch") is None:
        raise UsageError("capturing a workload needs PyTorch in this Python (pip install torch), or "
                         "--python PATH of one that has it; a trace file can be analysed without it")
    spec = CaptureSpec(path=str(target.path), function=target.function, mode=target.kind,
                       out_dir=str(out), params=params, argv=argv, warmup=warmup, steps=steps,
                       timed_steps=timed_steps)
    from diagnose.capture.runner import run_capture

    run_capture(spec, timeout_s=timeout_s, python=python, on_progress=on_progress)
    return diagnose_trace(load_capture_folder(out), config)


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

