"""Name tests over long columns (diagnose/trace/names.py): the factorized path gives the same rows as
pandas' own string methods, missing names never pass, and a column's codes go when the column does."""

from __future__ import annotations

import gc
import re

import numpy as np
import pandas as pd

from diagnose.trace import names
from diagnose.trace.names import name_has, name_match, name_search, name_starts


def _column(n: int = 30_000) -> pd.Series:
    rng = np.random.default_rng(0)
    pool = np.array(
        ["aten::mm", "aten::add_", "cudaLaunchKernel", "ProfilerStep#3", "triton_poi_fused_0"], dtype=object
    )
    values = pool[rng.integers(0, len(pool), n)]
    values[::97] = None  # missing names
    return pd.Series(values, dtype="str")


def test_the_factorized_path_equals_pandas_string_methods():
    col = _column()
    assert len(col) >= names.FACTORIZE_ROWS
    pattern = re.compile(r"^aten::(?:mm|add_)$")
    expected = {
        "search": col.str.contains(pattern, na=False).to_numpy(bool),
        "match": col.str.match(pattern, na=False).to_numpy(bool),
        "starts": col.str.startswith("triton_", na=False).to_numpy(bool),
        "has": col.str.contains("Launch", regex=False, na=False).to_numpy(bool),
    }
    got = {
        "search": name_search(col, pattern),
        "match": name_match(col, pattern),
        "starts": name_starts(col, "triton_"),
        "has": name_has(col, "Launch"),
    }
    for key in expected:
        assert np.array_equal(got[key], expected[key]), key
    assert not got["has"][::97].any(), "a missing name never passes"


def test_a_columns_codes_go_with_it():
    col = _column()
    name_has(col, "aten")
    key = id(col.array)
    assert key in names._FACTORS
    del col
    gc.collect()
    assert key not in names._FACTORS
