"""Untrusted text made safe for rich (text.py and diff_text.py share it), and whether to colour stdout."""

from __future__ import annotations

import os

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
