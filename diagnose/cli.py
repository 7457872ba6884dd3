"""The `diagnose` command line: subcommands, parsing, dispatch, and errors mapped to exit codes.

    diagnose [run] TARGET [options] [SCRIPT ARGS...]   (`run` may be left out)
    diagnose run -m MODULE [options] [ARGS...]
    diagnose demo [options]
    diagnose rules

As with pyinstrument, everything after a script (or `-m MODULE`) belongs to the script, so
diagnose's own options go before it; `--` still separates them explicitly.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import signal
import sys
import threading
import webbrowser
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

from diagnose.errors import EXIT_FINDING, EXIT_OK, EXIT_WORKLOAD_FAILED, DiagnoseError, UsageError
from diagnose.findings import SCHEMA, SEVERITIES
from diagnose.format import plain
from diagnose.output import OutputFolder
from diagnose.report.richtext import colour, safe
from diagnose.version import __version__

SUBCOMMANDS = ("run", "demo", "rules", "diff", "schema", "probe")

DESCRIPTION = """\
Find what limits a PyTorch GPU workload and which fix to apply.

commands:
  diagnose [run] TARGET   diagnose a workload or a trace (`run` may be left out):
      model.py [ARGS]     run the script as __main__ under torch.profiler; ARGS go to the script
      -m MODULE [ARGS]    the same for a module, as `python -m MODULE`
      model.py:NAME       NAME(**params) returns a zero-argument callable that runs one step
      trace.json[.gz]     analyse a torch.profiler (kineto) trace from anywhere; no GPU needed
      -                   a trace read from standard input
      FOLDER              re-analyse a folder that diagnose wrote (a capture or a --sweep)
  diagnose demo           the built-in default: the bundled decode workload (its H200 capture without a GPU)
  diagnose rules [RULE]   the rules, their inputs and thresholds (--format json|md); one rule's docs
  diagnose diff A B       compare two runs (traces or folders): faster or slower, and why
  diagnose schema [FILE]  the JSON Schema of findings.json; with files, check them against it
"""

EPILOG = """\
exit codes:
  0  diagnosis written
  1  a finding at or above --fail-on SEVERITY, or --fail-on-regression tripped (CI audits)
  2  bad usage or unreadable input (one line on stderr)
  3  the workload failed (exception, out of memory, timeout, crash); the report is still written
  130/143  Ctrl-C / SIGTERM: the workload's processes are ended first

thresholds: --set RULE.NAME=VALUE, or in pyproject.toml under [tool.diagnose.thresholds]
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line and exit code 2 through UsageError; a misspelt option
    gets the nearest one."""

    def error(self, message: str):
        if message.startswith("unrecognized arguments:"):
            unknown = [t.split("=", 1)[0] for t in message.split(":", 1)[1].split() if t.startswith("-")]
            for token in unknown:
                close = difflib.get_close_matches(token, [o for o in self._option_string_actions
                                                          if o.startswith("--")], n=1, cutoff=0.6)
                if close:
                    raise UsageError(f"unknown option {token!r}; did you mean {close[0]!r}? (see `diagnose --help`)")
        raise UsageError(f"{message} (see `diagnose --help`)")


def build_parser(command: str = "run") -> argparse.ArgumentParser:
    """The parser of one subcommand (its --help fits a screen)."""
    usage = {"run": "diagnose [run] TARGET [options] [SCRIPT ARGS...]  |  diagnose run -m MODULE [options] [ARGS...]",
             "demo": "diagnose demo [options]", "rules": "diagnose rules [RULE] [--format text|json|md]",
             "diff": "diagnose diff BEFORE AFTER [options]", "schema": "diagnose schema [FINDINGS.json ...]",
             "probe": "diagnose probe [--refresh] [--format text|json] [--python PYTHON]"}[command]
    p = _Parser(prog="diagnose", usage=usage, description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    if command == "rules":
        from diagnose.rules_table import FORMATS

        p.add_argument("rule", nargs="?", help="one rule, with its documentation")
        p.add_argument("--format", choices=FORMATS, default="text", help="text (default), json or md")
        return p
    if command == "schema":
        p.description = ("Print the JSON Schema of findings.json (diagnose.findings/1); with files, check each "
                         "against it instead (exit 0 when all fit, 2 naming the first field that does not).")
        p.add_argument("files", nargs="*", type=Path, metavar="FINDINGS.json", help="findings.json files to check")
        return p
    if command == "probe":
        p.description = ("Measure this machine's GPU (Triton copy/triad bandwidth, matmul TFLOP/s per precision) "
                         "and print it beside the datasheet; cached per device, and carried by every capture made "
                         "here (exit 0; 2 when no GPU is visible or the probe fails).")
        p.add_argument("--refresh", action="store_true", help="measure again even when a cached record exists")
        p.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
        p.add_argument("--python", default=None, help="the Python (with torch) that runs the probe")
        return p
    # --- `diagnose diff` (diagnose/diff_command.py) ---
    if command == "diff":
        from diagnose.diff_command import DESCRIPTION as DIFF_DESCRIPTION
        from diagnose.diff_command import EPILOG as DIFF_EPILOG
        from diagnose.diff_command import USAGE as DIFF_USAGE
        from diagnose.diff_command import add_diff_options

        p.usage, p.description, p.epilog = DIFF_USAGE, DIFF_DESCRIPTION, DIFF_EPILOG
        add_diff_options(p)
        return p
    if command == "run":
        p.add_argument("target", nargs="?", help=argparse.SUPPRESS)
        p.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m MODULE")
    p.add_argument("-o", "--out", type=Path, help="output folder (default: diagnose-out/NAME)")
    p.add_argument("--format", choices=_formats(), help="what to print on stdout (default: text)")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--fail-on", choices=SEVERITIES, help="exit 1 when a finding is at least this severe")
    p.add_argument("--set", action="append", default=[], metavar="RULE.NAME=VALUE", help="override a threshold")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for NAME(**params) (function mode)")
    p.add_argument("--warmup", type=_count(0), default=3, metavar="N", help="warm-up steps before profiling (default 3)")
    p.add_argument("--steps", type=_count(1), default=5, metavar="N", help="profiled steps (default 5)")
    p.add_argument("--timed-steps", type=_count(0), default=20, metavar="N", help="steps timed without the profiler (default 20)")
    p.add_argument("--timeout", type=_seconds, default=900, metavar="S", help="seconds before the workload is stopped (default 900)")
    p.add_argument("--python", metavar="PATH", help="the Python that runs the workload")
    p.add_argument("--ncu", action="store_true",
                   help="then measure one step under Nsight Compute")
    p.add_argument("--ncu-csv", type=Path, metavar="FILE",
                   help="attach Nsight Compute results (CSV or .ncu-rep)")
    p.add_argument("--ncu-timeout", type=_seconds, default=600, metavar="S",
                   help="limit of the Nsight Compute pass (default 600)")
    p.add_argument("--sweep", metavar="NAME=V1,V2,...",
                   help="one capture per value of a parameter")
    if command == "run":
        p.add_argument("--verify", action="store_true",
                       help="then apply each fix it can, time it, check outputs")
        p.add_argument("--verify-skip", default="", metavar="V,...", help="fix variants not to try")
    p.add_argument("--max-trace-bytes", type=_count(1), metavar="N",
                   help="refuse traces that inflate past N bytes")
    # --- `--baseline FOLDER` (diagnose/diff_command.py) ---
    if command == "run":
        from diagnose.diff_command import add_gate_option

        p.add_argument("--baseline", type=Path, metavar="FOLDER",
                       help="then diff against it (--fail-on-regression PCT)")
        add_gate_option(p, shown=False)
    # --- several ranks through torchrun (diagnose/capture/distributed.py) ---
    if command == "run":
        p.add_argument("--nproc-per-node", type=_count(1), metavar="N",
                       help="capture N ranks through torchrun")
        p.add_argument("--nnodes", metavar="N|MIN:MAX", help="passed to torchrun (multi-node)")
        p.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="passed to torchrun (c10d rendezvous)")
        p.add_argument("--node-rank", type=_count(0), metavar="K", help=argparse.SUPPRESS)
    p.add_argument("--no-html", action="store_true", help="skip report.html")
    p.add_argument("--open", action="store_true", help="open report.html in a browser when done")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary, only the output paths")
    p.add_argument("--version", action="version", version=f"diagnose {__version__}")
    return p


def _formats() -> list[str]:
    from diagnose import report

    return list(report.renderers())


def _count(least: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse


def _seconds(text: str) -> float:
    """A time limit: a finite number of seconds above 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to diagnose: it unwinds like Ctrl-C, so the workload's process group is ended
    and the output folder's staging is cleaned on the way out."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def _on_terminate(signum, frame):
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    from diagnose.capture.guard import adopt_orphans

    command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else "run"
    if argv and argv[0] in SUBCOMMANDS:
        argv = argv[1:]

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _on_terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
        if command_line:  # the command itself, not a caller's process that imported main()
            adopt_orphans()
    try:
        if command == "run" and argv:
            _check_not_a_misspelt_command(argv)
        args = _parse(command, argv)
        return _dispatch(command, args)
    except DiagnoseError as exc:
        print(f"diagnose: error: {plain(exc)}", file=sys.stderr)  # one line, whatever it quotes
        return exc.exit_code
    except Terminated as exc:
        print("diagnose: terminated" if exc.signum == signal.SIGTERM else "diagnose: hung up", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("diagnose: interrupted", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _parse(command: str, argv: list[str]) -> argparse.Namespace:
    """Parse one subcommand's arguments; for `run`, what follows a script or module is the script's."""
    if command == "run" and "-m" in argv:  # as with python: what follows `-m MODULE` is the module's
        cut = argv.index("-m")
        if cut + 1 >= len(argv):
            raise UsageError("-m needs a MODULE (see `diagnose --help`)")
        args = build_parser(command).parse_args(argv[:cut])
        if args.target is not None:
            raise UsageError(f"give a TARGET or -m MODULE, not both ({args.target!r} and -m {argv[cut + 1]!r})")
        args.module, args.script_args = argv[cut + 1], argv[cut + 2:]
        return args
    args = build_parser(command).parse_args(argv)
    if command != "run":
        return args
    rest = list(args.script_args or [])
    runs_a_script = (args.target or "").endswith(".py")
    if rest and rest[0] == "--":
        rest = rest[1:]
    if runs_a_script or not rest:
        args.script_args = rest
        return args
    # A trace, folder or function target: what follows it is diagnose's own options.
    again = build_parser(command).parse_args([*_before(argv, args.target), *rest, args.target])
    extra = [t for t in [again.target, *again.script_args] if t != args.target and not t.startswith("-")]
    if again.script_args:
        if len(extra) == 1 and not extra[0].endswith(".py"):
            raise UsageError(f"two targets ({args.target} and {extra[0]}): to compare two runs, use "
                             f"`diagnose diff {args.target} {extra[0]}`")
        raise UsageError(f"unexpected argument(s) after {args.target}: {' '.join(extra)} (see `diagnose --help`)")
    again.script_args = []
    return again


def _check_not_a_misspelt_command(argv: list[str]) -> None:
    """A usage error when the first word is no file or folder but close to a subcommand (`diagnose dif
    A B`), rather than reading it as a target."""
    word = argv[0]
    if word.startswith("-") or "." in word or "/" in word or Path(word).exists():
        return
    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6)
    if close:
        rest = " ".join(argv[1:])
        raise UsageError(f"unknown command {word!r}; did you mean `diagnose {close[0]}{' ' + rest if rest else ''}`?")


def _schema(files: list[Path]) -> int:
    """`diagnose schema`: the JSON Schema of findings.json, or each file checked against the model."""
    from diagnose.findings import check_findings_file, findings_schema

    if not files:
        _print(json.dumps(findings_schema(), indent=2))
        return EXIT_OK
    for path in files:
        check_findings_file(path)  # InputError (exit 2) naming the file and the field
        print(f"{path}: fits {SCHEMA}")
    return EXIT_OK


def _before(argv: list[str], target: str) -> list[str]:
    return argv[:argv.index(target)] if target in argv else argv


def _dispatch(command: str, args) -> int:
    if command == "rules":
        from diagnose import rules_table

        rule = rules_table.find_rule(args.rule) if args.rule else None
        if args.format == "json":
            _print(rules_table.rules_json(rule))
        elif args.format == "md":
            _print(rules_table.rules_markdown(rule).rstrip("\n"))
        else:
            console = _Stdout(highlight=False, width=None if sys.stdout.isatty() else rules_table.PIPED_WIDTH)
            if rule is None:
                rules_table.print_rules(console)
            else:
                rules_table.print_rule(console, rule)
        return EXIT_OK
    if command == "schema":
        return _schema(args.files)
    if command == "probe":
        from diagnose import probe_command

        return probe_command.run(args.refresh, args.format == "json", args.python)
    # --- `diagnose diff` ---
    if command == "diff":
        from diagnose.diff_command import run_diff

        args.fail_on = None
        return run_diff(args, _config(args))
    config = _config(args)
    err = Console(stderr=True, highlight=False)
    if command == "demo":
        return _run_demo(args, config, err)
    if args.target is None and args.module is None:
        raise UsageError("no TARGET given (try `diagnose demo`, or `diagnose --help`)")
    return _run(args, args.target, args.script_args, config, err)


def _config(args):
    from diagnose.config import load_config
    from diagnose.engine import known_thresholds
    from diagnose.rules import ALL_RULES

    return load_config(args.set, args.fail_on, known=known_thresholds(ALL_RULES))


def _run_demo(args, config, err: Console) -> int:
    from diagnose import bundled
    from diagnose.capture.probe import cuda_available

    args.module, args.script_args = None, []
    if cuda_available(args.python):
        return _run(args, bundled.demo_workload(), [], config, err)
    capture = bundled.demo_capture()
    if _output_format(args) == "text" and not args.quiet:
        print("No CUDA GPU here: analysing the bundled real NVIDIA H200 capture of the same "
              f"workload ({plain(capture)}).", file=sys.stderr)
    args.out = args.out or Path("diagnose-out") / "demo"
    return _run(args, str(capture), [], config, err)


def _output_format(args) -> str:
    return "json" if args.json else (args.format or "text")


def _run(args, target_text: str | None, script_args: list[str], config, err: Console) -> int:
    from diagnose import pipeline, report
    from diagnose.capture.spec import parse_params

    target = pipeline.parse_target(args.module if args.module else target_text, module=args.module is not None)
    out = args.out or pipeline.default_out(target)
    fmt_name = _output_format(args)
    quiet_progress = args.quiet or fmt_name != "text"
    _check_baseline(args)
    if hasattr(args, "nproc_per_node"):
        _check_distributed(args)
    if target.kind == "trace":
        for flag, given in (("--sweep", args.sweep), ("--param", args.param),
                            ("--verify", getattr(args, "verify", False)),
                            ("--nproc-per-node", getattr(args, "nproc_per_node", None))):
            if given:
                raise UsageError(f"{flag} needs a workload to run (model.py:NAME); {target.path} is a trace")
        folder = OutputFolder(out, inputs=_inputs(args, target.path))
        with folder:
            with _progress(err, quiet=quiet_progress, first="reading the trace") as on_progress:
                diagnosis = pipeline.analyse(target.path, config, ncu_csv=args.ncu_csv, on_progress=on_progress,
                                             max_bytes=args.max_trace_bytes)
            if args.ncu:
                diagnosis.warnings.insert(0, "--ncu: the target is a trace, not a workload: nothing to run under "
                                             "Nsight Compute (attach its results with --ncu-csv FILE)")
            written = _public(folder, pipeline.write_outputs(diagnosis, folder.path, html=not args.no_html))
            compared = _baseline(args, diagnosis, config, folder, written)
    else:
        try:
            params = parse_params(args.param)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        pipeline.check_can_capture(args.python)
        if getattr(args, "verify", False) and args.sweep:
            raise UsageError("--verify and --sweep cannot be combined: verify one point (--param NAME=VALUE)")
        if getattr(args, "verify_skip", "") and not getattr(args, "verify", False):
            raise UsageError("--verify-skip needs --verify")
        _variants(getattr(args, "verify_skip", ""))
        folder = OutputFolder(out, inputs=_inputs(args, None if args.module else target.path))
        folder.keep_on_error = True  # what the workload recorded is kept, whatever happens after
        with folder, _progress(err, quiet=quiet_progress) as on_progress:
            if getattr(args, "nproc_per_node", None):
                diagnosis = _run_distributed(args, target, folder, config, params, script_args, on_progress)
            elif args.sweep:
                diagnosis = pipeline.sweep_and_analyse(
                    target, folder.path, config, args.sweep, params=params, warmup=args.warmup, steps=args.steps,
                    timed_steps=args.timed_steps, timeout_s=args.timeout, python=args.python,
                    on_progress=on_progress)
            else:
                diagnosis = pipeline.capture_and_analyse(
                    target, folder.path, config, params=params, argv=script_args, warmup=args.warmup,
                    steps=args.steps, timed_steps=args.timed_steps, timeout_s=args.timeout,
                    python=args.python, on_progress=on_progress, ncu=args.ncu, ncu_csv=args.ncu_csv,
                    ncu_timeout_s=args.ncu_timeout, verify=getattr(args, "verify", False),
                    verify_skip=_variants(getattr(args, "verify_skip", "")))
            diagnosis = pipeline.relocate(diagnosis, folder.path, folder.final)
            written = _public(folder, pipeline.write_outputs(diagnosis, folder.path, html=not args.no_html))
            compared = _baseline(args, diagnosis, config, folder, written)
    if quiet_progress:
        for note in diagnosis.warnings:
            if note.startswith(("--ncu", "ncu.", "--verify")):
                print(f"diagnose: {plain(note)}", file=sys.stderr)
    if compared is not None:  # with --baseline, stdout shows the diff
        from diagnose.diff_command import exit_code, show

        show(compared, args, written)
        if diagnosis.workload_failed:
            return EXIT_WORKLOAD_FAILED
        if exit_code(compared) != EXIT_OK:
            return exit_code(compared)
    elif args.quiet and fmt_name == "text":
        _print("\n".join(written.values()))
    else:
        tty = sys.stdout.isatty()
        width = _terminal_width() if tty else None
        _print(report.get(fmt_name).render(diagnosis, outputs=written, width=width, color=colour(tty)).rstrip("\n"))
    if args.open and "report" in written:
        _open_report(Path(written["report"]))
    if diagnosis.workload_failed:
        _print_workload_error(diagnosis.capture.get("error") or {})
        return EXIT_WORKLOAD_FAILED
    worst = diagnosis.worst_severity()
    if config.fail_on and worst and SEVERITIES.index(worst) <= SEVERITIES.index(config.fail_on):
        return EXIT_FINDING
    return EXIT_OK


# --- `--nproc-per-node N [--nnodes ... --rdzv-endpoint ...]` ---
def _run_distributed(args, target, folder: OutputFolder, config, params: dict, script_args: list[str], on_progress):
    """Capture every rank through torchrun, then the cross-rank diagnosis."""
    from diagnose import pipeline
    from diagnose.capture.distributed import Launch, check_launch

    if args.sweep or args.ncu or args.ncu_csv:
        raise UsageError("--nproc-per-node cannot be combined with --sweep, --ncu or --ncu-csv")
    launch = Launch(args.nproc_per_node, args.nnodes, args.rdzv_endpoint, args.node_rank)
    check_launch(launch)
    return pipeline.capture_distributed_and_analyse(
        target, folder.path, config, launch=launch, params=params, argv=script_args, warmup=args.warmup,
        steps=args.steps, timed_steps=args.timed_steps, timeout_s=args.timeout, python=args.python,
        on_progress=on_progress)


def _variants(text: str) -> frozenset:
    """The fix variants named in --verify-skip; UsageError for a name --verify does not know."""
    from diagnose.verify.plan import variant_names

    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - variant_names())
    if unknown:
        raise UsageError(f"--verify-skip: unknown variant(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(variant_names()))})")
    return names


def _check_distributed(args) -> None:
    """Torchrun's pass-through flags need --nproc-per-node."""
    for flag, given in (("--nnodes", args.nnodes), ("--rdzv-endpoint", args.rdzv_endpoint),
                        ("--node-rank", args.node_rank)):
        if given is not None and not args.nproc_per_node:
            raise UsageError(f"{flag} is passed to torchrun: it needs --nproc-per-node N")


# --- `--baseline FOLDER` (diagnose/diff_command.py) ---
def _check_baseline(args) -> None:
    if getattr(args, "baseline", None) is not None:
        from diagnose.diff_command import check_baseline

        check_baseline(args.baseline)
    elif getattr(args, "fail_on_regression", None) is not None:
        raise UsageError("--fail-on-regression needs --baseline FOLDER (or use `diagnose diff BEFORE AFTER`)")


def _baseline(args, diagnosis, config, folder: OutputFolder, written: dict[str, str]):
    """With --baseline: the DiffReport of the baseline against this run, its files added to `written`."""
    if getattr(args, "baseline", None) is None:
        return None
    from diagnose.diff_command import compare_with_baseline

    result, files = compare_with_baseline(diagnosis, args.baseline, config, folder.path,
                                          fail_on_regression=args.fail_on_regression)
    written.update(_public(folder, files))
    return result


def _public(folder: OutputFolder, written: dict[str, str]) -> dict[str, str]:
    """Where the files written into the staging folder will be once it is in place."""
    return {k: str(folder.public(v)) for k, v in written.items()}


def _inputs(args, target_path) -> list:
    """Every path the run reads: the output folder may not be, hold or lie inside any of them."""
    return [target_path, args.ncu_csv, getattr(args, "baseline", None)]


def _open_report(path: Path) -> None:
    """--open: the report in a browser; say so on stderr when no browser could be started."""
    try:
        opened = webbrowser.open(path.resolve().as_uri())
    except webbrowser.Error:
        opened = False
    if not opened:
        print(f"diagnose: --open: no browser found to open {path} (set BROWSER, or open the file yourself)",
              file=sys.stderr)


TRACEBACK_LINES = 12


def _print_workload_error(error: dict) -> None:
    """The failed workload's traceback, its last frames (file:line), on stderr: the terminal shows
    where it failed, not only findings.json."""
    tb = _user_frames((error.get("traceback") or "").rstrip().splitlines())
    if not tb:
        return
    shown = tb[-TRACEBACK_LINES:]
    head = "the workload's traceback" + (f" (last {len(shown)} of {len(tb)} lines)" if len(tb) > len(shown) else "")
    print(f"diagnose: {head}:", file=sys.stderr)
    for line in shown:
        print(f"  {line}", file=sys.stderr)


def _user_frames(lines: list[str]) -> list[str]:
    """A traceback without the frames of diagnose's own capture code and of frozen modules (runpy)."""
    here = str(Path(__file__).resolve().parent)
    out, skipping = [], False
    for line in lines:
        if line.startswith("  File "):
            skipping = here in line or '"<frozen ' in line
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return out


def _terminal_width() -> int:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        return 100


def _stdout_gone() -> None:
    """The reader of stdout stopped early (`diagnose ... | head`): drop the rest, which is no error."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _print(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _stdout_gone()


class _Stdout(Console):
    """The rules table's console: a closed pipe ends the output, not the run (rich would exit 1)."""

    def on_broken_pipe(self) -> None:
        _stdout_gone()


class CountedBar(BarColumn):
    """A progress bar only where the phase has a known total (no empty bar for "0/?")."""

    def render(self, task):
        return super().render(task) if task.total else ""


class CountedOf(MofNCompleteColumn):
    """"3/5" only where the phase has a known total; nothing rather than "0/?"."""

    def render(self, task):
        return super().render(task) if task.total else ""


class _progress:
    """A rich progress line fed by phase reports: the capture child's, or the trace loader's (silent when quiet).

    A phase with a known total shows a bar and "done/total"; one without shows only a spinner."""

    LABELS = {"build": "building the workload", "warmup": "warming up", "timing": "timing steps without the profiler",
              "profile": "profiling steps", "export": "writing the trace", "run": "running the script",
              "ncu-start": "Nsight Compute: starting the workload again", "ncu-build": "Nsight Compute: "
              "building the workload", "ncu-run": "Nsight Compute: running the script",
              "ncu-warmup": "Nsight Compute: warming up", "ncu-replay": "Nsight Compute: replaying one step's "
              "hot kernels (~0.5 s each)", "ncu-finish": "Nsight Compute: collecting the results",
              "decode": "reading the trace", "rules": "running the rules",
              "ranks": "ranks: capturing or analysing each rank"}

    def __init__(self, console: Console, quiet: bool, first: str = "starting the workload"):
        self.console, self.quiet, self.first = console, quiet, first
        self.progress = None
        self.task = None

    def __enter__(self):
        if self.quiet or not self.console.is_terminal:
            return lambda event: None
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), CountedBar(), CountedOf(),
                                 console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task(self.first, total=None)
        return self.update

    def update(self, event: dict) -> None:
        """Show one phase report."""
        label = self.LABELS.get(event.get("phase"), event.get("phase", ""))
        if event.get("phase") == "sweep":
            label = f"capturing sweep point {event.get('value')}"
        if event.get("phase") == "verify":
            label = f"verifying fixes: {event.get('variant')}"
        label = safe(label)  # what the workload reports is untrusted: no control characters, no rich markup
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
