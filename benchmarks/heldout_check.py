"""Judge diagnose on the held-out captures of fixtures/record_heldout.py: nothing in it was fitted on them.

    python benchmarks/heldout_check.py ROOT [--json OUT]

ROOT holds one capture folder per workload (trace.json.gz and meta.json, which carries the step timed
without the profiler and, under "heldout", the first findings a performance engineer accepts). For
each folder it reports:

- the profiler-overhead model with its committed costs (diagnose/metrics/overhead.py, no refit): the
  unprofiled step estimated from the trace file alone against the measured one;
- the first finding of the folder (judged on the measured step), of the trace file alone on the
  profiled step as recorded (`timeline.profiler_overhead=0`) and of the trace file alone on the
  estimate (`timeline.profiler_overhead=1`, the default), and whether each is one the engineer accepts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_vs_hta import machine  # noqa: E402
from profiler_overhead import count_within, first_finding  # noqa: E402
from diagnose import analyze  # noqa: E402
from diagnose.metrics import Metrics  # noqa: E402
from diagnose.metrics.overhead import prepare  # noqa: E402
from diagnose.trace import load_target  # noqa: E402

ESTIMATED = {"timeline.profiler_overhead": 1.0}
PROFILED = {"timeline.profiler_overhead": 0.0}


def _first(diagnosis) -> dict:
    """The first finding's rule id and estimated speedup ("none" without a finding)."""
    rule, speedup = first_finding(diagnosis)
    return {"rule": rule, "speedup": speedup}


def judge(folder: Path) -> dict | None:
    """One capture folder's row; None when it holds no timed trace."""
    meta_path, trace_path = folder / "meta.json", folder / "trace.json.gz"
    if not meta_path.exists() or not trace_path.exists():
        return None
    meta = json.loads(meta_path.read_text())
    measured = (meta.get("timing") or {}).get("median_us")
    if not measured:
        return None
    trace = load_target(trace_path)
    replay = prepare(trace, Metrics(trace).steps.windows)
    estimate = replay.estimate() if replay is not None else None
    expect = (meta.get("heldout") or {}).get("expect") or []
    row = {
        "measured_us": measured,
        "profiled_us": estimate.profiled_us if estimate else None,
        "estimated_us": estimate.step_us if estimate else None,
        "folder": _first(analyze(folder)),
        "trace_profiled": _first(analyze(trace_path, overrides=PROFILED)),
        "trace_estimated": _first(analyze(trace_path, overrides=ESTIMATED)),
        "expect": expect,
        "why": (meta.get("heldout") or {}).get("why"),
        "params": meta.get("params"),
        "recorded_at": meta.get("recorded_at"),
        "device": {k: (meta.get("device") or {}).get(k) for k in ("name", "torch")},
    }
    for key in ("profiled", "estimated"):
        value = row[f"{key}_us"]
        row[f"{key}_error"] = value / measured - 1 if value else None
    return row


def _within(rows: dict, key: str) -> str:
    return count_within({name: r[key] for name, r in rows.items()})


def summary(rows: dict) -> dict:
    """The counts the docs quote."""
    expected = {n: r for n, r in rows.items() if r["expect"]}
    out = {
        "captures": len(rows),
        "estimate": _within(rows, "estimated_error"),
        "profiled_as_is": _within(rows, "profiled_error"),
    }
    for key in ("folder", "trace_profiled", "trace_estimated"):
        out[f"{key}_as_expected"] = sum(r[key]["rule"] in r["expect"] for r in expected.values())
        if key != "folder":
            out[f"{key}_same_as_folder"] = sum(r[key]["rule"] == r["folder"]["rule"] for r in rows.values())
    out["with_expectation"] = len(expected)
    return out


def _show(first: dict, expect: list) -> str:
    mark = "" if first["rule"] in expect else " ✗"
    return first["rule"] + (f" {first['speedup']:.2f}×" if first["speedup"] else "") + mark


def table(rows: dict) -> list[str]:
    """A markdown table: one line per capture."""
    lines = [
        "| capture | measured µs | profiled | estimated | folder | trace, profiled | trace, estimated | expected |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in sorted(rows.items()):
        err = lambda k: f"{r[k]:+.0%}" if r[k] is not None else "—"  # noqa: E731
        lines.append(
            f"| {name} | {r['measured_us']:,.0f} | {err('profiled_error')} | {err('estimated_error')} | "
            f"{_show(r['folder'], r['expect'])} | {_show(r['trace_profiled'], r['expect'])} | "
            f"{_show(r['trace_estimated'], r['expect'])} | {' / '.join(r['expect'])} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Judge every capture folder under ROOT; print the table and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = {}
    for folder in sorted(p for p in args.root.iterdir() if p.is_dir()):
        row = judge(folder)
        if row is not None:
            rows[folder.name] = row
            print(f"{folder.name}: {row['folder']['rule']}", file=sys.stderr, flush=True)
    print("\n".join(table(rows)))
    result = summary(rows)
    print(json.dumps(result, indent=1))
    if args.json:
        doc = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            "machine": machine(),
            "summary": result,
            "captures": rows,
        }
        args.json.write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
