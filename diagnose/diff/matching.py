"""Match the work of two runs: kernels by name family, ops by name and input shapes.

A kernel's *family* (diagnose/vocabulary/kernels.py: `kernel_family`) is what stays when the
choices a library makes per call are stripped, so cuBLAS picking another tile, or bf16 instead of
fp32, is one change of the `gemm` family, not one kernel vanishing and another appearing.

An op is matched by its name and the input shapes it was called with; an op whose name matches
but whose shapes differ is a *shape change* (a halved batch shows up there).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, TypeVar

from diagnose.metrics.sections import InventoryRow
from diagnose.vocabulary.kernels import kernel_family


def kernel_families(inventory: list[InventoryRow] | None) -> dict[str, dict]:
    """Per family: µs and calls per step, the ops that launched it and its kernel names."""
    out: dict[str, dict] = {}
    for row in inventory or []:
        fam = out.setdefault(
            kernel_family(row.name),
            {
                "us_per_step": 0.0,
                "calls_per_step": 0.0,
                "cat": row.cat,
                "ops": defaultdict(float),
                "kernels": defaultdict(float),
            },
        )
        fam["us_per_step"] += row.us_per_step or 0.0
        fam["calls_per_step"] += row.calls_per_step or 0.0
        fam["ops"][row.op or "(no CPU op: graph replay or untraced)"] += row.us_per_step or 0.0
        fam["kernels"][row.name] += row.us_per_step or 0.0
    return out


def op_table(inventory: list[InventoryRow] | None) -> dict[tuple[str, str], dict]:
    """Per (op name, input shapes): GPU µs and kernels launched per step (ops that launch kernels)."""
    out: dict[tuple[str, str], dict] = {}
    for row in inventory or []:
        if not row.op:
            continue
        entry = out.setdefault((row.op, row.input_dims or ""), {"us_per_step": 0.0, "kernels_per_step": 0.0})
        entry["us_per_step"] += row.us_per_step or 0.0
        entry["kernels_per_step"] += row.calls_per_step or 0.0
    return out


K = TypeVar("K")
V = TypeVar("V")


def match(before: Mapping[K, V], after: Mapping[K, V]) -> list[tuple[K, V | None, V | None]]:
    """(key, before's entry or None, after's entry or None) for every key of either side."""
    keys = list(dict.fromkeys([*before, *after]))
    return [(k, before.get(k), after.get(k)) for k in keys]


def shape_changes(before: dict, after: dict, limit: int = 10) -> list[dict]:
    """Ops whose name is on both sides but whose input shapes on one side are not on the other."""
    by_name_b: defaultdict[str, dict] = defaultdict(dict)
    by_name_a: defaultdict[str, dict] = defaultdict(dict)
    for (name, dims), v in before.items():
        by_name_b[name][dims] = v
    for (name, dims), v in after.items():
        by_name_a[name][dims] = v
    out = []
    for name in by_name_b.keys() & by_name_a.keys():
        gone = sorted(set(by_name_b[name]) - set(by_name_a[name]))
        new = sorted(set(by_name_a[name]) - set(by_name_b[name]))
        if gone and new:
            weight = sum(by_name_b[name][d]["us_per_step"] for d in gone) + sum(
                by_name_a[name][d]["us_per_step"] for d in new
            )
            out.append({"op": name, "before": gone[:3], "after": new[:3], "us_per_step": round(weight, 3)})
    out.sort(key=lambda r: -r["us_per_step"])
    return out[:limit]
