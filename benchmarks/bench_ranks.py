"""Make a SYNTHETIC folder of N rank traces and measure how `diagnose DIR` scales with N.

    python benchmarks/bench_ranks.py /tmp/ranks64 --ranks 64 --tiles 2 [--workers 4] [--compare 8]

Every rank is a copy of one real rank's trace (default: HTA's A100 DDP rank,
fixtures/peer/hta/nccl_parser_config), tiled `--tiles` times end to end (make_large_trace.py) and
given its own `distributedInfo.rank`; rank 1 is a SYNTHETIC slowed copy (its compute kernels 1.3×
longer, its collectives short: fixtures/synthetic/make_synthetic_ranks.py), so the straggler rule
has something to name. Files are written gzip'd, named `host_<pid>.<n>.pt.trace.json.gz` as
tensorboard_trace_handler would (no rank in the name: it comes from distributedInfo).

The analysis runs in a fresh subprocess, which reports its wall time and peak resident memory:
the largest of its own and its children's (RUSAGE_CHILDREN: the largest single worker process, not
their sum). With `--compare M` a folder of M ranks is measured too, for the growth.

Never write the folders inside the repository: they belong in /tmp.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "fixtures" / "synthetic")]

import make_large_trace  # noqa: E402
import make_synthetic_ranks  # noqa: E402

SOURCE = ROOT / "fixtures" / "peer" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
MEASURE = """
import json, resource, sys, time
from pathlib import Path
from diagnose.ranks.analyse import analyse_ranks
t = time.perf_counter()
d = analyse_ranks(Path(sys.argv[1]), workers=int(sys.argv[2]))
seconds = time.perf_counter() - t
peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"seconds": round(seconds, 2), "peak_mib": round(peak_kib / 1024, 1),
                  "parent_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "ranks": d.summary.ranks.count, "findings": [[f.rule, f.ranks] for f in d.findings]}))
"""


def make_rank_folder(out: Path, ranks: int, tiles: int = 1, source: Path = SOURCE, slow_rank: int | None = 1) -> dict:
    """Write `ranks` SYNTHETIC rank traces into `out`; returns sizes."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tiled = Path(tmp) / "tiled.json"
        make_large_trace.make(source, tiled, tiles=tiles)
        doc = json.loads(tiled.read_bytes())
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    events = json.dumps(doc["traceEvents"], separators=(",", ":"))
    slow = (
        json.dumps(make_synthetic_ranks.slowed_copy(doc, slow_rank)["traceEvents"], separators=(",", ":"))
        if slow_rank is not None
        else None
    )
    total = 0
    for r in range(ranks):
        info = {**(head.get("distributedInfo") or {}), "rank": r, "world_size": ranks}
        body = slow if r == slow_rank else events
        text = json.dumps({**head, "distributedInfo": info, "traceName": f"SYNTHETIC rank {r} of {ranks}"})[:-1]
        path = out / f"host_{1000 + r}.{r}.pt.trace.json.gz"
        with gzip.open(path, "wb", compresslevel=1) as f:
            f.write(f'{text},"traceEvents":{body}}}'.encode())
        total += path.stat().st_size
    return {
        "ranks": ranks,
        "tiles": tiles,
        "events_per_rank": len(doc["traceEvents"]),
        "json_bytes_per_rank": len(events),
        "gz_bytes_total": total,
    }


def measure(folder: Path, workers: int) -> dict:
    """Analyse `folder` in a fresh subprocess; its wall time and peak memory."""
    run = subprocess.run(
        [sys.executable, "-c", MEASURE, str(folder), str(workers)], capture_output=True, text=True, cwd=ROOT
    )
    if run.returncode:
        raise SystemExit(run.stderr[-2000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Command line: OUT --ranks N [--tiles T] [--workers W] [--compare M]."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--tiles", type=int, default=1)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--compare", type=int, help="also measure a folder of this many ranks")
    args = p.parse_args(argv)
    if ROOT in args.out.resolve().parents:
        p.error("write the rank folder outside the repository (e.g. /tmp)")
    results = []
    for n in ([args.compare] if args.compare else []) + [args.ranks]:
        folder = args.out if n == args.ranks else args.out.with_name(f"{args.out.name}-{n}")
        t = time.perf_counter()
        made = make_rank_folder(folder, n, args.tiles)
        made["made_in_s"] = round(time.perf_counter() - t, 1)
        result = {**made, **measure(folder, args.workers), "workers": args.workers}
        results.append(result)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
