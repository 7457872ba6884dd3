"""Untrusted text made safe for Markdown (markdown.py and diff_markdown.py share it): `md` is
format.markdown (escaping, mentions, references and bare URLs made inert), `link` a path as a link."""

from __future__ import annotations

from diagnose.base.format import markdown as md

__all__ = ["md", "link"]


def link(path: str) -> str:
    """A file path usable as a Markdown link target (spaces, parentheses and angle brackets encoded)."""
    return (
        path.replace("%", "%25")
        .replace(" ", "%20")
        .replace(")", "%29")
        .replace("(", "%28")
        .replace("<", "%3C")
        .replace(">", "%3E")
    )
