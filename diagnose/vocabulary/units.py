"""Numbers and units for people: counts, durations and percentages, written one way everywhere.

The verdict and the evidence sentences (model layer), the rules and every renderer use these:
`fmt` for a bare number (2,717 · 88.3 · 2.24 · 0.0786), `duration` for µs values ("232 µs",
"110.6 ms"), `percent` for a share ("88.3 %", "8 %", "< 0.1 %"), `plural` for a count of things.
A share is a fraction everywhere in memory (0.883); only `percent` writes it for people, and
`percent_number` / `fraction_of` are the one conversion of findings.json's evidence (diagnose/model/findings.py).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any


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


def percent(fraction, digits: int = 1, signed: bool = False) -> str:
    """A fraction as a percentage, the one way every sentence, table and chart writes one.

    One rule: `digits` decimals (one unless asked), a trailing ".0" dropped, a thousands
    separator, a space before the sign; a share that is not zero but rounds to it is "< 0.1 %"
    (with one digit), so a small share is never shown as none; `signed` writes a change's sign
    ("+3.2 %", "-0.4 %"). 0.883 -> "88.3 %", 0.0786 -> "7.9 %", 0.08 -> "8 %", 1 -> "100 %",
    0.0004 -> "< 0.1 %", 12.5 -> "1,250 %"; "—" when unknown.
    """
    if not is_number(fraction) or not math.isfinite(fraction):
        return "—"
    value = 100 * fraction
    text = f"{value:,.{digits}f}"
    if digits and "." in text:
        text = text.rstrip("0").rstrip(".")
    if text in ("0", "-0") and value != 0:
        smallest = f"{10**-digits:.{digits}f}" if digits else "1"
        return f"< {smallest} %" if value > 0 else f"> -{smallest} %"
    text = text.removeprefix("-") if text == "-0" else text
    return f"+{text} %" if signed and value > 0 else f"{text} %"


def percent_value(fraction: float, digits: int = 1) -> float:
    """The number a percentage shows, as data: 0.7123 -> 71.2 (an offender column that is a percent)."""
    return round(fraction * 100, digits)


def shown_share(fraction: float, digits: int = 1) -> float:
    """A share kept to what its percentage shows (`digits` decimals of the percent), still a fraction:
    0.71234 -> 0.712, 0.0004 -> 0.0. An evidence share holds this, so the report of an analysis and
    the report of its findings.json read back show the same."""
    return fraction_of(round(fraction * 100, digits)) if math.isfinite(fraction) else fraction


def percent_number(fraction: float) -> float:
    """A fraction as the number of its percentage, as data (findings.json writes a share so): the decimal
    point moved two places, so 0.712 -> 71.2, 0.2 -> 20.0, 0.07 -> 7.0 (not 0.07 × 100 = 7.000000000000001)."""
    return float(Decimal(repr(float(fraction))).scaleb(2))


def fraction_of(percent_number: float) -> float:
    """The fraction a percentage's number stands for, the inverse of `percent_number` (and how a tool's
    percentages, such as Nsight Compute's, are read): 71.2 -> 0.712 (not 71.2 / 100 = 0.7120000000000001)."""
    return float(Decimal(repr(float(percent_number))).scaleb(-2))


def plural(count: int | float, noun: str, many: str | None = None) -> str:
    """ "1 step", "4 steps" (`many` for irregular plurals)."""
    word = noun if count == 1 else (many or noun + "s")
    return f"{fmt(count)} {word}"
