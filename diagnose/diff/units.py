"""Whether two sides' steps hold the same work, and the ratio to compare them by when they do not.

A step found one way on one side and another way on the other (a CUDA-graphed decode read as one
24-token window, its eager twin as one token a step; a trace without markers against a capture) holds
a different amount of work, and comparing the two step times says nothing. The work a step holds is
read from its kernels: for each kernel family both sides launch (matching.kernel_families), the
calls per step after ÷ before. When the families that carry most of the time agree on one ratio,
that ratio is the unit change, and AFTER's step times are divided by it (time per BEFORE-sized unit
of work). When they disagree, the code changed what it launches (a fused projection, a compiled
region) and the steps are compared as they are. When no family is on both sides, the two runs do
different work and are not compared.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from diagnose.base.errors import InputError
from diagnose.diff.matching import kernel_families
from diagnose.metrics.sections import InventoryRow

SAME_UNIT = 1.2  # a work ratio within this factor either way is the same unit (batch noise, a tail)
AGREE = 0.15  # families agree on the ratio when within this share of it
AGREEING_SHARE = 0.6  # ... and the agreeing families carry this share of the matched GPU time
WHOLE, WHOLE_SHARE = 0.1, 0.02  # a ratio this close to a whole number (absolute, or share of it) is one


@dataclasses.dataclass
class UnitMatch:
    """How AFTER's step relates to BEFORE's in work."""

    ratio: float  # AFTER's step holds this many BEFORE steps of matched work (1: the same unit)
    families: list[str]  # the kernel families that agreed on it, most time first
    rescaled: bool  # AFTER's step times were divided by `ratio`
    note: str = ""  # what the report says about it ("" when the units match)


def match_units(
    before_inventory: list[InventoryRow] | None, after_inventory: list[InventoryRow] | None, rescale: bool = True
) -> UnitMatch:
    """The unit change between two sides from their kernel inventories; InputError when they share no
    kernel family and `rescale` asks for a unit (nothing to compare the work by). With `rescale` False (both
    sides' steps were found the same sure way: the step is the loop's unit) or a ratio that is no whole
    number of steps, a different amount of work is said, not divided out."""
    fam_b, fam_a = kernel_families(before_inventory), kernel_families(after_inventory)
    if not fam_b or not fam_a:
        return UnitMatch(1.0, [], False)
    shared = [
        (name, fam_a[name]["calls_per_step"] / fam_b[name]["calls_per_step"], _weight(fam_b[name], fam_a[name]))
        for name in fam_b.keys() & fam_a.keys()
        if fam_b[name]["calls_per_step"] > 0 and fam_a[name]["calls_per_step"] > 0
    ]
    if not shared:
        if not rescale:
            return UnitMatch(1.0, [], False)
        raise InputError(
            "cannot compare the two runs: no GPU kernel family is launched on both sides, so there is no "
            "common unit of work (different programs, or a trace of another part of the run)"
        )
    ratios = np.array([r for _, r, _ in shared])
    weights = np.array([w for _, _, w in shared])
    ratio = _weighted_median(ratios, weights)
    agree = np.abs(ratios / ratio - 1) <= AGREE
    share = float(weights[agree].sum() / weights.sum()) if weights.sum() > 0 else 0.0
    families = [name for (name, _, _), ok in sorted(zip(shared, agree), key=lambda x: -x[0][2]) if ok]
    if max(ratio, 1 / ratio) <= SAME_UNIT:
        return UnitMatch(1.0, families, False)
    if share < AGREEING_SHARE or (len(shared) > 1 and len(families) < 2):
        return UnitMatch(
            1.0,
            [],
            False,
            note=(
                f"the two steps launch different amounts of work (kernel families changed their calls per step "
                f"by {ratios.min():.2g}× to {ratios.max():.2g}×, with no common ratio): the code changed what it "
                "launches, and steps are compared as found"
            ),
        )
    if not rescale or not _whole_multiple(ratio):
        return UnitMatch(
            ratio,
            families,
            False,
            note=(
                f"AFTER's step launches {ratio:.3g}× BEFORE's calls of {_listed(families)}: the work of a step "
                "changed, and the steps are compared as found"
            ),
        )
    return UnitMatch(
        ratio,
        families,
        True,
        note=(
            f"the steps hold different amounts of work: AFTER's step launches {ratio:.3g}× BEFORE's calls of "
            f"{_listed(families)}, so AFTER is compared per BEFORE-sized unit of work (its step times ÷ "
            f"{ratio:.3g}); the steps were found differently on the two sides, or the loop's unit changed"
        ),
    )


def _whole_multiple(ratio: float) -> bool:
    """Whether a work ratio is a whole number of steps either way (24 tokens in one window against one a step),
    as a unit found differently gives, rather than a model doing more or less work per step."""
    many = max(ratio, 1 / ratio)
    return abs(many - round(many)) <= max(WHOLE, WHOLE_SHARE * many)


def _weight(before: dict, after: dict) -> float:
    return float(before["us_per_step"]) + float(after["us_per_step"])


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The weighted median of positive ratios, taken on their logarithms (2× and ½× weigh alike)."""
    order = np.argsort(values)
    values, weights = values[order], weights[order]
    if weights.sum() <= 0:
        return float(math.exp(np.median(np.log(values))))
    cumulative = np.cumsum(weights)
    return float(values[np.searchsorted(cumulative, cumulative[-1] / 2)])


def _listed(families: list[str], limit: int = 3) -> str:
    shown = ", ".join(families[:limit])
    return shown + (f" and {len(families) - limit} more families" if len(families) > limit else "")
