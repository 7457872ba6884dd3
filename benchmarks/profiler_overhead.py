"""Fit the profiler's cost per recorded event (diagnose/metrics/overhead.py's COSTS) on the bundled
captures, and judge the replay on captures it was not fitted on.

Every capture folder in fixtures/captures holds a profiled trace and the step timed without the
profiler (`timing.median_us` of meta.json). The fit reads the trace file alone, as a trace from
elsewhere would be read, replays its steps with a cost per event taken out (overhead.py) and
searches the costs (Nelder–Mead on their logarithms) that bring the replayed step closest to the
measured one: the mean of |log(estimated ÷ measured)|, each capture's term capped at 0.7 so that a
capture the model cannot explain (a workload whose profiled step is slow for another reason) does not
drag the others. Python function events, which no capture records, keep the cost measured directly
by benchmarks/profiler_event_costs.py (overhead.py's MEASURED).

    python benchmarks/profiler_overhead.py               # held-out check, then the fit on all
    python benchmarks/profiler_overhead.py --json OUT    # the same, figures as JSON too
    python benchmarks/profiler_overhead.py --verdicts    # each folder's verdict against its bare trace's
    python benchmarks/profiler_overhead.py --evaluate --json OUT  # COSTS in use judged again, no fit
    python benchmarks/profiler_overhead.py --plain --json OUT     # PLAIN_SCALE on the plain user loops
    python benchmarks/profiler_overhead.py --unshaped-check       # diagnose's capture with and without shapes

Plain: the user loops of fixtures/plain were recorded as most people record, without record_shapes or
profile_memory, those of fixtures/plain_shapes the same way with record_shapes=True, and each was timed
without the profiler. Their events cost the host less than the calibration captures' (diagnose's own,
with allocator events, allocator history and the sampler), so one factor on COSTS is fitted on them
(grid search, the same objective), and judged on each loop with the factor fitted on the other loops.

Held-out check: the captures sorted by name are split in two halves (every other one); the costs
fitted on each half judge the other, and every capture's held-out error is reported. The final
COSTS are fitted on every capture; tests/test_profiler_overhead.py checks that COSTS are what this
fit gives (to 1 %), so they cannot drift from the data.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_vs_hta import machine  # noqa: E402
from diagnose.metrics import Metrics  # noqa: E402
from diagnose.metrics.overhead import COSTS, MEASURED, PLAIN_SCALE, Replay, prepare  # noqa: E402
from diagnose.trace import load_target  # noqa: E402

CAPTURES = ROOT / "fixtures" / "captures"
PLAIN = (ROOT / "fixtures" / "plain", ROOT / "fixtures" / "plain_shapes")  # fixtures/record_plain.py
UNSHAPED = ROOT / "fixtures" / "unshaped"  # fixtures/record_unshaped.py: one GPU, with and without shapes
SCALES = np.round(np.arange(0.02, 1.51, 0.01), 2)  # the plain-loop factors tried
WITHIN = 0.25  # the bar: the estimated unprofiled step within 25 % of the measured one
CAP = 0.7  # a capture's largest term in the objective (|log ratio|)
FITTED = tuple(k for k in COSTS if k not in MEASURED)
START = {k: 5.0 for k in FITTED} | {
    "compiled_region": 100.0,
    "inductor_kernel": 50.0,
    "shaped_input": 0.2,
}
ITERATIONS = 400


def captures() -> dict[str, tuple[Replay, float, float]]:
    """{capture: (its replay read from the trace file alone, measured unprofiled median µs, mean µs)}."""
    out = {}
    for folder in sorted(p for p in CAPTURES.iterdir() if p.is_dir()):
        meta = folder / "meta.json"
        if not meta.exists() or not (folder / "trace.json.gz").exists():
            continue  # a sweep or a rank folder: its points are measured one by one
        timing = json.loads(meta.read_text()).get("timing") or {}
        if not timing.get("median_us"):
            continue
        trace = load_target(folder / "trace.json.gz")
        replay = prepare(trace, Metrics(trace).steps.windows)
        if replay is not None:
            out[folder.name] = (replay, float(timing["median_us"]), float(timing.get("mean_us") or 0.0))
    return out


def reference_launch_us(data: dict) -> float:
    """The calibration captures' median launch call: the median of their medians."""
    calls = [r.host.launch_call_us for r, _, _ in data.values() if r.host.launch_call_us > 0]
    return float(np.median(calls))


def errors(data: dict, costs: dict, names=None) -> dict[str, float]:
    """Each capture's relative error of the estimated unprofiled step under `costs`."""
    names = sorted(data) if names is None else names
    return {n: data[n][0].estimate(costs).step_us / data[n][1] - 1 for n in names}


def _costs(x: np.ndarray) -> dict:
    return {k: float(np.exp(v)) for k, v in zip(FITTED, x)} | {k: COSTS[k] for k in MEASURED}


def _objective(data: dict, names: list[str]):
    def f(x: np.ndarray) -> float:
        e = np.array(list(errors(data, _costs(x), names).values()))
        return float(np.mean(np.minimum(np.abs(np.log1p(e)), CAP)))

    return f


def nelder_mead(f, x0: np.ndarray, iterations: int = ITERATIONS, step: float = 0.7) -> np.ndarray:
    """The minimum Nelder–Mead finds from `x0` (no scipy here: the simplex steps written out)."""
    simplex = [x0] + [x0 + step * e for e in np.eye(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centre = np.mean(simplex[:-1], axis=0)
        reflected = centre + (centre - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centre + 2 * (centre - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centre + 0.5 * (simplex[-1] - centre)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit(data: dict, names: list[str]) -> dict:
    """The costs (µs per event by kind) fitted on the captures `names`."""
    x0 = np.log(np.array([START[k] for k in FITTED]))
    return _costs(nelder_mead(_objective(data, names), x0))


def _table(data: dict, held: dict[str, float], final: dict[str, float]) -> list[str]:
    lines = ["| capture | measured µs | profiled µs | held-out estimate | error | fitted on all | profiled's error |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for n in sorted(data):
        replay, measured, _ = data[n]
        profiled = replay.estimate({}).profiled_us
        lines.append(
            f"| {n} | {measured:,.0f} | {profiled:,.0f} | {(1 + held[n]) * measured:,.0f} | {held[n]:+.0%} | "
            f"{final[n]:+.0%} | {profiled / measured - 1:+.0%} |"
        )
    return lines


def count_within(errs: dict) -> str:
    """How many relative errors are within the bar, and their median size, in words."""
    e = np.abs(np.array([v for v in errs.values() if v is not None], dtype=float))
    if not len(e):
        return "no estimate"
    return f"{int((e <= WITHIN).sum())} of {len(e)} within {WITHIN:.0%}, median |error| {np.median(e):.1%}"


def first_finding(diagnosis) -> tuple[str, float | None]:
    """(the first finding's rule id, its estimated speedup), or ("none", None)."""
    if not diagnosis.findings:
        return "none", None
    top = diagnosis.findings[0]
    return top.rule, top.est_speedup


def verdicts() -> int:
    """Each capture folder's first finding (judged on its measured unprofiled step) beside its bare
    trace file's, judged on the profiled step as recorded and on the replayed estimate (the default), and how
    many of each agree with the folder on the rule; then the step each bare trace file's report prints (the
    estimate, on the step budget) against the folder's step (the mean of its timed steps, or its profiled step
    where that is shorter: metrics/budget.py)."""
    from diagnose import analyze

    agree = {"profiled": 0, "estimated": 0}
    printed: dict[str, float] = {}
    total = 0
    print(
        "| capture | folder | trace file alone, profiled step | trace file alone, estimated | same rule (profiled, estimated) "
        "| step printed: trace file ÷ folder |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name in sorted(captures()):
        folder = CAPTURES / name
        f_diag = analyze(folder)
        f_rule, f_speed = first_finding(f_diag)
        p_rule, p_speed = first_finding(
            analyze(folder / "trace.json.gz", overrides={"timeline.profiler_overhead": 0.0})
        )
        e_diag = analyze(folder / "trace.json.gz", overrides={"timeline.profiler_overhead": 1.0})
        e_rule, e_speed = first_finding(e_diag)
        agree["profiled"] += p_rule == f_rule
        agree["estimated"] += e_rule == f_rule
        total += 1
        printed[name] = e_diag.summary.step_time_us / f_diag.summary.step_time_us - 1
        show = lambda rule, x: rule + (f" {x:.2f}×" if x else "")  # noqa: E731
        same = ", ".join("yes" if r == f_rule else "no" for r in (p_rule, e_rule))
        print(
            f"| {name} | {show(f_rule, f_speed)} | {show(p_rule, p_speed)} | {show(e_rule, e_speed)} | {same} "
            f"| {printed[name]:+.0%} |"
        )
    print(
        f"first finding's rule the same as the folder's: profiled step {agree['profiled']} of {total}, "
        f"estimated {agree['estimated']} of {total}"
    )
    print(f"step the trace file's report prints against the folder's: {count_within(printed)}")
    return 0


def plain_loops(loops: list[str] | None = None) -> dict[str, tuple[Replay, float]]:
    """{"set/loop/file": (its replay without the plain-loop factor, measured unprofiled median µs)} for
    the plain user loops (all, or `loops`) whose iteration is known (an unsure unit is not one iteration,
    so its step is not the timed one); set is plain or plain_shapes."""
    out = {}
    folders = [p for root in PLAIN if root.is_dir() for p in sorted(root.iterdir()) if (p / "timing.json").exists()]
    for folder in folders:
        if loops is not None and folder.name not in loops:
            continue
        measured = float(json.loads((folder / "timing.json").read_text())["median_us"])
        for name in ("marked.json.gz", "plain.json.gz"):
            if not (folder / name).exists():
                continue
            trace = load_target(folder / name)
            steps = Metrics(trace).steps
            replay = prepare(trace, steps.windows) if steps.unit_known else None
            if replay is not None and replay.plain:
                replay.plain = False  # the factor is what is fitted here
                out[f"{folder.parent.name}/{folder.name}/{name.split('.')[0]}"] = (replay, measured)
    return out


def _scaled_errors(data: dict, scale: float, names=None) -> dict[str, float]:
    names = sorted(data) if names is None else names
    return {n: data[n][0].estimate(scale=scale).step_us / data[n][1] - 1 for n in names}


def _best_scale(data: dict, names: list[str]) -> float:
    def objective(scale: float) -> float:
        e = np.array(list(_scaled_errors(data, scale, names).values()))
        return float(np.mean(np.minimum(np.abs(np.log1p(e)), CAP)))

    return float(min(SCALES, key=objective))


def plain(out: Path | None) -> int:
    """The plain-loop factor fitted on the plain loops, each loop judged with the others' fit (a loop's
    traces with and without shapes are one loop: both are left out together)."""
    data = plain_loops()
    names = sorted(data)
    loops = sorted({n.split("/")[1] for n in names})
    held, held_scale = {}, {}
    for loop in loops:
        mine = [n for n in names if n.split("/")[1] == loop]
        scale = _best_scale(data, [n for n in names if n not in mine])
        held |= _scaled_errors(data, scale, mine)
        held_scale |= dict.fromkeys(mine, scale)
    scale = _best_scale(data, names)
    fitted = _scaled_errors(data, scale)
    as_is = _scaled_errors(data, 1.0)
    print("| loop / trace | measured µs | profiled µs | held out (its factor) | fitted on all | full costs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in names:
        replay, measured = data[n]
        print(
            f"| {n} | {measured:,.0f} | {replay.estimate({}).profiled_us:,.0f} | {held[n]:+.0%} ({held_scale[n]:.2f}) "
            f"| {fitted[n]:+.0%} | {as_is[n]:+.0%} |"
        )
    print(f"held out (leave one loop out): {count_within(held)}")
    print(f"fitted on all {len(names)}: {count_within(fitted)}")
    print(f"full costs (no factor): {count_within(as_is)}")
    for group in ("plain/", "plain_shapes/"):
        print(f"held out, {group[:-1]}: {count_within({k: v for k, v in held.items() if k.startswith(group)})}")
    print(f"PLAIN_SCALE = {scale:.2f} (in use: {PLAIN_SCALE})")
    if out:
        out.write_text(
            json.dumps(
                {
                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
                    "machine": {
                        **machine(),
                        "recorded_on": "the loops were recorded on an NVIDIA H100 (INDEX.json of each folder)",
                    },
                    "scale": scale,
                    "held_out": held,
                    "held_out_scale": held_scale,
                    "fitted": fitted,
                    "as_is": as_is,
                },
                indent=1,
            )
        )
    return 0


def unshaped_check() -> int:
    """The model as it runs on fixtures/unshaped, where each workload was captured by diagnose on one GPU
    with and without shapes (and allocator events) and timed without the profiler: PLAIN_SCALE where the
    capture has no allocator events; beside it, those captures under the full costs."""
    if not UNSHAPED.is_dir():
        print(f"no {UNSHAPED}: record it on a GPU with fixtures/record_unshaped.py")
        return 1
    print("| capture | device | measured µs | profiled µs | estimate | error | full costs' error |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    model, full = {}, {}
    for folder in sorted(p for p in UNSHAPED.iterdir() if (p / "meta.json").exists()):
        meta = json.loads((folder / "meta.json").read_text())
        measured = float((meta.get("timing") or {}).get("median_us") or 0)
        trace = load_target(folder / "trace.json.gz")
        replay = prepare(trace, Metrics(trace).steps.windows)
        if replay is None or not measured:
            continue
        estimate = replay.estimate()
        model[folder.name] = estimate.step_us / measured - 1
        cell = ""
        if replay.plain:
            full[folder.name] = replay.estimate(scale=1 / PLAIN_SCALE).step_us / measured - 1
            cell = f"{full[folder.name]:+.0%}"
        device = (meta.get("device") or {}).get("name", "?")
        print(
            f"| {folder.name} | {device} | {measured:,.0f} | {estimate.profiled_us:,.0f} | {estimate.step_us:,.0f} "
            f"| {model[folder.name]:+.0%} | {cell} |"
        )
    shaped = {k: v for k, v in model.items() if k not in full}
    print(f"with shapes, full costs: {count_within(shaped)}")
    print(f"without shapes, PLAIN_SCALE: {count_within({k: model[k] for k in full})}")
    print(f"without shapes, full costs: {count_within(full)}")
    return 0


def evaluate(out: Path | None) -> int:
    """The COSTS in use (and overhead.py's reference launch call) judged on every capture, without a fit:
    for a change to the replay that keeps the costs. Prints the counts; with `out`, writes the errors."""
    data = captures()
    final = errors(data, COSTS)
    as_is = {n: data[n][0].estimate({}).profiled_us / data[n][1] - 1 for n in sorted(data)}
    print(f"COSTS in use on all {len(data)}: {count_within(final)}")
    print(f"profiled step as is: {count_within(as_is)}")
    if out:
        out.write_text(json.dumps({"costs": COSTS, "errors": final}, indent=1))
    return 0


def main() -> int:
    """Held-out check on two halves, the fit on all, the table and the summary lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--verdicts", action="store_true", help="compare folder and bare-trace verdicts")
    parser.add_argument("--evaluate", action="store_true", help="judge the COSTS in use on every capture, no fit")
    parser.add_argument("--plain", action="store_true", help="fit PLAIN_SCALE on the plain user loops")
    parser.add_argument("--unshaped-check", action="store_true", help="judge PLAIN_SCALE on fixtures/unshaped")
    args = parser.parse_args()
    if args.plain:
        return plain(args.json)
    if args.unshaped_check:
        return unshaped_check()
    if args.verdicts:
        return verdicts()
    if args.evaluate:
        return evaluate(args.json)
    data = captures()
    reference = reference_launch_us(data)
    for replay, _, _ in data.values():
        replay.reference_launch_us = reference
    names = sorted(data)
    halves = (names[0::2], names[1::2])
    fits = [fit(data, half) for half in halves]
    held = errors(data, fits[0], halves[1]) | errors(data, fits[1], halves[0])
    final_costs = fit(data, names)
    final = errors(data, final_costs)
    as_is = {n: data[n][0].estimate({}).profiled_us / data[n][1] - 1 for n in names}
    print("\n".join(_table(data, held, final)))
    print(f"held out (two halves): {count_within(held)}")
    print(f"fitted on all {len(names)}: {count_within(final)}")
    print(f"profiled step as is: {count_within(as_is)}")
    print("COSTS = " + json.dumps({k: round(v, 2) for k, v in final_costs.items()}))
    print(f"REFERENCE_LAUNCH_US = {reference:.2f}")
    if args.json:
        out = {
            "held_out": held,
            "fitted": final,
            "as_is": as_is,
            "costs": final_costs,
            "half_costs": fits,
            "reference_launch_us": reference,
        }
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
