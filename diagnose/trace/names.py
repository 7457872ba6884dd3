"""Tests on a column of names, made once per distinct name.

A trace's name columns hold hundreds of thousands of rows but only hundreds of distinct names,
and pandas' string methods (`.str.contains`, `.str.startswith`, `.str.match`) call Python once per
row. These helpers call the test once per distinct value and spread the answer with `isin`.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pandas as pd


def name_test(names: pd.Series, test: Callable[[str], object]) -> np.ndarray:
    """Whether `test(name)` is true, for each row of `names` (non-strings never pass)."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    hits = [n for n in pd.unique(names) if isinstance(n, str) and test(n)]
    return names.isin(hits).to_numpy(bool) if hits else np.zeros(len(names), dtype=bool)


def name_search(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """`pattern.search` over the names: `.str.contains(pattern)`, as a numpy mask."""
    return name_test(names, pattern.search)


def name_match(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """`pattern.match` over the names: `.str.match(pattern)`, as a numpy mask."""
    return name_test(names, pattern.match)


def name_starts(names: pd.Series, prefix: str | tuple[str, ...]) -> np.ndarray:
    """`str.startswith(prefix)` over the names, as a numpy mask."""
    return name_test(names, lambda n: n.startswith(prefix))


def name_has(names: pd.Series, text: str) -> np.ndarray:
    """Whether each name holds `text`: `.str.contains(text, regex=False)`, as a numpy mask."""
    return name_test(names, lambda n: text in n)
