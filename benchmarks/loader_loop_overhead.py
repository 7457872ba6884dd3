"""What torch.profiler costs a loop fed by DataLoader worker processes, and why the replay misses it.

    python benchmarks/loader_loop_overhead.py --out DIR [CONFIG...]     # needs a CUDA GPU
    python benchmarks/loader_loop_overhead.py --analyse DIR [--json F]  # no GPU, no torch

The replay of diagnose/metrics/overhead.py estimates a step without the profiler to within 25 % on
most of the project's captures, but on the loops whose DataLoader workers do heavy Python work
(python_batch with 12 workers, host_loader with 4) it leaves the estimate 2-4x the measured step.
This script separates the suspects, one fresh process per configuration:

- the harness: torch.profiler's defaults (a plain user loop) or diagnose's (record_shapes,
  profile_memory, the allocator's history with Python stacks, the Python stack sampler), and each
  of diagnose's extras removed in turn;
- the workers: 12, 4 or 2 worker processes on the same loop;
- the GIL: diagnose's harness with the interpreter's switch interval cut from 5 to 0.5 ms ("switch"):
  the allocator's history takes the GIL at every allocation to record its Python stack, and a thread
  that waits for the GIL waits up to one switch interval before the holder is asked to let go;
- the sampler: diagnose's harness with another version of the stack sampler ("old_sampler"), read from
  the file $OLD_SAMPLER (`git show 1d514ac:diagnose/child/sampler.py > /tmp/old_sampler.py`: the
  sampler that held the last sample's frames until the next one);
- the time: profiling right after the timed steps, or after the loader has had seconds to fill
  its prefetch queue.

Each process warms up 5 steps, times 30 steps without the profiler (a CUDA sync after each), then
profiles 1 + 4 steps exactly as diagnose's function mode does (one absorbing the profiler's start,
each step synchronised and wall-timed), then times 30 more steps without it. It writes DIR/NAME.json
(timings, the host's core count and load) and DIR/NAME.trace.json.gz (the profiled steps, each in a
`diagnose/step N` range so that the analysis finds the same steps as in a capture).

`--analyse` reads them back and prints, per configuration, the measured unprofiled step, the profiled
step, and what the trace file alone estimates (diagnose.metrics.overhead), as JSON too with --json.
First run (an H100, 2026-12-07): benchmarks/results-loader-loop-h100.json, read in docs/profiler-overhead.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from whole_step_graph import _timed  # noqa: E402  (µs of each step, synchronised after each)

# name: (workload module, params, harness, seconds to wait before the profiled steps)
CONFIGS = {
    "pb12_plain": ("python_batch", {"workers": 12, "length": 128, "d_model": 2048}, "plain", 0.0),
    "pb12_diagnose": ("python_batch", {"workers": 12, "length": 128, "d_model": 2048}, "diagnose", 0.0),
    "pb12_no_sampler": ("python_batch", {"workers": 12, "length": 128, "d_model": 2048}, "no_sampler", 0.0),
    "pb12_no_history": ("python_batch", {"workers": 12, "length": 128, "d_model": 2048}, "no_history", 0.0),
    "pb12_late": ("python_batch", {"workers": 12, "length": 128, "d_model": 2048}, "diagnose", 3.0),
    "pb4_diagnose": ("python_batch", {"workers": 4, "length": 128, "d_model": 2048}, "diagnose", 0.0),
    "pb2_diagnose": ("python_batch", {"workers": 2, "length": 128, "d_model": 2048}, "diagnose", 0.0),
    "tp_diagnose": ("transfer", {"copy": "pinned"}, "diagnose", 0.0),
    "tp_plain": ("transfer", {"copy": "pinned"}, "plain", 0.0),
    "tp_no_history": ("transfer", {"copy": "pinned"}, "no_history", 0.0),
    "tp_switch": ("transfer", {"copy": "pinned"}, "switch", 0.0),
    "pb12_switch": ("python_batch", {"workers": 12, "length": 128, "d_model": 2048}, "switch", 0.0),
    "pb12_old_sampler": ("python_batch", {"workers": 12, "length": 128, "d_model": 2048}, "old_sampler", 0.0),
    "tp_old_sampler": ("transfer", {"copy": "pinned"}, "old_sampler", 0.0),
}
WARMUP, TIMED, PROFILED = 5, 30, 4


def run_one(name: str, out: Path) -> None:
    """Run one configuration in this process and write its timings and trace."""
    import torch

    sys.path.insert(0, str(ROOT / "fixtures" / "workloads"))
    sys.path.insert(0, str(ROOT))
    module, params, harness, wait_s = CONFIGS[name]
    step = __import__(module).make_step(**params)
    _timed(step, WARMUP)
    before = _timed(step, TIMED)
    time.sleep(wait_s)
    if harness == "switch":
        sys.setswitchinterval(0.0005)
    diagnose_like = harness != "plain"
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        record_shapes=diagnose_like,
        profile_memory=diagnose_like,
    )
    if harness in ("diagnose", "no_sampler", "switch", "old_sampler"):
        torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
    prof.start()
    sampler = None
    if harness in ("diagnose", "no_history", "switch", "old_sampler"):
        sampler = _sampler_class(harness)()
        sampler.start(mark=torch.profiler.record_function)
    load = os.getloadavg()
    with torch.profiler.record_function("diagnose/warmup 0"):
        _timed(step, 1)
    profiled = []
    for i in range(PROFILED):
        with torch.profiler.record_function(f"diagnose/step {i}"):
            profiled += _timed(step, 1)
    if sampler is not None:
        sampler.stop()
    prof.stop()
    if harness in ("diagnose", "no_sampler", "switch", "old_sampler"):
        torch.cuda.memory._record_memory_history(enabled=None)
    raw = out / f"{name}.trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / f"{name}.trace.json.gz", "wb", compresslevel=6) as dst:
        dst.write(src.read())
    raw.unlink()
    after = _timed(step, TIMED)
    record = {
        "name": name,
        "module": module,
        "params": params,
        "harness": harness,
        "wait_s": wait_s,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "load_at_profile": load,
        "timed_before_us": before,
        "profiled_us": profiled,
        "timed_after_us": after,
        "samples": len(sampler.samples) if sampler else 0,
        "sampling_s": sampler.sampling_ns / 1e9 if sampler else 0.0,
    }
    (out / f"{name}.json").write_text(json.dumps(record, indent=1))
    os._exit(0)  # persistent DataLoader workers: do not wait for their orderly shutdown


def _sampler_class(harness: str):
    """diagnose's StackSampler, or for "old_sampler" the one defined in the file $OLD_SAMPLER."""
    if harness != "old_sampler":
        from diagnose.child.sampler import StackSampler

        return StackSampler
    import importlib.util

    spec = importlib.util.spec_from_file_location("old_sampler", os.environ["OLD_SAMPLER"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StackSampler


def run_all(names: list[str], out: Path) -> None:
    """Each configuration in a fresh process, one after the other."""
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--out", str(out)], timeout=300)
        print(f"{name}: rc {proc.returncode}, {time.time() - t0:.0f} s", flush=True)


def analyse(folder: Path) -> list[dict]:
    """Measured, profiled and estimated step of each configuration written in `folder`."""
    sys.path.insert(0, str(ROOT))
    from diagnose import analyze

    rows = []
    for path in sorted(folder.glob("*.json")):
        rec = json.loads(path.read_text())
        diagnosis = analyze(folder / f"{rec['name']}.trace.json.gz")
        top = diagnosis.findings[0] if diagnosis.findings else None
        med = statistics.median
        rows.append(
            {
                "name": rec["name"],
                "gpu": rec["gpu"],
                "cpus": rec["cpus"],
                "load": rec["load_at_profile"][0],
                "timed_before_us": round(med(rec["timed_before_us"])),
                "timed_after_us": round(med(rec["timed_after_us"])),
                "profiled_us": round(med(rec["profiled_us"])),
                "estimated_us": round(diagnosis.summary.step_time_us),
                "first": f"{top.rule} {top.severity}" if top else "none",
                "allocation_us": round(_allocation_us(folder / f"{rec['name']}.trace.json.gz")),
                "sample_us": round(rec.get("sampling_s", 0.0) / rec["samples"] * 1e6) if rec.get("samples") else 0,
            }
        )
    return rows


def _allocation_us(path: Path) -> float:
    """Host time per profiled step in the allocation ops (aten::empty, aten::empty_strided) of every thread:
    where the allocator's history waits for the GIL to record a Python stack."""
    from diagnose.trace import load_target

    ops = load_target(path).ops
    steps = ops[(ops["cat"] == "user_annotation") & ops["name"].str.startswith("diagnose/step")]
    if not len(steps):
        return 0.0
    inside = (ops["ts"] >= steps["ts"].min()) & (ops["ts"] < steps["end"].max())
    allocation = (ops["cat"] == "cpu_op") & ops["name"].isin(("aten::empty", "aten::empty_strided"))
    return float(ops.loc[inside & allocation, "dur"].sum()) / len(steps)


def main() -> int:
    """Command line: run on a GPU, or analyse what came back."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", default=list(CONFIGS))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one")
    ap.add_argument("--analyse", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.one:
        run_one(args.one, args.out)
        return 0
    if args.analyse:
        rows = analyse(args.analyse)
        for r in rows:
            ratio = r["estimated_us"] / r["timed_before_us"] if r["estimated_us"] else float("nan")
            print(
                f"{r['name']:18} measured {r['timed_before_us']:>7,} (after {r['timed_after_us']:>7,}) µs · "
                f"profiled {r['profiled_us']:>7,} · estimated {r['estimated_us'] or 0:>7,} ({ratio:.2f}x) · "
                f"allocation ops {r['allocation_us']:,} µs a step · sampler {r['sample_us']} µs a sample · load {r['load']:.1f}/{r['cpus']} · first {r['first']}"
            )
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    run_all(args.configs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
