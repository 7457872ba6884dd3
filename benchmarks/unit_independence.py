"""How much a verdict hangs on the unit: every single-rank capture's trace file analysed with its steps as
found, and again with the unit changed: two steps read as one (`double`, a trace whose iteration is found
at twice its length) or each step cut in two at its middle (`half`, a step shorter than one iteration).

    python benchmarks/unit_independence.py double|half [NAME...]

A rule whose decision and estimate come from shares of the window and from counts over it gives the
same first finding and fix, and an estimate within 15 %, either way. Prints one row per capture and a
closing line with the counts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import diagnose.metrics.shared as metrics  # noqa: E402
from diagnose.metrics.steps import Steps, StepWindow  # noqa: E402
from unmarked_steps import alone, outcome, single_rank_captures  # noqa: E402

UNITS = ("double", "half")


def doubled(steps: Steps) -> Steps:
    """The steps merged two by two (a last odd one is dropped)."""
    w = steps.windows
    if len(w) < 2:
        return steps
    merged = [
        dataclasses.replace(a, index=i, cpu_end=b.cpu_end, end=b.end, n_gpu_ops=a.n_gpu_ops + b.n_gpu_ops)
        for i, (a, b) in enumerate(zip(w[::2], w[1::2]))
    ]
    return dataclasses.replace(steps, windows=merged)


def halved(steps: Steps) -> Steps:
    """Each step cut in two at the middle of its CPU range (its GPU window cut at the same time, or at its
    start when the GPU work starts later)."""
    out: list[StepWindow] = []
    for w in steps.windows:
        mid = (w.cpu_start + w.cpu_end) / 2
        gpu_mid = min(max(mid, w.start), w.end)
        first = w.n_gpu_ops // 2
        out.append(dataclasses.replace(w, index=len(out), cpu_end=mid, end=gpu_mid, n_gpu_ops=first))
        out.append(dataclasses.replace(w, index=len(out), cpu_start=mid, start=gpu_mid, n_gpu_ops=w.n_gpu_ops - first))
    return dataclasses.replace(steps, windows=out)


@contextlib.contextmanager
def unit(change: str):
    """Analyses made inside read every trace's steps changed by `change` ("double" or "half")."""
    regroup = {"double": doubled, "half": halved}[change]
    found = metrics.find_steps
    metrics.find_steps = lambda trace: regroup(found(trace))
    try:
        yield
    finally:
        metrics.find_steps = found


def compare(path: Path, change: str) -> dict:
    """The outcome of one trace with its steps as found and with the unit changed, and whether they agree."""
    before = outcome(path)
    with unit(change):
        after = outcome(path)
    same = (before["rule"], before["fix"]) == (after["rule"], after["fix"])
    est = None
    if same and before["estimate"] and after["estimate"]:
        est = abs(after["estimate"] / before["estimate"] - 1)
    return {"before": before, "after": after, "same_first": same, "estimate_error": est}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison over the captures and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("change", choices=UNITS)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder in single_rank_captures():
            if args.names and folder.name not in args.names:
                continue
            row = compare(alone(folder / "trace.json.gz", Path(tmp)), args.change)
            rows.append(row)
            b, a = row["before"], row["after"]
            flag = "" if row["same_first"] and (row["estimate_error"] or 0) <= 0.15 else "  <- differs"
            print(
                f"{folder.name:32s} {b['rule']:>16s} {b['fix']:>18s} {b['estimate'] or '-':>6} | "
                f"{a['rule']:>16s} {a['fix']:>18s} {a['estimate'] or '-':>6}{flag}",
                flush=True,
            )
    n = len(rows)
    same = sum(r["same_first"] for r in rows)
    est_rows = [r for r in rows if r["estimate_error"] is not None]
    est_ok = sum(r["estimate_error"] <= 0.15 for r in est_rows)
    print(
        f"unit {args.change}: {n} traces · same first finding {same}/{n} · estimate within 15 % {est_ok}/{len(est_rows)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
