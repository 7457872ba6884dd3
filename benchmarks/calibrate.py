"""Estimator constants from the calibration captures only, and the estimates against measured fixes
on the held-out ones.

    python benchmarks/calibrate.py            # print both tables
    python benchmarks/calibrate.py --check    # exit 1 if a constant in the code is not what the
                                              # calibration set gives, at its stated rounding
    python benchmarks/calibrate.py --write    # rewrite the generated part of docs/measured-fixes.md

The split (docs/measured-fixes.md says why): constants come from CALIBRATION, captures of the "after"
side of a fix (the graphed decode, the fused SwiGLU, the matmul precisions, SDPA at 8K). Every other
firing capture is HELD OUT: its estimate is compared with a speedup measured by `--verify`
(fixtures/verify/RESULTS.json, re-run by fixtures/record_verify.py on a GPU) or, for fixes that need a
code change, by the recorded pair of captures (fixtures/captures/INDEX.json, fixtures/record.py).
Analysis only: no torch, no GPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diagnose.model.config import Config  # noqa: E402
from diagnose.base.devices import H200  # noqa: E402
from diagnose.base.step_timing import normalised, paid_step_us  # noqa: E402
from diagnose.metrics import Metrics  # noqa: E402
from diagnose.front.pipeline import analyse  # noqa: E402
from diagnose.rules import ALL_RULES  # noqa: E402
from diagnose.trace.load import load_target  # noqa: E402
from diagnose.rules.memory_layout import layout_parts  # noqa: E402

CAPTURES = ROOT / "fixtures" / "captures"
RESULTS = ROOT / "fixtures" / "verify" / "RESULTS.json"
DOC = ROOT / "docs" / "measured-fixes.md"
BEGIN, END = "<!-- calibrate.py: begin -->", "<!-- calibrate.py: end -->"
LIBRARY_RESULTS = ROOT / "benchmarks" / "results-heldout-verify-h200.json"  # record_verify.py --heldout
LIBRARY = ROOT / "fixtures" / "heldout"  # the held-out library captures kept in the repository
LIBRARY_BEGIN, LIBRARY_END = "<!-- calibrate.py library: begin -->", "<!-- calibrate.py library: end -->"
FASTER = ("verified", "faster but changes results", "faster, outputs not compared")

CALIBRATION = (
    "decode_graphed",
    "swiglu_compiled",
    "matmul_fp32",
    "matmul_tf32",
    "matmul_bf16",
    "matmul_fp8",
    "attention_sdpa_8k",
    "conv_nchw",
    "conv_channels_last",
    "gemv_decode_1tok_w4a16",
)

# held out, fixed by a code change: (capture with the finding, rule, fix, capture with the fix applied)
PAIRS = [
    ("python_batch_inline", "host-bound", "dataloader-workers", "python_batch_workers"),
    ("compile_breaks", "compile-breaks", "fix-graph-break", "compile_fullgraph"),
    ("compile_breaks_print", "compile-breaks", "fix-graph-break", "compile_fullgraph"),
    ("compile_new_shapes", "compile-breaks", "mark-dynamic", "compile_bucketed"),
    ("sync_item", "sync-stall", "remove-sync", "sync_free"),
    ("gemv_decode_1tok_graphed", "decode-latency", "w4a16", "gemv_decode_1tok_w4a16_graphed"),
    ("matmul_bf16_k8191", "compute-bound", "pad-dims", "matmul_bf16"),
    ("regress_sdpa_math", "attention-memory", "flash-attention", "regress_base"),
    ("attention_naive_8k", "attention-memory", "flash-attention", "attention_sdpa_8k"),
    ("compile_graphs_mutation", "launch-overhead", "cuda-graphs", "compile_graphs"),
    ("ddp_accumulate", "exposed-comm", "grad-accumulation", "ddp_no_sync"),
    ("ddp_straggler", "straggler", "balance-ranks", "ddp_healthy"),
    ("ddp_heavy_straggler", "straggler", "balance-ranks", "ddp_heavy_healthy"),
    ("opt_single", "optimizer-step", "fused-optimizer", "opt_fused"),
    ("opt_single", "optimizer-step", "fused-optimizer", "opt_foreach"),
    # real library code (script mode)
    ("hf_trainer_fp32", "compute-bound", "bf16-tensor-cores", "hf_trainer_bf16"),
    ("lightning_fp32", "compute-bound", "bf16-tensor-cores", "lightning_bf16"),
    ("tv_resnet50_nchw", "memory-layout", "channels-last", "tv_resnet50_channels_last"),
    ("hf_generate_dynamic", "launch-overhead", "cuda-graphs", "hf_generate_static"),
]


def _metrics(name: str) -> Metrics:
    return Metrics(load_target(CAPTURES / name))


def _unprofiled(name: str) -> float:
    """The capture's median unprofiled step: a calibration constant is a typical call's cost, which one
    slow step should not move."""
    return float(json.loads((CAPTURES / "INDEX.json").read_text())[name]["median_step_us"])


def _paid(name: str) -> float:
    """The capture's measured unprofiled step as a run pays it: the mean of its timed steps, the step
    diagnose's estimates start from (base/step_timing.paid_step_us), so a fix measured by a recorded pair
    is the ratio of the two means. A rank folder's is its slowest rank's, the step every rank waits for."""
    metas = [CAPTURES / name / "meta.json", *sorted((CAPTURES / name).glob("rank-*/meta.json"))]
    steps = [paid_step_us(normalised(json.loads(m.read_text()).get("timing"))) for m in metas if m.exists()]
    return float(max((s for s in steps if s), default=0.0))


def _layout_parts(name: str) -> tuple[float, float]:
    m = _metrics(name)
    return layout_parts(m.step_kernels[m.step_kernels["cat"] == "kernel"], len(m.steps.windows))


def _gemm_tflops(name: str) -> float:
    work = _metrics(name).op_work
    gemm = work[work["kind"] == "gemm"]
    return float(gemm["flops"].sum() / gemm["kernel_us"].sum() / 1e6)


def derive() -> list[dict]:
    """Each constant: what the calibration captures give, the rounding the code applies, the code's value."""
    graphed = _metrics("decode_graphed")
    ops = graphed.timeline.ops.sort_values("ts")
    gaps = []
    for w in graphed.steps.windows:
        part = ops[(ops["ts"] >= w.start) & (ops["ts"] < w.end)]
        gaps += [g for g in (part["ts"].to_numpy()[1:] - part["end"].to_numpy()[:-1]) if g >= 0]
    gap = statistics.median(gaps)
    launch = _unprofiled("decode_graphed") - graphed.comm.busy_us
    swiglu = _metrics("swiglu_compiled")
    fused_call = _unprofiled("swiglu_compiled") - swiglu.comm.busy_us
    sdpa = _metrics("attention_sdpa_8k").op_work
    attention = sdpa[sdpa["kind"] == "attention"]
    per_step = float(attention["flops"].sum()) / 2 / len(_metrics("attention_sdpa_8k").steps.windows)
    flash = per_step / _unprofiled("attention_sdpa_8k") / 1e6 / H200.achievable_tflops["bf16"]
    rows = [
        (
            "launch-overhead.graph_gap_us",
            gap,
            "up to 0.1 µs",
            math.ceil(gap * 10) / 10,
            _threshold("launch-overhead", "graph_gap_us"),
            "median idle between replayed kernels, decode_graphed",
        ),
        (
            "launch-overhead.graph_launch_us",
            launch,
            "up to 5 µs",
            math.ceil(launch / 5) * 5,
            _threshold("launch-overhead", "graph_launch_us"),
            "unprofiled step − GPU busy, decode_graphed",
        ),
        (
            "memory-bound.fused_call_us",
            fused_call,
            "to 10 µs",
            round(fused_call / 10) * 10,
            _threshold("memory-bound", "fused_call_us"),
            "unprofiled step − GPU busy, swiglu_compiled",
        ),
        (
            "attention-memory.flash_efficiency",
            flash,
            "down to 0.05",
            math.floor(flash * 20) / 20,
            _threshold("attention-memory", "flash_efficiency"),
            "causal attention FLOPs (unmasked half) per unprofiled step ÷ achievable bf16, attention_sdpa_8k",
        ),
    ]
    int4 = _metrics("gemv_decode_1tok_w4a16")
    kernels = int4.step_kernels[int4.step_kernels["cat"] == "kernel"]
    tinygemm_us = float(kernels.loc[kernels["name"].str.contains("tinygemm"), "dur"].sum()) / int4.budget.n_steps
    int4_bytes = 8 * 3 * 4096 * 14336 * 4.125 / 8  # gemv_decode.py's 8 layers of 4096 × 14336 SwiGLU weights
    share = int4_bytes / tinygemm_us / 1e6 / int4.device_spec.achievable_tbps
    rows.append(
        (
            "decode-latency.w4_bandwidth_share",
            share,
            "to 0.01",
            round(share, 2),
            _threshold("decode-latency", "w4_bandwidth_share"),
            "4-bit weight bytes ÷ tinygemm kernel time ÷ achievable bandwidth, gemv_decode_1tok_w4a16",
        )
    )
    for key, index, what in (("nhwc_batch_norm_ratio", 0, "batch-norm"), ("nhwc_conv_ratio", 1, "convolution")):
        ratio = _layout_parts("conv_channels_last")[index] / _layout_parts("conv_nchw")[index]
        rows.append(
            (
                f"memory-layout.{key}",
                ratio,
                "to 0.01",
                round(ratio, 2),
                _threshold("memory-layout", key),
                f"NHWC ÷ NCHW {what} kernel time per step, conv_channels_last ÷ conv_nchw",
            )
        )
    for rung, name in (
        ("fp32", "matmul_fp32"),
        ("tf32", "matmul_tf32"),
        ("bf16", "matmul_bf16"),
        ("fp8", "matmul_fp8"),
    ):
        value = _gemm_tflops(name)
        rows.append(
            (
                f"devices.H200 achievable {rung} TFLOP/s",
                value,
                "within 5 %",
                value,
                H200.achievable_tflops[rung],
                f"GEMM FLOPs ÷ kernel time, {name}",
            )
        )
    return [
        {"constant": c, "derived": d, "rounding": r, "expected": e, "code": k, "from": f} for c, d, r, e, k, f in rows
    ]


def _threshold(rule_id: str, key: str) -> float:
    rule = next(r for r in ALL_RULES if r.id == rule_id)
    return float(next(th.default for th in rule.thresholds if th.name == key))


def agrees(row: dict) -> bool:
    """Whether the code's constant is what the calibration gives at the stated rounding."""
    if row["rounding"] == "within 5 %":
        return abs(row["code"] / row["expected"] - 1) <= 0.05
    return math.isclose(row["code"], row["expected"], rel_tol=1e-9, abs_tol=1e-9)


@functools.cache
def _diagnosis(name: str):
    """The Diagnosis of one capture with default thresholds (each capture is analysed once)."""
    return analyse(CAPTURES / name, Config())


def _estimate(name: str, rule: str, fix_id: str | None = None) -> float | None:
    d = _diagnosis(name)
    for f in d.findings:
        if f.rule == rule and (fix_id is None or fix_id in [x.id for x in f.fixes]):
            return f.est_speedup
    return None


def _prerequisites(name: str, rule: str) -> set[str]:
    """The fixes that the capture's `rule` finding names as prerequisites of its next fix (its estimate is
    for both changes, so a measurement of the first alone is not set against it)."""
    if not (CAPTURES / name).is_dir():
        return set()
    d = _diagnosis(name)
    return {x.id for f in d.findings if f.rule == rule for x in f.fixes if x.prerequisite}


def held_out() -> list[dict]:
    """Every held-out estimate with its measured speedup (verify runs, then recorded pairs)."""
    rows = []
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name, entry in sorted(results.items()):
        if name in CALIBRATION or name.replace("_eager", "") in ("decode", "swiglu") or name.startswith("matmul_"):
            continue
        for f in entry.get("findings", []):
            for v in f["verify"]:
                if not v["trials"]:
                    continue  # needs a code change: measured by a recorded pair below, if at all
                ok = [
                    t
                    for t in v["trials"]
                    if t["verdict"] in ("verified", "faster but changes results", "faster, outputs not compared")
                ]
                tried = ", ".join(
                    f"{t['variant']}: {t['verdict']}" + (f" {t['speedup']:.2f}×" if t["speedup"] else "")
                    for t in v["trials"]
                )
                best = max(ok, key=lambda t: t["speedup"]) if ok else None
                row = {
                    "capture": name,
                    "rule": f["rule"],
                    "fix": v["fix"],
                    "estimate": f["est_speedup"],
                    "measured": best["speedup"] if best else None,
                    "how": f"--verify ({tried})",
                    "source": "verify",
                }
                if v["fix"] in _prerequisites(name, f["rule"]):
                    row["how"] += "; a prerequisite: the estimate is for it and the next fix together, not compared"
                    row["prerequisite"] = True
                rows.append(row)
    for before, rule, fix_id, after in PAIRS:
        est = _estimate(before, rule, fix_id)
        measured = _paid(before) / _paid(after)
        rows.append(
            {
                "capture": before,
                "rule": rule,
                "fix": fix_id,
                "estimate": est,
                "measured": measured,
                "how": f"recorded pair: {after}",
                "source": "pair",
            }
        )
    for row in rows:
        e, m = row["estimate"], row["measured"]
        row["ratio"] = e / m if e and m and not row.get("prerequisite") else None
    return rows


def library_rows() -> list[dict]:
    """Each fix measured on a held-out library capture kept in fixtures/heldout, against what diagnose
    says of that capture now: the estimate of the finding that names the fix, or that none does."""
    results = json.loads(LIBRARY_RESULTS.read_text()) if LIBRARY_RESULTS.exists() else {}
    rows = []
    for name, entry in sorted(results.items()):
        if not isinstance(entry, dict) or not (LIBRARY / name).is_dir():
            continue
        now = analyse(LIBRARY / name, Config())
        measured: dict[str, list] = {}
        for f in entry.get("findings", []):
            for v in f["verify"]:
                measured.setdefault(v["fix"], v["trials"])
        for fix_id, trials in sorted(measured.items()):
            ok = [t for t in trials if t["verdict"] in FASTER and t["speedup"]]
            best = max(ok, key=lambda t: t["speedup"]) if ok else None
            finding = next((f for f in now.findings if fix_id in [x.id for x in f.fixes]), None)
            tried = ", ".join(
                f"{t['variant']}: {t['verdict']}" + (f" {t['speedup']:.2f}×" if t["speedup"] else "") for t in trials
            )
            rows.append(
                {
                    "capture": name,
                    "rule": finding.rule if finding else "none names it",
                    "fix": fix_id,
                    "estimate": finding.est_speedup if finding else None,
                    "measured": best["speedup"] if best else None,
                    "ratio": finding.est_speedup / best["speedup"] if finding and best else None,
                    "how": f"--verify ({tried})",
                }
            )
    return rows


def library_table() -> str:
    """The held-out library rows as Markdown, with their summary line."""
    return table(library_rows(), label="Held-out library captures")


def table(rows: list[dict], label: str = "Held out") -> str:
    """The held-out rows as Markdown, with the summary statistics."""
    lines = [
        "| capture | finding | fix | estimate | measured | estimate ÷ measured | how measured |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        est = f"{r['estimate']:.2f}×" if r["estimate"] else "—"
        meas = f"{r['measured']:.2f}×" if r["measured"] else "not faster"
        ratio = (
            f"{r['ratio']:.2f}"
            + (" **outside 1.5×**" if r["ratio"] and abs(math.log(r["ratio"])) > math.log(1.5) else "")
            if r["ratio"]
            else "—"
        )
        lines.append(f"| {r['capture']} | {r['rule']} | {r['fix']} | {est} | {meas} | {ratio} | {r['how']} |")
    logs = [abs(math.log(r["ratio"])) for r in rows if r["ratio"]]
    inside = sum(x <= math.log(1.5) for x in logs)
    if logs:
        lines += [
            "",
            f"{label}: {len(logs)} estimates with a measured speedup; median |log(estimate ÷ measured)| = "
            f"{statistics.median(logs):.3f} (a factor of {math.exp(statistics.median(logs)):.2f}); "
            f"{inside} of {len(logs)} within 1.5×.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a constant disagrees with the calibration")
    parser.add_argument("--write", action="store_true", help="rewrite the generated table in docs/measured-fixes.md")
    args = parser.parse_args(argv)
    rows = derive()
    print("| constant | calibration gives | rounding | expected | in the code | from |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['constant']} | {r['derived']:.3g} | {r['rounding']} | {r['expected']:.3g} | {r['code']:g} | {r['from']} |"
            + ("" if agrees(r) else " **disagrees**")
        )
    if args.check:
        bad = [r["constant"] for r in rows if not agrees(r)]
        if bad:
            print(f"constants that the calibration set does not give: {', '.join(bad)}", file=sys.stderr)
            return 1
        return 0
    text = table(held_out())
    library = library_table()
    print()
    print(text)
    print()
    print(library)
    if args.write:
        doc = DOC.read_text()
        for begin, end, body in ((BEGIN, END, text), (LIBRARY_BEGIN, LIBRARY_END, library)):
            a, b = doc.index(begin) + len(begin), doc.index(end)
            doc = doc[:a] + "\n" + body + "\n" + doc[b:]
        DOC.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
