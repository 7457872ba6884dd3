"""How numbers and names are written for people, the same in every sentence, table and chart.

The verdict and the evidence sentences (model layer) and every renderer use these, so they live
at the bottom of the layers. Untrusted text (kernel and op names from a trace, paths, messages
that quote them) goes through `plain` for a terminal or a log line: control characters (ANSI
escapes, newlines, bidirectional overrides) are shown escaped rather than executed, so a kernel
named "x\nVerdict: HEALTHY" cannot start a line of its own. `markdown` makes it inert in
Markdown posted where people read it (a pull-request comment, a CI job summary): no markup, no
HTML, no @mention that pings anyone, no #123 reference, no link made of a bare URL.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Kernel names are untrusted and can be megabytes long: look at this much of one, at most.
MAX_NAME_CHARS = 2000
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|\b[A-Za-z_]\w*)::")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~&])")  # & too: an entity (&#64;) would decode to markup
# What GitHub links without markup: @user and @org/team mentions, #123 references, e-mail addresses
# (user@host) and the extended autolinks (http://, https://, ftp://, www.). A zero-width space after
# the @ or #, inside the scheme's "://" or after "www" breaks each pattern and prints nothing.
ZWSP = "\u200b"
_LINKED = re.compile(r"(?<=[@#])|(?i:(?<=https:)|(?<=http:)|(?<=ftp:))(?=//)|(?i:(?<=\bwww))(?=\.)")


def fmt(value: Any) -> str:
    """Compact human formatting for evidence numbers: 2,717 · 88.3 · 2.24 · 0.0786."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = abs(value)
    if float(value).is_integer() and magnitude < 1e15:
        return f"{int(value):,}"
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def is_number(value) -> bool:
    """A real int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def duration(us) -> str:
    """A µs value for people: "232 µs", "2,717 µs", "110.6 ms"; "—" when unknown."""
    if not is_number(us):
        return "—"
    if abs(us) >= 100_000:
        return f"{us / 1000:,.1f} ms"
    return f"{fmt(us)} µs"


def percent(fraction) -> str:
    """A fraction as a percentage: 0.0786 -> "7.9 %"."""
    return f"{fmt(100 * fraction)} %" if is_number(fraction) else "—"


def plural(count: int | float, noun: str, many: str | None = None) -> str:
    """ "1 step", "4 steps" (`many` for irregular plurals)."""
    word = noun if count == 1 else (many or noun + "s")
    return f"{fmt(count)} {word}"


def column_label(key: str) -> str:
    """A readable column header from a data key: "idle_before_us_per_step" -> "idle before µs per step"."""
    return " ".join("µs" if word == "us" else word for word in str(key).split("_"))


def short_name(name, limit: int = 48) -> str:
    """A kernel or op name short enough for a label: C++ qualifiers and argument lists dropped, then cut.

    "void at::native::(anonymous namespace)::layer_norm_kernel<c10::Half>(int, float)" becomes
    "layer_norm_kernel<Half>". Linear in the name's length (names come from untrusted traces).
    """
    text = " ".join(str(name)[:MAX_NAME_CHARS].split())
    if len(text) <= limit:
        return text
    if "::" in text or text.startswith("void "):
        text = _QUALIFIER.sub("", text.removeprefix("void "))
        text = _drop_argument_list(text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _drop_argument_list(signature: str) -> str:
    if not signature.endswith(")"):
        return signature
    depth = 0
    for i in range(len(signature) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(signature[i], 0)
        if depth == 0:
            starts_a_call = i > 0 and not signature[i - 1].isspace()
            return signature[:i] if starts_a_call else signature
    return signature


def plain(text) -> str:
    """`text` safe to print on a terminal or in one line of a log: control characters (ANSI escapes,
    newlines, tabs, bidirectional overrides) shown as visible escapes (\\x1b, \\n, \\u202e)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def markdown(text) -> str:
    """Untrusted text made inert in GitHub-flavoured Markdown, also inside a table cell: one line,
    control characters escaped, every markup character backslash-escaped (no emphasis, links,
    HTML tags or entities), and mentions, references and bare URLs broken (module docstring)."""
    escaped = _MD_SPECIAL.sub(r"\\\1", " ".join(plain(text).split()))
    return _LINKED.sub(ZWSP, escaped)
