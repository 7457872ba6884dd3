"""The HTML report's rank section at many ranks (diagnose/report/rank_view.py): distributions over
the ranks and the outliers named, not a row per rank; a few ranks keep their table."""

from __future__ import annotations

import re

import msgspec
import pytest

from conftest import SYNTHETIC
from diagnose.model.config import Config
from diagnose.model.findings import RankRow
from diagnose.ranks.analyse import analyse_ranks
from diagnose.report.html import render_html
from diagnose.report.rank_view import MANY_RANKS, rank_ranges, ranks_view


def _row(rank, step=1000.0, work=800.0, wait=100.0):
    return RankRow(
        rank=rank,
        profiled_step_us=step,
        work_us=work,
        wait_us=wait,
        transfer_us=50.0,
        exposed_comm_us=wait + 50.0,
    )


def test_rank_ranges_keep_a_thousand_ranks_on_one_line():
    assert rank_ranges([0, 1, 2, 3, 7, 9, 10]) == "0–3, 7, 9, 10"
    assert rank_ranges([1]) == "1" and rank_ranges([0, 1]) == "0, 1"
    assert rank_ranges([r for r in range(1024) if r != 1]) == "0, 2–1023"


def test_at_many_ranks_the_slowed_rank_is_the_outlier_and_the_rest_a_distribution():
    rows = [_row(r) for r in range(1024)]
    rows[1] = _row(1, step=1000.0, work=1100.0, wait=0.0)  # slower compute, waits for no one
    rows[517] = _row(517, wait=104.0)  # 4 µs more wait than the others: beyond fences of an IQR of 0
    view = ranks_view(rows, reference=0)
    assert view["many"] and [o["rank"] for o in view["outliers"]][0] == 1
    work = next(m for m in view["distribution"] if m["label"].startswith("GPU work"))
    assert (work["median"], work["max"], work["max_rank"]) == (800.0, 1100.0, 1)
    assert view["drawn"] == sorted({0, *(o["rank"] for o in view["outliers"])})
    assert all(0 <= m["min"] <= m["median"] <= m["p90"] <= m["max"] for m in view["distribution"])


def test_identical_ranks_have_no_outlier_and_few_ranks_keep_their_table():
    assert ranks_view([_row(r) for r in range(64)], reference=0)["outliers"] == []
    assert not ranks_view([_row(r) for r in range(MANY_RANKS)], reference=0)["many"]


@pytest.fixture(scope="module")
def straggler():
    return analyse_ranks(SYNTHETIC / "ranks_straggler", Config(), workers=1)


@pytest.mark.parametrize("count", [2, 300])
def test_the_html_rank_section_is_bounded(straggler, count):
    d = straggler
    first, slow = d.summary.ranks.per_rank[0], d.summary.ranks.per_rank[1]
    per_rank = [msgspec.structs.replace(slow if r == 1 else first, rank=r) for r in range(count)]
    summary = msgspec.structs.replace(
        d.summary, ranks=msgspec.structs.replace(d.summary.ranks, per_rank=per_rank, count=count)
    )
    bars = {b.rank: b for b in d.details.ranks}
    ranks = [msgspec.structs.replace(bars[1 if r == 1 else 0], rank=r) for r in range(count)]
    d = msgspec.structs.replace(d, summary=summary, details=msgspec.structs.replace(d.details, ranks=ranks))
    html = render_html(d)
    section = html[html.index("Each rank’s step") :][:20000]
    rows = len(re.findall(r"<tr>", section.split("</table>")[0]))
    if count == 2:
        assert rows == 3 and "rank-spread" not in section
    else:
        assert rows <= 6 and "rank 1:" in section and "Outliers" in section
        assert len(re.findall(r">rank \d+<", html)) <= 9  # bars: the reference and the outliers
