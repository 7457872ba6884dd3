"""How much host time torch.profiler adds, fitted from the bundled captures (groundwork: not yet used
by the rules).

Every capture in fixtures/captures holds a profiled trace and the step timed without the profiler.
The fit reads the trace file alone (as a trace from elsewhere would be read) and models the
profiler's own host time per step as

    overhead ≈ a × CPU ops + b × driver launches (cuLaunchKernel: Triton, inductor) + c × other runtime calls

(non-negative least squares on the relative error, over the captures whose host-side idle is at
least a fifth of the profiled step, the ones where the overhead shows in the step). The estimated
unprofiled step is the profiled step less the overhead, capped at the host-side idle the trace
shows. Fitted on every other capture (sorted by name) and judged on the rest:

    python benchmarks/profiler_overhead.py            # fit, held-out table, summary line
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnose.metrics import Metrics  # noqa: E402
from diagnose.trace import load_target  # noqa: E402

CAPTURES = ROOT / "fixtures" / "captures"
FEATURES = ("cpu_ops", "driver_launches", "other_runtime", "compiled_regions")
WITHIN = 0.25  # the bar: the estimated unprofiled step within 25 % of the measured one


def measure(folder: Path) -> dict | None:
    """The fit's inputs for one capture folder, read from its trace file alone; None without timing."""
    trace_file = folder / "trace.json.gz"
    if not (folder / "meta.json").exists() or not trace_file.exists():
        return None  # a sweep or a rank folder: its points are measured one by one
    timing = (load_target(folder).capture or {}).get("timing") or {}
    if not timing.get("median_us"):
        return None
    trace = load_target(trace_file)
    metrics = Metrics(trace)
    budget, windows = metrics.budget, metrics.steps.windows
    lo, hi = min(w.cpu_start for w in windows), max(w.end for w in windows)
    n = budget.n_steps

    def per_step(frame, keep=None) -> float:
        ts = frame["ts"].to_numpy(float)
        inside = (ts >= lo) & (ts < hi)
        if keep is not None:
            inside &= keep
        return float(inside.sum()) / n

    names = trace.runtime["name"].astype(str)
    return {
        "capture": folder.name,
        "unprofiled": float(timing["median_us"]),
        "profiled": budget.profiled_step_us,
        "host_idle": budget.host_paced_us + budget.host_silent_us,
        "cpu_ops": per_step(trace.cpu_ops),
        "driver_launches": per_step(trace.runtime, names.str.startswith("cuLaunch").to_numpy()),
        "other_runtime": per_step(trace.runtime, (~names.str.contains("Launch")).to_numpy()),
        "compiled_regions": per_step(
            trace.ops, trace.ops["name"].astype(str).str.startswith("Torch-Compiled Region").to_numpy()
        ),
    }


def fit(rows: list[dict]) -> np.ndarray:
    """Non-negative µs per feature (projected gradient on the relative error)."""
    shown = [r for r in rows if r["host_idle"] > 0.2 * r["profiled"]]
    x = np.array([[r[f] for f in FEATURES] for r in shown]) / np.array([[r["unprofiled"]] for r in shown])
    y = np.array([(r["profiled"] - r["unprofiled"]) / r["unprofiled"] for r in shown])
    w, lipschitz = np.zeros(len(FEATURES)), np.linalg.norm(x, 2) ** 2
    for _ in range(50_000):
        w = np.maximum(0.0, w - x.T @ (x @ w - y) / lipschitz)
    return w


def estimate(row: dict, w: np.ndarray) -> float:
    """The unprofiled step the model gives for one capture."""
    overhead = min(float(sum(w[i] * row[f] for i, f in enumerate(FEATURES))), row["host_idle"])
    return row["profiled"] - overhead


def main() -> int:
    """Fit on every other capture, print the held-out table and the summary line."""
    rows = [r for r in (measure(p) for p in sorted(CAPTURES.iterdir()) if p.is_dir()) if r]
    calibration, held = rows[::2], rows[1::2]
    w = fit(calibration)
    print("µs per step: " + ", ".join(f"{f} {v:.2f}" for f, v in zip(FEATURES, w)))
    print("| capture | measured µs | profiled µs | estimated µs | error | profiled's error |")
    print("| --- | --- | --- | --- | --- | --- |")
    errors, plain = [], []
    for r in held:
        est = estimate(r, w)
        errors.append(est / r["unprofiled"] - 1)
        plain.append(r["profiled"] / r["unprofiled"] - 1)
        print(
            f"| {r['capture']} | {r['unprofiled']:,.0f} | {r['profiled']:,.0f} | {est:,.0f} | {errors[-1]:+.0%} | "
            f"{plain[-1]:+.0%} |"
        )
    inside = sum(abs(e) <= WITHIN for e in errors)
    before = sum(abs(e) <= WITHIN for e in plain)
    print(
        f"held out: {inside} of {len(held)} within {WITHIN:.0%} (profiled step as is: {before}); "
        f"median |error| {np.median(np.abs(errors)):.1%} ({np.median(np.abs(plain)):.1%} as is)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
