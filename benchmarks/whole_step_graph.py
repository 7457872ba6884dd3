"""Measure the fix host-bound names for a torch.compile(mode="reduce-overhead") step: one CUDA graph of the
whole step, captured by hand, against the compiled call that already replays inductor's graphs.

fixtures/captures/compile_graphs gets host-bound (low, cuda-graphs, est. about 1.3×): the GPU waits while
the compiled call's own Python runs (dynamo's guards, the AOT wrapper, the CUDA-graph tree's bookkeeping).
This times, without the profiler and synchronised after each step as diagnose's capture times steps:

- `reduce_overhead`: fixtures/workloads/compile_graphs.py's step as bundled (skip="none");
- `whole_step_graph`: the same model compiled in the default mode, its call captured once in a
  torch.cuda.CUDAGraph (static input, warmed up on a side stream) and replayed each step.

    python benchmarks/whole_step_graph.py [--steps 200] [--rounds 5] [--json OUT]

Needs a CUDA GPU. The two variants alternate round by round, each round in a fresh process; each
round's median is kept and the summary is the median over rounds. Writes the device, torch version and date with the numbers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_vs_hta import machine  # noqa: E402

VARIANTS = ("reduce_overhead", "whole_step_graph")


def _timed(step, n: int) -> list[float]:
    """µs of each of `n` calls of `step`, synchronised after each."""
    import torch

    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def _reduce_overhead_step():
    from fixtures.workloads.compile_graphs import make_step

    return make_step(skip="none")


def _whole_step_graph():
    """The bundled model, compiled in the default mode and captured whole in one CUDA graph."""
    import torch

    from fixtures.workloads.compile_graphs import Stack

    torch.manual_seed(0)
    model = Stack(512, 8).to("cuda", torch.bfloat16).eval()
    compiled = torch.compile(model)
    static_x = torch.randn(1, 512, device="cuda", dtype=torch.bfloat16)
    scale = torch.tensor(0.5, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(5):
            compiled(static_x, scale)  # compiles and warms up off the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        compiled(static_x, scale)
    return graph.replay


def _one(variant: str, steps: int) -> float:
    """The median step (µs) of `steps` timed calls of one variant, built and warmed up in this process."""
    step = _reduce_overhead_step() if variant == "reduce_overhead" else _whole_step_graph()
    _timed(step, 50)  # warm-up: compiles, the graph tree's recording and first replays
    return statistics.median(_timed(step, steps))


def main(argv: list[str] | None = None) -> int:
    """Time both variants, each round in a fresh process per variant (the two compiled copies of one module in
    one process hit an illegal memory access on an H100), and print (and optionally write) the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one round of one, in this process
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("whole_step_graph: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.variant:
        print(json.dumps({"variant": args.variant, "median_us": _one(args.variant, args.steps)}))
        return 0
    rounds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name in VARIANTS:
            run = subprocess.run(
                [sys.executable, __file__, "--variant", name, "--steps", str(args.steps)],
                capture_output=True,
                text=True,
                check=True,
            )
            rounds[name].append(json.loads(run.stdout.strip().splitlines()[-1])["median_us"])
    summary = {name: round(statistics.median(values), 2) for name, values in rounds.items()}
    result = {
        "what": "compile_graphs' step (reduce-overhead) against one hand-captured CUDA graph of the whole step",
        "device": torch.cuda.get_device_name(),
        "machine": machine(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "steps_per_round": args.steps,
        "round_medians_us": {k: [round(v, 2) for v in vs] for k, vs in rounds.items()},
        "median_step_us": summary,
        "speedup": round(summary["reduce_overhead"] / summary["whole_step_graph"], 3),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
