"""Who waits for whom in the unprofiled timed steps: the ranks' own arrivals.json (diagnose/child/arrivals.py).

Under the profiler each host issues its calls several times slower, by different amounts, so which
rank arrives last in a trace follows the hosts' pace. The timed steps run without the profiler, so
their arrivals decide who is late. Per timed step every collective call is matched across ranks by
its key (process group, the call's number in it, kind, element count), each rank's time is put on
rank 0's clock (the offset its capture measured at a barrier), and per call the last arrival is the
latest over the ranks. Per step:

- a rank's *wait* is the longest it waited for the last rank at any call of the step (last − own),
  never more than its step: waits at successive calls overlap, so they are not summed;
- a rank is *behind* at a call by how much it arrived after the (lower) median rank (0 when before); several
  ranks can be behind at once, where only one is last;
- the *late rank* of a call is the last one, when it arrived more than the alignment's error (the
  tie) after the next-latest; its *lateness* in the step is the most it was late by at any call.

Per rank, the step, the wait and the lateness are medians over the timed steps (a step that a busy
host stalls does not move them); each median wait is at most the median step.

On CUDA captures the GPU arrival (a CUDA event at entry) decides instead of the host's, the host
arrival then telling how much of the lateness the host explains. The clocks' error is the larger of
the barrier rounds' spread and the drift of the offsets from the first timed step to the last.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Union

import msgspec

from diagnose.trace.schemas import read_json_object, validate

ARRIVALS_FILE = "arrivals.json"
TIE_US = 50.0  # below this nobody is last, whatever the clocks' error


class TimedStep(msgspec.Struct):
    """One timed step: its start and end on the rank's clock, and its calls [key, host µs, GPU µs or null]."""

    start_us: float
    end_us: Union[float, None]
    calls: list[tuple[str, float, Union[float, None]]]


class ArrivalsDoc(msgspec.Struct):
    """A rank folder's arrivals.json."""

    schema: str
    rank: int
    world_size: int
    offset_us: float
    steps: list[TimedStep]
    backend: str = ""
    clock: str = ""
    offset_error_us: float = 0.0
    drift_us: float = 0.0
    end_error_us: float = 0.0
    ddp_hooks: int = 0
    gpu: bool = False


def read_timed(folder: Path) -> dict | None:
    """The arrivals.json of a rank's capture folder as plain data, None when it has none; InputError
    (one line naming the file) when it is too large, not JSON or not of the schema."""
    path = Path(folder) / ARRIVALS_FILE
    if not Path(folder).is_dir() or not path.exists():
        return None
    doc = read_json_object(path, "arrivals.json")
    validate(doc, ArrivalsDoc, path, "arrivals.json")
    return msgspec.to_builtins(msgspec.convert(doc, ArrivalsDoc))


@dataclasses.dataclass
class TimedArrivals:
    """The ranks' arrivals in the timed steps (module docstring); µs per step unless a share."""

    ranks: list
    steps: int
    matched: int
    on: str  # "GPU" (CUDA events) or "host"
    tie_us: float
    offsets_us: dict
    drift_us: float
    step_us: dict  # per rank, the median timed step
    wait_us: dict  # per rank, median over steps of its longest wait in the step
    lateness_us: dict  # per rank, median over steps of the most it was late by (0 in steps it was not last)
    host_lateness_us: dict  # the same on host arrivals
    late_steps: dict  # per rank, share of the steps in which it was last at least once
    behind_us: dict  # per rank, median over steps of the most it arrived after the calls' median arrival
    first_late_call: dict  # per rank, the median place (in the step's calls) of its first late arrival
    dropped: int = 0

    @classmethod
    def build(cls, profiles: list, warnings: list) -> "TimedArrivals | None":
        """The timed arrivals of these ranks' profiles, None unless every rank has them."""
        docs = [p.timed_arrivals for p in profiles]
        if len(profiles) < 2 or any(not d or not d.get("steps") for d in docs):
            return None
        n_steps = min(len(d["steps"]) for d in docs)
        on_gpu = all(d.get("gpu") for d in docs)
        error = max(max(d.get("offset_error_us", 0.0), d.get("end_error_us", 0.0)) for d in docs)
        drift = max(abs(d.get("drift_us", 0.0)) for d in docs)
        tie = max(TIE_US, error + drift)
        k = len(profiles)
        wait = [[0.0] * k for _ in range(n_steps)]
        late = [[0.0] * k for _ in range(n_steps)]
        host_late = [[0.0] * k for _ in range(n_steps)]
        behind = [[0.0] * k for _ in range(n_steps)]
        first: list[list[int]] = [[] for _ in range(k)]
        step_len = [[0.0] * k for _ in range(n_steps)]
        matched = dropped = 0
        for s in range(n_steps):
            steps = [d["steps"][s] for d in docs]
            for i, (d, st) in enumerate(zip(docs, steps)):
                step_len[s][i] = max((st["end_us"] or st["start_us"]) - st["start_us"], 0.0)
            by_key = [{c[0]: c for c in st["calls"]} for st in steps]
            keys = [c[0] for c in steps[0]["calls"] if all(c[0] in m for m in by_key)]
            dropped += max(len(m) for m in by_key) - len(keys)
            matched += len(keys)
            seen = [False] * k
            for place, key in enumerate(keys):
                host = [by_key[i][key][1] - docs[i]["offset_us"] for i in range(k)]
                gpu = [by_key[i][key][2] for i in range(k)]
                times = [g - docs[i]["offset_us"] for i, g in enumerate(gpu)] if on_gpu and None not in gpu else host
                last, middle = max(times), statistics.median_low(times)
                for i in range(k):
                    wait[s][i] = max(wait[s][i], min(last - times[i], step_len[s][i]))
                    behind[s][i] = max(behind[s][i], min(times[i] - middle, step_len[s][i]))
                for arrivals, out in ((times, late), (host, host_late)):
                    order = sorted(range(k), key=lambda i: arrivals[i])
                    who, gap = order[-1], arrivals[order[-1]] - arrivals[order[-2]]
                    if gap > tie:
                        out[s][who] = max(out[s][who], min(gap, step_len[s][who]))
                        if out is late and not seen[who]:
                            seen[who] = True
                            first[who].append(place)
        if not matched:
            warnings.append("the ranks' timed arrivals share no collective (keys differ): they are not compared")
            return None
        if dropped:
            warnings.append(
                f"{dropped} collective call(s) of the timed steps ran on some ranks only: the {matched} every "
                "rank ran are compared"
            )
        ranks = [p.rank for p in profiles]

        def mean(rows, i):  # the median step: one step a busy host stalls does not move it
            return round(statistics.median(r[i] for r in rows), 3)

        return cls(
            ranks=ranks,
            steps=n_steps,
            matched=matched,
            on="GPU" if on_gpu else "host",
            tie_us=round(tie, 1),
            offsets_us={r: round(d["offset_us"], 3) for r, d in zip(ranks, docs)},
            drift_us=round(drift, 1),
            step_us={r: mean(step_len, i) for i, r in enumerate(ranks)},
            wait_us={r: mean(wait, i) for i, r in enumerate(ranks)},
            lateness_us={r: mean(late, i) for i, r in enumerate(ranks)},
            host_lateness_us={r: mean(host_late, i) for i, r in enumerate(ranks)},
            behind_us={r: mean(behind, i) for i, r in enumerate(ranks)},
            late_steps={r: round(sum(row[i] > 0 for row in late) / n_steps, 3) for i, r in enumerate(ranks)},
            first_late_call={r: int(statistics.median(first[i])) if first[i] else None for i, r in enumerate(ranks)},
            dropped=dropped,
        )

    def latest(self) -> int:
        """The rank whose late arrivals cost the others the most per step (ties: the most late steps)."""
        return max(self.ranks, key=lambda r: (self.lateness_us[r], self.late_steps[r], -r))

    def others_wait(self, rank: int) -> float:
        """The least any other rank waits per step: what removing `rank`'s lateness can give at most."""
        return min((self.wait_us[r] for r in self.ranks if r != rank), default=0.0)

    @property
    def basis(self) -> str:
        """How the timed arrivals were taken, in words."""
        return (
            f"{self.matched} collective calls of {self.steps} steps timed without the profiler, matched across "
            f"ranks by process group, call number, kind and size; {self.on} arrivals on rank 0's clock (offsets "
            f"from a barrier exchange; error and drift {self.tie_us:,.0f} µs, below which nobody is last); "
            "wait = the longest a rank waited for the last one in a step"
        )

    def summary(self) -> dict:
        """findings.json's `summary.ranks.timed_arrivals`."""
        return {
            "basis": self.basis,
            "on": self.on,
            "matched": self.matched,
            "steps": self.steps,
            "dropped": self.dropped,
            "clock_offset_us": {str(r): v for r, v in self.offsets_us.items()},
            "tie_us": self.tie_us,
            "drift_us": self.drift_us,
            "per_rank": [
                {
                    "rank": r,
                    "step_us": self.step_us[r],
                    "wait_us": self.wait_us[r],
                    "lateness_us": self.lateness_us[r],
                    "host_lateness_us": self.host_lateness_us[r],
                    "late_steps": self.late_steps[r],
                    "behind_us": self.behind_us[r],
                }
                for r in self.ranks
            ],
        }
