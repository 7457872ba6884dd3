"""The paths of a run: capture a workload then analyse it, analyse an existing trace or sweep, write outputs.

Every path ends in a Diagnosis (diagnose/ruleset/assemble.py builds it) and `write_outputs`, which writes
findings.json and each renderer's file (report.html) into the output folder; a capture folder
also holds trace.json.gz, meta.json, workload.log (and with `--ncu` ncu.csv and ncu.log), so a run
can be re-analysed anywhere. Nsight Compute measurements come from the `--ncu` pass, from
`--ncu-csv FILE`, or from an ncu.csv (.gz, .ncu-rep) found in the capture folder.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path


from diagnose import report
from diagnose.ruleset.assemble import diagnose_trace
from diagnose.capture.runner import check_python
from diagnose.capture.spec import CaptureOptions, CaptureSpec
from diagnose.model.config import Config
from diagnose.base.errors import InputError, UsageError
from diagnose.model.findings import Diagnosis
from diagnose.memory.sweep import load_sweep
from diagnose.metrics import Metrics
from diagnose.ncu import read_ncu
from diagnose.trace.load import load_capture_folder, load_target
from diagnose.trace.model import Trace
from diagnose.base.safe_files import write_new
from diagnose.front.target import Target, as_target

NCU_FILES = ("ncu.csv", "ncu.csv.gz", "ncu.ncu-rep")


def analyse(
    target: Target | Path,
    config: Config,
    ncu_csv: Path | None = None,
    on_progress=None,
    max_bytes: int | None = None,
    engine=None,
) -> Diagnosis:
    """Analysis mode, no torch: a recorded target (a path is resolved by diagnose/front/target.py), by the
    analysis of its kind: a trace file, a capture folder (with its ncu.csv, if any), a rank folder
    or a sweep folder. `ncu_csv` attaches Nsight Compute results to a trace or capture; `engine`
    (diagnose/ranks/cluster.py, e.g. a Dask cluster) measures a rank folder's ranks.

    `on_progress` (optional) receives {"phase": ...} events: "decode" (with done and total), "rules"."""
    target = as_target(target)
    analysis = ANALYSES.get(target.kind)
    if analysis is None:
        raise UsageError(f"{target.text}: a workload to run, not a recording to analyse")
    if engine is not None and target.kind == "ranks":
        return _analyse_ranks(target.path, config, ncu_csv, on_progress, max_bytes, engine=engine)
    return analysis(target.path, config, ncu_csv, on_progress, max_bytes)


def _analyse_trace(path: Path, config: Config, ncu_csv: Path | None, on_progress, max_bytes: int | None) -> Diagnosis:
    """A kineto trace file or standard input (or a path that is not there: the loader says so)."""
    trace = load_target(path, on_progress, **({"max_bytes": max_bytes} if max_bytes else {}))
    return _with_ncu(trace, config, ncu_csv, None, on_progress)


def _analyse_capture(path: Path, config: Config, ncu_csv: Path | None, on_progress, max_bytes: int | None) -> Diagnosis:
    """A capture folder: meta.json, trace.json.gz, and the Nsight Compute file it holds, if any."""
    trace = load_capture_folder(path, on_progress, **({"max_bytes": max_bytes} if max_bytes else {}))
    return _with_ncu(trace, config, ncu_csv, capture_ncu_file(path), on_progress)


def _analyse_ranks(
    path: Path, config: Config, ncu_csv: Path | None, on_progress, max_bytes: int | None, engine=None
) -> Diagnosis:
    """A folder of rank traces, compared across ranks (diagnose/ranks), on `engine` where one is given."""
    from diagnose.ranks.analyse import analyse_ranks

    return analyse_ranks(path, config, on_progress=on_progress, max_bytes=max_bytes, engine=engine)


def _analyse_sweep_folder(
    path: Path, config: Config, ncu_csv: Path | None, on_progress, max_bytes: int | None
) -> Diagnosis:
    """A sweep folder (see analyse_sweep)."""
    return analyse_sweep(path, config)


def _with_ncu(trace: Trace, config: Config, ncu_csv: Path | None, found: Path | None, on_progress) -> Diagnosis:
    """The rules run on a loaded trace, with the Nsight Compute results of --ncu-csv, else those `found`."""
    (on_progress or (lambda event: None))({"phase": "rules"})
    found = ncu_csv or found
    label = "--ncu-csv" if ncu_csv else (found.name if found else "")
    table, notes = read_ncu_file(found, label)
    return diagnose_trace(trace, config, ncu=table, notes=notes, ncu_label=label)


ANALYSES = {
    "trace": _analyse_trace,
    "capture": _analyse_capture,
    "ranks": _analyse_ranks,
    "sweep": _analyse_sweep_folder,
}


def analyse_sweep(folder: Path, config: Config | None = None, rules=None) -> Diagnosis:
    """A sweep folder: fit peak memory and step time against the swept parameter (sweep.json), run
    the rules on the largest point that ran with the sweep in their context; the Diagnosis's target
    is the sweep folder and the sweep sits under `details.memory.sweep`."""
    sweep = load_sweep(folder)
    point = sweep.representative()
    if point is None:
        raise InputError(f"{folder}: the sweep lists no point folder that exists")
    trace = load_target(Path(folder) / str(point.folder))
    return diagnose_trace(trace, config, rules, sweep=sweep, target=str(folder))


def capture_ncu_file(folder: Path) -> Path | None:
    """The Nsight Compute file a capture folder holds (ncu.csv, ncu.csv.gz or ncu.ncu-rep), if any."""
    if not folder.is_dir():
        return None
    return next((folder / name for name in NCU_FILES if (folder / name).is_file()), None)


def read_ncu_file(path: Path | None, label: str = "--ncu-csv"):
    """Read an Nsight Compute file; (table, or None when it measured nothing, problems as sentences)."""
    if path is None:
        return None, []
    table = read_ncu(path)
    return (table if len(table.kernels) else None), [f"{label}: {p}" for p in table.problems]


def check_can_capture(python: str | None) -> None:
    """A usage error unless this Python (or `python`) can run a capture: it needs torch."""
    if python is not None:
        check_python(python)
        return
    if importlib.util.find_spec("torch") is None:
        raise UsageError(
            "capturing a workload needs PyTorch in this Python (pip install 'diagnose-gpu[capture]' "
            "or torch), or --python PATH of one that has it; a trace file can be analysed without it"
        )


@dataclasses.dataclass
class Captured:
    """One capture and its diagnosis: what a later step (`--verify`) needs of it."""

    spec: CaptureSpec
    meta: dict
    trace: Trace
    diagnosis: Diagnosis


def capture_spec(target: Target, options: CaptureOptions, out: Path) -> CaptureSpec:
    """The capture request of a runnable target: the one place a CaptureSpec is made from options."""
    return options.spec(str(target.path), target.kind, target.function, str(out))


def capture(
    target: Target,
    out: Path,
    config: Config,
    options: CaptureOptions,
    *,
    on_progress=None,
    ncu: bool = False,
    ncu_csv: Path | None = None,
    ncu_timeout_s: float = 600.0,
) -> Captured:
    """Capture mode: run the workload in a child process (then under ncu with `ncu`), analyse the folder."""
    check_can_capture(options.python)
    spec = capture_spec(target, options, out)
    from diagnose.capture.runner import run_capture

    meta = run_capture(spec, timeout_s=options.timeout_s, python=options.python, on_progress=on_progress)
    trace = load_capture_folder(out)
    table, notes, label, seconds = None, [], "--ncu-csv", None
    if ncu_csv is not None:
        table, notes = read_ncu_file(ncu_csv)
    elif ncu:
        table, notes, seconds = _ncu_pass(spec, out, trace, meta, ncu_timeout_s, options.python, on_progress)
        label = "--ncu"
    diagnosis = diagnose_trace(trace, config, ncu=table, notes=notes, ncu_label=label, ncu_seconds=seconds)
    return Captured(spec, meta, trace, diagnosis)


def capture_and_analyse(
    target: Target, out: Path, config: Config, options: CaptureOptions, on_progress=None
) -> Diagnosis:
    """Capture a runnable target into `out` and return its Diagnosis (diagnose.profile)."""
    return capture(target, out, config, options, on_progress=on_progress).diagnosis


def verify_fixes(
    diagnosis: Diagnosis,
    trace: Trace,
    spec: CaptureSpec,
    meta: dict,
    out: Path,
    *,
    timeout_s: float,
    python: str | None,
    on_progress=None,
    compile_backend: str = "",
    skip: frozenset = frozenset(),
) -> Diagnosis:
    """`--verify`: apply each finding's auto-applicable fix, measure it; returns a new Diagnosis whose findings
    hold their `verify` entries (a script or module: only the fixes that act on the whole run; verify/plan.py),
    with a warning first when nothing could be run. `diagnosis` is left as it is."""
    from diagnose.verify.run import verify_diagnosis

    if meta.get("status") != "ok":
        return diagnosis.noted("--verify: the workload did not finish its capture, so no fix was tried")
    names = set(trace.ops["name"].astype(str).unique()) if len(trace.ops) else set()
    verified, tried = verify_diagnosis(
        diagnosis,
        spec,
        out,
        names,
        timeout_s=timeout_s,
        python=python,
        compile_backend=compile_backend,
        on_progress=on_progress,
        skip=skip,
    )
    if not any(v.applicable for v in tried):
        from diagnose.verify.plan import APPLICABLE

        return verified.noted(
            "--verify: no finding names a fix that can be applied from outside the code "
            f"({', '.join(APPLICABLE)}): nothing was run"
        )
    return verified


def _ncu_pass(
    spec: CaptureSpec, out: Path, trace: Trace, meta: dict, timeout_s: float, python: str | None, on_progress
):
    """Run the workload under Nsight Compute; (table or None, notes, seconds)."""
    from diagnose.ncu import run

    if run.find_ncu() is None:
        return None, [run.MISSING], None
    if meta.get("status") != "ok":
        return None, ["--ncu: the workload did not finish its capture, so no Nsight Compute pass was made"], None
    outcome = run.measure(
        spec, out, Metrics(trace).kernels_in_steps, timeout_s=timeout_s, python=python, on_progress=on_progress
    )
    table = outcome.table if outcome.table is not None and len(outcome.table.kernels) else None
    return table, outcome.warnings, outcome.seconds


def write_outputs(diagnosis: Diagnosis, out: Path, html: bool = True) -> dict[str, str]:
    """Write findings.json and every file-writing renderer's document (report.html unless `html` is
    False) into `out`; returns {what: path} of what was written."""
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for renderer in report.file_renderers():
        if not renderer.filename or (renderer.name == "html" and not html):  # (file renderers have a filename)
            continue
        path = out / renderer.filename
        write_new(path, renderer.render(diagnosis).encode("utf-8"))
        written[renderer.label] = str(path)
    return written


def relocate(diagnosis: Diagnosis, old: Path, new: Path) -> Diagnosis:
    """The same diagnosis with every mention of folder `old` (a staging folder) naming `new` instead."""
    from diagnose.report.json_report import render_json

    text = render_json(diagnosis, indent=None)
    quoted_old, quoted_new = json.dumps(str(old))[1:-1], json.dumps(str(new))[1:-1]
    if quoted_old not in text:
        return diagnosis
    return Diagnosis.from_dict(json.loads(text.replace(quoted_old, quoted_new)))


def sweep_and_analyse(
    target: Target, out: Path, config: Config, sweep: str, options: CaptureOptions, on_progress=None
) -> Diagnosis:
    """`--sweep NAME=V1,V2,...`: one capture per value into `out`, then the sweep's diagnosis."""
    from diagnose.capture.sweep import parse_sweep, run_sweep

    if target.kind != "function":
        raise UsageError("--sweep needs a function target (model.py:NAME): the value is passed as NAME(**params)")
    check_can_capture(options.python)
    try:
        name, values = parse_sweep(sweep)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    run_sweep(
        capture_spec(target, options, out),
        name,
        values,
        out,
        timeout_s=options.timeout_s,
        python=options.python,
        on_progress=on_progress,
    )
    return analyse_sweep(out, config)


def capture_distributed_and_analyse(
    target: Target, out: Path, config: Config, options: CaptureOptions, launch, on_progress=None
) -> Diagnosis:
    """Capture every rank through torchrun (diagnose/capture/distributed.py), then analyse the rank
    folders together (diagnose/ranks); a failed rank makes the Diagnosis's capture that rank's."""
    from diagnose.capture.distributed import run_distributed
    from diagnose.ranks.analyse import analyse_ranks
    from diagnose.trace.rank_files import rank_sources

    check_can_capture(options.python)
    spec = capture_spec(target, options, out)
    meta = run_distributed(spec, launch, timeout_s=options.timeout_s, python=options.python, on_progress=on_progress)
    traced = [s for s in rank_sources(out) if (s.path / "trace.json.gz").exists()]
    if meta["status"] == "ok" and len(traced) >= 2:
        return analyse_ranks(out, config, on_progress=on_progress, target=spec.target, distributed=meta["distributed"])
    # a failed rank, or one rank only: the diagnosis of one rank folder, with the failed rank's error
    failed = next((r for r in meta["ranks"] if r["status"] != "ok"), None)
    folder = out / (failed["folder"] if failed else meta["ranks"][0]["folder"]) if meta["ranks"] else out
    trace = load_capture_folder(folder) if folder != out else None
    if trace is None:
        from diagnose.trace.load import empty_trace

        trace = empty_trace(str(out))
        trace.capture = {k: meta.get(k) for k in ("target", "mode", "status", "error", "params")}
    # the run's own target, status and error, and how torchrun launched it: what the Diagnosis is built with
    ran = {k: meta[k] for k in ("status", "error") if meta.get(k) is not None}
    trace.capture = {**(trace.capture or {}), "target": spec.target, **ran, "distributed": meta["distributed"]}
    return diagnose_trace(trace, config)
