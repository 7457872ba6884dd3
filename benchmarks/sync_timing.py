"""How much a step synchronised at its boundary (as diagnose's capture times it) is longer than the same
step in a loop that never synchronises.

    python benchmarks/sync_timing.py [--steps 30] [--rounds 5] [--json OUT]   # needs a CUDA GPU

diagnose's capture times each unprofiled step between two `torch.cuda.synchronize()` calls
(diagnose/child/steps.py), and the profiler-overhead replay estimates that same quantity
(diagnose/metrics/overhead.py). A training or serving loop that does not synchronise lets the host
run ahead, so a GPU-bound step there does not wait for its own first launch. This times a few
workloads of fixtures/workloads/library_zoo.py both ways, alternating, `--rounds` times: `synced` is
the median of per-step times with a sync at every boundary, `free` the whole loop of `--steps`
steps with one sync at its end, divided by the steps. Each workload is warmed up first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

WORKLOADS = {
    "resnet50 train b64 bf16 (GPU-bound)": {"model": "tv:resnet50", "task": "train", "batch": 64, "dtype": "bf16"},
    "bert infer b64 s128 bf16 (GPU-bound)": {
        "model": "hf:bert",
        "task": "infer",
        "batch": 64,
        "seq": 128,
        "dtype": "bf16",
    },
    "resnet18 infer b1 (launch-bound)": {"model": "tv:resnet18", "task": "infer", "batch": 1},
}


def _synced(torch, step, n: int) -> float:
    """Median µs of `n` steps, each between two synchronisations."""
    times = []
    torch.cuda.synchronize()
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def _free(torch, step, n: int) -> float:
    """µs per step of `n` steps with one synchronisation at the end."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / n


def measure(steps: int, rounds: int) -> dict:
    """{workload: {synced_us, free_us, ratio}} with the rounds' values."""
    import torch

    from fixtures.workloads.library_zoo import make_step

    out = {}
    for name, params in WORKLOADS.items():
        step = make_step(**params)
        for _ in range(5):
            step()
        synced, free = [], []
        for _ in range(rounds):
            synced.append(_synced(torch, step, steps))
            free.append(_free(torch, step, steps))
        ratios = [s / f for s, f in zip(synced, free)]
        out[name] = {
            "params": params,
            "synced_us": synced,
            "free_us": free,
            "synced_over_free": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
        }
        print(
            f"{name:40s} synced {statistics.median(synced):10,.0f} µs  free {statistics.median(free):10,.0f} µs  "
            f"ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})",
            flush=True,
        )
        del step
        torch.cuda.empty_cache()
    return out


def main() -> int:
    """Time each workload both ways; print, and write JSON with --json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    from bench_vs_hta import machine

    results = measure(args.steps, args.rounds)
    if args.json:
        doc = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            "machine": {**machine(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__},
            "steps": args.steps,
            "rounds": args.rounds,
            "workloads": results,
        }
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
