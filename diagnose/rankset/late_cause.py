"""The straggler in the unprofiled timed steps (timed.py) and its cause in the profiled ones.

The timed arrivals say which rank arrives last and by how much per step; the profiled trace says
what that rank did before: the lead-ins up to the collective it is first late at (profile.py
`host_leads`: time no op or CUDA call covers is *silent* host time, the rest is op time), and its
GPU work (model.py `work_of`). Each is compared with the other ranks' median. On a CPU rank op time
is its compute (work); on a GPU rank it is dispatch (host), and its work is on the GPU.
"""

from __future__ import annotations

import dataclasses
import statistics

from diagnose.rankset.model import RankSet
from diagnose.rankset.timed import TimedArrivals


@dataclasses.dataclass(frozen=True)
class TimedLate:
    """The late rank of the timed steps, what its lateness costs, and what the profile says caused it."""

    late: int
    lateness: float  # µs per timed step the late rank arrives after the next-latest
    bound: float  # the least any other rank waits per timed step: the most removing the lateness can give
    step: float  # the reference rank's step timed without the profiler (`_timed_step`), µs
    late_steps: float  # share of the timed steps in which it was last
    silent_extra: float  # its silent host lead-in above the others' median, µs per profiled step
    busy_extra: float  # its op time in the lead-in above the others' median, µs per profiled step
    gpu_extra: float  # its GPU work above the others' median, µs per profiled step
    on_gpu: bool  # the ranks ran on GPUs (op time is dispatch, not compute)
    place: int  # the collective (in the step's order) it is first late at

    @property
    def explained(self) -> float:
        """What the profiled extras explain, µs per step (0 when they show none)."""
        return self.host_extra + self.work_extra

    @property
    def cost(self) -> float:
        """What removing the lateness gives per step: the lateness, at most what the others wait and, where
        the profile shows extras, at most what they explain."""
        cap = min(self.lateness, self.bound, self.step)
        return max(min(cap, self.explained) if self.explained > 0 else cap, 0.0)

    @property
    def host_extra(self) -> float:
        """The extra host time before the late arrival: silent time, and op time on a GPU rank (dispatch)."""
        return self.silent_extra + (self.busy_extra if self.on_gpu else 0.0)

    @property
    def work_extra(self) -> float:
        """The extra work before the late arrival: GPU work, and op time on a CPU rank (its compute)."""
        return self.gpu_extra + (0.0 if self.on_gpu else self.busy_extra)

    @property
    def cause(self) -> str:
        """ "host" or "work", whichever is the larger extra; "unexplained" when the profile shows neither."""
        if self.host_extra <= 0 and self.work_extra <= 0:
            return "unexplained"
        return "host" if self.host_extra >= self.work_extra else "work"


def timed_late(ranks: RankSet, timed: TimedArrivals) -> TimedLate:
    """The latest rank of the timed steps and the extras of its profiled lead-in (module docstring)."""
    late = timed.latest()
    place = timed.first_late_call.get(late) or 0
    lead = {p.rank: _lead_in(p.host_leads, place) for p in ranks.profiles}
    others = [r for r in ranks.ranks if r != late]

    def extra(i: int) -> float:
        own = lead[late]
        if not others or own is None:
            return 0.0
        theirs = [their[i] for their in (lead[r] for r in others) if their is not None]
        return max(own[i] - statistics.median(theirs), 0.0) if theirs else 0.0

    mine = ranks.profile_of(late)
    on_gpu = any(p.compute_us for p in ranks.profiles)
    gpu_extra = max(ranks.work_of(mine) - ranks.median_work_us(exclude=late), 0.0) if on_gpu else 0.0
    return TimedLate(
        late=late,
        lateness=timed.lateness_us[late],
        bound=timed.others_wait(late),
        step=_timed_step(ranks, timed),
        late_steps=timed.late_steps[late],
        silent_extra=extra(1),
        busy_extra=extra(0),
        gpu_extra=gpu_extra,
        on_gpu=on_gpu,
        place=place,
    )


def _timed_step(ranks: RankSet, timed: TimedArrivals) -> float:
    """The step the lateness is taken from, on the same basis as the lateness: the reference rank's step
    timed without the profiler (the capture's timing); without that timing, the report's step (the
    estimate may not start from a step shorter than the one it is reported against)."""
    reference = ranks.profile_of(ranks.reference)
    return reference.unprofiled_step_us or reference.step_us or timed.step_us.get(ranks.reference) or 1e-9


def _lead_in(steps: list, place: int) -> tuple[float, float] | None:
    """(op time, silent time) µs per profiled step from the step's start to collective `place`, None without."""
    rows = [s[: place + 1] for s in steps if len(s) > place]
    if not rows:
        return None
    n = len(rows)
    silent = sum(r[1] for s in rows for r in s) / n
    return sum(r[0] for s in rows for r in s) / n - silent, silent
