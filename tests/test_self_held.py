"""metrics/host.self_held in column operations gives the per-op loop's numbers exactly.

The reference is the loop it replaced: each op's own time is its span minus its child ops (the
ops of the same thread nested in it by start order), and the silent time it holds is that own
time's overlap with the covered stretches, summed left to right.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.metrics.host import merge_intervals, overlap_us, self_held, subtract


def _loop(ops: pd.DataFrame, covered: np.ndarray) -> np.ndarray:
    out = np.zeros(len(ops))
    for _, group in ops.groupby("tid", sort=False):
        group = group.sort_values(["ts", "end"], ascending=[True, False], kind="stable")
        rows = ops.index.get_indexer(group.index)
        ts, end = group["ts"].to_numpy(float), group["end"].to_numpy(float)
        children: list[list[int]] = [[] for _ in range(len(group))]
        stack: list[int] = []
        for i in range(len(group)):
            while stack and ts[i] >= end[stack[-1]]:
                stack.pop()
            if stack:
                children[stack[-1]].append(i)
            stack.append(i)
        for i in range(len(group)):
            own = np.array([[ts[i], end[i]]])
            if children[i]:
                kids = np.array(children[i])
                own = subtract(own, merge_intervals(ts[kids], end[kids]))
            out[rows[i]] = overlap_us(covered, own)
    return out


def test_self_held_matches_the_loop_on_random_nestings():
    rng = np.random.default_rng(23)
    for trial in range(150):
        n = int(rng.integers(0, 30))
        ts = np.round(rng.uniform(0, 100, n), int(rng.integers(0, 4)))
        dur = np.round(rng.exponential(rng.choice([1, 5, 30]), n), int(rng.integers(0, 4)))
        dur[rng.random(n) < 0.1] = 0  # zero-length ops; the random spans nest improperly too
        ops = pd.DataFrame({"ts": ts, "end": ts + dur, "tid": rng.integers(0, 3, n)}, index=rng.permutation(n) + 7)
        m = int(rng.integers(0, 12))
        starts = rng.uniform(0, 110, m)
        covered = merge_intervals(starts, starts + rng.exponential(4, m))
        assert np.array_equal(self_held(ops, covered), _loop(ops, covered)), trial
