"""Untrusted text made safe for rich (text.py and diff_text.py share it)."""
from __future__ import annotations

from rich.markup import escape

from diagnose.format import plain

UNWRAPPED = 100_000  # piped output: one line stays one line


def safe(value) -> str:
    """Untrusted text ready for rich: control characters escaped, markup inert."""
    return escape(plain(value))
