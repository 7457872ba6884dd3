"""What the subcommands share: the Command base class, the parser, option groups, argument types and
the thresholds (writing to stdout is diagnose/front/stdout.py).

The option groups are added in the order `diagnose run --help` lists them; a subcommand takes the
groups it needs (demo: all but the target, --verify, --baseline and torchrun's).
"""

from __future__ import annotations

import argparse
import collections.abc
import difflib
import functools
import math
import os
import sys
from pathlib import Path
from typing import Callable, ClassVar, Iterable

from rich.console import Console

from diagnose.base.errors import UsageError
from diagnose.model.findings import SEVERITIES
from diagnose.base.version import __version__

HEADER = """\
Find what limits a PyTorch GPU workload and which fix to apply.

commands:
"""

EPILOG = """\
exit codes:
  0  diagnosis written
  1  a finding at or above --fail-on SEVERITY, or --fail-on-regression tripped (CI audits)
  2  bad usage, unreadable input, or what the system refused (one line on stderr)
  3  the workload failed (exception, out of memory, timeout, crash); the report is still written
  130/143  Ctrl-C / SIGTERM: the workload's processes are ended first

thresholds: --set RULE.NAME=VALUE, or in pyproject.toml under [tool.diagnose.thresholds]
"""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line and exit code 2 through UsageError; a misspelt option
    gets the nearest one."""

    def error(self, message: str):
        """Raise the parse error as a UsageError (one line, exit 2), naming the nearest option to a misspelt one."""
        if message.startswith("unrecognized arguments:"):
            unknown = [t.split("=", 1)[0] for t in message.split(":", 1)[1].split() if t.startswith("-")]
            for token in unknown:
                close = difflib.get_close_matches(
                    token, [o for o in self._option_string_actions if o.startswith("--")], n=1, cutoff=0.6
                )
                if close:
                    raise UsageError(f"unknown option {token!r}; did you mean {close[0]!r}? (see `diagnose --help`)")
        raise UsageError(f"{message} (see `diagnose --help`)")


class Command:
    """One subcommand of `diagnose`: its name, its lines in `diagnose --help`, its arguments and what it does.

    A subclass sets the class attributes and defines `add_arguments` and `run`; `parse` may be
    replaced where argparse alone cannot split the command line (`run`: a script's own arguments).
    `overview` is the text of every command's `overview` (the registry makes it), which `--help`
    shows unless the command has a `description` of its own."""

    name: ClassVar[str]
    order: ClassVar[int]  # the place of its lines in `diagnose --help`, lowest first
    usage: ClassVar[str]
    summary: ClassVar[str]  # its lines under "commands:" in `diagnose --help`, indented two spaces
    description: ClassVar[str | None] = None
    epilog: ClassVar[str] = EPILOG

    def __init__(self, overview: str = ""):
        self.overview = overview

    def parser(self) -> argparse.ArgumentParser:
        """This subcommand's parser (its --help fits a screen)."""
        p = Parser(
            prog="diagnose",
            usage=self.usage,
            description=self.description or self.overview,
            epilog=self.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.add_arguments(p)
        return p

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this subcommand's arguments and options to `parser`."""
        raise NotImplementedError

    def parse(self, argv: list[str]) -> argparse.Namespace:
        """The parsed arguments (UsageError for bad ones)."""
        return self.parser().parse_args(argv)

    def run(self, args: argparse.Namespace) -> int:
        """Do the command; returns the exit code (errors are raised as DiagnoseError)."""
        raise NotImplementedError


def overview(commands: list[type[Command]]) -> str:
    """The description `diagnose --help` shows: the header, then each command's summary in order."""
    return HEADER + "".join(c.summary for c in sorted(commands, key=lambda c: c.order))


def add_output_options(p: argparse.ArgumentParser) -> None:
    """Where the outputs go, what stdout shows, when to fail, thresholds."""
    p.add_argument("-o", "--out", type=Path, help="output folder (default: diagnose-out/NAME)")
    p.add_argument(
        "--format",
        choices=Lazily(formats),
        metavar="FORMAT",
        help="what to print on stdout: %(choices)s (default: text)",
    )
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--fail-on", choices=SEVERITIES, help="exit 1 when a finding is at least this severe")
    p.add_argument("--set", action="append", default=[], metavar="RULE.NAME=VALUE", help="override a threshold")


def add_capture_options(p: argparse.ArgumentParser) -> None:
    """How a workload is run (CaptureOptions), Nsight Compute, and --sweep."""
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for NAME(**params) (function mode)",
    )
    p.add_argument("--warmup", type=count(0), default=3, metavar="N", help="warm-up steps before profiling (default 3)")
    p.add_argument("--steps", type=count(1), default=5, metavar="N", help="profiled steps (default 5)")
    p.add_argument(
        "--timed-steps", type=count(0), default=20, metavar="N", help="steps timed without the profiler (default 20)"
    )
    p.add_argument(
        "--timeout", type=seconds, default=900, metavar="S", help="seconds before the workload is stopped (default 900)"
    )
    p.add_argument("--python", metavar="PATH", help="the Python that runs the workload")
    p.add_argument("--ncu", action="store_true", help="then measure one step under Nsight Compute")
    p.add_argument("--ncu-csv", type=Path, metavar="FILE", help="attach Nsight Compute results (CSV or .ncu-rep)")
    p.add_argument(
        "--ncu-timeout", type=seconds, default=600, metavar="S", help="limit of the Nsight Compute pass (default 600)"
    )
    p.add_argument("--sweep", metavar="NAME=V1,V2,...", help="one capture per value of a parameter")


def add_trace_options(p: argparse.ArgumentParser) -> None:
    """How much of a trace is read."""
    p.add_argument("--max-trace-bytes", type=count(1), metavar="N", help="refuse traces that inflate past N bytes")


def add_display_options(p: argparse.ArgumentParser) -> None:
    """What is written and shown at the end, and --version."""
    p.add_argument("--no-html", action="store_true", help="skip report.html")
    p.add_argument("--open", action="store_true", help="open report.html in a browser when done")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary, only the output paths")
    p.add_argument("--version", action="version", version=f"diagnose {__version__}")


def add_gate_option(p: argparse.ArgumentParser, shown: bool = True) -> None:
    """`--fail-on-regression PCT` (diff, and run with --baseline; `shown` False keeps it out of --help)."""
    p.add_argument(
        "--fail-on-regression",
        type=percent,
        metavar="PCT",
        help="exit 1 when slower than BEFORE by > PCT %% (interval excluding 0)" if shown else argparse.SUPPRESS,
    )


class Lazily(collections.abc.Sequence):
    """A list made on first use, for argparse `choices` from a registry: argparse reads choices only to check a
    value given or to write help, so building a parser imports nothing (the renderers import pandas; a
    command line that never analyses, `--version` or a path that is not there, answers without it)."""

    def __init__(self, make: Callable[[], Iterable[str]]):
        self._make = make

    @functools.cached_property
    def _items(self) -> list[str]:
        return list(self._make())

    def __getitem__(self, index):
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)


def formats() -> list[str]:
    """The names `--format` takes: every renderer's."""
    from diagnose import report

    return list(report.renderers())


def count(least: int):
    """An argparse type: a whole number of at least `least`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """A time limit: a finite number of seconds above 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def percent(text: str) -> float:
    """A percentage ≥ 0 (argparse type)."""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a percentage ≥ 0, got {text!r}")
    return value


def load_config(settings: list[str], fail_on: str | None):
    """The thresholds and --fail-on: `--set` over pyproject.toml's [tool.diagnose], checked against the rules."""
    from diagnose.model.config import load_config as load

    def known() -> dict:
        from diagnose.rulebook.engine import known_thresholds
        from diagnose.rules import ALL_RULES

        return known_thresholds(ALL_RULES)

    return load(settings, fail_on, known=known)


def stderr_console() -> Console:
    """The console of progress lines and notes (stderr, no highlighting)."""
    return Console(stderr=True, highlight=False)


def terminal_width() -> int:
    """The terminal's width in columns (100 when stdout is no terminal after all)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        return 100
