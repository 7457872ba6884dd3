"""Is there a JSON decoder on the package index that beats the floor? msgspec against Arrow and Polars.

    python benchmarks/bench_parsers.py TRACE.json --runs 3 --other-python /tmp/pv/bin/python

The speed target asks for the whole `diagnose TRACE` at 0.6× the floor: one process reading the file and
decoding it with one typed `msgspec.json.decode` (bench_vs_hta.py's FLOOR_CHILD). On two cores that
is only possible with a decoder that does the floor's work at well under half its cost. This
benchmark times, interleaved, one child each round of:

- the floor (read + typed msgspec decode, as bench_vs_hta.py runs it, with the project's python);
- Arrow's JSON reader (`pyarrow.json.read_json`, threads on, an explicit schema of the fields diagnose
  reads, unknown fields ignored) on the same event array cut to one event per line;
- Polars' `read_ndjson` with the same schema, on the same lines;

the last two with `--other-python`, the python of a venv holding pyarrow and polars (neither is a
dependency of diagnose). The cut to one event per line is timed apart ("prep"): kineto writes one
event over several lines, so a real reader would pay it too. Both columnar readers are given a trace
whose events have one type per field; on a real kineto trace they refuse the file instead (`pid`
"Spans" among integers, `tid` strings on some threads), which the children report.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_hta import FLOOR_CHILD, machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# The event array as one event per line, and the fields diagnose reads (diagnose/trace/kineto.py).
LINES = r"""
import sys, time, re
t0 = time.perf_counter()
data = open(sys.argv[1], "rb").read()
start = data.index(b"[", data.index(b'"traceEvents"')) + 1
body = re.sub(rb"\}\s*,\s*\{", b"}\n{", data[start:data.rindex(b"]")].replace(b"\n", b" "))
mixed = b'"pid":"' in body or b'"tid":"' in body
t1 = time.perf_counter()
"""
# The timed read (the child defines `read`) and the RESULT line.
DECODE = r"""
import json
try:
    rows, error = len(read()), None
except Exception as e:
    rows, error = 0, str(e).splitlines()[0]
t2 = time.perf_counter()
print("RESULT " + json.dumps({"prep_s": t1 - t0, "decode_s": t2 - t1, "events": rows, "error": error,
                              "pid_tid_left_out": mixed}))
"""
ARROW_CHILD = (
    LINES
    + r"""
import io, pyarrow as pa, pyarrow.json as pj
dims = pa.list_(pa.list_(pa.int64()))
args = pa.struct([("External id", pa.int64()), ("correlation", pa.int64()), ("stream", pa.int64()),
                  ("device", pa.int64()), ("Input Dims", dims), ("Bytes", pa.int64()), ("Addr", pa.int64()),
                  ("Total Allocated", pa.int64()), ("Total Reserved", pa.int64()),
                  ("grid", pa.list_(pa.int64())), ("block", pa.list_(pa.int64()))])
fields = [("name", pa.string()), ("ph", pa.string()), ("cat", pa.string()), ("ts", pa.float64()),
          ("dur", pa.float64()), ("args", args)]
if not mixed:
    fields += [("pid", pa.int64()), ("tid", pa.int64())]
opts = pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")
read = lambda: pj.read_json(io.BytesIO(body), parse_options=opts, read_options=pj.ReadOptions(block_size=8 << 20))
"""
    + DECODE
)
POLARS_CHILD = (
    LINES
    + r"""
import io, polars as pl
args = pl.Struct({"External id": pl.Int64, "correlation": pl.Int64, "stream": pl.Int64, "device": pl.Int64,
                  "Input Dims": pl.List(pl.List(pl.Int64)), "Bytes": pl.Int64, "Addr": pl.Int64,
                  "Total Allocated": pl.Int64, "Total Reserved": pl.Int64, "grid": pl.List(pl.Int64),
                  "block": pl.List(pl.Int64)})
schema = {"name": pl.String, "ph": pl.String, "cat": pl.String, "ts": pl.Float64, "dur": pl.Float64, "args": args}
if not mixed:
    schema |= {"pid": pl.Int64, "tid": pl.Int64}
read = lambda: pl.read_ndjson(io.BytesIO(body), schema=schema)
"""
    + DECODE
)


def _child(python: str, code: str, trace: Path) -> dict:
    """Run one child; its RESULT line, its wall time and the load average before it."""
    load = os.getloadavg()[0]
    out = subprocess.run([python, "-c", code, str(trace)], capture_output=True, text=True, cwd=ROOT)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"error": (out.stderr.strip().splitlines() or ["no result"])[-1], "load_before": load}
    return {**json.loads(line[len("RESULT ") :]), "load_before": load}


def main() -> int:
    """Interleaved rounds of the three children; medians and each reader's decode ÷ the floor's decode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a plain .json trace (make_large_trace.py)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--other-python", required=True, help="python of a venv with pyarrow and polars")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rounds = []
    for i in range(args.runs):
        rounds.append(
            {
                "floor": _child(sys.executable, FLOOR_CHILD, args.trace),
                "arrow": _child(args.other_python, ARROW_CHILD, args.trace),
                "polars": _child(args.other_python, POLARS_CHILD, args.trace),
            }
        )
        print(json.dumps(rounds[-1]))
    summary = {}
    for reader in ("arrow", "polars"):
        ratios = [r[reader]["decode_s"] / r["floor"]["decode_s"] for r in rounds if r[reader].get("decode_s")]
        summary[reader] = {
            "decode_over_floor_decode": statistics.median(ratios) if ratios else None,
            "range": [min(ratios), max(ratios)] if ratios else None,
            "errors": sorted({r[reader]["error"] for r in rounds if r[reader].get("error")}),
        }
    print(json.dumps(summary, indent=1))
    if args.json:
        doc = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "trace": args.trace.name,  # never an absolute path (tests/test_bench_floor.py)
            "rounds": rounds,
            "summary": summary,
        }
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
