"""Patterns of CPU ops, from their recorded shapes, that decide where attention and KV-cache memory goes.

- score matrices: a softmax over [..., Tq, Tk] fed by a batched matmul producing [..., Tq, Tk]:
  attention computed by hand, its T×T scores materialised in HBM (also what SDPA's math fallback
  does inside `aten::_scaled_dot_product_attention_math`);
- attention calls: scaled_dot_product_attention with its q/k/v (and mask) shapes and the backend
  that ran it (flash, efficient, cudnn or math, read from the nested op);
- KV appends: `aten::cat([cache, new])` where `new` adds a few positions along one dimension of a
  much longer `cache`: a cache grown by concatenation, reallocated and copied every token.

Shapes come from `record_shapes=True`; tensor lists (cat's input) carry shapes but no dtype.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from diagnose.metrics.work import last_window
from diagnose.vocabulary.dtypes import dtype_bytes
from diagnose.vocabulary.ops import SDPA_TOP, is_sdpa_backend_op, sdpa_backend

SOFTMAX_OPS = {
    "aten::softmax",
    "aten::_softmax",
    "aten::log_softmax",
    "aten::_log_softmax",
    "aten::_safe_softmax",
    "aten::_masked_softmax",
}
SCORE_MATMULS = {"aten::matmul", "aten::bmm", "aten::baddbmm", "aten::mm"}
MASK_OPS = {
    "aten::add",
    "aten::add_",
    "aten::masked_fill",
    "aten::masked_fill_",
    "aten::where",
    "aten::sub",
    "aten::mul",
    "aten::mul_",
    "aten::baddbmm",
}
CAT_OPS = {"aten::cat", "aten::concat", "aten::concatenate", "aten::_cat"}


@dataclasses.dataclass(frozen=True)
class Shape:
    """A tensor argument: dims and dtype (dtype '' when not recorded)."""

    dims: tuple[int, ...]
    dtype: str = ""

    @property
    def numel(self) -> int:
        return math.prod(self.dims) if self.dims else 1

    @property
    def itemsize(self) -> int:
        return dtype_bytes(self.dtype, 2)

    @property
    def nbytes(self) -> float:
        return float(self.numel * self.itemsize)


def _dims(value) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        return tuple(value)
    return None


# (id(dims), id(types)) -> (dims, types, their shapes). The decoder keeps one list per distinct
# value (trace/frames.py), so a trace has few; holding the lists keeps their ids from being reused.
_PARSED: dict[tuple[int, int], tuple] = {}
_PARSED_MAX = 1 << 16


def shapes(input_dims, input_types) -> tuple[Shape | None, ...]:
    """The op's tensor arguments position by position (None for scalars, lists and empty dims),
    parsed once per distinct shape list; shared, so a tuple."""
    if not isinstance(input_dims, list):
        return ()
    key = (id(input_dims), id(input_types))
    hit = _PARSED.get(key)
    if hit is not None and hit[0] is input_dims and hit[1] is input_types:
        return hit[2]
    types = input_types if isinstance(input_types, list) else []
    out = []
    for i, dims in enumerate(input_dims):
        d = _dims(dims)
        dtype = types[i] if i < len(types) and isinstance(types[i], str) else ""
        out.append(Shape(d, dtype) if d is not None else None)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    parsed = _PARSED[key] = (input_dims, input_types, tuple(out))
    return parsed[2]


def distinct_calls(ops: pd.DataFrame):
    """(name, input dims, input types) of each distinct call in `ops`, in order of first appearance.

    The shape lists are shared objects, one per distinct value (trace/frames.py), so calls are told
    apart by identity: a repeated call may come back more than once, never a distinct one less.
    """
    seen = set()
    for name, dims, types in zip(
        ops["name"].to_numpy(object), ops["input_dims"].to_numpy(object), ops["input_types"].to_numpy(object)
    ):
        key = (name, id(dims), id(types))
        if key not in seen:
            seen.add(key)
            yield name, dims, types


def has_shapes(ops: pd.DataFrame) -> bool:
    """True when the trace recorded input shapes (record_shapes=True)."""
    if not len(ops) or "input_dims" not in ops:
        return False
    return any(isinstance(d, list) and len(d) > 0 for d in ops["input_dims"])


def step_index(ops: pd.DataFrame, windows: list | None) -> np.ndarray:
    """For each op, the measured step whose CPU range holds its start; -1 outside them; 0 for all
    when the trace has no step ranges."""
    if not windows:
        return np.zeros(len(ops), dtype=int)
    starts = np.array([w.cpu_start for w in windows], dtype=float)
    ends = np.array([w.cpu_end for w in windows], dtype=float)
    index = np.array([w.index for w in windows], dtype=int)
    return last_window(ops["ts"].to_numpy(float), starts, ends, index, closed=True)


@dataclasses.dataclass
class ScoreMatrix:
    """A materialised attention score matrix [..., Tq, Tk]."""

    dims: tuple[int, ...]
    dtype: str
    how: str
    mask: Shape | None = None

    @property
    def tq(self) -> int:
        return self.dims[-2]

    @property
    def tk(self) -> int:
        return self.dims[-1]

    @property
    def batch_heads(self) -> int:
        return math.prod(self.dims[:-2])

    @property
    def nbytes(self) -> float:
        """One copy of the matrix in the softmax's dtype."""
        return float(math.prod(self.dims) * dtype_bytes(self.dtype, 2))


def score_matrices(ops: pd.DataFrame, min_tokens: int, calls: list | None = None) -> list[ScoreMatrix]:
    """Distinct score matrices with Tq and Tk ≥ min_tokens: a softmax over [..., Tq, Tk] whose
    shape a batched matmul in the trace produces (q @ kᵀ), with the dense mask added to it if any.
    `calls`: attention_calls(ops), when the caller has them already."""
    if not len(ops):
        return []
    soft = ops[ops["name"].isin(SOFTMAX_OPS)]
    if not len(soft):
        return []
    found: dict[tuple, ScoreMatrix] = {}
    products = _matmul_outputs(ops)
    calls = attention_calls(ops) if calls is None else calls
    math_calls = {(c.q.dims[-2], c.k.dims[-2]) for c in calls if c.backend == "math"}
    for _, dims_raw, types in distinct_calls(soft):
        args = shapes(dims_raw, types)
        x = args[0] if args else None
        if x is None or len(x.dims) < 3 or min(x.dims[-2:]) < min_tokens:
            continue
        tail = x.dims[-2:]
        if (x.dims, x.dtype) in found or tail not in products:
            continue
        how = (
            "SDPA fell back to its math path (aten::_scaled_dot_product_attention_math)"
            if tail in math_calls
            else "attention written by hand: a matmul producing [..., Tq, Tk], then softmax"
        )
        found[(x.dims, x.dtype)] = ScoreMatrix(x.dims, x.dtype, how, _dense_mask(ops, x.dims))
    return sorted(found.values(), key=lambda s: s.nbytes, reverse=True)


def _matmul_outputs(ops: pd.DataFrame) -> set[tuple[int, int]]:
    """The last two dims of every batched matmul's output: (a[-2], b[-1])."""
    out = set()
    for name, dims_raw, types in distinct_calls(ops[ops["name"].isin(SCORE_MATMULS)]):
        args = [a for a in shapes(dims_raw, types) if a is not None]
        if name == "aten::baddbmm":
            args = args[1:]
        if len(args) >= 2 and len(args[0].dims) >= 2 and len(args[1].dims) >= 2:
            out.add((args[0].dims[-2], args[1].dims[-1]))
    return out


def _dense_mask(ops: pd.DataFrame, score: tuple[int, ...]) -> Shape | None:
    """A smaller tensor ending in [Tq, Tk] combined elementwise with the scores: a dense mask."""
    for _, dims_raw, types in distinct_calls(ops[ops["name"].isin(MASK_OPS)]):
        args = [a for a in shapes(dims_raw, types) if a is not None]
        if not any(a.dims == score for a in args):
            continue
        for a in args:
            if a.dims[-2:] == score[-2:] and a.numel < math.prod(score):
                return a
    return None


@dataclasses.dataclass
class AttentionCall:
    """One scaled_dot_product_attention call: q, k, v (and mask) shapes, and its backend."""

    ts: float
    q: Shape
    k: Shape
    v: Shape
    mask: Shape | None
    backend: str

    @property
    def decode(self) -> bool:
        """Fewer queries than keys by far: a token (or a few) attending to a cache."""
        return self.q.dims[-2] * 8 <= self.k.dims[-2]


def attention_calls(ops: pd.DataFrame) -> list[AttentionCall]:
    """Every SDPA call (the top-level op, or the backend op when no top-level op was recorded)."""
    if not len(ops):
        return []
    names = ops["name"]
    # Match each distinct name once: a large trace has millions of ops but few names.
    backend_names = {n for n in names.unique() if is_sdpa_backend_op(n)}
    backend_rows = ops[names.isin(backend_names)]
    top = ops[names == SDPA_TOP]
    rows = top if len(top) else backend_rows
    b_ts = backend_rows["ts"].to_numpy(float)
    b_names = backend_rows["name"].to_numpy(object)
    calls = []
    for r in rows.itertuples(index=False):
        args = shapes(r.input_dims, r.input_types)
        qkv = [a for a in args[:3] if a is not None and len(a.dims) >= 2]
        if len(qkv) < 3:
            continue
        mask = args[3] if len(args) > 3 and args[3] is not None and len(args[3].dims) >= 2 else None
        name = r.name
        if name == SDPA_TOP:
            i = int(np.searchsorted(b_ts, r.ts, side="left"))
            name = b_names[i] if i < len(b_ts) and b_ts[i] <= r.ts + r.dur else ""
        calls.append(AttentionCall(float(r.ts), qkv[0], qkv[1], qkv[2], mask, sdpa_backend(name)))
    return calls


@dataclasses.dataclass
class KVAppend:
    """One `cat([cache, new])`: `new` adds `added` positions along `dim` of a `cache_len`-long cache."""

    ts: float
    step: int
    dims: tuple[int, ...]
    dim: int
    cache_len: int
    added: int

    @property
    def out_dims(self) -> tuple[int, ...]:
        d = list(self.dims)
        d[self.dim] = self.cache_len + self.added
        return tuple(d)

    @property
    def per_position(self) -> int:
        """Elements per cache position (everything but the growing dimension)."""
        return math.prod(self.dims) // max(self.cache_len, 1)


def kv_appends(ops: pd.DataFrame, steps: np.ndarray, max_append: int, min_cache: int) -> list[KVAppend]:
    """The cat ops that append at most `max_append` positions to a cache of ≥ `min_cache` positions
    along one dimension of two same-rank tensors (rank ≥ 3), all other dims equal."""
    out = []
    pick = ops["name"].isin(CAT_OPS).to_numpy()
    for r, step in zip(ops[pick].itertuples(index=False), steps[pick]):
        dims = r.input_dims
        if not isinstance(dims, list) or not dims or not isinstance(dims[0], list) or len(dims[0]) != 2:
            continue
        a, b = (_dims(x) for x in dims[0])
        if a is None or b is None or len(a) != len(b) or len(a) < 3:
            continue
        differ = [i for i in range(len(a)) if a[i] != b[i]]
        if len(differ) != 1:
            continue
        d = differ[0]
        if b[d] <= max_append and a[d] >= min_cache:
            out.append(KVAppend(float(r.ts), int(step), a, d, a[d], b[d]))
    return out
