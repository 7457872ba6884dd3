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

MIN_REPEATS = 2  # whole repetitions that make a period
MIN_COVER = 0.8  # a period must span this share of the activity
ALIKE = 0.8  # segments share at least this share of their activities (dynamic shapes add or drop a few)
GAP_FACTOR = 1.5  # an iteration boundary's host gap is this much longer than every gap inside iterations
GAP_FLOOR_US = 2.0  # ... and longer by at least this much (timer resolution)
# a pattern this short, repeated this often with nothing between, looks like an inner loop: without a pause to
# group its repetitions it is reported as the smallest unit the iteration can be (ambiguous)
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
    for head, at in positions.items():  # in order of first appearance: the pattern's head comes first
        if len(at) < MIN_REPEATS + 1 or at[-1] - at[0] < MIN_COVER * n * (MIN_REPEATS - 1) / MIN_REPEATS:
            continue
        found = [
            p
            for m in range(1, min(len(at) // MIN_REPEATS, MAX_OCCURRENCES) + 1)
            if (p := _period_at(tokens, at[::m], head))
        ]
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
    segments = [tokens[a:b] for a, b in zip(cuts, cuts[1:])]
    lengths = [len(s) for s in segments]
    typical = int(np.median(lengths))
    reference = Counter(segments[len(segments) // 2])  # a middle one: warm-up and tail are at the ends
    scores = [_similarity(Counter(s), reference) for s in segments]
    if min(scores[1:], default=1.0) < ALIKE:  # the first may be a cold start that does more (compiles, plans)
        return None
    last = tokens[cuts[-1] :]
    cut_list = list(cuts)
    if len(last) >= typical and _similarity(Counter(last[:typical]), reference) >= ALIKE:
        cut_list.append(cuts[-1] + typical)  # the last repetition is whole
        last = last[typical:]
    known = set(reference)
    if not (known.issuperset(tokens[: cuts[0]]) and known.issuperset(last)):
        return None  # what precedes and follows must be parts of an iteration (one forward's layers are not)
    if len(cut_list) < MIN_REPEATS + 1 or (cut_list[-1] - cut_list[0]) < MIN_COVER * n:
        return None
    return Period(cuts=cut_list, length=typical, head=head, score=float(np.mean(scores[1:] or [1.0])))


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
    graph = "GraphLaunch" in period.head  # a graph replays a whole captured step, not an inner loop of one
    if not pure or repeats < 2 * MIN_REPEATS or graph:
        return period
    # the host's pause before each repetition after the first: pauses[j] precedes cut index j + 1
    pauses = np.array([starts[c] - ends[c - 1] for c in cuts[1:-1]], dtype=float)
    at = np.arange(1, repeats)
    for m in range(2, repeats // MIN_REPEATS + 1):
        for offset in range(m):
            marks = (at - offset) % m == 0
            joined = list(range(offset, repeats + 1, m))  # cut indices of whole joined iterations
            if len(joined) < MIN_REPEATS + 2 or (~marks).sum() < 3 or not marks.any():
                continue  # three whole iterations at least, and pauses inside them to compare with
            inside = pauses[~marks].max()
            if pauses[marks].min() > max(GAP_FACTOR * inside, inside + GAP_FLOOR_US):
                return dataclasses.replace(period, cuts=[cuts[i] for i in joined], length=period.length * m, by_gaps=m)
    inner = period.length <= INNER_LOOP_LENGTH and repeats >= INNER_LOOP_REPEATS and not graph
    return dataclasses.replace(period, ambiguous=inner)
