"""The iteration of a loop that left no step marks, found the way an engineer finds it on a timeline.

The input is the trace's top-level host activity in time order: the outermost CPU ops of the thread
that drives the loop, the autograd threads' backward calls, and graph launches made outside any op
(a CUDA-graphed step is one `cudaGraphLaunch`). Names are compared with their numbers taken out, so
"Torch-Compiled Region: 0/13" and "…: 0/14" (a recompile) are the same activity.

The iteration is the sequence's *outermost* period: the cut points are every m-th occurrence of the
activity that opens the pattern, for the smallest m whose segments are alike (the same activities in
nearly the same order), so an inner loop repeated k times inside a longer period is part of the step.
Where the whole sequence is one short pattern repeated (a layer stack with nothing around it, or 30
matmuls each followed by `.item()`), nothing in the names separates the iterations; the host's pauses
can: every m-th boundary between repetitions is then a clearly longer gap (the loop's own Python, the
step function's call and return). When no such gap stands out, the pattern is reported as the smallest
unit the iteration can be and said to be one (`Period.ambiguous`).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import numpy as np

from diagnose.vocabulary.runtime import GRAPH_LAUNCH

MIN_REPEATS = 2  # whole repetitions that make a period
MIN_COVER = 0.8  # a period must span this share of the activity
ALIKE = 0.8  # segments share at least this share of their activities (dynamic shapes add or drop a few)
GAP_FACTOR = 1.5  # an iteration boundary's host gap is this much longer than every gap inside iterations
GAP_FLOOR_US = 2.0  # ... and longer by at least this much (timer resolution)
# a pattern this short, repeated this often with nothing between, looks like an inner loop: without a pause to
# group its repetitions it is reported as the smallest unit the iteration can be (ambiguous)
MAX_HEADS = 8  # activities tried as the pattern's head (in order of first appearance)
MAX_GROUP = 64  # repetitions of a pattern tried as one iteration (a layer stack, an inner loop's trip count)
INNER_LOOP_LENGTH = 8
INNER_LOOP_REPEATS = 16
MAX_OCCURRENCES = 64  # occurrences of the pattern's head per period tried
SCORE_SLACK = 0.05  # of the periods found, the shortest whose iterations are within this of the most alike

_NUMBERS = re.compile(r"\d+")


def normalise(name: str) -> str:
    """A name with its numbers taken out: one activity, whichever compile, graph or call it is."""
    return _NUMBERS.sub("#", name)


@dataclasses.dataclass
class Period:
    """The iterations found in a sequence of activities."""

    cuts: list[int]  # index of the first activity of each iteration, and one past the last whole one
    length: int  # activities per iteration (the median)
    head: str  # the activity that opens each iteration
    by_gaps: int = 1  # repetitions of a shorter pattern joined into one iteration by the host's pauses
    ambiguous: bool = False  # a pattern with nothing to tell its repetitions apart from iterations
    score: float = 1.0  # how alike the iterations are (1: the same activities each time)


def find_period(names: list[str], starts: np.ndarray, ends: np.ndarray) -> Period | None:
    """The outermost period of a sequence of activities (names with their host start and end, µs), or None
    when the sequence does not repeat."""
    tokens = [normalise(n) for n in names]
    n = len(tokens)
    if n < MIN_REPEATS * 2:
        return None
    positions: dict[str, list[int]] = {}
    for i, token in enumerate(tokens):
        positions.setdefault(token, []).append(i)
    tried = 0
    for head, at in positions.items():  # in order of first appearance: the pattern's head comes first
        if len(at) < MIN_REPEATS + 1 or at[-1] - at[0] < MIN_COVER * n * (MIN_REPEATS - 1) / MIN_REPEATS:
            continue
        tried += 1
        if tried > MAX_HEADS:
            break
        found = []
        for m in range(1, min(len(at) // MIN_REPEATS, MAX_OCCURRENCES) + 1):
            period = _period_at(tokens, at[::m], head)
            if period is not None:
                found.append(period)
                if period.score >= 1.0:
                    break  # the same activities every time: no longer period can be more alike
        if found:
            best = max(p.score for p in found)
            period = next(p for p in found if p.score >= best - SCORE_SLACK)  # the shortest of the most alike
            return _joined_by_gaps(period, tokens, starts, ends)
    return None


def _period_at(tokens: list[str], cuts: list[int], head: str) -> Period | None:
    """A period with these cut points, if its segments are alike and cover the sequence."""
    n = len(tokens)
    if len(cuts) < MIN_REPEATS:
        return None
    lengths = np.diff(np.asarray(cuts))
    middle = len(lengths) // 2  # the reference: a middle one, warm-up and tail are at the ends
    others = [i for i in range(len(lengths)) if i != middle and (i > 0 or len(lengths) == 2)]
    # the first may be a cold start that does more (compiles, plans), unless it is the only one to compare
    if not others or np.any(np.abs(lengths[others] / lengths[middle] - 1) > 1 - ALIKE):
        return None  # iterations of one loop hold about as many activities each (a cheap test first)
    typical = int(np.median(lengths))
    reference = _profile(tokens[cuts[middle] : cuts[middle + 1]])
    scores = [_similarity(_profile(tokens[cuts[i] : cuts[i + 1]]), reference) for i in others]
    if min(scores) < ALIKE:
        return None
    last = tokens[cuts[-1] :]
    cut_list = list(cuts)
    if len(last) >= typical and _similarity(_profile(last[:typical]), reference) >= ALIKE:
        cut_list.append(cuts[-1] + typical)  # the last repetition is whole
        last = last[typical:]
    known = set(tokens[cuts[middle] : cuts[middle + 1]])
    if not (known.issuperset(tokens[: cuts[0]]) and known.issuperset(last)):
        return None  # what precedes and follows must be parts of an iteration (one forward's layers are not)
    if len(cut_list) < MIN_REPEATS + 1 or (cut_list[-1] - cut_list[0]) < MIN_COVER * n:
        return None
    return Period(cuts=cut_list, length=typical, head=head, score=float(np.mean(scores)))


def _profile(segment: list[str]) -> Counter:
    """A segment's activities and the pairs that follow each other in it (as multisets): the pairs keep the
    order, so two long runs of the same activities in another order do not pass for the same iteration."""
    return Counter(segment) + Counter(zip(segment, segment[1:]))


def _similarity(segment: Counter, reference: Counter) -> float:
    """The share of activities two segments have in common (as multisets; 1 when they are the same)."""
    shared = sum((segment & reference).values())
    return shared / max(sum(segment.values()), sum(reference.values()), 1)


def _joined_by_gaps(period: Period, tokens: list[str], starts: np.ndarray, ends: np.ndarray) -> Period:
    """`period`, or a multiple of it where every m-th boundary is a clearly longer pause of the host; the
    period marked ambiguous when it is one pattern repeated edge to edge and no pause tells iterations apart."""
    cuts = period.cuts
    repeats = len(cuts) - 1
    pure = cuts[0] == 0 and cuts[-1] == len(tokens)
    graph = bool(GRAPH_LAUNCH.search(period.head))  # a graph replays a whole captured step, not an inner loop of one
    if not pure or repeats < 2 * MIN_REPEATS or graph:
        return period
    # the host's pause before each repetition after the first: pauses[j] precedes cut index j + 1
    pauses = np.array([starts[c] - ends[c - 1] for c in cuts[1:-1]], dtype=float)
    index = np.arange(1, repeats)  # the cut index each pause precedes
    for m in range(2, min(repeats // MIN_REPEATS, MAX_GROUP) + 1):
        residue = index % m
        shortest = np.full(m, np.inf)
        np.minimum.at(shortest, residue, pauses)
        longest = np.full(m, -np.inf)
        np.maximum.at(longest, residue, pauses)
        ranked = np.argsort(longest)[::-1]
        for offset in range(m):  # boundaries before cut indices offset, offset + m, ...
            inside = longest[ranked[1]] if ranked[0] == offset else longest[ranked[0]]  # every other pause
            joined = list(range(offset, repeats + 1, m))
            if len(joined) < MIN_REPEATS + 2 or int((residue != offset).sum()) < 3:
                continue  # three whole iterations at least, and pauses inside them to compare with
            if shortest[offset] > max(GAP_FACTOR * inside, inside + GAP_FLOOR_US):
                return dataclasses.replace(period, cuts=[cuts[i] for i in joined], length=period.length * m, by_gaps=m)
    inner = period.length <= INNER_LOOP_LENGTH and repeats >= INNER_LOOP_REPEATS and not graph
    return dataclasses.replace(period, ambiguous=inner)
