"""Untrusted text made safe for Markdown (markdown.py and diff_markdown.py share it)."""
from __future__ import annotations

import re

from diagnose.format import plain

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def md(text) -> str:
    """Untrusted text made inert in Markdown (and in a table cell): specials escaped, one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(plain(text).split()))


def link(path: str) -> str:
    """A file path usable as a Markdown link target (spaces and parentheses encoded)."""
    return path.replace(" ", "%20").replace(")", "%29").replace("(", "%28")
