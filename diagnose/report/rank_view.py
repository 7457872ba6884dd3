"""The HTML report's rank section at any number of ranks.

Up to MANY_RANKS ranks, every rank is a row and a bar. Beyond, a row per rank would bury the one
rank that matters, so the section shows how each measure is spread over the ranks (minimum,
median, 90th percentile, maximum, and the rank at the maximum), names the outliers (a rank whose
profiled step, GPU work, wait or exposed communication lies beyond Tukey's fences, 1.5 interquartile
ranges past the quartiles, and further than OUTLIER_FLOOR_US from the median), and draws bars
only for the reference rank and the first SHOWN_OUTLIERS outliers. findings.json keeps every rank.
"""

from __future__ import annotations

import msgspec
import numpy as np

from diagnose.model.findings import RankRow

MANY_RANKS = 16
SHOWN_OUTLIERS = 8
OUTLIER_FLOOR_US = 1.0  # copies of one trace differ by rounding: not an outlier
MEASURES = (  # (key in summary.ranks.per_rank, label)
    ("profiled_step_us", "profiled step (µs)"),
    ("work_us", "GPU work (µs)"),
    ("wait_us", "wait in collectives (µs)"),
    ("transfer_us", "transfer (µs)"),
    ("exposed_comm_us", "exposed communication (µs)"),
)
OUTLIER_MEASURES = ("profiled_step_us", "work_us", "wait_us", "exposed_comm_us")


def ranks_view(per_rank: list[RankRow], reference: int | None) -> dict:
    """What the rank section shows: `many` (False: the table of every rank, as before), else the
    `distribution` rows, the `outliers` (rank and the measures that set it apart, largest gap first)
    and `drawn`, the ranks whose bars are drawn."""
    rows = [msgspec.structs.asdict(r) for r in per_rank]  # a measure is read by its name in MEASURES
    if len(rows) <= MANY_RANKS:
        return {"many": False, "distribution": [], "outliers": [], "more_outliers": 0, "drawn": None}
    distribution, columns = [], {}
    for key, label in MEASURES:
        pairs = [(r["rank"], float(r[key])) for r in rows if r[key] is not None]
        if not pairs:
            continue
        values = np.array([v for _, v in pairs])
        columns[key] = pairs
        top = max(pairs, key=lambda p: p[1])
        distribution.append(
            {
                "label": label,
                "min": float(values.min()),
                "median": float(np.median(values)),
                "p90": float(np.percentile(values, 90)),
                "max": top[1],
                "max_rank": top[0],
            }
        )
    outliers = _outliers(columns)
    shown = outliers[:SHOWN_OUTLIERS]
    drawn = sorted({*([reference] if reference is not None else []), *(o["rank"] for o in shown)})
    return {
        "many": True,
        "distribution": distribution,
        "outliers": shown,
        "more_outliers": len(outliers) - len(shown),
        "drawn": drawn,
    }


def _outliers(columns: dict) -> list[dict]:
    """The ranks beyond Tukey's fences on any of OUTLIER_MEASURES, each with its measures' values and
    medians, the rank furthest from a median (relative to it) first."""
    found: dict[int, list] = {}
    for key, pairs in columns.items():  # in MEASURES order, as OUTLIER_MEASURES are
        if key not in OUTLIER_MEASURES or not pairs:
            continue
        values = np.array([v for _, v in pairs])
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
        label = dict(MEASURES)[key].replace(" (µs)", "")
        for rank, value in pairs:
            if (value < low or value > high) and abs(value - median) > OUTLIER_FLOOR_US:
                gap = abs(value - median) / max(abs(median), OUTLIER_FLOOR_US)
                found.setdefault(rank, []).append({"label": label, "value": value, "median": float(median), "gap": gap})
    ranked = sorted(found.items(), key=lambda kv: (-max(m["gap"] for m in kv[1]), kv[0]))
    return [{"rank": rank, "measures": measures} for rank, measures in ranked]


def rank_ranges(ranks: list[int]) -> str:
    """Ranks as runs of three or more: [0, 1, 2, 3, 7, 9, 10] -> "0–3, 7, 9, 10" (a list of 1,024
    ranks stays one line)."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(f"{a}–{b}" if b - a >= 2 else ", ".join(map(str, range(a, b + 1))) for a, b in runs)
