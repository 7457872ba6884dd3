"""Tests on a column of names, made once per distinct name.

A trace's name columns hold hundreds of thousands of rows but only hundreds of distinct names,
and pandas' string methods (`.str.contains`, `.str.startswith`, `.str.match`) call Python once per
row. These helpers call the test once per distinct value and spread the answer with `isin`.
"""

from __future__ import annotations

import re
import weakref
from typing import Callable

import numpy as np
import pandas as pd


FACTORIZE_ROWS = 10_000  # columns this long are factorized once and their codes kept while they live
_FACTORS: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id of a column's array → (codes, distinct names)


def name_test(names: pd.Series, test: Callable[[str], object]) -> np.ndarray:
    """Whether `test(name)` is true, for each row of `names` (non-strings never pass)."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    if len(names) >= FACTORIZE_ROWS:
        codes, distinct = _factorized(names)
        passed = np.fromiter((isinstance(n, str) and bool(test(n)) for n in distinct), bool, len(distinct))
        return np.append(passed, False)[codes]  # code -1, a missing name, reads the False at the end
    hits = [n for n in pd.unique(names) if isinstance(n, str) and test(n)]
    return names.isin(hits).to_numpy(bool) if hits else np.zeros(len(names), dtype=bool)


def _factorized(names: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct names) of a long column, made once per array: a trace's frames are read-only once
    loaded, and a rule tests the same name column many times (ops, runtime calls, kernels). The entry goes
    when the array does, before its id can be given to another object."""
    array = names.array
    key = id(array)
    hit = _FACTORS.get(key)
    if hit is None:
        codes, distinct = pd.factorize(array, use_na_sentinel=True)
        hit = (codes, np.asarray(distinct, dtype=object))
        try:
            weakref.finalize(array, _FACTORS.pop, key, None)
        except TypeError:  # an array that takes no weak reference is not kept
            return hit
        _FACTORS[key] = hit
    return hit


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
