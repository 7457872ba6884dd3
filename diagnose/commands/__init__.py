"""The subcommands of `diagnose`, one module and one Command class each.

    run.py     diagnose [run] TARGET ...   the default: a workload or a recording (RunOptions, Run)
    demo.py    diagnose demo               the bundled workload, or its bundled capture
    rules.py   diagnose rules [RULE]
    diff.py    diagnose diff BEFORE AFTER
    schema.py  diagnose schema [FILE ...]
    probe.py   diagnose probe              this machine's GPU measured beside its datasheet
    common.py  the Command base class, the parser, shared option groups and types, stdout
    progress.py  the progress line on stderr

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
by the entry point (diagnose/front/cli.py) as for every other command. Keep the module's top-level
imports light (the standard library, `common`): every command line imports every command.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from pathlib import Path

from diagnose.commands.common import Command, overview
from diagnose.base.errors import UsageError

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
