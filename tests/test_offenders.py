"""The rules' shared mechanics: one offenders helper (rows into typed Offenders) and one time-base phrase."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd

from diagnose.rulebook.engine import time_base, top_offenders
from diagnose.model.findings import Offender

from conftest import ROOT


def test_a_frame_indexed_by_name_becomes_offenders_in_its_order():
    frame = pd.DataFrame(
        {"kernels_per_step": np.array([3.0, 1.0]), "median_kernel_us": [np.float64(2.5), float("nan")]},
        index=pd.Index(["aten::mm", "aten::add"], name="op_name"),
    )
    rows = top_offenders(frame, "op")
    assert [(o.label, o.name) for o in rows] == [("op", "aten::mm"), ("op", "aten::add")]
    assert rows[0].kernels_per_step == 3.0 and type(rows[0].kernels_per_step) is float  # numpy -> Python
    assert rows[0].extra == {"median_kernel_us": 2.5} and rows[1].extra == {"median_kernel_us": None}  # NaN -> None
    assert rows[0].row() == {"op": "aten::mm", "kernels_per_step": 3.0, "median_kernel_us": 2.5}


def test_rows_are_ranked_by_a_column_ties_kept_in_order_and_cut_to_n():
    rows = [{"chain": c, "us_per_step": us} for c, us in [("a", 1.0), ("b", 5.0), ("c", 5.0), ("d", 3.0)]]
    top = top_offenders(rows, "chain", by="us_per_step", n=3)
    assert [o.name for o in top] == ["b", "c", "d"]
    assert top_offenders(rows, "chain", n=2) == [
        Offender.of("chain", "a", us_per_step=1.0),
        Offender.of("chain", "b", us_per_step=5.0),
    ]


def test_the_name_sits_under_the_key_its_label_gives():
    o = top_offenders(
        [{"allocated_by": "kv.py:39 in step", "bytes_allocated": 4e9, "rank": np.int64(1)}], "allocation"
    )[0]
    assert (o.label, o.key, o.name, o.rank) == ("allocation", "allocated_by", "kv.py:39 in step", 1)
    assert o.get("allocated_by") == "kv.py:39 in step" and o.get("bytes_allocated") == 4e9 and o.get("x", 7) == 7
    assert Offender.from_row({"label": "allocation", **o.row()}) == o


def test_the_time_base_says_which_step_the_estimate_starts_from():
    assert time_base(SimpleNamespace(unprofiled_step_us=2715.24)) == "step time = unprofiled 2,715.2 µs"
    assert time_base(SimpleNamespace(unprofiled_step_us=None)) == (
        "step time = profiled step (no unprofiled timing in the capture)"
    )


def test_no_rule_words_the_time_base_or_builds_offender_dicts_of_its_own():
    """The phrase lives in diagnose/rulebook/engine.py only; every rule's offenders go through the shared helpers."""
    phrase = re.compile(r"step time = unprofiled|unprofiled median|no unprofiled timing in the capture")
    for path in sorted((ROOT / "diagnose" / "rules").glob("*.py")):
        text = path.read_text()
        assert not phrase.search(text), f"{path.name} words the time base itself"
        assert not re.search(r"def _offenders\(.*\) -> list\[dict\]", text), path.name
        if "offenders=" in text or "offenders +=" in text:
            assert "top_offenders(" in text or "Offender.of(" in text, path.name
