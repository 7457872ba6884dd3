"""Typed data made from plain rows: the conversion every section builder and the model share.

`typed(data, cls)` turns plain data (dicts and lists, numpy numbers among them, as pandas computes
them) into the msgspec Struct `cls`, checked; `plain` is the hook that writes numpy numbers as Python
ones. `Row` is a Struct shown as a table row, `Number` a value that may be an int or a float (an int
stays an int in findings.json).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

Number = int | float


class Row(msgspec.Struct, frozen=True):
    """A frozen Struct shown as a table row: `columns()` is its flat form, unset columns left out."""

    def columns(self) -> dict[str, Any]:
        """The row as {column: value}, in field order, without the columns this row does not have."""
        return {f: v for f in self.__struct_fields__ if (v := getattr(self, f)) is not UNSET}


def typed(data, cls):
    """`data` (plain dicts, numpy numbers among them) converted to the Struct `cls`, checked; keys become
    strings, as in JSON."""
    return msgspec.convert(msgspec.to_builtins(data, enc_hook=plain, str_keys=True), cls)


def plain(value):
    """numpy scalars and arrays (in details and offenders) as plain numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise NotImplementedError(f"cannot encode {type(value).__name__} in findings.json")
