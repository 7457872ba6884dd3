"""Byte quantities as people read them: decimal gigabytes (10.96 GB), GiB where a limit was set in GiB."""

from __future__ import annotations

from typing import overload

GB = 1e9
GIB = 1024**3


def gb(value: float | None, digits: int = 2) -> str:
    """'10.96 GB' (decimal, as nvidia-smi and datasheets count); MB below 1 GB; '?' for None."""
    if value is None:
        return "?"
    if abs(value) < 1e9:
        return f"{value / 1e6:,.{max(digits - 1, 0)}f} MB"
    return f"{value / GB:,.{digits}f} GB"


@overload
def in_gb(value: float, digits: int = 3) -> float: ...
@overload
def in_gb(value: None, digits: int = 3) -> None: ...
@overload
def in_gb(value: float | None, digits: int = 3) -> float | None: ...


def in_gb(value: float | None, digits: int = 3) -> float | None:
    """Bytes as a rounded number of decimal GB, for evidence values."""
    return None if value is None else round(value / GB, digits)


def in_size(value: float) -> tuple[float, str]:
    """Bytes as (number, unit) for evidence: GB from 1 GB, MB below it, so a small part never reads 0 GB."""
    if abs(value) >= GB:
        return round(value / GB, 3), "GB"
    return round(value / 1e6, 1), "MB"
