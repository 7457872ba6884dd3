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

import re

# Kernel names are untrusted and can be megabytes long: look at this much of one, at most.
MAX_NAME_CHARS = 2000
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|\b[A-Za-z_]\w*)::")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_IN_DOCUMENT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~&])")  # & too: an entity (&#64;) would decode to markup
# What GitHub links without markup: @user and @org/team mentions, #123 references, e-mail addresses
# (user@host) and the extended autolinks (http://, https://, ftp://, www.). A zero-width space after
# the @ or #, inside the scheme's "://" or after "www" breaks each pattern and prints nothing.
ZWSP = "\u200b"
_LINKED = re.compile(r"(?<=[@#])|(?i:(?<=https:)|(?<=http:)|(?<=ftp:))(?=//)|(?i:(?<=\bwww))(?=\.)")


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


def json_inert(text: str) -> str:
    """JSON text (as json.dumps writes it, ensure_ascii=False) with every control and bidirectional
    character left raw (DEL, C1 such as U+009B CSI, U+2028, the overrides) written as a \\u escape:
    the same document, with no byte a terminal would act on. Such characters occur only inside strings."""
    return _IN_DOCUMENT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # JSON's own line breaks stay


def document_inert(text: str) -> str:
    """A rendered document (HTML) with every control and bidirectional character but tab, newline and
    carriage return shown as its visible escape (\\x1b, \\u202e), as `plain` shows them: the
    template's own line breaks stay, nothing from a trace reaches a terminal or a browser raw."""
    return _IN_DOCUMENT.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def markdown(text) -> str:
    """Untrusted text made inert in GitHub-flavoured Markdown, also inside a table cell: one line,
    control characters escaped, every markup character backslash-escaped (no emphasis, links,
    HTML tags or entities), and mentions, references and bare URLs broken (module docstring)."""
    escaped = _MD_SPECIAL.sub(r"\\\1", " ".join(plain(text).split()))
    return _LINKED.sub(ZWSP, escaped)
