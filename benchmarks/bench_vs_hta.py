"""Benchmark diagnose against Holistic Trace Analysis (HTA) on tiled real traces, and check that
the two agree where they compute the same thing.

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install holistictraceanalysis matplotlib psutil
    /tmp/hta-venv/bin/python benchmarks/bench_vs_hta.py --sizes 10 100 1000

Run it with the benchmark venv's Python (HTA, matplotlib and psutil live there, never in the
project's venv); it runs diagnose with the project's own interpreter (--diagnose-python, default
.venv/bin/python of this checkout) in a child process, HTA in another, one after the other:

- time: wall seconds of the whole child process, median of --runs runs, nothing sampling it;
- memory: the maximum resident set of the largest process (from /usr/bin/time), and for diagnose
  the peak of the proportional set size (PSS) summed over the child and its own children,
  sampled every 20 ms in one more run that is not timed: diagnose decodes large traces in forked
  processes that share the file's pages, so the summed PSS is the honest figure for the memory
  the machine needed (HTA runs in one process: its maximum resident set is its peak);
- HTA: `TraceAnalysis(trace_dir=...)` (the load) then `get_idle_time_breakdown` on the trace's rank;
- agreement: GPU idle and kernel time per stream over each stream's span, and GPU idle over the
  device's span with all streams merged, from both tools, as a share of the span.

Traces are made by benchmarks/make_large_trace.py under --work (never inside the repository).
Results go to --json (default benchmarks/results.json) and, with --chart, to a PNG.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "peer-traces" / "hta" / "trace_diff" / "control" / "control.json.gz"
KERNEL_WAIT_US = 30  # HTA's consecutive_kernel_delay default, compared against µs

HTA_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
rank = sorted(ta.t.traces)[0]
idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
t2 = time.perf_counter()
out = {"load_s": t1 - t0, "idle_s": t2 - t1, "rank": int(rank), "streams": {}}
if len(sys.argv) > 2:
    df = ta.t.get_trace(rank)
    sym = ta.t.symbol_table.get_sym_id_map()
    cats = [sym.get(c, -1000) for c in ("kernel", "gpu_memset", "gpu_memcpy")]
    gpu = df[df["stream"].ne(-1) & df["cat"].isin(cats)]
    for stream, g in gpu.groupby("stream"):
        rows = idle[idle["stream"] == stream]
        out["streams"][str(int(stream))] = {
            "span_us": float((g["ts"] + g["dur"]).max() - g["ts"].min()),
            "kernel_us": float(g["dur"].sum()),
            **{r.idle_category: float(r.idle_time) for r in rows.itertuples()}}
    tb = ta.get_temporal_breakdown(visualize=False)
    tb = tb[tb["rank"] == rank].iloc[0]
    out["device"] = {"span_us": float(tb["kernel_time(us)"]), "idle_us": float(tb["idle_time(us)"])}
print("RESULT " + json.dumps(out))
"""


def diagnose_side(path: str) -> dict:
    """Per-stream and device-level GPU idle and kernel time as diagnose computes them, each over the
    span HTA uses (first GPU op start to last GPU op end). Runs in the project's venv."""
    import dataclasses

    import pandas as pd

    from diagnose.metrics.steps import Steps, StepWindow, find_steps
    from diagnose.metrics.timeline import build_timeline
    from diagnose.trace import load_target

    trace = load_target(path)
    device = trace.main_device
    ops = _as_hta_keeps(trace, trace.gpu[trace.gpu["device"] == device])

    def timeline(frame: pd.DataFrame):
        start, end = float(frame["ts"].min()), float(frame["end"].max())
        view = dataclasses.replace(trace, gpu=frame)
        steps = Steps([StepWindow(0, "span", start, end, start, end)], "span", annotated=False)
        return build_timeline(view, steps), end - start

    out = {"streams": {}}
    for stream, frame in ops.groupby("stream"):
        tl, span = timeline(frame)
        out["streams"][str(int(stream))] = {"span_us": span, "kernel_us": float(frame["dur"].sum()),
                                            "idle_us": tl.idle_us, **tl.idle_by_kind()}
    tl, span = timeline(ops)
    out["device"] = {"span_us": span, "idle_us": tl.idle_us}
    steps = find_steps(trace)
    tl = build_timeline(trace, steps)
    out["steps"] = {"how": steps.how, "n": len(steps.windows), "window_us": tl.window_us, "idle_us": tl.idle_us,
                    **tl.idle_by_kind()}
    return out


def _as_hta_keeps(trace, gpu):
    """The GPU ops HTA analyses: with two or more ProfilerStep ranges it drops the last step, keeping
    only the ops launched by a CPU call that started before that step (hta/common/trace.py,
    _filter_irrelevant_gpu_kernels)."""
    ops = trace.ops
    steps = ops[ops["name"].str.contains("ProfilerStep", regex=False)] if len(ops) else ops
    if steps["name"].nunique() < 2:
        return gpu
    last = steps["ts"].max()
    cpu = trace.runtime[trace.runtime["ts"] < last]
    return gpu[gpu["correlation"].isin(cpu["correlation"].dropna())]


def run_measured(cmd: list[str], env: dict | None = None, sample: bool = True) -> dict:
    """Run `cmd`, with `sample` sampling the PSS of its process tree; returns seconds, peaks and its stdout.

    Sampling reads /proc/PID/smaps of every process of the tree 50 times a second, which costs the
    measured processes CPU and page-table locks (about a quarter more wall time for diagnose at 1 GB
    on 2 cores), so timed runs do not sample and memory comes from a run of its own.
    """
    import psutil

    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    top = psutil.Process(proc.pid)
    peak_pss = peak_rss_sum = 0
    if not sample:
        proc.wait()
    while proc.poll() is None:
        pss = rss = 0
        try:
            for p in [top, *top.children(recursive=True)]:
                info = p.memory_full_info()
                pss += info.pss
                rss += info.rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
        peak_pss, peak_rss_sum = max(peak_pss, pss), max(peak_rss_sum, rss)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out, err = proc.communicate()
    return {"wall_s": wall, "code": proc.returncode, "peak_pss_mb": peak_pss / 1e6,
            "peak_rss_sum_mb": peak_rss_sum / 1e6, "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace")[-2000:]}


def measure(cmd: list[str], env: dict | None = None, sample: bool = False) -> dict:
    """One run of `cmd` under /usr/bin/time -v: wall seconds, the maximum resident set of its largest
    process and CPU seconds (from time), and with `sample` the PSS peak of its process tree."""
    res = run_measured(["/usr/bin/time", "-v", *cmd], env, sample)
    fields = {}
    for line in res["stderr"].splitlines():
        key, _, value = line.strip().rpartition(": ")
        fields[key] = value
    return {"wall_s": res["wall_s"], "peak_pss_mb": res["peak_pss_mb"], "peak_rss_sum_mb": res["peak_rss_sum_mb"],
            "maxrss_mb": int(fields.get("Maximum resident set size (kbytes)", 0)) * 1024 / 1e6,
            "user_s": float(fields.get("User time (seconds)", 0)), "sys_s": float(fields.get("System time (seconds)", 0)),
            "code": res["code"], "stdout": res["stdout"]}


def make_trace(size_mb: int, work: Path, source: Path, diagnose_python: str) -> Path:
    """The tiled trace of about `size_mb` MB, alone in its folder (HTA reads a whole folder)."""
    folder = work / f"{size_mb}mb"
    path = folder / "trace.json"
    meta = work / f"{size_mb}mb.made"  # outside the folder: HTA would read any .json in it
    if not path.exists() or not meta.exists():
        made = subprocess.run([diagnose_python, str(ROOT / "benchmarks" / "make_large_trace.py"), str(source),
                               str(path), "--size-mb", str(size_mb)], check=True, capture_output=True, text=True)
        meta.write_text(made.stdout)
    return path


def bench_size(path: Path, args) -> dict:
    """Time and memory of diagnose (--runs runs) and of HTA (--hta-runs runs) on one trace."""
    size = path.stat().st_size
    out = path.parent.parent / f"{path.parent.name}-diagnose-out"
    cmd = [args.diagnose_python, "-m", "diagnose", str(path), "-o", str(out), "-q"]
    keys = ("wall_s", "maxrss_mb", "user_s", "sys_s", "code")
    runs = [measure(cmd) for _ in range(args.runs)]
    sampled = measure(cmd, sample=True)  # memory of the whole process tree, in a run not timed
    row = {"file_mb": size / 1e6, "events": _events(path),
           "diagnose": {**{k: [r[k] for r in runs] for k in keys},
                        "peak_pss_mb": [sampled["peak_pss_mb"]], "peak_rss_sum_mb": [sampled["peak_rss_sum_mb"]],
                        "sampled_wall_s": [sampled["wall_s"]]}}
    if args.hta_runs and size / 1e6 <= args.hta_max_mb:
        hta_runs = []
        for _ in range(args.hta_runs):  # one process: its maximum resident set is its peak memory
            res = measure([sys.executable, "-c", HTA_CHILD, str(path.parent)])
            result = _result(res["stdout"])
            hta_runs.append({**{k: res[k] for k in keys}, "load_s": result.get("load_s"), "idle_s": result.get("idle_s")})
        row["hta"] = {k: [r[k] for r in hta_runs] for k in hta_runs[0]}
    return row


def agreement(path: Path, args) -> dict:
    """Both tools' per-stream and device numbers on one trace, and their differences as % of span."""
    ours = json.loads(subprocess.run([args.diagnose_python, __file__, "--diagnose-side", str(path)],
                                     capture_output=True, text=True, check=True).stdout)
    folder = path.parent if path.parent.name.endswith("mb") else _alone(path, args.work)
    theirs = _result(subprocess.run([sys.executable, "-c", HTA_CHILD, str(folder), "streams"],
                                    capture_output=True, text=True).stdout)
    exact = _result(subprocess.run([sys.executable, "-c", HTA_CHILD, str(folder), "streams"], capture_output=True,
                                   text=True, env={**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}).stdout)
    return {"trace": str(path), "diagnose_steps": ours["steps"], "hta_error": None if theirs else "no HTA result",
            "hta_default": _compare(ours, theirs), "hta_no_ns_rounding": _compare(ours, exact)}


def _compare(ours: dict, theirs: dict) -> dict:
    """Per-stream and device rows of both tools' numbers, with differences as % of the span."""
    rows = []
    for stream, d in ours["streams"].items():
        h = theirs.get("streams", {}).get(stream)
        if h is None:
            continue
        span = max(d["span_us"], h["span_us"], 1e-9)
        hta_idle = h.get("host_wait", 0) + h.get("kernel_wait", 0) + h.get("other", 0)
        rows.append({"stream": stream, "span_us": d["span_us"], "hta_span_us": h["span_us"],
                     "kernel_us": d["kernel_us"], "hta_kernel_us": h["kernel_us"],
                     "idle_us": d["idle_us"], "hta_idle_us": hta_idle,
                     "host_us": d["host"], "hta_host_us": h.get("host_wait", 0),
                     "kernel_wait_us": d["kernel"], "hta_kernel_wait_us": h.get("kernel_wait", 0),
                     "other_us": d["other"], "hta_other_us": h.get("other", 0),
                     "kernel_diff_pct": 100 * abs(d["kernel_us"] - h["kernel_us"]) / span,
                     "idle_diff_pct": 100 * abs(d["idle_us"] - hta_idle) / span,
                     "host_diff_pct": 100 * abs(d["host"] - h.get("host_wait", 0)) / span,
                     "kernel_wait_diff_pct": 100 * abs(d["kernel"] - h.get("kernel_wait", 0)) / span,
                     "other_diff_pct": 100 * abs(d["other"] - h.get("other", 0)) / span})
    device = None
    if "device" in theirs:
        span = max(ours["device"]["span_us"], theirs["device"]["span_us"], 1e-9)
        device = {"span_us": ours["device"]["span_us"], "hta_span_us": theirs["device"]["span_us"],
                  "idle_us": ours["device"]["idle_us"], "hta_idle_us": theirs["device"]["idle_us"],
                  "idle_diff_pct": 100 * abs(ours["device"]["idle_us"] - theirs["device"]["idle_us"]) / span}
    return {"streams": rows, "device": device}


def _alone(path: Path, work: Path) -> Path:
    """A folder holding only `path` (linked), for HTA's trace_dir."""
    folder = work / "agree" / hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / path.name
    if not link.exists():
        link.symlink_to(path.resolve())
    return folder


def _result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {}


def _events(path: Path) -> int | None:
    meta = path.parent.parent / f"{path.parent.name}.made"
    return json.loads(meta.read_text())["events"] if meta.exists() else None


def chart(results: dict, png: Path) -> None:
    """Time and peak memory against trace size, diagnose and HTA (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["sizes"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    x = [r["file_mb"] for r in rows]
    ax_t.plot(x, [statistics.median(r["diagnose"]["wall_s"]) for r in rows], "o-", label="diagnose (all rules + report)")
    hta = [r for r in rows if "hta" in r]
    if hta:
        ax_t.plot([r["file_mb"] for r in hta], [statistics.median(r["hta"]["wall_s"]) for r in hta], "s-",
                  label="HTA (load + idle breakdown)")
    ax_t.axhline(15, linestyle=":", color="grey", label="15 s target at 1 GB")
    ax_m.plot(x, [statistics.median(r["diagnose"]["peak_pss_mb"]) / 1e3 for r in rows], "o-",
              label="diagnose (peak PSS, all processes)")
    ax_m.plot(x, [statistics.median(r["diagnose"]["maxrss_mb"]) / 1e3 for r in rows], "o--",
              label="diagnose (max RSS, one process)")
    if hta:
        ax_m.plot([r["file_mb"] for r in hta], [statistics.median(r["hta"]["maxrss_mb"]) / 1e3 for r in hta], "s-",
                  label="HTA (max RSS, one process)")
    ax_m.plot(x, [2 * v / 1e3 for v in x], ":", color="grey", label="2 × file size")
    for ax, label in ((ax_t, "seconds"), (ax_m, "GB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trace size (MB, uncompressed JSON)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_title("Analysis time")
    ax_m.set_title("Peak memory")
    fig.suptitle(results["machine"]["summary"], fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)


def machine() -> dict:
    """What the numbers were measured on."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0)
    cores = len(os.sched_getaffinity(0))
    return {"cpu": cpu, "cores": cores, "memory_gb": round(mem / 2 ** 30, 1), "python": platform.python_version(),
            "summary": f"{cores} cores ({cpu}), {mem / 2 ** 30:.0f} GiB RAM, Python {platform.python_version()}"}


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--diagnose-side", help=argparse.SUPPRESS)
    p.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 1000], help="trace sizes in MB")
    p.add_argument("--source", type=Path, default=SOURCE, help="the real trace to tile")
    p.add_argument("--work", type=Path, default=Path("/tmp/diagnose-bench"), help="where traces are written")
    p.add_argument("--diagnose-python", default=str(ROOT / ".venv" / "bin" / "python"))
    p.add_argument("--runs", type=int, default=3, help="diagnose runs per size (median quoted)")
    p.add_argument("--hta-runs", type=int, default=1, help="HTA runs per size")
    p.add_argument("--hta-max-mb", type=float, default=1e9, help="skip HTA above this size")
    p.add_argument("--agree", type=Path, nargs="*", default=[], help="extra traces for the agreement check")
    p.add_argument("--agree-max-mb", type=float, default=200, help="agreement on tiled traces up to this size")
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results.json")
    p.add_argument("--chart", type=Path, help="write the time/memory chart (PNG) here")
    p.add_argument("--keep-sizes", action="store_true", help="keep the size rows already in --json (agreement only)")
    args = p.parse_args(argv)
    if args.diagnose_side:
        print(json.dumps(diagnose_side(args.diagnose_side)))
        return 0
    if ROOT in args.work.resolve().parents or args.work.resolve() == ROOT:
        print("bench_vs_hta: --work must be outside the repository", file=sys.stderr)
        return 2
    results = {"machine": machine(), "source": str(args.source), "sizes": [], "agreement": []}
    if args.json.exists() and args.keep_sizes:
        results["sizes"] = json.loads(args.json.read_text())["sizes"]
    for size in args.sizes:
        path = make_trace(size, args.work, args.source, args.diagnose_python)
        row = bench_size(path, args)
        results["sizes"].append(row)
        print(json.dumps({k: v for k, v in row.items()}), flush=True)
        if size <= args.agree_max_mb:
            results["agreement"].append(agreement(path, args))
    for extra in args.agree:
        results["agreement"].append(agreement(extra, args))
    args.json.write_text(json.dumps(results, indent=1))
    if args.chart:
        chart(results, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
