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
from diagnose.base.errors import DiagnoseError
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    from diagnose.capture.guard import adopt_orphans

    command_line = argv is None
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
