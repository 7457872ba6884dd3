"""The fixed step's budget, from the trace its verify child profiled, in the same terms as the report's."""

from __future__ import annotations

from pathlib import Path

from diagnose.base.errors import DiagnoseError
from diagnose.metrics import Metrics
from diagnose.trace.load import load_capture_folder

BUDGET_KEYS = ("step_time_us", "gpu_busy_fraction", "gpu_ops_per_step", "host_wait_share", "time_basis")


def step_budget(summary: dict) -> dict:
    """The headline of a step budget: step time, GPU busy share, GPU ops per step, host wait, and the
    accounting buckets as {bucket id: µs per step}."""
    out = {k: summary.get(k) for k in BUDGET_KEYS if summary.get(k) is not None}
    buckets = ((summary.get("accounting") or {}).get("buckets")) or []
    out["buckets_us"] = {b["id"]: b["us_per_step"] for b in buckets if b.get("in_sum") and b.get("us_per_step")}
    return out


def fixed_budget(folder: Path) -> tuple[dict | None, str]:
    """(budget, "") of the verify folder's profiled fixed steps, or (None, why) when it cannot be read."""
    if not (Path(folder) / "trace.json.gz").exists():
        return None, "the fixed step was not profiled"
    try:
        trace = load_capture_folder(Path(folder))
        if not (trace.has_gpu_activity or len(trace.ops)):
            return None, "the fixed step's profile holds no operation"
        return step_budget(Metrics(trace).summary()), ""
    except (DiagnoseError, ValueError, KeyError, OSError) as exc:
        return None, f"reading the fixed step's profile failed: {exc}"
