"""Where diagnose's time goes on one trace: decode, metrics, rules and report, as ratios to the floor.

    .venv/bin/python benchmarks/bench_phases.py /tmp/big/trace.json --runs 3 [--before /tmp/old-src]
        [--hta /tmp/hta-venv/bin/python] [--memory]

Each run is a child process of the project's interpreter (--python), one after another and
interleaved: the floor (bench_vs_hta.py's FLOOR_CHILD: read the file and one typed
`msgspec.json.decode`, in one process), then diagnose split into phases, then, with --before,
the same phases on another source tree of diagnose (a `git archive` of an older commit; one from before
rules/ moved into diagnose/ needs `diagnose/rules` linked to its `rules/`), so a before/after comparison is made on the same
machine minutes apart. Phases, timed inside the child (imports and interpreter start left out):

- decode: `load_target` (reading, decoding in parallel, frames);
- metrics: the shared views of the trace built on the rules' Context before any rule runs
  (steps, timeline, budget, communication, launches, step kernels, op work, silent split,
  accounting, attention calls: whichever of them the tree's Metrics has);
- rules: `run_rules` with those views already built;
- report: the rest of `diagnose_trace` (summary, details, verdict) and the JSON and HTML reports.

The headline ratios are each phase ÷ the floor's read + decode of the same run pair, and
analysis (metrics + rules + report) ÷ the floor; beside them the whole child processes' wall
times, diagnose ÷ floor pair by pair. With --hta (the python of a venv holding
HolisticTraceAnalysis), HTA loads the same trace and breaks down its idle time once per trace,
after the first round (bench_vs_hta.py's HTA_CHILD): HTA ÷ diagnose, each diagnose run of the
trace against that HTA run. With --memory, one more run of the whole command
(`python -m diagnose TRACE -o OUT -q`), not timed, samples the proportional set size of it and
its decoding child (benchmarks/peak_memory.py): peak ÷ the file's size. Every child records the
load average before it started. Results go to --json as well as stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peak_memory  # noqa: E402
from bench_vs_hta import FLOOR_CHILD, HTA_CHILD, _alone, machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

PHASES_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import diagnose, diagnose.rules
from diagnose.ruleset import assemble
from diagnose.model.config import Config
from diagnose.rulebook.engine import Context, run_rules
from diagnose.report.html import render_html
from diagnose.report.json_report import render_json
from diagnose.trace.load import load_target
VIEWS = ("steps", "timeline", "budget", "comm", "launches", "step_kernels", "kernels_in_steps", "op_work",
         "silent", "accounting", "attention_calls")
t1 = time.perf_counter()
trace = load_target(sys.argv[1])
t2 = time.perf_counter()
ctx = Context(trace, Config())
m = ctx.metrics
built = [v for v in VIEWS if hasattr(type(m), v) and getattr(m, v) is not None]
t3 = time.perf_counter()
rules_s = []
def timed_rules(*a, **k):
    t = time.perf_counter()
    try:
        return run_rules(*a, **k)
    finally:
        rules_s.append(time.perf_counter() - t)
assemble.Context = lambda *a, **k: ctx  # diagnose_trace runs on the context whose views are built
assemble.run_rules = timed_rules
d = assemble.diagnose_trace(trace, Config())
render_json(d)
render_html(d)
t4 = time.perf_counter()
print("RESULT " + json.dumps({"import_s": t1 - t0, "decode_s": t2 - t1, "metrics_s": t3 - t2,
      "rules_s": rules_s[0], "report_s": t4 - t3 - rules_s[0], "views": built,
      "source": diagnose.__file__, "rules_source": diagnose.rules.__file__,
      "findings": sorted(f.rule for f in d.findings)}))
"""


def child(cmd: list[str], env: dict | None = None) -> dict:
    """Run one child and return its RESULT line, with its wall time and maximum resident set."""
    load = os.getloadavg()[0]
    t = time.perf_counter()
    # run from / so that `python -c` finds diagnose where PYTHONPATH or the installed package says,
    # not in the working directory
    done = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M", *cmd], capture_output=True, text=True, env=env, cwd="/")
    wall = time.perf_counter() - t
    if done.returncode:
        raise SystemExit(f"bench_phases: {cmd[:3]} failed:\n{done.stderr[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    rss = next(x for x in done.stderr.splitlines() if x.startswith("MAXRSS "))
    return {**json.loads(line[7:]), "wall_s": wall, "maxrss_mb": int(rss.split()[1]) / 1e3, "load_before": load}


def phases(python: str, trace: str, tree: Path | None) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return child([python, "-c", PHASES_CHILD, trace], env)


def summarise(runs: list[dict], floors: list[dict]) -> dict:
    """Medians (and ranges) of each phase, and of each phase ÷ its pair's floor."""
    out: dict = {}
    for key in ("decode_s", "metrics_s", "rules_s", "report_s", "analysis_s", "total_s", "wall_s", "maxrss_mb"):
        values = [r[key] for r in runs]
        ratios = [r[key] / (f["read_s"] + f["decode_s"]) for r, f in zip(runs, floors)]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        if key.endswith("_s") and key != "wall_s":
            out[key]["over_floor"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return out


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def whole(row: dict) -> dict:
    """Whole-process ratios: diagnose ÷ floor wall time pair by pair, HTA ÷ diagnose, peak memory ÷ file."""
    out: dict = {}
    for side in ("after", "before"):
        if row[side]:
            out[side + "_over_floor_wall"] = _spread(
                [r["wall_s"] / f["wall_s"] for r, f in zip(row[side], row["floor"])]
            )
    if row.get("hta"):
        out["hta_over_diagnose_wall"] = _spread([row["hta"]["wall_s"] / r["wall_s"] for r in row["after"]])
        out["hta_maxrss_over_file"] = row["hta"]["maxrss_mb"] / row["file_mb"]
    if row.get("memory"):
        out["diagnose_peak_pss_over_file"] = row["memory"]["peak_pss_sum"] / 1e6 / row["file_mb"]
    return out


def _line(row: dict) -> str:
    """One trace's medians: each phase in seconds and ÷ the floor."""
    out = [f"{row['trace']} ({row['file_mb']:.0f} MB): floor {row['floor_summary']['read_decode_s']['median']:.2f} s"]
    for side in ("after", "before"):
        if side + "_summary" in row:
            s = row[side + "_summary"]
            out.append(
                f"  {side}: "
                + ", ".join(
                    f"{k[:-2]} {s[k]['median']:.2f} s ({s[k]['over_floor']['median']:.2f}x)"
                    for k in ("decode_s", "metrics_s", "rules_s", "report_s", "analysis_s", "total_s")
                )
            )
    out += [
        f"  {k}: {v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})" if isinstance(v, dict) else f"  {k}: {v:.2f}"
        for k, v in row["whole"].items()
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", help="traces or capture folders (outside the repository)")
    p.add_argument("--runs", type=int, default=3, help="floor/diagnose(/before) rounds per trace")
    p.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    p.add_argument("--before", type=Path, help="another diagnose source tree to time the same way")
    p.add_argument("--json", type=Path, help="write the results here too")
    p.add_argument("--hta", help="python of a venv with HolisticTraceAnalysis: one HTA run per trace")
    p.add_argument("--memory", action="store_true", help="one more whole-command run sampling peak PSS")
    p.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/bench-phases"),
        help="scratch folder (HTA's trace folder, the reports of the memory run)",
    )
    args = p.parse_args(argv)
    results = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": {"start": os.getloadavg()},
        "traces": [],
    }
    for trace in args.traces:
        file = Path(trace)
        data = file if file.is_file() else next(file.glob("trace.json*"))
        row = {"trace": trace, "file_mb": data.stat().st_size / 1e6, "floor": [], "after": [], "before": []}
        for i in range(args.runs):
            row["floor"].append(child([args.python, "-c", FLOOR_CHILD, str(data)]))
            row["after"].append(phases(args.python, trace, None))
            if args.before:
                row["before"].append(phases(args.python, trace, args.before))
            if i == 0 and args.hta:
                row["hta"] = child([args.hta, "-c", HTA_CHILD, str(_alone(data, args.work))])
        if args.memory:
            load = os.getloadavg()[0]
            row["memory"] = {
                **peak_memory.measure(
                    [args.python, "-m", "diagnose", trace, "-o", str(args.work / "memory-run"), "-q"]
                ),
                "load_before": load,
            }
            row["memory"].pop("timeline")
        for side in ("after", "before"):
            for r in row[side]:
                r["analysis_s"] = r["metrics_s"] + r["rules_s"] + r["report_s"]
                r["total_s"] = r["decode_s"] + r["analysis_s"]
            if row[side]:
                row[side + "_summary"] = summarise(row[side], row["floor"])
        floor = [f["read_s"] + f["decode_s"] for f in row["floor"]]
        row["floor_summary"] = {
            "read_decode_s": {"median": statistics.median(floor), "min": min(floor), "max": max(floor)}
        }
        row["whole"] = whole(row)
        results["traces"].append(row)
        print(_line(row), flush=True)
    results["load_average"]["end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
