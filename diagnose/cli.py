"""The `diagnose` command line: parse, dispatch, map errors to exit codes."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console

from diagnose import __version__
from diagnose.errors import EXIT_FINDING, EXIT_OK, EXIT_WORKLOAD_FAILED, DiagnoseError, UsageError
from diagnose.findings import SEVERITIES

USAGE = "diagnose TARGET [options] [-- SCRIPT ARGS]  |  diagnose demo  |  diagnose rules"

DESCRIPTION = """\
Find what limits a PyTorch GPU workload and which fix to apply.

TARGET is one of:
  model.py            run the script as __main__ under torch.profiler (steps found on their own)
  model.py:NAME       NAME(**params) returns a zero-argument callable that runs one step
  trace.json[.gz]     analyse a torch.profiler (kineto) trace from anywhere; no GPU needed
  CAPTURE_FOLDER      re-analyse a folder that diagnose wrote (a capture or a --sweep)

  diagnose demo       the built-in default: profiles the bundled decode workload on a GPU, or
                      analyses the bundled real H200 capture of it where there is none
  diagnose rules      the table of rules, their thresholds and defaults
"""

EPILOG = """\
exit codes:
  0  diagnosis written
  1  a finding at or above --fail-on SEVERITY (off unless asked; for CI audits)
  2  bad usage or unreadable input (one line on stderr)
  3  the workload failed (exception, out of memory, timeout, crash); the report is still written

thresholds: --set RULE.NAME=VALUE, or in pyproject.toml:
  [tool.diagnose]
  fail-on = "high"
  [tool.diagnose.thresholds]
  "launch-overhead.min_recoverable_share" = 0.3
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help fits a screen)."""
    p = argparse.ArgumentParser(prog="diagnose", usage=USAGE, description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", help=argparse.SUPPRESS)
    p.add_argument("-o", "--out", type=Path, help="output folder (default: diagnose-out/NAME)")
    p.add_argument("--json", action="store_true", help="print findings JSON on stdout instead of the summary")
    p.add_argument("--fail-on", choices=SEVERITIES, help="exit 1 when a finding is at least this severe")
    p.add_argument("--set", action="append", default=[], metavar="RULE.NAME=VALUE", help="override a threshold")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for NAME(**params) (function mode)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps before profiling (default 3)")
    p.add_argument("--steps", type=int, default=5, help="profiled steps (default 5)")
    p.add_argument("--timed-steps", type=int, default=20, help="steps timed without the profiler (default 20)")
    p.add_argument("--timeout", type=float, default=900, help="seconds before the workload is stopped (default 900)")
    p.add_argument("--python", help="Python interpreter that runs the workload (default: this one)")
    p.add_argument("--ncu", action="store_true",
                   help="then run one step again under Nsight Compute: measured SM %%, DRAM %%, tensor pipe")
    p.add_argument("--ncu-csv", type=Path, metavar="FILE",
                   help="attach Nsight Compute results (ncu --csv --page raw, or .ncu-rep) to the trace")
    p.add_argument("--ncu-timeout", type=float, default=600, metavar="S",
                   help="seconds before the Nsight Compute pass is stopped (default 600)")
    p.add_argument("--sweep", metavar="NAME=V1,V2,...",
                   help="function mode: one capture per value of NAME; fits memory and time growth")
    p.add_argument("--no-html", action="store_true", help="skip report.html")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary, only the output paths")
    p.add_argument("--version", action="version", version=f"diagnose {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    err = Console(stderr=True, highlight=False)
    try:
        return _dispatch(args, script_args, err)
    except DiagnoseError as exc:
        print(f"diagnose: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("diagnose: interrupted", file=sys.stderr)
        return 130


def _dispatch(args, script_args: list[str], err: Console) -> int:
    from diagnose.config import load_config

    if args.target is None:
        raise UsageError("no TARGET given (try `diagnose demo`, or `diagnose --help`)")
    if args.target == "rules" and not Path("rules").is_file():
        from diagnose.rules_table import print_rules

        print_rules(_Stdout(highlight=False))
        return EXIT_OK
    config = load_config(args.set, args.fail_on)
    if args.target == "demo" and not Path("demo").exists():
        return _run_demo(args, config, err)
    return _run(args, args.target, script_args, config, err)


def _run_demo(args, config, err: Console) -> int:
    from diagnose import bundled
    from diagnose.capture.probe import cuda_available

    if cuda_available(args.python):
        return _run(args, bundled.demo_workload(), [], config, err)
    capture = bundled.demo_capture()
    if not args.json:
        print("No CUDA GPU here: analysing the bundled real NVIDIA H200 capture of the same "
              f"workload ({capture}).", file=sys.stderr)
    args.out = args.out or Path("diagnose-out") / "demo"
    return _run(args, str(capture), [], config, err)


def _run(args, target_text: str, script_args: list[str], config, err: Console) -> int:
    from diagnose import pipeline
    from diagnose.capture.spec import parse_params
    from diagnose.report.json_report import render_json
    from diagnose.report.text import print_summary

    target = pipeline.parse_target(target_text)
    out = args.out or pipeline.default_out(target)
    if target.kind == "trace":
        with _progress(err, quiet=args.quiet or args.json, first="reading the trace") as on_progress:
            diagnosis = pipeline.analyse(target.path, config, ncu_csv=args.ncu_csv, on_progress=on_progress)
        if args.ncu:
            diagnosis.warnings.insert(0, "--ncu: the target is a trace, not a workload: nothing to run under "
                                         "Nsight Compute (attach its results with --ncu-csv FILE)")
    else:
        try:
            params = parse_params(args.param)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        with _progress(err, quiet=args.quiet or args.json) as on_progress:
            if args.sweep:
                diagnosis = pipeline.sweep_and_analyse(
                    target, out, config, args.sweep, params=params, warmup=args.warmup, steps=args.steps,
                    timed_steps=args.timed_steps, timeout_s=args.timeout, python=args.python,
                    on_progress=on_progress)
            else:
                diagnosis = pipeline.capture_and_analyse(
                    target, out, config, params=params, argv=script_args, warmup=args.warmup,
                    steps=args.steps, timed_steps=args.timed_steps, timeout_s=args.timeout,
                    python=args.python, on_progress=on_progress, ncu=args.ncu, ncu_csv=args.ncu_csv,
                    ncu_timeout_s=args.ncu_timeout)
    written = pipeline.write_outputs(diagnosis, out, html=not args.no_html)
    if args.json or args.quiet:
        for note in diagnosis.warnings:
            if note.startswith("--ncu") or note.startswith("ncu."):
                print(f"diagnose: {note}", file=sys.stderr)
    if args.json:
        _print(render_json(diagnosis))
    elif args.quiet:
        _print("\n".join(written.values()))
    else:
        print_summary(diagnosis, _Stdout(highlight=False), written)
    if diagnosis.workload_failed:
        return EXIT_WORKLOAD_FAILED
    worst = diagnosis.worst_severity()
    if config.fail_on and worst and SEVERITIES.index(worst) <= SEVERITIES.index(config.fail_on):
        return EXIT_FINDING
    return EXIT_OK


def _stdout_gone() -> None:
    """The reader of stdout stopped early (`diagnose ... | head`): drop the rest, which is no error."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _print(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _stdout_gone()


class _Stdout(Console):
    """The terminal summary's console: a closed pipe ends the output, not the run (rich would exit 1)."""

    def on_broken_pipe(self) -> None:
        _stdout_gone()


class _progress:
    """A rich progress line fed by phase reports: the capture child's, or the trace loader's (silent when quiet)."""

    LABELS = {"build": "building the workload", "warmup": "warming up", "timing": "timing steps without the profiler",
              "profile": "profiling steps", "export": "writing the trace", "run": "running the script",
              "ncu-start": "Nsight Compute: starting the workload again", "ncu-build": "Nsight Compute: "
              "building the workload", "ncu-run": "Nsight Compute: running the script",
              "ncu-warmup": "Nsight Compute: warming up", "ncu-replay": "Nsight Compute: replaying one step's "
              "hot kernels (~0.5 s each)", "ncu-finish": "Nsight Compute: collecting the results",
              "decode": "reading the trace", "rules": "running the rules"}

    def __init__(self, console: Console, quiet: bool, first: str = "starting the workload"):
        self.console, self.quiet, self.first = console, quiet, first
        self.progress = None
        self.task = None

    def __enter__(self):
        if self.quiet:
            return lambda event: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task(self.first, total=None)
        return self.update

    def update(self, event: dict) -> None:
        """Show one phase report from the child."""
        label = self.LABELS.get(event.get("phase"), event.get("phase", ""))
        if event.get("phase") == "sweep":
            label = f"capturing sweep point {event.get('value')}"
        total = event.get("total") or None
        task = self.progress.tasks[0] if self.progress.tasks else None
        if task is None or task.description != label or task.total != total:
            # a new phase: a fresh line (rich keeps the old total when told None)
            self.progress.remove_task(self.task)
            self.task = self.progress.add_task(label, total=total)
        if total:
            self.progress.update(self.task, completed=event.get("done", 0) + 1)

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()
        return False
