"""Attach Nsight Compute rows to the profiler's kernels: by normalised name and order within a step.

The ncu run and the torch.profiler capture are two runs of the same code, so each step launches
the same kernels in the same order; what differs is how the names are spelt. Kineto keeps the
full demangled signature (`void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous
namespace)::silu_kernel(...)::{lambda()#1}...>(int, ...)`), ncu its own demangling, often
shortened (`void at::vectorized_elementwise_kernel<8, at::<unnamed>::silu_kernel(...)::[lambda()
(instance 1)]...`). Both reduce to a *base name*: the first identifier that is not a namespace
(`vectorized_elementwise_kernel`, `nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT`).

The measured step's ncu rows (NVTX range `diagnose:step N`, the lowest N) are aligned with the
kernels of every profiled step in launch order, as a weighted longest common subsequence: two
kernels can pair only when their base names agree; a pair scores 1, plus up to 0.5 for the
identifiers the two names share (which functor, which dtype) and 0.5 when grid and block sizes
agree. Kernels ncu skipped (`-k` filters, replay failures) or that the trace lacks fall out as
gaps and are reported, never paired by force.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import re

import numpy as np
import pandas as pd

from diagnose.ncu.classify import classify_table
from diagnose.ncu.csv import NcuTable
from diagnose.vocabulary.markers import NVTX_STEP
from diagnose.vocabulary.units import percent

MEASURED_COLUMNS = [
    "sm_pct",
    "mem_pct",
    "dram_pct",
    "tensor_pct",
    "occupancy_pct",
    "dram_bytes",
    "measured_us",
    "bound",
    "bound_why",
    "ncu_id",
    "ncu_kernel",
]
MAX_DP_CELLS = 4_000_000  # above this, a greedy in-order match replaces the alignment
STEP_RANGE = NVTX_STEP
_IDENT = re.compile(r"[A-Za-z_]\w*")
_STOP = frozenset(
    """void at native std c10 cuda unnamed anonymous namespace const unsigned signed int long
char float double bool true false lambda instance operator array ul short struct class typename
detail impl int64_t uint32_t size_t""".split()
)


@dataclasses.dataclass
class JoinResult:
    """Measured values per trace kernel, and how well the two runs lined up."""

    measured: pd.DataFrame
    ncu_rows: int
    step_kernels: int
    matched: int
    unmatched_ncu: list[str]
    unmeasured: list[str]
    unmeasured_count: int
    coverage: float
    steps: int
    step_range: str
    ignored_rows: int = 0

    def summary(self) -> str:
        """One line: how many kernels were matched and how much of the step's kernel time they cover."""
        text = (
            f"{self.matched} of {self.ncu_rows} Nsight Compute rows ({self.step_range}) matched the "
            f"trace's {self.step_kernels} kernels of a step, covering {percent(self.coverage)} of its kernel time"
        )
        if self.unmatched_ncu:
            text += f"; {len(self.unmatched_ncu)} rows unmatched"
        if self.ignored_rows:
            text += f"; {self.ignored_rows} rows of other ranges ignored"
        return text


@functools.lru_cache(maxsize=4096)
def base_name(name: str) -> str:
    """The kernel's own name: the first identifier that is not `void`, a namespace or a placeholder."""
    text = str(name)
    for match in _IDENT.finditer(text):
        word = match.group()
        if word in ("void", "unnamed", "anonymous", "namespace"):
            continue
        rest = text[match.end() :].lstrip(" >)")
        if rest.startswith("::"):
            continue
        return word
    return text.strip()


@functools.lru_cache(maxsize=4096)
def detail_tokens(name: str) -> frozenset:
    """Identifiers of a kernel name that tell instantiations apart (functors, dtypes), lower-cased."""
    base = base_name(name)
    words = {w.lower() for w in _IDENT.findall(str(name)) if w != base}
    return frozenset(w for w in words if len(w) > 2 and w not in _STOP and not re.fullmatch(r"t\d+", w))


@functools.lru_cache(maxsize=65536)
def name_score(ncu_name: str, trace_name: str) -> float:
    """0 when the base names differ, else 1 + half the Jaccard similarity of their detail tokens."""
    if base_name(ncu_name) != base_name(trace_name):
        return 0.0
    a, b = detail_tokens(ncu_name), detail_tokens(trace_name)
    return 1.0 + 0.5 * (len(a & b) / len(a | b) if a | b else 1.0)


def measured_step(table: NcuTable) -> tuple[pd.DataFrame, str, int]:
    """The rows of one measured step (lowest `diagnose:step N` range, else all), its label, rows left out."""
    rows = table.kernels
    steps = rows["range"].astype(str).str.extract(STEP_RANGE, expand=False)
    if steps.notna().any():
        first = steps.dropna().astype(int).min()
        keep = steps == str(first)
        return rows[keep], f"diagnose:step {first}", int((~keep).sum())
    return rows, "all rows", 0


def join(table: NcuTable, kernels: pd.DataFrame, sm_count: float | None = None) -> JoinResult:
    """Align the measured step's rows with each step's kernels (`work.step_kernels` frame)."""
    rows, label, ignored = measured_step(table)
    rows = rows.reset_index(drop=True)
    empty = pd.DataFrame(columns=MEASURED_COLUMNS)
    if not len(rows) or not len(kernels):
        return JoinResult(empty, len(rows), 0, 0, list(rows["kernel"].head(10)), [], 0, 0.0, 0, label, ignored)
    steps = [g for _, g in kernels.groupby("step", sort=True)]
    first = _launch_order(steps[0])
    classes = classify_table(rows, sm_count, launches_in_step=len(first))
    parts: list[pd.DataFrame] = []
    report: JoinResult | None = None
    for step in steps:
        ordered = _launch_order(step)
        pairs = align(rows, ordered)
        if report is None:
            report = _report(rows, ordered, pairs, label, ignored)
        if pairs:
            parts.append(_measured_rows(rows, classes, ordered, pairs))
    measured = pd.concat(parts) if parts else empty
    assert report is not None  # steps holds at least one step, which made the report
    report.measured = measured
    report.steps = len(parts)
    return report


def align(rows: pd.DataFrame, ordered: pd.DataFrame) -> list[tuple[int, int]]:
    """(ncu row position, trace kernel position) pairs of the best order-preserving match."""
    n, m = len(rows), len(ordered)
    if n == 0 or m == 0:
        return []
    if n * m > MAX_DP_CELLS:
        return _greedy(rows, ordered)
    score = _scores(rows, ordered)
    dp = np.zeros((n + 1, m + 1))
    for i in range(1, n + 1):
        s = score[i - 1]
        diag = np.where(s > 0, dp[i - 1, :-1] + s, -np.inf)
        dp[i, 1:] = np.maximum(dp[i - 1, 1:], diag)
        dp[i] = np.maximum.accumulate(dp[i])
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        if dp[i, j] == dp[i, j - 1]:
            j -= 1
        elif dp[i, j] == dp[i - 1, j]:
            i -= 1
        else:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return pairs[::-1]


def _scores(rows: pd.DataFrame, ordered: pd.DataFrame) -> np.ndarray:
    ncu_names, ncu_idx = np.unique(rows["kernel"].astype(str).to_numpy(), return_inverse=True)
    trace_names, trace_idx = np.unique(ordered["name"].astype(str).to_numpy(), return_inverse=True)
    table = np.array([[name_score(a, b) for b in trace_names] for a in ncu_names])
    score = table[ncu_idx][:, trace_idx]
    same_grid = (_col(rows, "blocks")[:, None] == _col(ordered, "blocks")[None, :]) & (
        _col(rows, "threads")[:, None] == _threads(ordered)[None, :]
    )
    return score + np.where((score > 0) & same_grid, 0.5, 0.0)


def _greedy(rows: pd.DataFrame, ordered: pd.DataFrame) -> list[tuple[int, int]]:
    positions: dict[str, list[int]] = {}
    for j, name in enumerate(ordered["name"].astype(str)):
        positions.setdefault(base_name(name), []).append(j)
    pairs, cursor = [], 0
    for i, name in enumerate(rows["kernel"].astype(str)):
        candidates = positions.get(base_name(name), [])
        k = bisect.bisect_left(candidates, cursor)
        if k < len(candidates):
            pairs.append((i, candidates[k]))
            cursor = candidates[k] + 1
    return pairs


def _col(frame: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float) if name in frame else np.full(len(frame), np.nan)


def _threads(ordered: pd.DataFrame) -> np.ndarray:
    if "block" not in ordered:
        return np.full(len(ordered), np.nan)
    return np.array([_dims(b) for b in ordered["block"]])


def _dims(value) -> float:
    parts = re.findall(r"\d+", str(value)) if value is not None else []
    return float(math.prod(int(p) for p in parts)) if parts else math.nan


def _launch_order(step: pd.DataFrame) -> pd.DataFrame:
    for key in ("correlation", "launch_ts", "ts"):
        if key in step and step[key].notna().all():
            return step.sort_values(key, kind="stable")
    return step.sort_values("ts", kind="stable")


def _measured_rows(rows, classes, ordered, pairs) -> pd.DataFrame:
    ri = [p[0] for p in pairs]
    picked = rows.iloc[ri]
    return pd.DataFrame(
        {
            "sm_pct": picked["sm_pct"].to_numpy(float),
            "mem_pct": picked["mem_pct"].to_numpy(float),
            "dram_pct": picked["dram_pct"].to_numpy(float),
            "tensor_pct": picked["tensor_pct"].to_numpy(float),
            "occupancy_pct": picked["occupancy_pct"].to_numpy(float),
            "dram_bytes": picked["dram_bytes"].to_numpy(float),
            "measured_us": picked["duration_us"].to_numpy(float),
            "bound": classes["bound"].iloc[ri].to_numpy(object),
            "bound_why": classes["bound_why"].iloc[ri].to_numpy(object),
            "ncu_id": picked["id"].to_numpy(float),
            "ncu_kernel": picked["kernel"].to_numpy(object),
        },
        index=ordered.index[[p[1] for p in pairs]],
    )


def _report(rows, ordered, pairs, label, ignored) -> JoinResult:
    matched_rows = {p[0] for p in pairs}
    matched_kernels = {p[1] for p in pairs}
    unmatched = [k[:120] for i, k in enumerate(rows["kernel"].astype(str)) if i not in matched_rows]
    left = ordered.iloc[[j for j in range(len(ordered)) if j not in matched_kernels]]
    total = float(ordered["dur"].sum()) or 1.0
    coverage = 1.0 - float(left["dur"].sum()) / total
    by_time = left.groupby(left["name"].astype(str).map(base_name))["dur"].sum().sort_values(ascending=False)
    return JoinResult(
        pd.DataFrame(columns=MEASURED_COLUMNS),
        len(rows),
        len(ordered),
        len(pairs),
        unmatched,
        list(by_time.index[:10]),
        len(left),
        coverage,
        0,
        label,
        ignored,
    )
