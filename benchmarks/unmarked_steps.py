"""How much a verdict hangs on step markers: every single-rank capture's trace file analysed as recorded
and again with every step marker removed (diagnose/step N, diagnose/warmup N, ProfilerStep#N, on CPU
and GPU rows), as most people record: no schedule, no prof.step().

    python benchmarks/unmarked_steps.py [NAME...] [--json OUT]

Prints one row per capture (first finding and fix, its estimate, the step each way) and a closing line
with the counts that matter: the same first finding, the step within 20 %, the estimate within
15 %. The plain user loops of fixtures/plain (recorded with no markers at all) are compared with their
ProfilerStep twins the same way.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnose import analyze  # noqa: E402
from diagnose.vocabulary.markers import OUR_STEP, PROFILER_STEP  # noqa: E402

WARMUP = "diagnose/warmup "
PLAIN_SETS = ("plain", "plain_h200")  # fixtures/record_plain.py's recordings with marked twins (H100; H200)


def is_marker(name: object) -> bool:
    """A step marker a plain recording would not have."""
    return isinstance(name, str) and bool(OUR_STEP.match(name) or PROFILER_STEP.match(name) or name.startswith(WARMUP))


class _Named(msgspec.Struct):
    """An event's name, the one field stripping reads (msgspec skips the rest)."""

    name: object = None  # (object, not Any: the tests load this file without registering it as a module)


def strip_markers(src: Path, dest: Path) -> int:
    """Write `src` (a kineto .json.gz) to `dest` without its step markers; how many events were removed.
    Every other event, and every other top-level field, is written back as the bytes it was read as."""
    data = msgspec.json.decode(gzip.decompress(src.read_bytes()), type=dict[str, msgspec.Raw])
    events = data["traceEvents"]
    names = msgspec.json.decode(events, type=list[_Named])
    raws = msgspec.json.decode(events, type=list[msgspec.Raw])
    kept = [raw for raw, event in zip(raws, names) if not is_marker(event.name)]
    data["traceEvents"] = msgspec.Raw(msgspec.json.encode(kept))
    dest.write_bytes(gzip.compress(msgspec.json.encode(data), compresslevel=1))
    return len(raws) - len(kept)


def alone(trace: Path, tmp: Path) -> Path:
    """A copy of a capture's trace file with no side file beside it (meta.json, compile.json, samples), as the
    stripped copy is: the two then differ by their markers alone."""
    dest = tmp / "marked" / f"{trace.parent.name}.json.gz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(trace.read_bytes())
    return dest


def outcome(path: Path) -> dict:
    """The first finding, its first fix and estimate, and the step of one analysis."""
    d = analyze(path)
    first = d.findings[0] if d.findings else None
    s = d.summary
    return {
        "rule": first.rule if first else "none",
        "fix": first.fixes[0].id if first and first.fixes else "",
        "estimate": first.est_speedup if first else None,
        "step_us": s.step_time_us,
        "steps": s.steps_analysed,
        "how": s.steps_found_by,
    }


def single_rank_captures() -> list[Path]:
    """Every capture folder in fixtures/captures with one trace (not a rank folder, not a sweep)."""
    folders = sorted(p.parent for p in (ROOT / "fixtures" / "captures").glob("*/trace.json.gz"))
    return [f for f in folders if not any(f.glob("rank-*"))]


def compare(marked: dict, plain: dict) -> dict:
    """Whether two outcomes agree: first finding and fix, step, estimate."""
    same = (marked["rule"], marked["fix"]) == (plain["rule"], plain["fix"])
    step = abs(plain["step_us"] / marked["step_us"] - 1) if marked["step_us"] else None
    est = None
    if same and marked["estimate"] and plain["estimate"]:
        est = abs(plain["estimate"] / marked["estimate"] - 1)
    return {"same_first": same, "step_error": step, "estimate_error": est}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plain-only", action="store_true", help="only the plain loops (fixtures/plain, plain_h200)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pairs = []
        if not args.plain_only:
            for folder in single_rank_captures():
                if args.names and folder.name not in args.names:
                    continue
                stripped = Path(tmp) / f"{folder.name}.json.gz"
                strip_markers(folder / "trace.json.gz", stripped)
                pairs.append((folder.name, alone(folder / "trace.json.gz", Path(tmp)), stripped))
        for folder in sorted(p for name in PLAIN_SETS for p in (ROOT / "fixtures" / name).glob("*/")):
            if args.names and folder.name not in args.names:
                continue
            twin = folder / "marked.json.gz"
            if twin.exists():
                pairs.append((f"{folder.parent.name}/{folder.name}", twin, folder / "plain.json.gz"))
        for name, marked_path, plain_path in pairs:
            marked, plain = outcome(marked_path), outcome(plain_path)
            row = {"name": name, "marked": marked, "plain": plain, **compare(marked, plain)}
            rows.append(row)
            flag = "" if row["same_first"] else "  <- first finding differs"
            step = f"{(plain['step_us'] / marked['step_us'] - 1) * 100:+.0f} %" if marked["step_us"] else "?"
            print(
                f"{name:32s} {marked['rule']:>16s} {marked['estimate'] or '-':>6} | "
                f"{plain['rule']:>16s} {plain['estimate'] or '-':>6} | step {marked['step_us']:>10,.0f} -> "
                f"{plain['step_us']:>10,.0f} µs ({step}){flag}",
                flush=True,
            )
    n = len(rows)
    same = sum(r["same_first"] for r in rows)
    step_ok = sum(r["step_error"] is not None and r["step_error"] <= 0.20 for r in rows)
    est_rows = [r for r in rows if r["estimate_error"] is not None]
    est_ok = sum(r["estimate_error"] <= 0.15 for r in est_rows)
    print(
        f"unmarked: {n} traces · same first finding {same}/{n} · step within 20 % {step_ok}/{n} · "
        f"estimate within 15 % {est_ok}/{len(est_rows)}"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
