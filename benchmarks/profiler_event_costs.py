"""What torch.profiler costs the host per recorded event, measured directly on tight loops.

    python benchmarks/profiler_event_costs.py [--device cuda] [--iters 4000] [--json OUT]

Each loop is timed without the profiler and under it (settings as diagnose captures: activities
CPU + CUDA, record_shapes=True, profile_memory=True, with_stack=False; then the same with
with_stack=True), alternating, five rounds; the profiled loops' traces are counted by event kind.
The cost per event of a kind is the added time per iteration ÷ the events per iteration:

- `view`: one ATen op that launches nothing (`x.view(-1)`): the cost of a CPU op;
- `add`: one ATen op that launches one kernel (`x.add_(1)`): a CPU op and a launch;
- `python`: the same `add` inside a Python function, under with_stack=True: what each
  `python_function` event adds on top;
- `alloc`: one allocation and its free (`torch.empty(1024)`, dropped at once): a CPU op and two
  allocator events; on CUDA also profiled with the allocator's history on (Python stacks, as
  diagnose's capture records it in its profiled warm-up steps): what the history adds per event.

The medians of the rounds are printed with their spread, as JSON too with --json. These are the
direct measurements beside the fit of benchmarks/profiler_overhead.py: the fit reads real
captures, this script isolates one kind of event at a time. It needs torch (and a GPU for
`--device cuda`, the setting the captures were recorded in).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path


def _loops(torch, device: str):
    """The loops, each a (name, function of iteration count) pair."""
    x = torch.zeros(1024, device=device)

    def view(n: int) -> None:
        for _ in range(n):
            x.view(-1)

    def add(n: int) -> None:
        for _ in range(n):
            x.add_(1)

    def step(y):
        return y.add_(1)

    def python(n: int) -> None:
        for _ in range(n):
            step(x)

    def alloc(n: int) -> None:
        for _ in range(n):
            torch.empty(1024, device=device)

    return (("view", view), ("add", add), ("python", python), ("alloc", alloc))


def _sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(torch, device: str, fn, n: int, profiler=None, history: bool = False) -> tuple[float, dict]:
    """µs per iteration of `fn(n)`, and the profiled trace's events by kind (empty unprofiled); `history`: with
    the allocator's history on (Python stacks, as diagnose's capture records it) while the loop runs."""
    _sync(torch, device)
    if history:
        torch.cuda.memory._record_memory_history(max_entries=20000, stacks="python")
        try:
            return _timed(torch, device, fn, n, profiler)
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
    if profiler is None:
        t0 = time.perf_counter()
        fn(n)
        _sync(torch, device)
        return (time.perf_counter() - t0) * 1e6 / n, {}
    with tempfile.TemporaryDirectory() as tmp:
        with profiler as prof:
            t0 = time.perf_counter()
            fn(n)
            _sync(torch, device)
            elapsed = time.perf_counter() - t0
        path = Path(tmp) / "trace.json.gz"
        prof.export_chrome_trace(str(path))
        with gzip.open(path, "rt") as fh:
            events = json.load(fh).get("traceEvents", [])
    counts: dict = {}
    for e in events:
        if e.get("ph") == "X":
            counts[e.get("cat", "")] = counts.get(e.get("cat", ""), 0) + 1
        elif e.get("ph") == "i" and e.get("name") == "[memory]":
            counts["allocator"] = counts.get("allocator", 0) + 1
    return elapsed * 1e6 / n, counts


def _profiler(torch, device: str, with_stack: bool):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=acts, record_shapes=True, profile_memory=True, with_stack=with_stack)


def measure(device: str, iters: int, rounds: int) -> dict:
    """Per loop: µs per iteration unprofiled and profiled (with_stack off and on), events per
    iteration by category, each round's figures and their medians."""
    import torch

    out: dict = {"device": device, "torch": torch.__version__, "iters": iters, "rounds": rounds, "loops": {}}
    if device == "cuda":
        out["gpu"] = torch.cuda.get_device_name()
    cuda = device == "cuda"  # the allocator's history is CUDA's
    for name, fn in _loops(torch, device):
        fn(200)  # warm-up: first calls, allocator, module loading
        rows = []
        for _ in range(rounds):
            plain, _ = _timed(torch, device, fn, iters)
            prof, counts = _timed(torch, device, fn, iters, _profiler(torch, device, False))
            stack, stack_counts = _timed(torch, device, fn, iters, _profiler(torch, device, True))
            hist = _timed(torch, device, fn, iters, _profiler(torch, device, False), history=True)[0] if cuda else None
            rows.append(
                {
                    "plain_us": plain,
                    "profiled_us": prof,
                    "with_stack_us": stack,
                    "with_history_us": hist,
                    "events_per_iter": {k: v / iters for k, v in counts.items()},
                    "events_per_iter_with_stack": {k: v / iters for k, v in stack_counts.items()},
                }
            )
        out["loops"][name] = {
            "rounds": rows,
            "plain_us": statistics.median(r["plain_us"] for r in rows),
            "added_us": statistics.median(r["profiled_us"] - r["plain_us"] for r in rows),
            "added_with_stack_us": statistics.median(r["with_stack_us"] - r["plain_us"] for r in rows),
            "added_with_history_us": statistics.median(r["with_history_us"] - r["plain_us"] for r in rows)
            if cuda
            else None,
            "added_range_us": [
                min(r["profiled_us"] - r["plain_us"] for r in rows),
                max(r["profiled_us"] - r["plain_us"] for r in rows),
            ],
        }
    return out


def _us(value: float | None) -> str:
    """A measured µs figure, or "not measured" (the allocator's history off CUDA)."""
    return "not measured" if value is None else f"{value:6.2f} µs"


def main() -> None:
    """Measure and print the per-event costs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--iters", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(args.device, args.iters, args.rounds)
    for name, loop in result["loops"].items():
        events = loop["rounds"][0]["events_per_iter_with_stack"]
        print(
            f"{name:8s} plain {loop['plain_us']:7.2f} µs/iter; profiler adds {loop['added_us']:6.2f} µs "
            f"({loop['added_range_us'][0]:.2f}–{loop['added_range_us'][1]:.2f}); with_stack adds "
            f"{loop['added_with_stack_us']:6.2f} µs; with the allocator history {_us(loop['added_with_history_us'])}; "
            f"events/iter (with_stack) {json.dumps({k: round(v, 2) for k, v in events.items()})}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
