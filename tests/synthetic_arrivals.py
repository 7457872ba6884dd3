"""SYNTHETIC rank folders made from one real capture, for the arrival tests (tests/test_arrivals.py).

Every rank is a copy of one real rank's trace with its own clock offset (its ts shifted by a
constant). A *late* rank's host is held up before the first collective of every step by a
`delay_us` host range (`range_name`: a DataLoader range, a logging range, ...): its host events
after that point and its GPU work from that collective on move later by the delay. The other
ranks' first collective of each step waits for it (its kernel lasts `delay_us` longer) and their
GPU work after it moves later by as much, so every collective still ends together on all ranks.
A rank given `extra_gpu_us` runs extra compute kernels on a side stream while it waits: more GPU
work that does not delay its arrival.
"""

from __future__ import annotations

import gc
import gzip
import json
from bisect import bisect_left, bisect_right
from contextlib import contextmanager
from pathlib import Path

import msgspec


def read(path: Path) -> dict:
    """A trace file (plain or gzipped) as a dict."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f, _gc_paused():
        return json.load(f)


def _first_collectives(events: list) -> list[tuple[float, float, float]]:
    """Per step (ProfilerStep# or diagnose/step range): (the step's start + 1 µs, where a late rank is
    held up; start and end of the kernel of the step's first record_param_comms)."""
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
        and str(e.get("name", "")).startswith(("ProfilerStep#", "diagnose/step"))
    )
    comms = sorted(
        (e["ts"], e["args"]["External id"])
        for e in events
        if e.get("name") == "record_param_comms" and e.get("cat") == "cpu_op"
    )
    kernels = {
        e["args"].get("External id"): e
        for e in events
        if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("ncclDevKernel")
    }
    out = []
    for start, end in steps:
        first = next(((ts, ext) for ts, ext in comms if start <= ts < end and ext in kernels), None)
        if first:
            k = kernels[first[1]]
            out.append((start + 1.0, k["ts"], k["ts"] + k["dur"]))
    return out


def _late_gpu_starts(events: list, host_at: list[float]) -> list[float]:
    """Where a late rank's GPU work launched after each hold-up starts (its GPU waits for its host)."""
    launched = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in (e.get("args") or {})
    }
    gpu = [
        (e["ts"], launched.get((e.get("args") or {}).get("correlation"), -1))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    return [min((ts for ts, at in gpu if at >= h), default=1e30) for h in host_at]


@contextmanager
def _gc_paused():
    """The cyclic collector off for a block that makes ~10^5 containers (it would scan them several
    times over for no garbage: ~3x the time of a trace's decode or copy)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _copy(trace: dict) -> dict:
    """A deep copy of plain JSON data (msgspec's round trip: ~6x copy.deepcopy's speed)."""
    with _gc_paused():
        return msgspec.json.decode(msgspec.json.encode(trace))


def make_rank(
    trace: dict,
    rank: int,
    world: int,
    *,
    clock_us: float = 0.0,
    late: bool = False,
    delay_us: float = 0.0,
    range_name: str = "",
    extra_gpu_us: float = 0.0,
) -> dict:
    """One SYNTHETIC rank from `trace` (module docstring)."""
    t = _copy(trace)
    events = t["traceEvents"]
    firsts = _first_collectives(events)
    host_at = sorted(h for h, _, _ in firsts)
    gpu_at = sorted(s for _, s, _ in firsts)
    late_gpu_at = sorted(_late_gpu_starts(events, host_at)) if late else []
    first_kernels = {(s, e) for _, s, e in firsts}
    main = next(e for e in events if e.get("name") == "record_param_comms")
    added = []
    for e in events:
        if "ts" not in e or e.get("ph") not in ("X", "i", "I"):
            continue
        ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        on_gpu = e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
        if on_gpu:  # counts of the sorted hold-up times before ts, by bisection
            before = bisect_right(late_gpu_at, ts) if late else bisect_left(gpu_at, ts)
            if not late and (ts, ts + dur) in first_kernels:
                e["dur"] = dur + delay_us
            e["ts"] = ts + before * delay_us
        elif late:
            before = bisect_right(host_at, ts)
            spans = max(0, bisect_left(host_at, ts + dur) - before)  # hold-ups strictly inside (ts, ts + dur)
            e["ts"] = ts + before * delay_us
            if "dur" in e:
                e["dur"] = dur + spans * delay_us
    for k, (h, s, e_) in enumerate(firsts):
        if late and delay_us:
            added.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": range_name,
                    "pid": main["pid"],
                    "tid": main["tid"],
                    "ts": h + k * delay_us,
                    "dur": delay_us,
                    "args": {},
                }
            )
        if extra_gpu_us and not late:
            n = 4
            for j in range(n):
                added.append(
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": "void synthetic_extra_work_kernel<float>()",
                        "pid": 0,
                        "tid": 99,
                        "ts": e_ + k * delay_us + j * extra_gpu_us / n,
                        "dur": extra_gpu_us / n * 0.98,
                        "args": {
                            "device": 0,
                            "stream": 99,
                            "grid": [132, 1, 1],
                            "block": [256, 1, 1],
                            "correlation": 10**9 + k * n + j,
                        },
                    }
                )
    events.extend(added)
    for e in events:
        if "ts" in e:
            e["ts"] = float(e["ts"]) + clock_us
    t["distributedInfo"] = {**(t.get("distributedInfo") or {}), "rank": rank, "world_size": world}
    return t


def make_folder(
    folder: Path,
    source: Path,
    world: int,
    *,
    late: int | None = None,
    delay_us: float = 0.0,
    range_name: str = "",
    extra_gpu: dict | None = None,
    meta: dict | None = None,
) -> Path:
    """A SYNTHETIC rank folder (rank-K/trace.json) of `world` copies of `source`, rank `late` held up."""
    real = read(source)
    for k in range(world):
        sub = folder / f"rank-{k}"
        sub.mkdir(parents=True, exist_ok=True)
        made = make_rank(
            real,
            k,
            world,
            clock_us=1000.0 * k - 3000.0 * (k % 3),
            late=k == late,
            delay_us=delay_us,
            range_name=range_name,
            extra_gpu_us=(extra_gpu or {}).get(k, 0.0),
        )
        (sub / "trace.json").write_bytes(msgspec.json.encode(made))
        if meta is not None:
            (sub / "meta.json").write_text(json.dumps(meta))
    return folder
