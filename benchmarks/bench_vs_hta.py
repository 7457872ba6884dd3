"""Benchmark diagnose against Holistic Trace Analysis (HTA) on tiled real traces, and check that
the two agree where they compute the same thing.

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install holistictraceanalysis matplotlib psutil
    /tmp/hta-venv/bin/python benchmarks/bench_vs_hta.py --sizes 10 100 1000

Run it with the benchmark venv's Python (HTA, matplotlib and psutil live there, never in the
project's venv); it runs diagnose with the project's own interpreter (--diagnose-python, default
.venv/bin/python of this checkout) in a child process, the floor and HTA in others, one at a time:

- the floor: a plain single-process read of the same file plus one `msgspec.json.decode` of its
  bytes into typed Structs naming only the fields diagnose reads (FLOOR_CHILD, run with
  --diagnose-python): the least any msgspec-based tool has to do before analysing anything;
- interleaving: at each size the runs alternate diagnose, floor, diagnose, floor... (--runs pairs),
  with the HTA run(s) after the first pair, so each ratio compares runs minutes apart at most. The
  machine's speed drifts between sessions, so the headline figures are the ratios
  diagnose ÷ floor (pair by pair) and HTA ÷ diagnose (each HTA run against each diagnose run of
  the same size), medians with ranges, and the absolute seconds come with the machine and date;
- time: wall seconds of the whole child process, nothing sampling it;
- memory: the maximum resident set of the largest process (from /usr/bin/time), and for diagnose
  the peak of the proportional set size (PSS) summed over the child and its own children,
  sampled every 20 ms in one more run that is not timed: diagnose decodes large traces in forked
  processes that share the file's pages, so the summed PSS is the honest figure for the memory
  the machine needed (HTA runs in one process: its maximum resident set is its peak);
- HTA: `TraceAnalysis(trace_dir=...)` (the load) then `get_idle_time_breakdown` on the trace's rank;
- agreement: GPU idle and kernel time per stream over each stream's span, and GPU idle over the
  device's span with all streams merged, from both tools, as a share of the span.

Traces are made by benchmarks/make_large_trace.py under --work (never inside the repository) from
--source (default: HTA's trace_diff/control trace, vendored in fixtures/peer/hta). Results go to
--json (default benchmarks/results.json), with paths relative to the repository (or to --work,
written `<work>/...`) and never absolute, and with --chart to a PNG.
"""

from __future__ import annotations

import argparse
import datetime
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
SOURCE = ROOT / "fixtures" / "peer" / "hta" / "trace_diff" / "control" / "control.json.gz"
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


FLOOR_STRUCTS = r"""
import sys, time
import msgspec
from diagnose.trace.kineto import Event  # the same typed records diagnose decodes into


class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []
"""
FLOOR_CHILD = (
    FLOOR_STRUCTS
    + r"""
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    data = f.read()
t1 = time.perf_counter()
trace = msgspec.json.decode(data, type=Trace)
t2 = time.perf_counter()
print("RESULT " + msgspec.json.encode({"read_s": t1 - t0, "decode_s": t2 - t1,
                                       "events": len(trace.traceEvents)}).decode())
"""
)


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
        out["streams"][str(int(stream))] = {
            "span_us": span,
            "kernel_us": float(frame["dur"].sum()),
            "idle_us": tl.idle_us,
            **tl.idle_by_kind(),
        }
    tl, span = timeline(ops)
    out["device"] = {"span_us": span, "idle_us": tl.idle_us}
    steps = find_steps(trace)
    tl = build_timeline(trace, steps)
    out["steps"] = {
        "how": steps.how,
        "n": len(steps.windows),
        "window_us": tl.window_us,
        "idle_us": tl.idle_us,
        **tl.idle_by_kind(),
    }
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
    return {
        "wall_s": wall,
        "code": proc.returncode,
        "peak_pss_mb": peak_pss / 1e6,
        "peak_rss_sum_mb": peak_rss_sum / 1e6,
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace")[-2000:],
    }


def measure(cmd: list[str], env: dict | None = None, sample: bool = False) -> dict:
    """One run of `cmd` under /usr/bin/time -v: wall seconds, the maximum resident set of its largest
    process and CPU seconds (from time), and with `sample` the PSS peak of its process tree."""
    res = run_measured(["/usr/bin/time", "-v", *cmd], env, sample)
    fields = {}
    for line in res["stderr"].splitlines():
        key, _, value = line.strip().rpartition(": ")
        fields[key] = value
    return {
        "wall_s": res["wall_s"],
        "peak_pss_mb": res["peak_pss_mb"],
        "peak_rss_sum_mb": res["peak_rss_sum_mb"],
        "maxrss_mb": int(fields.get("Maximum resident set size (kbytes)", 0)) * 1024 / 1e6,
        "user_s": float(fields.get("User time (seconds)", 0)),
        "sys_s": float(fields.get("System time (seconds)", 0)),
        "code": res["code"],
        "stdout": res["stdout"],
    }


def make_trace(size_mb: int, work: Path, source: Path, diagnose_python: str) -> Path:
    """The tiled trace of about `size_mb` MB, alone in its folder (HTA reads a whole folder)."""
    folder = work / f"{size_mb}mb"
    path = folder / "trace.json"
    meta = work / f"{size_mb}mb.made"  # outside the folder: HTA would read any .json in it
    if not path.exists() or not meta.exists():
        made = subprocess.run(
            [
                diagnose_python,
                str(ROOT / "benchmarks" / "make_large_trace.py"),
                str(source),
                str(path),
                "--size-mb",
                str(size_mb),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        meta.write_text(made.stdout)
    warm(path)
    return path


def warm(path: Path) -> None:
    """Flush what was just written and read the trace once, untimed, so every timed run finds it in
    the page cache and none competes with the write-back of a freshly made trace. (It does not
    remove everything first-run: in both recordings of 2026-11-30 the first floor run at 1 GB had
    2.4–3.6× the system time of the later two, with or without this.)"""
    os.sync()
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


KEYS = ("wall_s", "maxrss_mb", "user_s", "sys_s", "code")


def bench_size(path: Path, args) -> dict:
    """Time and memory of diagnose and of the floor (--runs pairs, interleaved D F D F ...) and of
    HTA (--hta-runs runs, after the first pair) on one trace, with the ratios of runs of this session."""
    size = path.stat().st_size
    out = path.parent.parent / f"{path.parent.name}-diagnose-out"
    cmd = [args.diagnose_python, "-m", "diagnose", str(path), "-o", str(out), "-q"]
    floor_cmd = [args.diagnose_python, "-c", FLOOR_CHILD, str(path)]
    do_hta = args.hta_runs and size / 1e6 <= args.hta_max_mb
    order, runs, floors, hta_runs = [], [], [], []
    for i in range(args.runs):
        runs.append(measure(cmd))
        order.append("diagnose")
        res = measure(floor_cmd)
        result = _result(res["stdout"])
        floors.append(
            {
                **{k: res[k] for k in KEYS},
                "read_s": result.get("read_s"),
                "decode_s": result.get("decode_s"),
                "events": result.get("events"),
            }
        )
        order.append("floor")
        if i == 0 and do_hta:
            for _ in range(args.hta_runs):  # one process: its maximum resident set is its peak memory
                res = measure([sys.executable, "-c", HTA_CHILD, str(path.parent)])
                result = _result(res["stdout"])
                hta_runs.append(
                    {**{k: res[k] for k in KEYS}, "load_s": result.get("load_s"), "idle_s": result.get("idle_s")}
                )
                order.append("hta")
    sampled = measure(cmd, sample=True)  # memory of the whole process tree, in a run not timed
    row = {
        "file_mb": size / 1e6,
        "events": _events(path),
        "order": order + ["diagnose (sampled, not timed)"],
        "diagnose": {
            **{k: [r[k] for r in runs] for k in KEYS},
            "peak_pss_mb": [sampled["peak_pss_mb"]],
            "peak_rss_sum_mb": [sampled["peak_rss_sum_mb"]],
            "sampled_wall_s": [sampled["wall_s"]],
        },
        "floor": {k: [r[k] for r in floors] for k in floors[0]},
    }
    if hta_runs:
        row["hta"] = {k: [r[k] for r in hta_runs] for k in hta_runs[0]}
    row["ratios"] = ratios(row)
    return row


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def ratios(row: dict) -> dict:
    """The session's ratios at one size: diagnose ÷ floor pair by pair (each diagnose run and the
    floor run right after it), HTA ÷ diagnose for every HTA run against every diagnose run of the
    size, and peak memory ÷ file size."""
    d, f = row["diagnose"]["wall_s"], row["floor"]["wall_s"]
    out = {
        "diagnose_over_floor": _spread([a / b for a, b in zip(d, f)]),
        "diagnose_pss_over_file": row["diagnose"]["peak_pss_mb"][0] / row["file_mb"],
        "diagnose_maxrss_over_file": statistics.median(row["diagnose"]["maxrss_mb"]) / row["file_mb"],
        "floor_maxrss_over_file": statistics.median(row["floor"]["maxrss_mb"]) / row["file_mb"],
    }
    if "hta" in row:
        out["hta_over_diagnose"] = _spread([h / a for h in row["hta"]["wall_s"] for a in d])
        out["hta_over_floor"] = _spread([h / b for h in row["hta"]["wall_s"] for b in f])
        out["hta_maxrss_over_file"] = statistics.median(row["hta"]["maxrss_mb"]) / row["file_mb"]
        out["hta_over_diagnose_memory"] = statistics.median(row["hta"]["maxrss_mb"]) / row["diagnose"]["peak_pss_mb"][0]
    return out


def agreement(path: Path, args) -> dict:
    """Both tools' per-stream and device numbers on one trace, and their differences as % of span."""
    ours = json.loads(
        subprocess.run(
            [args.diagnose_python, __file__, "--diagnose-side", str(path)], capture_output=True, text=True, check=True
        ).stdout
    )
    folder = path.parent if path.parent.name.endswith("mb") else _alone(path, args.work)
    theirs = _result(
        subprocess.run([sys.executable, "-c", HTA_CHILD, str(folder), "streams"], capture_output=True, text=True).stdout
    )
    exact = _result(
        subprocess.run(
            [sys.executable, "-c", HTA_CHILD, str(folder), "streams"],
            capture_output=True,
            text=True,
            env={**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"},
        ).stdout
    )
    return {
        "trace": portable(path, args.work),
        "diagnose_steps": ours["steps"],
        "hta_error": None if theirs else "no HTA result",
        "hta_default": _compare(ours, theirs),
        "hta_no_ns_rounding": _compare(ours, exact),
    }


def _compare(ours: dict, theirs: dict) -> dict:
    """Per-stream and device rows of both tools' numbers, with differences as % of the span."""
    rows = []
    for stream, d in ours["streams"].items():
        h = theirs.get("streams", {}).get(stream)
        if h is None:
            continue
        span = max(d["span_us"], h["span_us"], 1e-9)
        hta_idle = h.get("host_wait", 0) + h.get("kernel_wait", 0) + h.get("other", 0)
        rows.append(
            {
                "stream": stream,
                "span_us": d["span_us"],
                "hta_span_us": h["span_us"],
                "kernel_us": d["kernel_us"],
                "hta_kernel_us": h["kernel_us"],
                "idle_us": d["idle_us"],
                "hta_idle_us": hta_idle,
                "host_us": d["host"],
                "hta_host_us": h.get("host_wait", 0),
                "kernel_wait_us": d["kernel"],
                "hta_kernel_wait_us": h.get("kernel_wait", 0),
                "other_us": d["other"],
                "hta_other_us": h.get("other", 0),
                "kernel_diff_pct": 100 * abs(d["kernel_us"] - h["kernel_us"]) / span,
                "idle_diff_pct": 100 * abs(d["idle_us"] - hta_idle) / span,
                "host_diff_pct": 100 * abs(d["host"] - h.get("host_wait", 0)) / span,
                "kernel_wait_diff_pct": 100 * abs(d["kernel"] - h.get("kernel_wait", 0)) / span,
                "other_diff_pct": 100 * abs(d["other"] - h.get("other", 0)) / span,
            }
        )
    device = None
    if "device" in theirs:
        span = max(ours["device"]["span_us"], theirs["device"]["span_us"], 1e-9)
        device = {
            "span_us": ours["device"]["span_us"],
            "hta_span_us": theirs["device"]["span_us"],
            "idle_us": ours["device"]["idle_us"],
            "hta_idle_us": theirs["device"]["idle_us"],
            "idle_diff_pct": 100 * abs(ours["device"]["idle_us"] - theirs["device"]["idle_us"]) / span,
        }
    return {"streams": rows, "device": device}


def _alone(path: Path, work: Path) -> Path:
    """A folder holding only `path` (linked), for HTA's trace_dir."""
    folder = work / "agree" / hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / path.name
    if not link.exists():
        link.symlink_to(path.resolve())
    return folder


def portable(path: Path, work: Path | None = None) -> str:
    """`path` as results.json stores it: relative to the repository, or `<work>/...` under --work,
    else its file name alone; never an absolute path of the recording machine."""
    resolved = Path(path).resolve()
    for base, prefix in ((ROOT, ""), (work.resolve() if work else None, "<work>/")):
        if base is not None and (base == resolved or base in resolved.parents):
            return prefix + resolved.relative_to(base).as_posix()
    return Path(path).name


def _result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
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
    ax_t.plot(
        x, [statistics.median(r["diagnose"]["wall_s"]) for r in rows], "o-", label="diagnose (all rules + report)"
    )
    hta = [r for r in rows if "hta" in r]
    if hta:
        ax_t.plot(
            [r["file_mb"] for r in hta],
            [statistics.median(r["hta"]["wall_s"]) for r in hta],
            "s-",
            label="HTA (load + idle breakdown)",
        )
    floor = [r for r in rows if "floor" in r]
    if floor:
        ax_t.plot(
            [r["file_mb"] for r in floor],
            [statistics.median(r["floor"]["wall_s"]) for r in floor],
            "^--",
            label="floor (read + msgspec decode, one process)",
        )
    ax_m.plot(
        x,
        [statistics.median(r["diagnose"]["peak_pss_mb"]) / 1e3 for r in rows],
        "o-",
        label="diagnose (peak PSS, all processes)",
    )
    ax_m.plot(
        x,
        [statistics.median(r["diagnose"]["maxrss_mb"]) / 1e3 for r in rows],
        "o--",
        label="diagnose (max RSS, one process)",
    )
    if hta:
        ax_m.plot(
            [r["file_mb"] for r in hta],
            [statistics.median(r["hta"]["maxrss_mb"]) / 1e3 for r in hta],
            "s-",
            label="HTA (max RSS, one process)",
        )
    if floor:
        ax_m.plot(
            [r["file_mb"] for r in floor],
            [statistics.median(r["floor"]["maxrss_mb"]) / 1e3 for r in floor],
            "^--",
            label="floor (max RSS, one process)",
        )
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
    fig.suptitle(
        f"{results['machine']['summary']}; {results.get('date', '')} (shared machine: "
        "compare the lines, not the absolute seconds)",
        fontsize=8,
    )
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)


def machine() -> dict:
    """What the numbers were measured on."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem = next(
        (
            int(line.split()[1]) * 1024
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    cores = len(os.sched_getaffinity(0))
    return {
        "cpu": cpu,
        "cores": cores,
        "memory_gb": round(mem / 2**30, 1),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "summary": f"{cores} cores ({cpu}), {mem / 2**30:.0f} GiB RAM, Python {platform.python_version()}",
    }


def versions(diagnose_python: str) -> dict:
    """The versions the numbers depend on: diagnose's commit, msgspec, pandas, HTA."""
    probe = (
        "import json, msgspec, pandas; print(json.dumps({'msgspec': msgspec.__version__, "
        "'pandas': pandas.__version__}))"
    )
    out = {}
    try:
        out.update(
            json.loads(
                subprocess.run([diagnose_python, "-c", probe], capture_output=True, text=True, check=True).stdout
            )
        )
    except (subprocess.CalledProcessError, json.JSONDecodeError, OSError):
        pass
    try:
        from importlib.metadata import version

        out["hta"] = version("HolisticTraceAnalysis")
    except Exception:  # noqa: BLE001 (HTA absent: the floor ratio only)
        out["hta"] = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
        out["diagnose_commit"] = commit + ("+changes" if dirty else "")
    except (subprocess.CalledProcessError, OSError):
        out["diagnose_commit"] = None
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--diagnose-side", help=argparse.SUPPRESS)
    p.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 1000], help="trace sizes in MB")
    p.add_argument("--source", type=Path, default=SOURCE, help="the real trace to tile")
    p.add_argument("--work", type=Path, default=Path("/tmp/diagnose-bench"), help="where traces are written")
    p.add_argument("--diagnose-python", default=str(ROOT / ".venv" / "bin" / "python"))
    p.add_argument("--runs", type=int, default=3, help="diagnose/floor pairs per size (interleaved)")
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
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {
        "machine": machine(),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "versions": versions(args.diagnose_python),
        "source": portable(args.source),
        "load_average": {"start": os.getloadavg()},
        "sizes": [],
        "agreement": [],
    }
    if args.json.exists() and args.keep_sizes:
        results["sizes"] = json.loads(args.json.read_text())["sizes"]
    for size in args.sizes:
        path = make_trace(size, args.work, args.source, args.diagnose_python)
        load = os.getloadavg()
        row = bench_size(path, args)
        row["load_average"] = {"before": load, "after": os.getloadavg()}
        results["sizes"].append(row)
        print(json.dumps({k: v for k, v in row.items()}), flush=True)
        if size <= args.agree_max_mb:
            results["agreement"].append(agreement(path, args))
    for extra in args.agree:
        results["agreement"].append(agreement(extra, args))
    results["load_average"]["end"] = os.getloadavg()
    results["finished"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    args.json.write_text(json.dumps(results, indent=1))
    if args.chart:
        chart(results, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
