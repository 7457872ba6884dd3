"""The `diagnose` entry point: pick the subcommand, parse, run it, and map errors and signals to exit codes.

    diagnose [run] TARGET [options] [SCRIPT ARGS...]   (`run` may be left out)
    diagnose run -m MODULE [options] [ARGS...]
    diagnose demo [options]
    diagnose rules

As with pyinstrument, everything after a script (or `-m MODULE`) belongs to the script, so
diagnose's own options go before it; `--` still separates them explicitly. The subcommands are
the modules of diagnose/commands (its docstring says how to add one).
"""

from __future__ import annotations

import signal
import sys
import threading

from diagnose import commands
from diagnose.commands.progress import CountedOf
from diagnose.commands.run import print_workload_error as _print_workload_error
from diagnose.base import os_errors
from diagnose.base.errors import EXIT_BAD_INPUT, DiagnoseError
from diagnose.base.format import plain

__all__ = ["main", "Terminated", "CountedOf", "_print_workload_error"]


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
        command, own = commands.split(argv)
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
