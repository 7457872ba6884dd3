"""Measure `diagnose DIR` on a Dask LocalCluster beside the local process pool, for 64 to 1,024 ranks.

    python benchmarks/bench_cluster.py /tmp/cluster-bench [--ranks 64,256,1024] [--modes pool:2,dask:2,dask:1]

Each folder holds SYNTHETIC copies of one real rank's trace (HTA's A100 DDP rank,
fixtures/peer/hta/nccl_parser_config, as benchmarks/bench_ranks.py uses), each with its own
`distributedInfo.rank` and `world_size`; rank 1 is a slowed copy (fixtures/synthetic/make_synthetic_ranks.py:
compute 1.3x longer, collectives short), so the straggler rule has a rank to name. A file is two gzip
members, the rank's header and the events shared by every rank, so a 1,024-rank folder is written in
seconds (the loader reads multi-member gzip as one stream).

Every run is a fresh subprocess: `pool:W` is analyse_ranks(workers=W) (the parent counted), `dask:W`
a LocalCluster of W worker processes of one thread (started inside the timed span, and timed apart).
Each reports its wall time, the driver's peak resident memory (RUSAGE_SELF: for Dask it includes the
scheduler and nannies, which run in the driver), the workers' peak (the largest worker, its own
decoding children counted) and whether the straggler finding named rank 1. Modes are interleaved
within each rank count so that drift on a shared machine hits them alike. Results are JSON lines.

Never write the folders inside the repository: they belong in /tmp.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "fixtures" / "synthetic")]

import make_synthetic_ranks  # noqa: E402

SOURCE = ROOT / "fixtures" / "peer" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
MEASURE = """
import json, resource, sys, time
from pathlib import Path
from diagnose.ranks.analyse import analyse_ranks

def peak_kib():
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)

folder, mode = Path(sys.argv[1]), sys.argv[2]
kind, workers = mode.split(":")[0], int(mode.split(":")[1])
t = time.perf_counter()
started = None
if kind == "pool":
    d = analyse_ranks(folder, workers=workers)
    worker_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if workers > 1 else None
else:
    from diagnose.ranks.cluster import DaskEngine
    with DaskEngine(f"local:{workers}") as engine:
        started = time.perf_counter() - t
        d = analyse_ranks(folder, engine=engine)
        worker_kib = max(engine.client.run(peak_kib).values())
seconds = time.perf_counter() - t
straggler = next((f.ranks for f in d.findings if f.rule == "straggler"), None)
print(json.dumps({"mode": mode, "ranks": d.summary.ranks.count, "seconds": round(seconds, 1),
                  "cluster_start_s": None if started is None else round(started, 1),
                  "driver_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "worker_mib": None if worker_kib is None else round(worker_kib / 1024, 1),
                  "straggler_ranks": straggler, "failed": len(d.details.failed_ranks or [])}))
"""


def make_rank_folder(out: Path, ranks: int, source: Path = SOURCE, slow_rank: int = 1) -> dict:
    """Write `ranks` SYNTHETIC rank traces into `out` (see the module docstring); their sizes."""
    out.mkdir(parents=True, exist_ok=True)
    doc = make_synthetic_ranks.read(source)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    bodies = {}
    for which, events in (
        ("same", doc["traceEvents"]),
        ("slow", make_synthetic_ranks.slowed_copy(doc, slow_rank)["traceEvents"]),
    ):
        bodies[which] = gzip.compress((json.dumps(events, separators=(",", ":")) + "}").encode(), compresslevel=1)
    total = 0
    for r in range(ranks):
        info = {**(head.get("distributedInfo") or {}), "rank": r, "world_size": ranks}
        text = json.dumps({**head, "distributedInfo": info, "traceName": f"SYNTHETIC rank {r} of {ranks}"})
        path = out / f"host_{1000 + r}.{r}.pt.trace.json.gz"
        path.write_bytes(
            gzip.compress((text[:-1] + ',"traceEvents":').encode()) + bodies["slow" if r == slow_rank else "same"]
        )
        total += path.stat().st_size
    return {"ranks": ranks, "events_per_rank": len(doc["traceEvents"]), "gz_bytes_total": total}


def result_bytes(folder: Path) -> dict:
    """What one rank sends back to the driver (analyse_rank's result), pickled, and its largest parts."""
    from diagnose.model.config import Config
    from diagnose.ranks.analyse import analyse_rank
    from diagnose.trace.rank_files import rank_sources

    result = analyse_rank(rank_sources(folder)[0], Config())
    parts = {k: len(pickle.dumps(v)) for k, v in result["profile"].items()}
    return {
        "result_bytes": len(pickle.dumps(result)),
        "profile_bytes": len(pickle.dumps(result["profile"])),
        "largest_profile_fields": dict(sorted(parts.items(), key=lambda kv: -kv[1])[:3]),
    }


def measure(folder: Path, mode: str) -> dict:
    """One analysis of `folder` in a fresh subprocess."""
    run = subprocess.run([sys.executable, "-c", MEASURE, str(folder), mode], capture_output=True, text=True, cwd=ROOT)
    if run.returncode:
        raise SystemExit(run.stderr[-2000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Command line: OUT [--ranks 64,256,1024] [--modes pool:2,dask:2,dask:1] [--keep]."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--ranks", default="64,256,1024")
    p.add_argument("--modes", default="pool:2,dask:2,dask:1")
    p.add_argument("--keep", action="store_true", help="keep the rank folders")
    args = p.parse_args(argv)
    if ROOT in args.out.resolve().parents or args.out.resolve() == ROOT:
        p.error("write the rank folders outside the repository (e.g. /tmp)")
    for n in [int(x) for x in args.ranks.split(",")]:
        folder = args.out / f"ranks-{n}"
        made = make_rank_folder(folder, n)
        print(json.dumps({**made, **result_bytes(folder)}), flush=True)
        for mode in args.modes.split(","):
            print(json.dumps(measure(folder, mode)), flush=True)
        if not args.keep:
            shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
