"""The `diagnose` entry point and its subcommands, one module and one Command class each.

`main` (the console script) picks the subcommand, parses, runs it, and maps errors and signals to
exit codes:

    diagnose [run] TARGET [options] [SCRIPT ARGS...]   (`run` may be left out)
    diagnose run -m MODULE [options] [ARGS...]
    diagnose demo [options]
    diagnose rules

As with pyinstrument, everything after a script (or `-m MODULE`) belongs to the script, so
diagnose's own options go before it; `--` still separates them explicitly.

    run.py     diagnose [run] TARGET ...   the default: a workload or a recording (RunOptions, Run)
    demo.py    diagnose demo               the bundled workload, or its bundled capture
    rules.py   diagnose rules [RULE]
    diff.py    diagnose diff BEFORE AFTER
    schema.py  diagnose schema [FILE ...]
    probe.py   diagnose probe              this machine's GPU measured beside its datasheet
    common.py  the Command base class, the parser, shared option groups and types
    progress.py  the progress line on stderr

What the commands run (the pipeline from a path to a Diagnosis, targets, output folders, the
diff and probe services, stdout) is diagnose/front, the application services below them.

A subcommand is a module of this package that binds `COMMAND` to a `common.Command` subclass;
the registry below finds every such module, so adding one (`diagnose census`, say) is adding one
module, diagnose/commands/census.py:

    from diagnose.commands import common

    class CensusCommand(common.Command):
        name = "census"
        order = 70                 # its place in `diagnose --help`, after probe's 60
        usage = "diagnose census [options]"
        summary = "  diagnose census         the models a workload holds\\n"   # "" lists it nowhere

        def add_arguments(self, p): ...
        def run(self, args) -> int: ...   # the exit code; raise DiagnoseError for an error

    COMMAND = CensusCommand

`diagnose census ...` then reaches it, `diagnose --help` lists its summary, `diagnose censsu` is
answered with "did you mean `diagnose census`?", and errors, signals and exit codes are handled
by the entry point (`main`, below) as for every other command. Keep the module's top-level
imports light (the standard library, `common`): every command line imports every command.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
import signal
import sys
import threading
from pathlib import Path

from diagnose.commands.common import Command, overview
from diagnose.base import os_errors
from diagnose.base.errors import EXIT_BAD_INPUT, DiagnoseError, UsageError
from diagnose.base.format import plain

DEFAULT = "run"  # the command of a command line that names none (`diagnose model.py`)


@functools.cache
def commands() -> dict[str, Command]:
    """Every subcommand by name, in the order of `diagnose --help`."""
    found: list[type[Command]] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        command = getattr(module, "COMMAND", None)
        if command is not None:
            found.append(command)
    text = overview(found)
    return {c.name: c(text) for c in sorted(found, key=lambda c: c.order)}


def names() -> tuple[str, ...]:
    """The subcommands' names."""
    return tuple(commands())


def split(argv: list[str]) -> tuple[Command, list[str]]:
    """The command a command line names and the arguments that are its own: `diagnose NAME ...`
    names NAME; anything else is `run` (UsageError for a first word that reads as a misspelt
    command rather than a target)."""
    if argv and argv[0] in commands():
        return commands()[argv[0]], argv[1:]
    if argv:
        _check_not_a_misspelt_command(argv)
    return commands()[DEFAULT], argv


def _check_not_a_misspelt_command(argv: list[str]) -> None:
    """A usage error when the first word is no file or folder but close to a subcommand (`diagnose dif
    A B`), rather than reading it as a target."""
    word = argv[0]
    if word.startswith("-") or "." in word or "/" in word or Path(word).exists():
        return
    close = difflib.get_close_matches(word, names(), n=1, cutoff=0.6)
    if close:
        rest = " ".join(argv[1:])
        raise UsageError(f"unknown command {word!r}; did you mean `diagnose {close[0]}{' ' + rest if rest else ''}`?")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to diagnose: it unwinds like Ctrl-C, so the workload's process group is ended
    and the output folder's staging is cleaned on the way out."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def _on_terminate(signum, frame):
    raise Terminated(signum)


def _say(line: str) -> None:
    """`line` on stderr, if stderr can still take it (it may be full or closed: the exit code still tells)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    from diagnose.capture.guard import adopt_orphans

    command_line = argv is None
    if command_line:
        os_errors.keep_std_streams()
    os_errors.ascii_spellings(sys.stdout, sys.stderr)
    argv = list(sys.argv[1:] if argv is None else argv)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _on_terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
        if command_line:  # the command itself, not a caller's process that imported main()
            adopt_orphans()
    try:
        command, own = split(argv)
        return command.run(command.parse(own))
    except DiagnoseError as exc:
        _say(f"diagnose: error: {plain(exc)}")  # one line, whatever it quotes
        return exc.exit_code
    except OSError as exc:  # the machine refused: a full disk, a permission, a vanished folder (os_errors)
        _say(f"diagnose: error: {plain(os_errors.describe(exc))}")
        return EXIT_BAD_INPUT
    except UnicodeEncodeError as exc:  # a stream os_errors.ascii_spellings could not reconfigure
        _say(
            f"diagnose: error: the output holds {exc.object[exc.start : exc.end]!a}, which {exc.encoding} cannot "
            "encode: set PYTHONIOENCODING=utf-8"
        )
        return EXIT_BAD_INPUT
    except Terminated as exc:
        _say("diagnose: terminated" if exc.signum == signal.SIGTERM else "diagnose: hung up")
        return 128 + exc.signum
    except KeyboardInterrupt:
        _say("diagnose: interrupted")
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
