"""How numbers and names are written for people, the same in every sentence, table and chart.

The verdict and the evidence sentences (model layer) and every renderer use these, so they live
at the bottom of the layers. `plain` makes untrusted text (kernel and op names from a trace) safe
for a terminal: control characters are shown escaped rather than executed.
"""
from __future__ import annotations

import math
import re
from typing import Any

# Kernel names are untrusted and can be megabytes long: look at this much of one, at most.
MAX_NAME_CHARS = 2000
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|\b[A-Za-z_]\w*)::")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


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
    """"1 step", "4 steps" (`many` for irregular plurals)."""
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
    """`text` safe to print on a terminal: control characters (ANSI escapes among them) shown as \\xNN."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))
