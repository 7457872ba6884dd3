"""Measure what the Python stack sampler costs a workload's step, without the profiler.

    python benchmarks/sampler_overhead.py fixtures/workloads/tiny_decode.py:make_step --steps 200

Runs the step (synchronising after each) in alternating blocks with and without the sampler
running (diagnose/child/sampler.py, default interval), after a warm-up, and prints the median
step time of each and the difference in %, plus µs spent per sample. The capture runs the sampler
only while the profiler runs, so this is an upper bound on what it adds to a profiled step and
exactly zero for the unprofiled timing run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diagnose.child.capture import load_function  # noqa: E402
from diagnose.child.sampler import StackSampler  # noqa: E402


def main() -> int:
    """Command line: TARGET (file.py:factory), --steps, --blocks, --param KEY=VALUE."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--steps", type=int, default=100, help="steps per block")
    parser.add_argument("--blocks", type=int, default=6, help="blocks of each kind, alternating")
    parser.add_argument("--param", action="append", default=[])
    args = parser.parse_args()
    import torch

    path, name = args.target.rsplit(":", 1)
    params = dict(p.split("=", 1) for p in args.param)
    params = {k: int(v) if v.isdigit() else v for k, v in params.items()}
    step = load_function(path, name)(**params)
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(10):
        step()
    sync()
    times = {"without": [], "with": []}
    per_sample = []
    for block in range(2 * args.blocks):
        kind = "with" if block % 2 else "without"
        sampler = StackSampler() if kind == "with" else None
        if sampler:
            sampler.start()
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            sync()
            times[kind].append(time.perf_counter() - t0)
        if sampler:
            sampler.stop()
            cost = sampler.to_dict()["cost"]
            if cost["samples"]:
                per_sample.append(cost["sampling_s"] / cost["samples"] * 1e6)
    base, sampled = (statistics.median(times[k]) * 1e6 for k in ("without", "with"))
    print(
        f"median step without sampler {base:,.1f} µs, with {sampled:,.1f} µs: "
        f"{(sampled / base - 1) * 100:+.2f} %; {statistics.median(per_sample or [0]):.1f} µs per sample"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
