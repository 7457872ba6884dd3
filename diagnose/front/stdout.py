"""Writing to stdout: a reader that went away (`diagnose ... | head`) ends the output quietly, and
any other refusal is an OSError naming standard output."""

from __future__ import annotations

import os
import sys

from rich.console import Console

from diagnose.base import os_errors


def stdout_gone() -> None:
    """The reader of stdout stopped early (`diagnose ... | head`), or stdout refused a write: drop the
    rest (the reader's going is no error; a refused write is raised by print_out)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # no file descriptor behind it (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def print_out(text: str) -> None:
    """Print `text` on stdout; a reader that went away ends the output quietly, and any other refusal
    (/dev/full, a file-size limit) is an OSError naming standard output (the entry point,
    diagnose/commands/__init__.py, says it in one line)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        stdout_gone()
    except OSError as exc:
        stdout_gone()  # so that the buffered rest is not written again at exit
        raise os_errors.on_stdout(exc) from None


class Stdout(Console):
    """A console on stdout where a closed pipe ends the output, not the run (rich would exit 1)."""

    def on_broken_pipe(self) -> None:
        """Drop the rest of the output."""
        stdout_gone()
