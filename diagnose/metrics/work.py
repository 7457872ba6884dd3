"""Work per op: FLOPs and HBM bytes estimated from the shapes and dtypes torch.profiler recorded.

With `record_shapes=True` every CPU op carries `Input Dims` and `Input type`; Metrics.launches
joins each kernel to the op that launched it. From those, per op instance:

- matmuls (`aten::mm`, `addmm`, `bmm`, `baddbmm`, `matmul`, `linear`, `_scaled_mm`, `_int_mm`,
  `mv`, `addmv`): FLOPs = 2·batch·M·N·K (+ M·N for a bias); bytes = A + B (+ bias) + C, each read
  or written once (what a well-tiled GEMM moves; L2 reuse is assumed perfect).
- convolutions (`convolution`, `cudnn_convolution`, `convolution_backward`, ...): FLOPs =
  2·N·O·P·(C/g)·R·S per pass, with P the output pixels. The forward op's record has no stride
  or padding values, so P is taken as the input's pixels (stride 1, "same" padding): an upper
  bound. `convolution_backward` gets P exactly from the gradient it receives and counts two
  passes (input and weight gradients).
- attention (SDPA / flash / efficient / cuDNN kernels): 2·B·H·Lq·Lk·(D + Dv) forward, ×2.5 for
  backward; bytes = q, k, v and the output (the fused kernels never write the scores).
- pointwise ops: bytes = every tensor input read once + the output written once; the output has
  the broadcast shape of the inputs and their promoted dtype (in-place ops write their first input;
  `copy_` reads its source and writes its destination). FLOPs = one per output element.
- reductions (`sum`, `mean`, `amax`, norms...): the input read once; the output (shape not
  recorded) is taken as negligible. Row-wise ops (softmax, layer/RMS/batch norm) write an output of
  the input's shape.
- Inductor/Triton kernels recorded as their own ops (`triton_*`): every tensor argument is read or
  written once; `triton_tem_*` matmul templates get GEMM FLOPs from their first two 2-D arguments.

Everything here is an estimate from shapes: the real traffic of a kernel can be higher (re-reads
that miss L2, strided access) or lower (L2 hits). Op instances carry `sm_pct` / `dram_pct` /
`mem_pct` / `tensor_pct` / `dram_bytes` / `measured_us` / `bound` columns for measured Nsight
Compute values (`--ncu`, `--ncu-csv`: diagnose/ncu/), NaN without them; `best_bytes` and the
`source` column let rules prefer a measurement when there is one.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from diagnose.base.grouped import aggregate
from diagnose.vocabulary import kernels as K
from diagnose.vocabulary.dtypes import BF16, dtype_bytes, is_dtype, is_promoting_float, precision_label
from diagnose.vocabulary.ops import (
    CONV_GRAD_OPS,
    CONV_OPS,
    GATHER_OPS,
    GEMM_OPS,
    INPLACE_INDEX_OPS,
    MEMORY_OPS,
    REDUCE_OPS,
    ROWWISE_OPS,
    is_attention_op,
    returns_bool,
)

MAX_NUMEL = 2**63  # torch sizes are int64: a recorded shape with more elements is garbage


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A tensor argument as recorded: shape and dtype."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> float:
        return self.numel * dtype_bytes(self.dtype, 4)


@dataclasses.dataclass
class Work:
    """What one op instance computes and moves, estimated from its recorded shapes."""

    kind: str
    flops: float = math.nan
    bytes: float = math.nan
    dtype: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    batch: int | None = None
    channels: tuple[int, int] | None = None
    inputs: list[Tensor] = dataclasses.field(default_factory=list)
    outputs: list[Tensor] = dataclasses.field(default_factory=list)
    reduces: bool = False
    note: str = ""


def tensors(input_dims, input_types) -> list[Tensor | None]:
    """The op's arguments, position for position: a Tensor, or None for scalars, lists and Nones."""
    if not isinstance(input_dims, list):
        return []
    types = input_types if isinstance(input_types, list) else []
    out: list[Tensor | None] = []
    for i, dims in enumerate(input_dims):
        dtype = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if (
            isinstance(dims, list)
            and all(isinstance(d, int) and not isinstance(d, bool) for d in dims)
            and is_dtype(dtype)
            and (dims or dtype)
            and abs(math.prod(dims)) < MAX_NUMEL
        ):
            out.append(Tensor(tuple(int(d) for d in dims), dtype))
        else:
            out.append(None)
    return out


def op_work(op_name, input_dims, input_types, kernel_kind: str | None = None) -> Work | None:
    """Estimate the work of one op instance; None when nothing can be said (no op, no shapes)."""
    if not isinstance(op_name, str):
        return None
    args = tensors(input_dims, input_types)
    present = [t for t in args if t is not None]
    if op_name.startswith("triton_"):
        return _triton(op_name, present)
    if op_name in GEMM_OPS:
        return _gemm(op_name, args, present)
    if op_name in CONV_OPS:
        return _conv(op_name, args, present)
    if op_name in CONV_GRAD_OPS:
        return _conv_gradient(CONV_GRAD_OPS[op_name], args)
    if is_attention_op(op_name):
        return _attention(op_name, present)
    if not present:
        return Work(kind=kernel_kind or "other", note="no tensor shapes recorded")
    dtype = present[0].dtype
    if op_name in REDUCE_OPS:
        return Work(
            kind="reduction",
            flops=float(present[0].numel),
            bytes=present[0].nbytes,
            dtype=dtype,
            inputs=[present[0]],
            reduces=True,
        )
    if op_name in ROWWISE_OPS:
        out = Tensor(present[0].shape, dtype)
        return Work(
            kind="reduction",
            flops=5.0 * out.numel,
            bytes=sum(t.nbytes for t in present) + out.nbytes,
            dtype=dtype,
            inputs=present,
            outputs=[out],
        )
    if op_name in GATHER_OPS and len(present) > 1:
        table, index = present[0], present[1]
        row = math.prod(table.shape[1:]) if len(table.shape) > 1 else 1
        out = Tensor((index.numel, row), table.dtype)
        return Work(
            kind="memory",
            bytes=index.nbytes + 2.0 * out.nbytes,
            flops=0.0,
            dtype=table.dtype,
            inputs=[index],
            outputs=[out],
            note="row gather (dim 0 assumed): the rows read, then written",
        )
    if op_name in INPLACE_INDEX_OPS and len(present) > 1:
        src = present[1:]
        return Work(
            kind="memory",
            bytes=2.0 * sum(t.nbytes for t in src),
            flops=0.0,
            dtype=dtype,
            inputs=src,
            outputs=[],
            note="in-place indexed write: the source read, as much written",
        )
    if op_name in MEMORY_OPS or kernel_kind == "memory":
        return Work(
            kind="memory",
            bytes=float(sum(t.nbytes for t in present)),
            flops=0.0,
            dtype=dtype,
            inputs=present,
            note="indexing/concatenation: inputs read once, output not counted",
        )
    return _pointwise(op_name, present, kernel_kind)


def _pointwise(op_name: str, present: list[Tensor], kernel_kind: str | None) -> Work:
    kind = kernel_kind if kernel_kind in K.MEMORY_KINDS else "elementwise"
    base = op_name.split("::")[-1]
    if base in ("copy_", "_copy_from", "_copy_from_and_resize"):
        dst, src = present[0], present[1] if len(present) > 1 else present[0]
        return Work(kind=kind, flops=0.0, bytes=dst.nbytes + src.nbytes, dtype=src.dtype, inputs=[src], outputs=[dst])
    if base in ("fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_"):
        out = present[0]
        return Work(kind=kind, flops=float(out.numel), bytes=out.nbytes, dtype=out.dtype, outputs=[out])
    if base.endswith("_") and not base.startswith("_foreach"):
        out = present[0]
    else:
        out = Tensor(_broadcast([t.shape for t in present]), _promote(op_name, present))
    return Work(
        kind=kind,
        flops=float(out.numel),
        bytes=sum(t.nbytes for t in present) + out.nbytes,
        dtype=present[0].dtype,
        inputs=present,
        outputs=[out],
    )


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        sizes = [s[len(s) - ndim + axis] for s in shapes if len(s) - ndim + axis >= 0]
        out.append(max(sizes) if sizes else 1)
    return tuple(out)


def _promote(op_name: str, present: list[Tensor]) -> str:
    if returns_bool(op_name):
        return "bool"
    floats = [t.dtype for t in present if is_promoting_float(t.dtype)]
    if not floats:
        return present[0].dtype
    return max(floats, key=lambda d: dtype_bytes(d, 0))


def _gemm(op_name: str, args: list[Tensor | None], present: list[Tensor]) -> Work | None:
    base = op_name.split("::")[-1]
    if base in ("addmm", "baddbmm", "addbmm", "_addmm_activation", "addmv"):
        operands, extra = args[1:3], [args[0]] if args and args[0] is not None else []
    elif base == "linear":
        operands, extra = args[0:2], [args[2]] if len(args) > 2 and args[2] is not None else []
    else:
        operands, extra = args[0:2], []
    a, b = operands if len(operands) == 2 else (None, None)
    if a is None or b is None:
        return Work(kind="gemm", note="matmul operands not recorded")
    dims = _gemm_dims(base, a.shape, b.shape)
    if dims is None:
        return Work(kind="gemm", dtype=a.dtype, note=f"unrecognised matmul shapes {a.shape} x {b.shape}")
    batch, m, n, k = dims
    out_bytes = {"_scaled_mm": 2, "_int_mm": 4}.get(base, dtype_bytes(a.dtype, 4))
    flops = 2.0 * batch * m * n * k + (batch * m * n if extra else 0)
    moved = a.nbytes + b.nbytes + batch * m * n * out_bytes + sum(t.nbytes for t in extra)
    out = Tensor((batch, m, n) if batch > 1 else (m, n), a.dtype if base != "_scaled_mm" else BF16)
    return Work(
        kind="gemm",
        flops=flops,
        bytes=float(moved),
        dtype=a.dtype,
        m=m,
        n=n,
        k=k,
        batch=batch,
        inputs=[a, b, *extra],
        outputs=[out],
    )


def _gemm_dims(base: str, a: tuple, b: tuple):
    """(batch, M, N, K) of a matmul from its operand shapes, or None."""
    if not a or not b:  # a 0-d (scalar) operand is no matmul
        return None
    if base == "linear":
        if len(a) < 1 or len(b) != 2 or a[-1] != b[1]:
            return None
        return 1, math.prod(a[:-1]) if len(a) > 1 else 1, b[0], a[-1]
    if len(a) == 1 and len(b) == 1:
        return (1, 1, 1, a[0]) if a[0] == b[0] else None
    if len(b) == 1:  # matrix-vector
        return (1, math.prod(a[:-1]), 1, a[-1]) if a[-1] == b[0] else None
    if len(a) == 1:
        return (math.prod(b[:-2]) or 1, 1, b[-1], a[0]) if a[0] == b[-2] else None
    if a[-1] != b[-2]:
        return None
    if len(b) == 2:  # batched activations against one weight: one big GEMM
        return 1, math.prod(a[:-1]), b[-1], a[-1]
    batch_shape = _broadcast([a[:-2], b[:-2]])
    return math.prod(batch_shape) if batch_shape else 1, a[-2], b[-1], a[-1]


def _conv(op_name: str, args: list[Tensor | None], present: list[Tensor]) -> Work:
    backward = "backward" in op_name
    if len(present) < 2:
        return Work(kind="conv", note="convolution shapes not recorded")
    grad_out: Tensor | None
    if backward:
        if len(present) < 3:
            return Work(kind="conv", note="convolution shapes not recorded")
        grad_out, x, w = present[0], present[1], present[2]
        out_pixels = math.prod(grad_out.shape[2:]) if len(grad_out.shape) > 2 else 1
    else:
        x, w = present[0], present[1]
        grad_out = None
        out_pixels = math.prod(x.shape[2:]) if len(x.shape) > 2 else 1
    if len(x.shape) < 3 or len(w.shape) < 3 or w.shape[1] == 0:
        return Work(kind="conv", dtype=x.dtype, note="unrecognised convolution shapes")
    n, c = x.shape[0], x.shape[1]
    o, c_per_group = w.shape[0], w.shape[1]
    taps = math.prod(w.shape[2:])
    fwd = 2.0 * n * o * out_pixels * c_per_group * taps
    out = Tensor((n, o, *(grad_out.shape[2:] if grad_out else x.shape[2:])), x.dtype)
    if grad_out is not None:  # backward
        flops, moved = 2 * fwd, grad_out.nbytes + 2 * x.nbytes + 2 * w.nbytes
        note = "input and weight gradients"
    else:
        flops, moved = fwd, x.nbytes + w.nbytes + out.nbytes
        note = "output pixels taken as input pixels (stride and padding not recorded): an upper bound"
    return Work(
        kind="conv",
        flops=flops,
        bytes=float(moved),
        dtype=x.dtype,
        m=n * out_pixels,
        n=o,
        k=c_per_group * taps,
        batch=1,
        channels=(c, o),
        inputs=[x, w],
        outputs=[out],
        note=note,
    )


def _conv_gradient(which: str, args: list[Tensor | None]) -> Work:
    """One gradient pass of a convolution: the input's (size, grad_output, weight) or the weight's
    (size, grad_output, input). FLOPs = 2·N·O·P·(C/g)·R·S with P the gradient's pixels (exact)."""
    if len(args) < 3 or args[1] is None or args[2] is None or len(args[1].shape) < 3:
        return Work(kind="conv", note="convolution gradient shapes not recorded")
    grad_out = args[1]
    w: Tensor | None
    x: Tensor | None
    if which == "input":
        w, x = args[2], args[0]
    else:
        w, x = args[0], args[2]
    if w is None or len(w.shape) < 3 or w.shape[1] == 0:
        return Work(kind="conv", dtype=grad_out.dtype, note="the filter's shape was not recorded")
    n, o, pixels = grad_out.shape[0], w.shape[0], math.prod(grad_out.shape[2:])
    c_per_group, taps = w.shape[1], math.prod(w.shape[2:])
    flops = 2.0 * n * o * pixels * c_per_group * taps
    x_bytes = x.nbytes if x is not None else n * c_per_group * pixels * dtype_bytes(grad_out.dtype, 4)
    moved = grad_out.nbytes + w.nbytes + x_bytes
    return Work(
        kind="conv",
        flops=flops,
        bytes=float(moved),
        dtype=grad_out.dtype,
        m=n * pixels,
        n=o,
        k=c_per_group * taps,
        batch=1,
        channels=(c_per_group, o),
        inputs=[grad_out, w],
        note=f"the {which} gradient, one pass",
    )


def _attention(op_name: str, present: list[Tensor]) -> Work:
    backward = "backward" in op_name
    qkv = present[1:4] if backward and len(present) >= 4 else present[0:3]
    if len(qkv) < 3 or any(len(t.shape) < 2 for t in qkv):
        return Work(kind="attention", note="attention shapes not recorded")
    q, k, v = qkv
    lead = math.prod(q.shape[:-2]) if len(q.shape) > 2 else 1
    fwd = 2.0 * lead * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
    out = Tensor((*q.shape[:-1], v.shape[-1]), q.dtype)
    moved = q.nbytes + k.nbytes + v.nbytes + out.nbytes
    return Work(
        kind="attention",
        flops=fwd * (2.5 if backward else 1.0),
        bytes=float(moved * (2 if backward else 1)),
        dtype=q.dtype,
        inputs=[q, k, v],
        outputs=[out],
    )


def _triton(op_name: str, present: list[Tensor]) -> Work:
    kind = K.kernel_kind(op_name)
    if not present:
        return Work(kind=kind, note="Triton kernel arguments not recorded")
    moved = float(sum(t.nbytes for t in present))
    if kind == "gemm":
        two_d = [t for t in present if len(t.shape) == 2]
        if len(two_d) >= 2 and two_d[0].shape[1] == two_d[1].shape[0]:
            (m, k), n = two_d[0].shape, two_d[1].shape[1]
            return Work(
                kind="gemm",
                flops=2.0 * m * n * k,
                bytes=moved,
                dtype=two_d[0].dtype,
                m=m,
                n=n,
                k=k,
                batch=1,
                inputs=present,
            )
    return Work(
        kind=kind,
        flops=float(max(t.numel for t in present)),
        bytes=moved,
        dtype=present[0].dtype,
        inputs=present,
        note="Triton kernel: each tensor argument read or written once",
    )


# --------------------------------------------------------------------------------------------
# Op instances of the measured steps

INSTANCE_COLUMNS = [
    "step",
    "stream",
    "ts",
    "end",
    "kernel_us",
    "matrix_us",
    "n_kernels",
    "kernel",
    "kind",
    "tensor_core",
    "fused",
    "blocks",
    "op_name",
    "shapes",
    "dtype",
    "flops",
    "bytes",
    "m",
    "n",
    "k",
    "batch",
    "source",
    "sm_pct",
    "dram_pct",
    "dram_bytes",
    "mem_pct",
    "tensor_pct",
    "measured_us",
    "bound",
    "work",
]
MEASURED_PCT = ("sm_pct", "dram_pct", "mem_pct", "tensor_pct")
MEASURED_COVER = 0.9  # an instance takes measured values when they cover this share of its kernel time


def step_kernels(launches: pd.DataFrame, windows: list, device: int | None, annotated: bool) -> pd.DataFrame:
    """The kernels of `device` that belong to a measured step, with that step's index in `step`.

    A kernel belongs to the step whose CPU range contains its launch call; without launch links
    or step ranges, to the window its GPU start falls in.
    """
    if device is None or not windows or not len(launches):
        return launches.iloc[0:0].assign(step=pd.Series(dtype=int))
    kern = launches[(launches["device"] == device) & (launches["cat"] == "kernel")]  # copy-on-write: shared
    kern["step"] = _assign_steps(kern, windows, annotated) if len(kern) else []
    return kern[kern["step"] >= 0]


def op_instances(kern: pd.DataFrame, measured: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per op instance (all the kernels one CPU op launched) inside the measured steps,
    from `kern`, the step kernels (`step_kernels`).

    `kernel_us` is the time of all its kernels; `matrix_us` that of its GEMM / convolution /
    attention kernels alone (cuDNN's layout transforms and offset kernels excluded), or
    `kernel_us` when none of its kernels has such a name.

    A kernel belongs to the step whose CPU range contains its launch call (so work queued by the
    previous step but still running is not counted twice); without launch links or step ranges
    it belongs to the window its GPU start falls in. Kernels no CPU op claims (CUDA-graph
    replays, traces without op links) are instances of their own, with unknown work.

    `measured` (Nsight Compute values per kernel, indexed like `launches`: see diagnose/ncu/join.py)
    fills `sm_pct`, `dram_pct`, `mem_pct`, `tensor_pct` (weighted by measured duration), `dram_bytes`,
    `measured_us` and `bound` (the class of its longest measured kernel) of the instances whose
    measured kernels cover at least MEASURED_COVER of their kernel time.
    """
    if not len(kern):
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    kern = kern.join(classify(kern["name"]))
    has_op = kern["op_name"].notna() & kern["op_external_id"].notna()
    key = np.where(
        has_op, kern["op_external_id"].astype("Float64").fillna(-1).to_numpy(float), -1.0 - np.arange(len(kern))
    )
    kern["instance"] = pd.Series(key, index=kern.index, copy=False)
    kern["is_matrix"] = kern["kind"].isin(K.MATRIX_KINDS)
    kern["matrix_dur"] = kern["dur"].where(kern["is_matrix"], 0.0)
    # numbers, not objects: a trace without launch geometry holds None in every row, and an object
    # column's groupby max runs in Python, group by group (minutes for a million kernels)
    kern["blocks"] = pd.to_numeric(kern["blocks"], errors="coerce")
    # without op links every kernel is an instance of its own (its key is -1 - its row)
    agg = _aggregates(kern, key) if has_op.any() else _own_aggregates(kern, key)
    if not agg["ts"].is_monotonic_increasing:  # in time order before the columns are made: no copy of them after
        agg = agg.take(np.argsort(agg["ts"].to_numpy(float), kind="stable"))
    # the columns as they are (no consolidation into blocks, which copies): those with one value
    # in every row are views of that value, so read them, never write them in place (_fill_measured
    # replaces the ones it fills)
    frame = pd.DataFrame(_instance_columns(agg), columns=INSTANCE_COLUMNS, index=agg.index, copy=False)
    if measured is not None and len(measured):
        _fill_measured(frame, kern.join(measured[[c for c in measured.columns if c not in kern.columns]]))
    return frame.reset_index(drop=True)


def _aggregates(kern: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """Per instance (rows of `kern` sharing a `key`, in order of first appearance): the time span,
    kernel and matrix time, kernel count, largest grid, tensor-core use, and the columns of its
    main kernel (its longest matrix kernel, else its longest) and of its first kernel."""
    # each instance's main kernel (last by rank) and first kernel (first by start), as row positions:
    # only the columns taken from those rows are copied, once
    rank = kern["dur"].to_numpy(float) + np.where(kern["is_matrix"].to_numpy(bool), 1e12, 0.0)
    main = _rows(kern, _last_of_each(key, rank), ["name", "kind", "fused"])
    del rank
    first = _rows(
        kern,
        _first_of_each(key, kern["ts"].to_numpy(float)),
        ["step", "stream", "op_name", "input_dims", "input_types"],
    )
    grouped = kern.groupby("instance", sort=False)
    agg = aggregate(
        grouped,
        ts=("ts", "min"),
        end=("end", "max"),
        kernel_us=("dur", "sum"),
        matrix_us=("matrix_dur", "sum"),
        n_kernels=("dur", "size"),
        blocks=("blocks", "max"),
    )
    tc = kern["tensor_core"]
    agg["tc_yes"] = (tc == True).fillna(False).groupby(kern["instance"]).any()  # noqa: E712
    agg["tc_no"] = (tc == False).fillna(False).groupby(kern["instance"]).any()  # noqa: E712
    return agg.join(main[["name", "kind", "fused"]]).join(
        first[["step", "stream", "op_name", "input_dims", "input_types"]]
    )


def _own_aggregates(kern: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """_aggregates when every kernel is an instance of its own (no kernel has an op link): each
    aggregate is the kernel's own value, so the columns are the kernels' (shared, not copied). A
    sum starts from zero, so a -0.0 duration sums to 0.0: that one case is added to 0.0."""
    n = len(kern)
    columns = [
        "ts",
        "end",
        "dur",
        "matrix_dur",
        "blocks",
        "name",
        "kind",
        "fused",
        "step",
        "stream",
        "op_name",
        "input_dims",
        "input_types",
    ]
    agg = kern[columns].rename(columns={"dur": "kernel_us", "matrix_dur": "matrix_us"})
    agg.index = pd.Index(key, name="instance")
    for column in ("kernel_us", "matrix_us"):
        values = agg[column].to_numpy(float)
        if np.signbit(values).any():
            agg[column] = values + 0.0
    agg["n_kernels"] = pd.Series(np.broadcast_to(np.int64(1), n), index=agg.index, copy=False)  # a view of one 1
    tc = kern["tensor_core"]
    agg["tc_yes"] = (tc == True).fillna(False).to_numpy(bool)  # noqa: E712
    agg["tc_no"] = (tc == False).fillna(False).to_numpy(bool)  # noqa: E712
    return agg


def _last_of_each(key: np.ndarray, by: np.ndarray) -> np.ndarray:
    """The row of each distinct key that comes last in a stable sort by `by` (groupby tail(1) of that sort)."""
    order = np.argsort(by, kind="stable")
    return order[~pd.Series(key[order]).duplicated(keep="last").to_numpy()]


def _first_of_each(key: np.ndarray, by: np.ndarray) -> np.ndarray:
    """The row of each distinct key that comes first in a stable sort by `by` (groupby head(1) of that sort)."""
    order = np.argsort(by, kind="stable")
    return order[~pd.Series(key[order]).duplicated(keep="first").to_numpy()]


def _rows(kern: pd.DataFrame, rows: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """`columns` of the kernels at positions `rows`, indexed by their instance."""
    out = kern[columns].take(rows)
    out.index = pd.Index(kern["instance"].to_numpy()[rows], name="instance")
    return out


def _fill_measured(frame: pd.DataFrame, kern: pd.DataFrame) -> None:
    """Measured columns of the instances whose measured kernels cover MEASURED_COVER of their time."""
    m = kern[kern["measured_us"].notna()]
    if not len(m):
        return
    for column in (*MEASURED_PCT, "dram_bytes", "measured_us", "bound"):
        frame[column] = frame[column].to_numpy().copy()  # writable: a constant column is a view of one value
    by = m["instance"]
    weight = m["measured_us"]
    covered = m.groupby(by)["dur"].sum()
    ok = covered[covered >= MEASURED_COVER * frame.loc[covered.index, "kernel_us"]].index
    for column in MEASURED_PCT:
        w = weight.where(m[column].notna())
        mean = (m[column] * w).groupby(by).sum(min_count=1) / w.groupby(by).sum(min_count=1)
        frame.loc[ok, column] = mean.reindex(ok).to_numpy(float)
    frame.loc[ok, "dram_bytes"] = m.groupby(by)["dram_bytes"].sum(min_count=1).reindex(ok).to_numpy(float)
    frame.loc[ok, "measured_us"] = weight.groupby(by).sum().reindex(ok).to_numpy(float)
    longest = m.sort_values("measured_us", kind="stable").groupby(by).tail(1)
    frame.loc[ok, "bound"] = longest.set_index("instance")["bound"].reindex(ok).to_numpy(object)
    has_bytes = frame.index.isin(ok) & frame["dram_bytes"].notna()
    frame.loc[has_bytes, "source"] = "measured by Nsight Compute"


def _assign_steps(kern: pd.DataFrame, windows: list, annotated: bool) -> np.ndarray:
    launch_ts = kern["launch_ts"].to_numpy(float)
    gpu_ts = kern["ts"].to_numpy(float)
    index = np.array([w.index for w in windows], dtype=int)
    gpu = np.array([w.start for w in windows], dtype=float), np.array([w.end for w in windows], dtype=float)
    if not annotated:
        return last_window(gpu_ts, *gpu, index, closed=True)
    cpu = np.array([w.cpu_start for w in windows], dtype=float), np.array([w.cpu_end for w in windows], dtype=float)
    steps = last_window(launch_ts, *cpu, index, closed=True)
    unlinked = np.isnan(launch_ts)
    steps[unlinked] = last_window(gpu_ts[unlinked], *gpu, index, closed=False)
    return steps


def last_window(x: np.ndarray, starts: np.ndarray, ends: np.ndarray, index: np.ndarray, closed: bool) -> np.ndarray:
    """For each x, the index of the last window holding it ([start, end], or [start, end) when not
    `closed`), -1 when none does."""
    out = np.full(len(x), -1)
    if not len(starts) or not len(x):
        return out
    if (np.diff(starts) < 0).any() or (np.diff(ends) < 0).any():  # nested windows: check each
        for start, end, i in zip(starts, ends, index):
            out[(x >= start) & ((x <= end) if closed else (x < end))] = i
        return out
    # windows in order of start and of end: the last one starting by x is the only candidate
    k = np.searchsorted(starts, x, side="right") - 1
    kk = np.maximum(k, 0)
    inside = (k >= 0) & ((x <= ends[kk]) if closed else (x < ends[kk]))
    out[inside] = index[kk[inside]]
    return out


def _instance_columns(agg: pd.DataFrame) -> dict[str, pd.Series | np.ndarray]:
    """The instance frame's columns, from the per-instance aggregates; the work of each distinct
    (op, shapes, dtypes, kernel kind) is estimated once, and its columns are taken from that."""
    n = len(agg)
    op_names = [o if isinstance(o, str) else None for o in agg["op_name"].to_numpy(object)]
    codes = _distinct_codes(
        op_names, agg["input_dims"].to_numpy(object), agg["input_types"].to_numpy(object), agg["kind"].to_numpy(object)
    )
    static = [_static_fields(*key) for key in codes.keys]
    kernel_us = agg["kernel_us"].to_numpy(float)
    matrix_us = agg["matrix_us"].to_numpy(float)
    tc_yes, tc_no = agg["tc_yes"].to_numpy(bool), agg["tc_no"].to_numpy(bool)
    foreach = np.fromiter(((o or "").startswith("aten::_foreach") for o in op_names), bool, n)
    nan = _constant(math.nan, n)
    columns = {
        "step": agg["step"].to_numpy(np.int64),
        "stream": agg["stream"],
        "ts": agg["ts"].to_numpy(float),
        "end": agg["end"].to_numpy(float),
        "kernel_us": kernel_us,
        "matrix_us": np.where(matrix_us == 0, kernel_us, matrix_us),
        "n_kernels": agg["n_kernels"].to_numpy(np.int64),
        "kernel": agg["name"],
        "tensor_core": _inferred(
            [True, False, pd.NA], np.where(tc_yes, 0, np.where(tc_no, 1, 2)), agg.index, sparse=True
        ),
        "fused": agg["fused"].fillna(False).to_numpy(bool) | foreach,
        "blocks": _same_or(agg["blocks"].to_numpy(float, na_value=math.nan)),
        "op_name": (
            _inferred(op_names, np.arange(n), agg.index)
            if any(o is not None for o in op_names)
            else _inferred([None], np.zeros(n, dtype=np.int64), agg.index)
        ),
        "sm_pct": nan,
        "dram_pct": nan,
        "dram_bytes": nan,
        "mem_pct": nan,
        "tensor_pct": nan,
        "measured_us": nan,
        "bound": _constant(None, n),
    }
    for name in ("kind", "shapes", "dtype", "flops", "bytes", "m", "n", "k", "batch", "source", "work"):
        columns[name] = _inferred([fields[name] for fields in static], codes.codes, agg.index)
    return columns


@dataclasses.dataclass
class _Codes:
    keys: list  # the distinct (op, dims, types, kind), first-seen order
    codes: np.ndarray  # each row's index into keys


def _distinct_codes(op_names: list, dims: np.ndarray, types: np.ndarray, kinds: np.ndarray) -> _Codes:
    """The distinct (op name, input dims, input types, kernel kind) of the rows, and each row's.

    The shape lists are shared objects (one per distinct value, trace/frames.py), so rows are told
    apart by identity first and equal values are merged by their text once per identity.
    """
    by_identity: dict = {}
    by_value: dict = {}
    keys: list = []
    codes = np.empty(len(op_names), dtype=np.int64)
    for i, (op, d, t, kind) in enumerate(zip(op_names, dims, types, kinds)):
        fast = (op, id(d), id(t), kind)
        code = by_identity.get(fast)
        if code is None:
            slow = (op, repr(d), repr(t), kind)
            code = by_value.get(slow)
            if code is None:
                code = by_value[slow] = len(keys)
                keys.append((op, d, t, kind))
            by_identity[fast] = code
        codes[i] = code
    return _Codes(keys, codes)


def _same_or(values: np.ndarray) -> np.ndarray:
    """`values`, or a view of its one value when every row is NaN (a trace without launch geometry)."""
    return _constant(math.nan, len(values)) if len(values) and np.isnan(values).all() else values


def _constant(value, n: int) -> np.ndarray:
    """A read-only column of `n` times `value` that holds it once (a view with a zero stride)."""
    return np.broadcast_to(np.array([value], dtype=float if isinstance(value, float) else object), n)


def _inferred(values: list, codes: np.ndarray, index: pd.Index, sparse: bool = False) -> pd.Series:
    """values[codes] as a column of the dtype pandas infers for `values` (the same as for the
    whole column, which holds the same kinds of value); `sparse` when some values may be unused.
    A column of numbers or objects that holds one value in every row is that value's view (_constant)."""
    if sparse:
        used, codes = np.unique(codes, return_inverse=True)
        values = [values[i] for i in used]
    column = pd.Series(values, dtype=object if not values else None)
    if len(codes) and isinstance(column.dtype, np.dtype) and (codes == codes[0]).all():
        value = column.to_numpy()[codes[:1]]
        return pd.Series(np.broadcast_to(value, len(codes)), index=index, copy=False)
    return column.take(codes).set_axis(index)


def _static_fields(op_name: str | None, dims, types, kernel_kind: str) -> dict:
    """What an instance's op, shapes and kernel kind decide: its work estimate and the columns from it."""
    work = op_work(op_name, dims, types, kernel_kind)
    kind = work.kind if work is not None and work.kind in K.KINDS and work.kind != "other" else kernel_kind
    if kernel_kind in K.MATRIX_KINDS and kind in K.MEMORY_KINDS:
        kind = kernel_kind
    known = work is not None and not math.isnan(work.bytes)
    return {
        "kind": kind,
        "shapes": _shapes_text(work),
        "dtype": work.dtype if work else None,
        "flops": work.flops if work else math.nan,
        "bytes": work.bytes if work else math.nan,
        "m": work.m if work else None,
        "n": work.n if work else None,
        "k": work.k if work else None,
        "batch": work.batch if work else None,
        "source": "estimated from shapes" if known else "unknown",
        "work": work,
    }


def _shapes_text(work: Work | None) -> str | None:
    if work is None or not (work.inputs or work.outputs):
        return None
    dims = ", ".join("×".join(str(d) for d in t.shape) or "scalar" for t in work.inputs)
    return f"[{dims}] {precision_label(work.dtype) if work.dtype else ''}".strip()


def classify(names: pd.Series) -> pd.DataFrame:
    """`kind`, `tensor_core` (True/False/<NA>) and `fused` for a column of kernel names, each name
    classified once (diagnose/vocabulary/kernels.py)."""
    unique = pd.unique(names)
    table = pd.DataFrame(
        {
            "kind": [K.kernel_kind(n) for n in unique],
            "tensor_core": pd.array([K.tensor_core(n) for n in unique], dtype="boolean"),
            "fused": [K.is_fused(n) for n in unique],
        },
        index=unique,
    )
    out = table.reindex(names.to_numpy())
    out.index = names.index
    return out


def best_bytes(frame: pd.DataFrame) -> pd.Series:
    """Bytes moved per instance: measured DRAM bytes where Nsight Compute supplied them, else the estimate."""
    return frame["dram_bytes"].where(frame["dram_bytes"].notna(), frame["bytes"]).astype(float)
