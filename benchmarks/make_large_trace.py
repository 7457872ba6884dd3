"""Make a large kineto trace by tiling a real one end to end in time.

    python benchmarks/make_large_trace.py SOURCE.json[.gz] OUT.json --size-mb 1000

Each tile is a copy of the source's events shifted by a whole number of periods (the source's
span plus a gap), so nothing overlaps. Every id that joins two events gets a fresh value per
tile, shifted by the same stride everywhere it appears: `correlation` (kernel ↔ launch call),
`External id` (op ↔ launch ↔ kernel) and the `id` of flow events (`s`/`f`, which kineto sets to
the correlation). Step annotations are renumbered so they stay unique and increasing
(`ProfilerStep#N`, `diagnose/step N`, `diagnose/warmup N`). Metadata events (`ph: M`) and the
top-level fields (deviceProperties, distributedInfo...) are written once. The output is plain
JSON (the sizes quoted are uncompressed bytes); give it a `.gz` name to compress it.

Never write the output inside the repository: traces of this size belong in /tmp.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

import msgspec

STEP_NAMES = (
    re.compile(r"^(ProfilerStep#)(\d+)$"),
    re.compile(r"^(diagnose/step )(\d+)$"),
    re.compile(r"^(diagnose/warmup )(\d+)$"),
)
GAP_US = 1000.0


def read_trace(path: Path) -> dict:
    """The source trace as a dict (gzip detected by magic number)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _ids(events: list) -> int:
    """One more than the largest id any event carries: the stride between tiles' ids."""
    top = 0
    for ev in events:
        args = ev.get("args") or {}
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                top = max(top, args[key])
        if ev.get("ph") in ("s", "f", "t") and isinstance(ev.get("id"), int):
            top = max(top, ev["id"])
    return top + 1


def _step_counts(events: list) -> dict:
    """For each step-name pattern, how many numbers the source uses (max − min + 1)."""
    counts = {}
    for pattern in STEP_NAMES:
        numbers = [
            int(m[2]) for ev in events if isinstance(ev.get("name"), str) for m in [pattern.match(ev["name"])] if m
        ]
        if numbers:
            counts[pattern.pattern] = max(numbers) - min(numbers) + 1
    return counts


def _span(events: list) -> tuple[float, float]:
    times = [
        (ev["ts"], ev["ts"] + (ev.get("dur") or 0))
        for ev in events
        if isinstance(ev.get("ts"), (int, float)) and isinstance(ev.get("dur", 0), (int, float))
    ]
    return min(t for t, _ in times), max(e for _, e in times)


def tile_event(ev: dict, k: int, period: float, id_stride: int, step_counts: dict) -> dict:
    """A copy of `ev` for tile `k`: shifted in time, fresh ids, renumbered step names."""
    if k == 0:
        return ev
    out = dict(ev)
    if isinstance(ev.get("ts"), (int, float)):
        out["ts"] = round(ev["ts"] + k * period, 3)
    if ev.get("ph") in ("s", "f", "t") and isinstance(ev.get("id"), int):
        out["id"] = ev["id"] + k * id_stride
    args = ev.get("args")
    if args and ("correlation" in args or "External id" in args):
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int) and args[key] > 0:
                args[key] += k * id_stride
        out["args"] = args
    name = ev.get("name")
    if isinstance(name, str) and name[:1] in ("P", "d"):
        for pattern in STEP_NAMES:
            m = pattern.match(name)
            if m:
                out["name"] = f"{m[1]}{int(m[2]) + k * step_counts[pattern.pattern]}"
                break
    return out


def make(source: Path, out: Path, size_mb: float | None = None, tiles: int | None = None) -> dict:
    """Write the tiled trace to `out`; returns what was written (tiles, events, bytes)."""
    doc = read_trace(source)
    events = doc["traceEvents"]
    body = [ev for ev in events if ev.get("ph") != "M"]
    meta = [ev for ev in events if ev.get("ph") == "M"]
    start, end = _span(body)
    period = float(round(end - start + GAP_US))
    stride = _ids(body)
    counts = _step_counts(body)
    encoder = msgspec.json.Encoder()
    tile_bytes = sum(len(encoder.encode(ev)) + 1 for ev in body)
    if tiles is None:
        tiles = max(1, round(size_mb * 1e6 / tile_bytes)) if size_mb else 1
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    opener = gzip.open if out.suffix == ".gz" else open
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with opener(out, "wb") as f:
        f.write(encoder.encode(head)[:-1] + (b"," if head else b"") + b'"traceEvents":[\n')
        first = True
        for ev in meta:
            f.write((b"" if first else b",\n") + encoder.encode(ev))
            first = False
            n += 1
        for k in range(tiles):
            chunk = b",\n".join(encoder.encode(tile_event(ev, k, period, stride, counts)) for ev in body)
            f.write((b"" if first else b",\n") + chunk)
            first = False
            n += len(body)
        f.write(b"\n]}\n")
    return {
        "source": str(source),
        "out": str(out),
        "tiles": tiles,
        "events": n,
        "bytes": out.stat().st_size,
        "period_us": period,
        "id_stride": stride,
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: SOURCE OUT (--size-mb N | --tiles N)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path)
    p.add_argument("out", type=Path)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--size-mb", type=float, help="approximate uncompressed size (10^6 bytes)")
    group.add_argument("--tiles", type=int, help="number of copies of the source")
    args = p.parse_args(argv)
    if Path(__file__).resolve().parents[1] in args.out.resolve().parents:
        print("make_large_trace: write large traces outside the repository (e.g. /tmp)", file=sys.stderr)
        return 2
    print(json.dumps(make(args.source, args.out, args.size_mb, args.tiles)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
