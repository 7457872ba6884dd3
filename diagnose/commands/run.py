"""`diagnose [run] TARGET`: diagnose a workload or a recording; the default command.

RunCommand parses the command line (what follows a script or `-m MODULE` is the script's) into
RunOptions; a Run then takes the steps of one diagnosis: the checks, the diagnosis itself
(analyse a recording, or capture the workload once, per sweep point or per rank through
torchrun), `--verify` after a single capture, writing the outputs, `--baseline`, and what stdout
shows and the exit code says. `diagnose demo` makes a Run too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
import webbrowser
from pathlib import Path

from rich.console import Console

from diagnose.capture.spec import CaptureOptions
from diagnose.commands import common
from diagnose.front.stdout import print_out
from diagnose.base.errors import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_OK, EXIT_WORKLOAD_FAILED, UsageError
from diagnose.model.details import CaptureError
from diagnose.model.findings import SEVERITIES, Diagnosis
from diagnose.base.format import plain
from diagnose.front.output import OutputFolder, default_out
from diagnose.ranks.cluster import cluster_address, open_engine

SUMMARY = """\
  diagnose [run] TARGET   diagnose a workload or a trace (`run` may be left out):
      model.py [ARGS]     run the script as __main__ under torch.profiler; ARGS go to the script
      -m MODULE [ARGS]    the same for a module, as `python -m MODULE`
      model.py:NAME       NAME(**params) returns a zero-argument callable that runs one step
      trace.json[.gz]     analyse a torch.profiler (kineto) trace from anywhere; no GPU needed
      -                   a trace read from standard input
      FOLDER              re-analyse a folder that diagnose wrote (a capture or a --sweep)
"""
TRACEBACK_LINES = 12


@dataclasses.dataclass
class RunOptions:
    """The options of `diagnose run` (and `demo`, which has no target, --verify, --baseline or torchrun's)."""

    target: str | None = None
    module: str | None = None
    script_args: list[str] = dataclasses.field(default_factory=list)
    out: Path | None = None
    format: str | None = None
    json: bool = False
    fail_on: str | None = None
    set: list[str] = dataclasses.field(default_factory=list)
    param: list[str] = dataclasses.field(default_factory=list)
    warmup: int = 3
    steps: int = 5
    timed_steps: int = 20
    timeout: float = 900
    python: str | None = None
    ncu: bool = False
    ncu_csv: Path | None = None
    ncu_timeout: float = 600
    sweep: str | None = None
    verify: bool = False
    verify_skip: str = ""
    max_trace_bytes: int | None = None
    cluster: str | None = None
    baseline: Path | None = None
    fail_on_regression: float | None = None
    nproc_per_node: int | None = None
    nnodes: str | None = None
    rdzv_endpoint: str | None = None
    node_rank: int | None = None
    no_html: bool = False
    open: bool = False
    quiet: bool = False

    @classmethod
    def of(cls, args: argparse.Namespace) -> "RunOptions":
        """The options a parser gave; those it does not have keep their defaults."""
        given = vars(args)
        return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given})

    @property
    def output_format(self) -> str:
        """What stdout shows: --json, else --format, else text."""
        return "json" if self.json else (self.format or "text")

    def capture_options(self) -> CaptureOptions:
        """How the workload is run; UsageError for a bad --param."""
        from diagnose.capture.spec import parse_params

        try:
            params = parse_params(self.param)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return CaptureOptions(
            params=params,
            argv=list(self.script_args),
            warmup=self.warmup,
            steps=self.steps,
            timed_steps=self.timed_steps,
            timeout_s=self.timeout,
            python=self.python,
        )


class RunCommand(common.Command):
    """`diagnose [run] TARGET [options] [SCRIPT ARGS...]` and `diagnose run -m MODULE ...`."""

    name = "run"
    order = 10
    usage = "diagnose [run] TARGET [options] [SCRIPT ARGS...]  |  diagnose run -m MODULE [options] [ARGS...]"
    summary = SUMMARY

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        """The target, every option of a run, and what follows the target."""
        p.add_argument("target", nargs="?", help=argparse.SUPPRESS)
        p.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m MODULE")
        common.add_output_options(p)
        common.add_capture_options(p)
        p.add_argument("--verify", action="store_true", help="then apply each fix it can, time it, check outputs")
        p.add_argument("--verify-skip", default="", metavar="V,...", help="fix variants not to try")
        common.add_trace_options(p)
        p.add_argument(
            "--cluster",
            metavar="ADDR",
            help="rank folders on a Dask cluster, or local:N workers",
        )
        p.add_argument(
            "--baseline", type=Path, metavar="FOLDER", help="then diff against it (--fail-on-regression PCT)"
        )
        common.add_gate_option(p, shown=False)
        p.add_argument("--nproc-per-node", type=common.count(1), metavar="N", help="capture N ranks through torchrun")
        p.add_argument("--nnodes", metavar="N|MIN:MAX", help="passed to torchrun (multi-node)")
        p.add_argument("--rdzv-endpoint", metavar="ADDR", help="passed to torchrun (c10d rendezvous, HOST:PORT)")
        p.add_argument("--node-rank", type=common.count(0), metavar="K", help=argparse.SUPPRESS)
        common.add_display_options(p)

    def parse(self, argv: list[str]) -> argparse.Namespace:
        """Parse a run's arguments; what follows a script or module is the script's."""
        if "-m" in argv:  # as with python: what follows `-m MODULE` is the module's
            cut = argv.index("-m")
            if cut + 1 >= len(argv):
                raise UsageError("-m needs a MODULE (see `diagnose --help`)")
            args = self.parser().parse_args(argv[:cut])
            if args.target is not None:
                raise UsageError(f"give a TARGET or -m MODULE, not both ({args.target!r} and -m {argv[cut + 1]!r})")
            args.module, args.script_args = argv[cut + 1], argv[cut + 2 :]
            return args
        args = self.parser().parse_args(argv)
        rest = list(args.script_args or [])
        runs_a_script = (args.target or "").endswith(".py")
        if rest and rest[0] == "--":
            rest = rest[1:]
        if runs_a_script or not rest:
            args.script_args = rest
            return args
        # A trace, folder or function target: what follows it is diagnose's own options.
        before = argv[: argv.index(args.target)] if args.target in argv else argv
        again = self.parser().parse_args([*before, *rest, args.target])
        extra = [t for t in [again.target, *again.script_args] if t != args.target and not t.startswith("-")]
        if again.script_args:
            if len(extra) == 1 and not extra[0].endswith(".py"):
                raise UsageError(
                    f"two targets ({args.target} and {extra[0]}): to compare two runs, use "
                    f"`diagnose diff {args.target} {extra[0]}`"
                )
            raise UsageError(f"unexpected argument(s) after {args.target}: {' '.join(extra)} (see `diagnose --help`)")
        again.script_args = []
        return again

    def run(self, args: argparse.Namespace) -> int:
        """Diagnose the target."""
        options = RunOptions.of(args)
        config = common.load_config(options.set, options.fail_on)
        err = common.stderr_console()
        if options.target is None and options.module is None:
            raise UsageError("no TARGET given (try `diagnose demo`, or `diagnose --help`)")
        return Run(options, config, err).execute()


class Run:
    """One diagnosis of one target and the steps that make it.

        Run(options, config, err).execute()   # -> exit code

    `check` refuses what cannot work before anything is written; then one diagnosis step by the
    target's kind (`analyse` for a recording; `capture`, `sweep` or `torchrun` for a workload,
    `verify` after a single capture), `write` (the outputs, then `baseline`) and `show`."""

    def __init__(self, options: RunOptions, config, err: Console):
        from diagnose.front.target import resolve_target

        self.options, self.config, self.err = options, config, err
        module = options.module is not None
        self.target = resolve_target((options.module or "") if module else (options.target or ""), module=module)
        self.out = options.out or default_out(self.target)
        self.quiet_progress = options.quiet or options.output_format != "text"
        self.skip: frozenset = frozenset()

    @functools.cached_property
    def capture_options(self) -> CaptureOptions:
        """How the workload is run, parsed once from the options (UsageError for a bad --param)."""
        return self.options.capture_options()

    def execute(self) -> int:
        """Check, diagnose, write, show; the exit code."""
        from diagnose.commands.progress import ProgressLine

        self.check()
        folder = OutputFolder(self.out, inputs=self.inputs())
        if not self.target.runs:
            with folder:
                with ProgressLine(self.err, quiet=self.quiet_progress, first="reading the trace") as on_progress:
                    diagnosis = self.analyse(on_progress)
                written, compared = self.write(diagnosis, folder)
            return self.show(diagnosis, written, compared)
        folder.keep_on_error = True  # what the workload recorded is kept, whatever happens after
        with folder, ProgressLine(self.err, quiet=self.quiet_progress) as on_progress:
            diagnosis = self.workload_step()(folder, on_progress)
            written, compared = self.write(diagnosis, folder)
        return self.show(diagnosis, written, compared)

    def check(self) -> None:
        """Usage errors that need no work: flags the target cannot take, flags that need another."""
        o = self.options
        if o.baseline is not None:
            from diagnose.front.diff_command import check_baseline

            check_baseline(o.baseline)
        elif o.fail_on_regression is not None:
            raise UsageError("--fail-on-regression needs --baseline FOLDER (or use `diagnose diff BEFORE AFTER`)")
        for flag, given in (("--nnodes", o.nnodes), ("--rdzv-endpoint", o.rdzv_endpoint), ("--node-rank", o.node_rank)):
            if given is not None and not o.nproc_per_node:
                raise UsageError(f"{flag} is passed to torchrun: it needs --nproc-per-node N")
        if o.cluster and self.target.kind != "ranks":
            raise UsageError(f"--cluster needs a folder of rank traces; {self.target.text} is not one")
        if not self.target.runs:
            from diagnose.trace.source import check_present

            check_present(self.target.path)  # before the analysis imports pandas: a wrong path answers at once
            for flag, wanted in (
                ("--sweep", o.sweep),
                ("--param", o.param),
                ("--verify", o.verify),
                ("--nproc-per-node", o.nproc_per_node),
            ):
                if wanted:
                    raise UsageError(f"{flag} needs a workload to run (model.py:NAME); {self.target.path} is a trace")
            return
        from diagnose.front import pipeline

        _ = self.capture_options  # a bad --param is refused before anything runs
        pipeline.check_can_capture(o.python)
        if o.verify and o.sweep:
            raise UsageError("--verify and --sweep cannot be combined: verify one point (--param NAME=VALUE)")
        if o.verify_skip and not o.verify:
            raise UsageError("--verify-skip needs --verify")
        self.skip = variants(o.verify_skip)

    def inputs(self) -> list:
        """Every path the run reads: the output folder may not be, hold or lie inside any of them."""
        path = None if self.target.kind == "module" else self.target.path
        return [path, self.options.ncu_csv, self.options.baseline]

    def analyse(self, on_progress) -> Diagnosis:
        """The diagnosis of a recording (trace, capture, rank or sweep folder)."""
        from diagnose.front import pipeline

        o = self.options
        address = cluster_address(o.cluster) if self.target.kind == "ranks" else None
        with open_engine(address) if address else contextlib.nullcontext() as engine:
            if engine is not None and not o.quiet:
                self.err.print(
                    f"diagnose: ranks on the Dask cluster {address}; dashboard: {engine.dashboard_link}", soft_wrap=True
                )
            diagnosis = pipeline.analyse(
                self.target,
                self.config,
                ncu_csv=o.ncu_csv,
                on_progress=on_progress,
                max_bytes=o.max_trace_bytes,
                engine=engine,
            )
        if o.ncu:
            return diagnosis.noted(
                "--ncu: the target is a trace, not a workload: nothing to run under "
                "Nsight Compute (attach its results with --ncu-csv FILE)"
            )
        return diagnosis

    def workload_step(self):
        """The step that runs the workload: torchrun for --nproc-per-node, sweep for --sweep, else capture."""
        if self.options.nproc_per_node:
            return self.torchrun
        if self.options.sweep:
            return self.sweep
        return self.capture

    def capture(self, folder: OutputFolder, on_progress) -> Diagnosis:
        """One capture (with --ncu, --ncu-csv), then --verify; its diagnosis names the final folder."""
        from diagnose.front import pipeline

        o = self.options
        captured = pipeline.capture(
            self.target,
            folder.path,
            self.config,
            self.capture_options,
            on_progress=on_progress,
            ncu=o.ncu,
            ncu_csv=o.ncu_csv,
            ncu_timeout_s=o.ncu_timeout,
        )
        diagnosis = self.verify(captured, folder, on_progress) if o.verify else captured.diagnosis
        return pipeline.relocate(diagnosis, folder.path, folder.final)

    def verify(self, captured, folder: OutputFolder, on_progress) -> Diagnosis:
        """--verify: apply each fix that can be applied from outside the code, measure it; the Diagnosis with
        the outcome."""
        from diagnose.front import pipeline

        return pipeline.verify_fixes(
            captured.diagnosis,
            captured.trace,
            captured.spec,
            captured.meta,
            folder.path,
            timeout_s=self.options.timeout,
            python=self.options.python,
            on_progress=on_progress,
            skip=self.skip,
        )

    def sweep(self, folder: OutputFolder, on_progress) -> Diagnosis:
        """--sweep NAME=V1,...: one capture per value, then the sweep's diagnosis."""
        from diagnose.front import pipeline

        diagnosis = pipeline.sweep_and_analyse(
            self.target,
            folder.path,
            self.config,
            self.options.sweep or "",
            self.capture_options,
            on_progress=on_progress,
        )
        return pipeline.relocate(diagnosis, folder.path, folder.final)

    def torchrun(self, folder: OutputFolder, on_progress) -> Diagnosis:
        """--nproc-per-node N: every rank captured through torchrun, then the cross-rank diagnosis."""
        from diagnose.front import pipeline
        from diagnose.capture.distributed import Launch, check_launch

        o = self.options
        if o.sweep or o.ncu or o.ncu_csv:
            raise UsageError("--nproc-per-node cannot be combined with --sweep, --ncu or --ncu-csv")
        assert o.nproc_per_node is not None  # the step is taken only with --nproc-per-node
        launch = Launch(o.nproc_per_node, o.nnodes, o.rdzv_endpoint, o.node_rank)
        check_launch(launch)
        diagnosis = pipeline.capture_distributed_and_analyse(
            self.target, folder.path, self.config, self.capture_options, launch, on_progress=on_progress
        )
        return pipeline.relocate(diagnosis, folder.path, folder.final)

    def write(self, diagnosis: Diagnosis, folder: OutputFolder) -> tuple[dict[str, str], object]:
        """Write findings.json and the reports, then --baseline's diff; ({what: final path}, DiffReport or None)."""
        from diagnose.front import pipeline

        written = public(folder, pipeline.write_outputs(diagnosis, folder.path, html=not self.options.no_html))
        return written, self.baseline(diagnosis, folder, written)

    def baseline(self, diagnosis: Diagnosis, folder: OutputFolder, written: dict[str, str]):
        """--baseline FOLDER: the DiffReport of the baseline against this run, its files added to `written`."""
        if self.options.baseline is None:
            return None
        from diagnose.front.diff_command import compare_with_baseline

        result, files = compare_with_baseline(
            diagnosis,
            self.options.baseline,
            self.config,
            folder.path,
            fail_on_regression=self.options.fail_on_regression,
        )
        written.update(public(folder, files))
        return result

    def show(self, diagnosis: Diagnosis, written: dict[str, str], compared) -> int:
        """Print what stdout shows (the diff with --baseline), open the report, and say the exit code."""
        from diagnose import report
        from diagnose.report.richtext import colour

        o, fmt_name = self.options, self.options.output_format
        if self.quiet_progress:
            for note in diagnosis.warnings:
                if note.startswith(("--ncu", "ncu.", "--verify")):
                    print(f"diagnose: {plain(note)}", file=sys.stderr)
        if compared is not None:  # with --baseline, stdout shows the diff
            from diagnose.front.diff_command import exit_code, show

            show(compared, o, written)
            if diagnosis.workload_failed:
                return EXIT_WORKLOAD_FAILED
            if exit_code(compared) != EXIT_OK:
                return exit_code(compared)
        elif o.quiet and fmt_name == "text":
            print_out("\n".join(written.values()))
        else:
            tty = sys.stdout.isatty()
            width = common.terminal_width() if tty else None
            print_out(
                report.get(fmt_name).render(diagnosis, outputs=written, width=width, color=colour(tty)).rstrip("\n")
            )
        if o.open and "report" in written:
            open_report(Path(written["report"]))
        if diagnosis.workload_failed:
            print_workload_error(diagnosis.capture.error_or_empty)
            return EXIT_WORKLOAD_FAILED
        lost = diagnosis.details.failed_ranks or []
        if lost:  # the report is written without them; the exit code says a rank could not be read
            more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
            print(f"diagnose: error: {plain(lost[0].error)}{more}; the other ranks were analysed", file=sys.stderr)
            return EXIT_BAD_INPUT
        worst = diagnosis.worst_severity()
        if self.config.fail_on and worst and SEVERITIES.index(worst) <= SEVERITIES.index(self.config.fail_on):
            print(f"diagnose: {gate_line(diagnosis, self.config.fail_on)}", file=sys.stderr)
            return EXIT_FINDING
        return EXIT_OK


def gate_line(diagnosis: Diagnosis, level: str) -> str:
    """What tripped `--fail-on LEVEL`, in one line: the findings at or above it, and where an end of an uncertain
    estimated step would leave one under it ("launch-overhead quiet if the step is 14,532 µs ...")."""
    at = SEVERITIES.index(level)
    tripped = [f for f in diagnosis.findings if SEVERITIES.index(f.severity) <= at]
    line = f"--fail-on {level}: " + ", ".join(f"{f.rule} ({f.severity})" for f in tripped)

    def under(verdict: str) -> bool:
        return verdict not in SEVERITIES or SEVERITIES.index(verdict) > at

    unsure = [(f.rule, f.step_range.ends_text(under)) for f in tripped if f.step_range]
    said = "; ".join(f"{rule} {ends}" for rule, ends in unsure if ends)
    if said:
        line += f"; uncertain on this trace's estimated step: {said} (timing steps without the profiler settles it)"
    return line


def variants(text: str) -> frozenset:
    """The fix variants named in --verify-skip; UsageError for a name --verify does not know."""
    from diagnose.verify.plan import variant_names

    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - variant_names())
    if unknown:
        raise UsageError(
            f"--verify-skip: unknown variant(s) {', '.join(unknown)} (known: {', '.join(sorted(variant_names()))})"
        )
    return names


def public(folder: OutputFolder, written: dict[str, str]) -> dict[str, str]:
    """Where the files written into the staging folder will be once it is in place."""
    return {k: str(folder.public(v)) for k, v in written.items()}


def open_report(path: Path) -> None:
    """--open: the report in a browser; say so on stderr when no browser could be started."""
    try:
        opened = webbrowser.open(path.resolve().as_uri())
    except webbrowser.Error:
        opened = False
    if not opened:
        print(
            f"diagnose: --open: no browser found to open {plain(path)} (set BROWSER, or open the file yourself)",
            file=sys.stderr,
        )


def print_workload_error(error: CaptureError) -> None:
    """The failed workload's traceback, its last frames (file:line), on stderr: the terminal shows
    where it failed, not only findings.json."""
    tb = _user_frames((error.traceback or "").rstrip().splitlines())
    if not tb:
        return
    shown = tb[-TRACEBACK_LINES:]
    head = "the workload's traceback" + (f" (last {len(shown)} of {len(tb)} lines)" if len(tb) > len(shown) else "")
    print(f"diagnose: {head}:", file=sys.stderr)
    for line in shown:
        print(f"  {plain(line)}", file=sys.stderr)  # the workload's text: its escape sequences shown, not run


def _user_frames(lines: list[str]) -> list[str]:
    """A traceback without the frames of diagnose's own code and of frozen modules (runpy)."""
    here = str(Path(__file__).resolve().parent.parent)  # the diagnose package
    out, skipping = [], False
    for line in lines:
        if line.startswith("  File "):
            skipping = here in line or '"<frozen ' in line
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return out


COMMAND = RunCommand
