"""The change of the step split over the step-accounting buckets, and inside them over matched work.

Each side's `summary.accounting` splits its step into buckets that sum to it (GPU compute,
communication, memcpy, launch, host setup, host work, syncs, queued waits, unexplained;
diagnose/metrics/accounting.py), so the per-bucket differences sum to the difference of the
accounted steps. The buckets are ranked by how much of the change they carry: first those that
moved the way the step moved, largest first, then the rest.

Inside a bucket, the change is given to matched items (diagnose/diff/matching.py):
- `compute`, `copy`, `comm_exposed`: kernel families, GPU µs per step (profiled durations, which the
  profiler barely stretches);
- `launch`: ops matched by name and input shapes, each charged the side's launch µs per kernel
  times the kernels it launched per step (an estimate: dispatch cost is spread evenly per launch);
- `host_in_ops`, `host_work`: the op and range names the accounting found covering silent host time.
"""

from __future__ import annotations

import dataclasses

from diagnose.diff import matching
from diagnose.model.findings import Bucket, Summary
from diagnose.vocabulary.kernels import COMM_FAMILY

TOP_ITEMS = 5
KERNEL_BUCKETS = {"compute": ("kernel",), "copy": ("memcpy", "memset"), "comm_exposed": ("kernel",)}
HOST_BUCKETS = ("host_in_ops", "host_work")


@dataclasses.dataclass
class ItemChange:
    """One matched item inside a bucket: a kernel family, an op with its shapes, or a host range."""

    kind: str  # "kernel family" | "op" | "host range"
    name: str
    before_us: float | None
    after_us: float | None
    detail: str = ""

    @property
    def delta_us(self) -> float:
        """after − before, µs per step (a side without the item counts 0)."""
        return (self.after_us or 0.0) - (self.before_us or 0.0)

    @property
    def status(self) -> str:
        """ "matched", "appeared" or "disappeared"."""
        if self.before_us is None:
            return "appeared"
        if self.after_us is None:
            return "disappeared"
        return "matched"

    def to_dict(self) -> dict:
        """Plain data for diff.json."""
        return {
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "before_us": _r(self.before_us),
            "after_us": _r(self.after_us),
            "delta_us": round(self.delta_us, 3),
            "detail": self.detail,
        }


@dataclasses.dataclass
class BucketChange:
    """One step-accounting bucket before and after, with the matched items that moved most."""

    id: str
    label: str
    before_us: float
    after_us: float
    items: list[ItemChange] = dataclasses.field(default_factory=list)
    note: str = ""  # why this bucket moved, when another bucket's change caused it

    @property
    def delta_us(self) -> float:
        """after − before, µs per step."""
        return self.after_us - self.before_us

    def to_dict(self, step_delta_us: float) -> dict:
        """Plain data for diff.json; `share_of_change` is this bucket's part of the step's change."""
        share = self.delta_us / step_delta_us if step_delta_us else None
        return {
            "id": self.id,
            "label": self.label,
            "before_us": _r(self.before_us),
            "after_us": _r(self.after_us),
            "delta_us": round(self.delta_us, 3),
            "share_of_change": _r(share, 4),
            "items": [i.to_dict() for i in self.items],
            "note": self.note,
        }


def bucket_changes(before, after) -> list[BucketChange]:
    """Every bucket of either side's accounting, ranked by how much of the step's change it carries."""
    rows_b = _buckets(before.summary)
    rows_a = _buckets(after.summary)
    out = []
    for key, b, a in matching.match(rows_b, rows_a):
        row = a or b  # match gives every key a side
        change = BucketChange(
            key,
            row.label if row else key,
            (b.us_per_step if b else 0.0) or 0.0,
            (a.us_per_step if a else 0.0) or 0.0,
        )
        change.items = _items(key, before, after, b, a)
        out.append(change)
    total = sum(c.delta_us for c in out)
    return drained_queue_first(rank(out, total), before.summary, after.summary, total)


STALL_BUCKETS = ("host_work", "host_python", "host_in_ops", "sync_wait")
STALL_SHARE = 0.10  # a stall must carry at least this share of the step's change...
STALL_OF_LAUNCH = 0.15  # ...and this share of the launch bucket's own change, to be called its cause
SAME_LAUNCHES = 0.10  # GPU ops per step within this fraction: the host dispatches the same work


def drained_queue_first(
    changes: list[BucketChange], before: Summary, after: Summary, total: float
) -> list[BucketChange]:
    """When launch idle grew most but the host dispatches the same work, and a host stall grew with
    it, the stall comes first: it let the GPU's queue run dry, after which every launch of the step
    is exposed (measured on the H200: 1.5 ms of loading in the main process at the step start cost
    6.3 ms of launch idle). The launch bucket stays, second, saying it follows from the stall."""
    if not changes or changes[0].id != "launch" or total <= 0:
        return changes
    ops_b, ops_a = before.gpu_ops_per_step or 0, after.gpu_ops_per_step or 0
    if not ops_b or abs(ops_a - ops_b) > SAME_LAUNCHES * ops_b:
        return changes
    launch = changes[0]
    stalls = [
        c
        for c in changes
        if c.id in STALL_BUCKETS
        and c.delta_us >= STALL_SHARE * total
        and c.delta_us >= STALL_OF_LAUNCH * launch.delta_us
    ]
    if not stalls:
        return changes
    stall = max(stalls, key=lambda c: c.delta_us)
    launch.note = (
        f"the same {ops_a:g} GPU ops per step on both sides: the GPU's queue ran dry after the host "
        f"stall ({stall.label}, +{stall.delta_us:,.0f} µs), so every later launch was exposed"
    )
    rest = [c for c in changes if c is not stall and c is not launch]
    return [stall, launch, *rest]


def rank(changes: list[BucketChange], total: float) -> list[BucketChange]:
    """Those that moved the way the total moved first (largest first), then the others by size."""
    sign = 1.0 if total >= 0 else -1.0
    return sorted(changes, key=lambda c: (c.delta_us * sign <= 0, -abs(c.delta_us)))


def _buckets(summary: Summary) -> dict[str, Bucket]:
    rows = summary.accounting.buckets if summary.accounting else []
    return {r.id: r for r in rows if r.in_sum}


def _items(bucket: str, before, after, row_b: Bucket | None, row_a: Bucket | None) -> list[ItemChange]:
    inv_b, inv_a = before.details.inventory, after.details.inventory
    if bucket in KERNEL_BUCKETS:
        cats = KERNEL_BUCKETS[bucket]
        fam_b = _only(matching.kernel_families(inv_b), cats, bucket)
        fam_a = _only(matching.kernel_families(inv_a), cats, bucket)
        items = [
            ItemChange("kernel family", key, _us(b), _us(a), _family_detail(b, a))
            for key, b, a in matching.match(fam_b, fam_a)
        ]
    elif bucket == "launch":
        items = _launch_items(matching.op_table(inv_b), matching.op_table(inv_a), row_b, row_a)
    elif bucket in HOST_BUCKETS:
        names_b = {r.name: r.us_per_step for r in (row_b.by_name if row_b else [])}
        names_a = {r.name: r.us_per_step for r in (row_a.by_name if row_a else [])}
        items = [ItemChange("host range", key, b, a) for key, b, a in matching.match(names_b, names_a)]
    else:
        return []
    moved = [i for i in items if abs(i.delta_us) > 0.0005]
    return sorted(moved, key=lambda i: -abs(i.delta_us))[:TOP_ITEMS]


def _only(families: dict, cats: tuple, bucket: str) -> dict:
    def is_comm(key: str) -> bool:
        return key.startswith(COMM_FAMILY)

    keep = {}
    for key, fam in families.items():
        if fam.get("cat") not in cats:
            continue
        if bucket == "compute" and is_comm(key) or bucket == "comm_exposed" and not is_comm(key):
            continue
        keep[key] = fam
    return keep


def _launch_items(ops_b: dict, ops_a: dict, row_b: Bucket | None, row_a: Bucket | None) -> list[ItemChange]:
    """Ops charged their share of the launch bucket: µs per launch × kernels launched per step."""
    per_b = _per_launch(ops_b, row_b)
    per_a = _per_launch(ops_a, row_a)
    items = []
    for (name, dims), b, a in matching.match(ops_b, ops_a):
        before_us = b["kernels_per_step"] * per_b if b else None
        after_us = a["kernels_per_step"] * per_a if a else None
        detail = (
            f"{_fmt(b['kernels_per_step'] if b else 0)} → {_fmt(a['kernels_per_step'] if a else 0)} "
            "kernels launched per step"
        )
        items.append(ItemChange("op", f"{name} {dims}".strip(), before_us, after_us, detail))
    return items


def _per_launch(ops: dict, row: Bucket | None) -> float:
    launches = sum(v["kernels_per_step"] for v in ops.values())
    return ((row.us_per_step if row else 0.0) or 0.0) / launches if launches else 0.0


def _family_detail(b: dict | None, a: dict | None) -> str:
    """The kernel names behind a family when they differ between the sides (cuBLAS chose another tile)."""
    names_b = _top_name(b)
    names_a = _top_name(a)
    calls = f"{_fmt((b or {}).get('calls_per_step', 0))} → {_fmt((a or {}).get('calls_per_step', 0))} calls per step"
    if names_b and names_a and names_b != names_a:
        return f"{calls}; {names_b} → {names_a}"
    return calls + (f"; {names_a or names_b}" if names_a or names_b else "")


def _top_name(fam: dict | None) -> str:
    if not fam or not fam.get("kernels"):
        return ""
    name = max(fam["kernels"].items(), key=lambda kv: kv[1])[0]
    return name if len(name) <= 90 else name[:87] + "…"


def _us(entry: dict | None) -> float | None:
    return None if entry is None else float(entry.get("us_per_step") or 0.0)


def _fmt(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def _r(value, digits: int = 3):
    return None if value is None else round(float(value), digits)
