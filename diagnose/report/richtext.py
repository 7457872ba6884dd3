"""What text.py and diff_text.py share: untrusted text made safe for rich, the console they print to, and
whether to colour stdout."""

from __future__ import annotations

import io
import os

from rich.console import Console
from rich.markup import escape

from diagnose.base.format import plain

UNWRAPPED = 100_000  # piped output: one line stays one line


def safe(value) -> str:
    """Untrusted text ready for rich: control characters escaped, markup inert."""
    return escape(plain(value))


def colour(tty: bool) -> bool:
    """Whether stdout gets ANSI colours: as rich decides, NO_COLOR (set and not empty) turns them off,
    FORCE_COLOR turns them on without a terminal; otherwise only on a terminal."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return tty


def string_console(width: int | None, color: bool) -> tuple[Console, io.StringIO]:
    """A rich console printing into a string buffer: `width` columns (None: no wrapping, one line stays one
    line), ANSI colours with `color`; (console, buffer)."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width or UNWRAPPED,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=width is None,
        emoji=False,
    )
    return console, buffer
