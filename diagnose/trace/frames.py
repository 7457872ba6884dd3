"""Turn decoded events into the frames a Trace holds: one bucket per event family.

Events arrive a chunk at a time (kineto.Decoded.chunks). Each chunk is bucketed with numpy
masks over its categories, phases and times, and only the families a frame holds are read,
field by field, with list comprehensions: event families no frame keeps (flow arrows, Python
function events, metadata) cost one pass over their category and phase and nothing else.
Columns stay compact while the file is read: times and ids in numpy arrays; names, categories,
launch dimensions and shape lists as int32 codes into tables of their distinct values (one table
per process, shared by its builders). `compact` turns a builder's columns into arrays where they
were decoded, `merge` appends other builders' (from other processes too), and `finish` decodes
the codes once and makes the frames.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter, eq, is_not
from typing import Any, Callable, Iterable, NamedTuple

import msgspec
import numpy as np
import pandas as pd

from diagnose.trace import allocator, legacy
from diagnose.trace.kineto import EMPTY_ARGS, Event, decode_list
from diagnose.trace.outliers import drop_time_outliers

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", *legacy.GPU_CATEGORIES}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", *legacy.RUNTIME_CATEGORIES}
OP_CATS = {"cpu_op", "user_annotation", *legacy.OP_CATEGORIES}

GPU_COLUMNS = [
    *("name", "cat", "ts", "dur", "device", "stream", "correlation", "external_id", "grid", "block", "blocks"),
    "bytes",  # a copy's or memset's size (kineto's `bytes`); None for kernels
]
RUNTIME_COLUMNS = ["name", "ts", "dur", "pid", "tid", "correlation", "external_id"]
OP_COLUMNS = ["name", "cat", "ts", "dur", "pid", "tid", "external_id", "input_dims", "input_types"]
ANNOTATION_COLUMNS = ["name", "ts", "dur", "device", "stream"]
SYNC_COLUMNS = ["name", "ts", "dur", "device", "stream", "correlation", "wait_on_stream"]
PYTHON_COLUMNS = ["name", "ts", "dur", "tid"]  # with_stack=True: python_function events
MEMORY_COLUMNS = ["ts", "bytes", "total_allocated", "total_reserved", "device_id", "device_type", "addr", "tid"]
SESSION_COLUMNS = ["ts", "dur"]  # kineto's `Trace` span: the profiling session (GPU records may end after it)

NO_CAT, GPU, RUNTIME, OPS, ANNOTATIONS, SYNCS, PYTHON, SESSION, OTHER = range(9)
FAMILY_OF: dict[str | None, int] = {
    None: NO_CAT,
    **{c: GPU for c in GPU_CATS},
    **{c: RUNTIME for c in RUNTIME_CATS},
    **{c: OPS for c in OP_CATS},
    "gpu_user_annotation": ANNOTATIONS,
    "cuda_sync": SYNCS,
    "python_function": PYTHON,
    "Trace": SESSION,
}
PHASE_OF = {"X": 1, "i": 2, "I": 2}
GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", **legacy.GPU_CATEGORIES}
FRAMES = {
    GPU: ("gpu", GPU_COLUMNS),
    RUNTIME: ("runtime", RUNTIME_COLUMNS),
    OPS: ("ops", OP_COLUMNS),
    ANNOTATIONS: ("gpu_annotations", ANNOTATION_COLUMNS),
    SYNCS: ("syncs", SYNC_COLUMNS),
    PYTHON: ("python", PYTHON_COLUMNS),
    SESSION: ("sessions", SESSION_COLUMNS),
}
ARRAY_COLUMNS = {"ts", "dur", "correlation", "external_id"}
INT64_MAX = 2**63 - 1
MEMORY_NAME = "[memory]"
MEMORY_FIELDS = (
    ("bytes", "mem_bytes"),
    ("total_allocated", "total_allocated"),
    ("total_reserved", "total_reserved"),
    ("device_id", "device_id"),
    ("device_type", "device_type"),
    ("addr", "addr"),
)


class _Codes(dict):
    """Small integer codes for keys, given out in order of first appearance; `by_code[code]` is the
    key itself, or what `decode` makes of it."""

    def __init__(self, decode: Callable[[Any], Any] | None = None) -> None:
        super().__init__()
        self.by_code: list = []
        self._decode = decode

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self.by_code)
        self.by_code.append(self._decode(key) if self._decode else key)
        return code


def _codes(table: _Codes, keys: Iterable[Any]) -> np.ndarray:
    """The codes of `keys` (new keys get new codes) as an int32 array."""
    return np.fromiter(map(table.__getitem__, keys), np.int32)


def _raw_texts(raws: list) -> list[bytes]:
    """The bytes of each raw JSON value, copied in one join and one split (JSON holds no NUL byte
    outside a string, and none inside one unescaped; any NUL found falls back to one copy each)."""
    if not raws:
        return []
    texts = b"\x00".join(raws).split(b"\x00")
    return texts if len(texts) == len(raws) else list(map(bytes, raws))


def _raw_list(raw: bytes) -> list | None:
    return decode_list(msgspec.Raw(raw))


def _list_info(raw: bytes) -> tuple:
    """(list, text, product of its numbers) of a raw JSON list such as a kernel's grid."""
    value = _raw_list(raw)
    return value, _dims_text(value), _product(value)


def _product(dims: object) -> int | None:
    if not isinstance(dims, list) or not dims:
        return None
    out = 1
    for d in dims:
        if not isinstance(d, (int, float)) or isinstance(d, bool):
            return None
        out *= int(d)
    return out


def _dims_text(dims: object) -> str | None:
    if not isinstance(dims, list):
        return None
    return ",".join(str(d) for d in dims)


def _int_or(value: object, fallback: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return fallback


def _int_values(values: list) -> list:
    """The values, with None in place of any that is not an int (bools count as ints)."""
    if set(map(type, values)) <= {int, bool}:
        return values
    return [v if isinstance(v, int) else None for v in values]


def id_array(values: list) -> np.ndarray:
    """An id column chunk: int64, or float64 with NaN where ids are missing or beyond int64."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, OverflowError, ValueError):
        pass
    return np.array([v if type(v) is int and -INT64_MAX <= v <= INT64_MAX else None for v in values], dtype=float)


def _get(field: str, items: Iterable[Any]) -> list:
    return list(map(attrgetter(field), items))


def _external_ids(args: list) -> list:
    """Each event's `External id`, or the lower-case spelling old kineto gave GPU and runtime records
    (Args.any_external_id, read a column at a time)."""
    ids = _get("external_id", args)
    if None not in ids:
        return ids
    return [i if i is not None else old for i, old in zip(ids, _get("legacy_external_id", args))]


def _args(events: list[Event]) -> list:
    args = _get("args", events)
    return [a if a is not None else EMPTY_ARGS for a in args] if None in args else args


def _device(events: list[Event], args: list, field: str, fallback: str) -> list:
    """`args.<field>` as an int, else the event's pid/tid as an int, else 0."""
    values = _get(field, args)
    if set(map(type, values)) == {int}:
        return values
    return [v if type(v) is int else _int_or(v, _int_or(getattr(e, fallback), 0)) for e, v in zip(events, values)]


class FrameBuilder:
    """Accumulates the columns of every frame, chunk by chunk; `finish` makes the frames."""

    def __init__(self, like: "FrameBuilder | None" = None):
        """An empty builder; `like`, another builder of the same process, lends its code tables (so
        a process keeps one table of distinct names, categories and shape lists for all its blocks)."""
        # per frame and column: a list of one piece per chunk, one Column after `compact`
        self.columns: dict[str, dict[str, Any]] = {key: {c: [] for c in cols} for key, cols in FRAMES.values()}
        self.columns["memory"] = {c: [] for c in MEMORY_COLUMNS}
        self.bad = 0
        # codes for the distinct values of the coded columns (names, categories, raw JSON lists)
        self._names: _Codes = like._names if like else _Codes()
        self._categories: _Codes = like._categories if like else _Codes()
        self._launch_dims: _Codes = like._launch_dims if like else _Codes(_list_info)
        self._shapes: _Codes = like._shapes if like else _Codes(_raw_list)
        self._phases: _Codes = like._phases if like else _Codes()
        self._families = np.empty(0, dtype=np.int8)
        self._phase_kinds = np.empty(0, dtype=np.int8)
        self._cat = None  # the category codes of the rows being bucketed
        self._compacted = False
        self._later: list[FrameBuilder] = []  # builders whose rows `finish` appends (merge(later=True))

    def add(self, chunk: list[Event]) -> None:
        """Bucket one chunk of events."""
        n = len(chunk)
        if not n:
            return
        cat = _codes(self._categories, _get("cat", chunk))
        family = self._family_of(cat)
        phase = self._phase_of(_codes(self._phases, _get("ph", chunk)))
        ts = np.array(_get("ts", chunk), dtype=float)
        finite = np.isfinite(ts)
        self.bad += int((~finite & (family >= GPU) & (family <= OPS)).sum())
        events = np.fromiter(chunk, dtype=object, count=n)  # gathered by row number below
        instants = np.nonzero(finite & (phase == 2))[0]
        if len(instants):
            self._memory(events[instants].tolist(), instants, ts)
        spans = np.nonzero(finite & (phase == 1) & (family != NO_CAT))[0]
        picked = events[spans]
        dur = np.array(_get("dur", picked.tolist()), dtype=float)
        with np.errstate(over="ignore"):  # an end beyond the largest float is not a time either
            valid = np.isfinite(dur) & (dur >= 0) & np.isfinite(ts[spans] + dur)
        self.bad += int((~valid).sum())
        spans, dur, picked = spans[valid], dur[valid], picked[valid]
        kinds = family[spans]
        for kind, (key, _) in FRAMES.items():
            pick = kinds == kind
            if not pick.any():
                continue
            rows = spans[pick]
            out = self.columns[key]
            out["ts"].append(ts[rows])
            out["dur"].append(dur[pick])
            self._cat = cat[rows]
            getattr(self, "_" + key)(picked[pick].tolist(), out)

    def _family_of(self, cat: np.ndarray) -> np.ndarray:
        """The event family of each category code."""
        if len(self._families) != len(self._categories.by_code):
            self._families = np.array([FAMILY_OF.get(c, OTHER) for c in self._categories.by_code], dtype=np.int8)
        return self._families[cat]

    def _phase_of(self, ph: np.ndarray) -> np.ndarray:
        """1 for complete events (`X`), 2 for instants (`i`, `I`), 0 for any other phase, by phase code."""
        if len(self._phase_kinds) != len(self._phases.by_code):
            self._phase_kinds = np.array([PHASE_OF.get(p, 0) for p in self._phases.by_code], dtype=np.int8)
        return self._phase_kinds[ph]

    def _name_codes(self, events: list[Event]) -> np.ndarray:
        names = _get("name", events)
        if None in names:
            names = [n if n is not None else "<unnamed>" for n in names]
        return _codes(self._names, names)

    def _gpu(self, events: list[Event], out: dict) -> None:
        args = _args(events)
        out["name"].append(self._name_codes(events))
        out["cat"].append(self._cat)
        out["device"].append(_piece(_device(events, args, "device", "pid")))
        out["stream"].append(_piece(_device(events, args, "stream", "tid")))
        out["correlation"].append(id_array(_get("correlation", args)))
        out["external_id"].append(id_array(_external_ids(args)))
        grids = _codes(self._launch_dims, _raw_texts(_get("grid", args)))
        blocks = _codes(self._launch_dims, _raw_texts(_get("block", args)))
        out["grid"].append(grids)
        out["block"].append(blocks)
        info = self._launch_dims.by_code
        out["blocks"].append(_piece([info[c][2] for c in grids.tolist()]))
        out["bytes"].append(_piece(_get("copy_bytes", args)))

    def _runtime(self, events: list[Event], out: dict) -> None:
        args = _args(events)
        out["name"].append(self._name_codes(events))
        out["pid"].append(_piece(_get("pid", events)))
        out["tid"].append(_piece(_get("tid", events)))
        out["correlation"].append(id_array(_get("correlation", args)))
        out["external_id"].append(id_array(_external_ids(args)))

    def _ops(self, events: list[Event], out: dict) -> None:
        args = _args(events)
        out["name"].append(self._name_codes(events))
        out["cat"].append(self._cat)
        out["pid"].append(_piece(_get("pid", events)))
        out["tid"].append(_piece(_get("tid", events)))
        out["external_id"].append(id_array(_external_ids(args)))
        out["input_dims"].append(_codes(self._shapes, _raw_texts(_get("input_dims", args))))
        out["input_types"].append(_codes(self._shapes, _raw_texts(_get("input_types", args))))

    def _gpu_annotations(self, events: list[Event], out: dict) -> None:
        args = _args(events)
        out["name"].append(self._name_codes(events))
        out["device"].append(_piece(_device(events, args, "device", "pid")))
        out["stream"].append(_piece(_device(events, args, "stream", "tid")))

    def _syncs(self, events: list[Event], out: dict) -> None:
        self._gpu_annotations(events, out)
        args = _args(events)
        out["correlation"].append(id_array(_get("correlation", args)))
        out["wait_on_stream"].append(_piece(_get("wait_on_stream", args)))

    def _python(self, events: list[Event], out: dict) -> None:
        out["name"].append(self._name_codes(events))
        out["tid"].append(_piece(_get("tid", events)))

    def _sessions(self, events: list[Event], out: dict) -> None:
        """Nothing beyond the span's times (kept by `add`)."""

    def _memory(self, events: list[Event], instants: np.ndarray, ts: np.ndarray) -> None:
        """The allocator's `[memory]` instant events among the chunk's instants (`events`, at rows
        `instants`), column by column."""
        args = _get("args", events)
        # operator.eq, not str.__eq__: a name that is not a string (a hostile file) compares False, not NotImplemented
        keep = np.fromiter(map(eq, repeat(MEMORY_NAME), _get("name", events)), bool, len(events))
        keep &= np.fromiter(map(is_not, args, repeat(None)), bool, len(events))
        if not keep.any():
            return
        if not keep.all():
            rows = np.nonzero(keep)[0].tolist()
            events, args, instants = [events[i] for i in rows], [args[i] for i in rows], instants[keep]
        out = self.columns["memory"]
        out["ts"].append(ts[instants])
        for col, field in MEMORY_FIELDS:
            out[col].append(_piece(_get(field, args)))
        out["tid"].append(_piece(_int_values(_get("tid", events))))

    @classmethod
    def compacted(cls, columns: dict, bad: int) -> "FrameBuilder":
        """A builder holding the compacted columns another process sent (its `columns` after `compact`)."""
        builder = cls()
        builder.columns, builder.bad, builder._compacted = columns, bad, True
        return builder

    def compact(self) -> None:
        """Turn each accumulated column into one array, with the set of value types it held.

        Done where the rows were decoded (in each decoding process, in parallel), so that the
        columns travel between processes as arrays and `finish` only has to join them.
        """
        if not self._compacted:
            tables = self._tables()
            self.columns = {
                key: {col: _compact(col, values, tables.get((key, col))) for col, values in columns.items()}
                for key, columns in self.columns.items()
            }
            self._compacted = True

    def _tables(self) -> dict:
        """The values the codes of each coded column stand for."""
        names, categories = self._names.by_code, self._categories.by_code
        launch_text = [info[1] for info in self._launch_dims.by_code]
        return {
            ("gpu", "name"): names,
            ("runtime", "name"): names,
            ("ops", "name"): names,
            ("gpu_annotations", "name"): names,
            ("syncs", "name"): names,
            ("python", "name"): names,
            ("gpu", "cat"): [GPU_KIND.get(c) for c in categories],
            ("ops", "cat"): categories,
            ("gpu", "grid"): launch_text,
            ("gpu", "block"): launch_text,
            ("ops", "input_dims"): self._shapes.by_code,
            ("ops", "input_types"): self._shapes.by_code,
        }

    def merge(self, *others: "FrameBuilder", later: bool = False) -> None:
        """Append other builders' rows (events that came after this builder's, in that order).

        Each column of the others is let go as soon as it is joined (the others end up empty), so
        the rows are held twice for one column at a time, not for all of them. `later`: keep the
        others as they are and join them when `finish` runs, after the caller has freed what the
        rows were decoded from (the file's bytes)."""
        if later:
            self._later += others
            return
        self.compact()
        for other in others:
            other.compact()
        for key, columns in self.columns.items():
            for col in columns:
                columns[col] = _join([columns[col]] + [other.columns[key].pop(col) for other in others])
        self.bad += sum(other.bad for other in others)

    def finish(self, warnings: list[str]) -> dict:
        """The frames, times in µs relative to the earliest kept event (under "t0"); events with
        times far outside the trace's range are dropped with a warning (trace/outliers.py)."""
        if self._later:
            others, self._later = self._later, []
            self.merge(*others)
        if self.bad:
            warnings.append(f"{self.bad} events with missing, non-finite or negative times were ignored")
        self.compact()
        frames = {key: _frame(self.columns.pop(key), columns) for key, columns in FRAMES.values()}
        sessions = frames.pop("sessions")  # it starts before the first event: not a part of the timeline
        frames["memory"], older_allocator_events = allocator.usable(
            _frame(self.columns.pop("memory"), MEMORY_COLUMNS), warnings
        )
        frames = drop_time_outliers(frames, warnings)
        starts = [f["ts"].min() for f in frames.values() if len(f)]
        t0 = float(min(starts)) if starts else 0.0
        ends = sessions["ts"].astype("float64") + sessions["dur"].astype("float64") if len(sessions) else []
        for key, frame in frames.items():
            frame["ts"] = frame["ts"].astype("float64") - t0
            if "dur" in frame:
                frame["dur"] = frame["dur"].astype("float64")
                frame["end"] = frame["ts"] + frame["dur"]
            for col in ("correlation", "external_id"):
                if col in frame:
                    frame[col] = _int64(frame[col])
            if len(frame) and not frame["ts"].is_monotonic_increasing:
                frame = frame.sort_values("ts", kind="stable")
            frames[key] = frame.reset_index(drop=True)
        frames["t0"] = t0
        frames["session_end"] = float(max(ends)) - t0 if len(ends) else None
        frames["older_allocator_events"] = older_allocator_events
        return frames


def _int64(column: pd.Series) -> pd.Series:
    """A nullable Int64 id column; ids beyond int64 are missing."""
    values = pd.to_numeric(column, errors="coerce")
    if values.dtype.kind == "f":
        values = values.where(values.abs() < 2.0**63)
    elif values.dtype.kind not in "iu" or (values.dtype.kind == "u" and len(values) and values.max() > INT64_MAX):
        values = pd.to_numeric(
            column.map(lambda v: v if type(v) is int and abs(v) <= INT64_MAX else None), errors="coerce"
        )
    return values.astype("Int64")


NONE_VIEWS = {"grid", "block", "blocks"}  # launch geometry: nothing writes it after loading


def _frame(data: dict, columns: list[str]) -> pd.DataFrame:
    body = {c: _values(data.pop(c), c in NONE_VIEWS) for c in columns}
    if not len(body["ts"]):
        return pd.DataFrame([], columns=columns)  # object columns, as pandas makes from no rows
    return pd.DataFrame(body, columns=columns, copy=False)  # fresh arrays: no copy, no consolidation


_NUMERIC = {
    frozenset({int}): np.int64,
    frozenset({float}): float,
    frozenset({int, float}): float,
    frozenset({int, type(None)}): float,
    frozenset({float, type(None)}): float,
    frozenset({int, float, type(None)}): float,
}


class Column(NamedTuple):
    """A compacted column: its values as one array (a list where pandas must infer the dtype), and
    the Python types they had (None for columns that were arrays from the start). A coded column
    holds int32 codes into `table`, the values they stand for."""

    values: np.ndarray | list
    types: frozenset | None
    table: list | None = None


def _compact(col: str, values: list, table: list | None = None) -> Column:
    """One accumulated column as a Column: numeric values straight to the numpy dtype pandas would
    infer for them, strings and other objects to an object array, codes kept as codes."""
    if table is not None:
        codes = np.concatenate(values) if values else np.empty(0, dtype=np.int32)
        return Column(codes, frozenset(type(table[i]) for i in np.unique(codes).tolist()), table)
    if col in ARRAY_COLUMNS and values and isinstance(values[0], np.ndarray):
        return Column(np.concatenate(values), None)
    if values and isinstance(values[0], Column):  # one piece per chunk (`_piece`)
        return _join(values)
    types = frozenset(map(type, values))
    return Column(_array(values, types), types)


NONE = frozenset({type(None)})


def _piece(values: list) -> Column:
    """One chunk's values of a column as a Column, made while the chunk's objects are fresh in the
    cache (read back one by one at the end, the pointers of a whole column of Python values scatter
    over the heap); `_join` appends the pieces as one list of all their values would have been made."""
    types = frozenset(map(type, values))
    return Column(_array(values, types), types)


def _values(column: Column, none_view: bool = False) -> np.ndarray | list:
    """The values of a column, coded or not; with `none_view`, a column of None alone (a trace
    without launch geometry) is one None seen in every row, read-only (np.broadcast_to)."""
    if none_view and column.types == NONE and len(column.values):
        return np.broadcast_to(np.array([None], dtype=object), len(column.values))
    return _decoded([column]).values if column.table is not None else column.values


def _decoded(parts: list[Column]) -> Column:
    """Coded columns (from one process or several) as one column of the values themselves."""
    tables: dict[int, tuple[int, list]] = {}
    codes: list[np.ndarray] = []
    size = 0
    for part in parts:
        assert part.table is not None and isinstance(part.values, np.ndarray), "a coded column"
        if id(part.table) not in tables:
            tables[id(part.table)] = (size, part.table)
            size += len(part.table)
        offset, _ = tables[id(part.table)]
        codes.append(part.values.astype(np.int64) + offset)
    values = [v for _, table in tables.values() for v in table]
    lookup = np.fromiter(values, dtype=object, count=len(values))
    types = frozenset().union(*(p.types or frozenset() for p in parts))
    taken = lookup[np.concatenate(codes)] if codes else np.empty(0, dtype=object)
    if bool in types or _NUMERIC.get(types) or not len(taken):
        return Column(_array(taken.tolist(), types), types)
    return Column(taken, types)


def _array(values: list, types: frozenset) -> np.ndarray | list:
    dtype = _NUMERIC.get(types)
    if dtype is not None:
        try:
            return np.array(values, dtype=dtype)
        except OverflowError:  # ints beyond int64: let pandas decide
            return values
    if bool in types or not values:
        return values  # pandas infers bool from a list, not from an object array
    return np.fromiter(values, dtype=object, count=len(values))


def _join(parts: list[Column]) -> Column:
    """The columns appended one to the next, with the dtype one column of all their values would have."""
    if all(p.table is not None for p in parts):
        return _decoded(parts)
    types = frozenset().union(*(p.types or frozenset() for p in parts))
    parts = [p for p in parts if len(p.values)] or parts[:1]
    if all(p.types is None for p in parts):
        return Column(np.concatenate([p.values for p in parts]), None)
    dtype = _NUMERIC.get(types)
    kinds = {p.values.dtype.kind if isinstance(p.values, np.ndarray) else "list" for p in parts}
    if dtype is not None and kinds <= {"i", "f"}:
        return Column(np.concatenate([p.values for p in parts]).astype(dtype, copy=False), types)
    if dtype is None and kinds == {"O"} and bool not in types:
        return Column(np.concatenate([p.values for p in parts]), types)
    values = [v for p in parts for v in _python_values(p)]
    return Column(_array(values, types), types)


def _python_values(part: Column) -> list:
    """A compacted column's values as Python objects again (missing numbers as None where the
    column held None)."""
    values = part.values
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "if":
        return list(values)
    out = values.tolist()
    if part.types and type(None) in part.types:
        out = [None if v != v else v for v in out]
    if part.types and part.types <= {int, type(None)}:
        out = [None if v is None else int(v) for v in out]
    return out


def build_frames(chunks: Iterable[list[Event]], warnings: list[str]) -> dict:
    """Bucket events into gpu / runtime / ops / gpu_annotations / syncs / memory frames.

    `chunks` is an iterable of event lists (kineto.Decoded.chunks). Times are in microseconds
    relative to the earliest kept event (`t0`, returned in the dict under "t0"). Events with
    missing or non-finite times or negative durations are dropped and counted in `warnings`.
    """
    builder = FrameBuilder()
    for chunk in chunks:
        builder.add(chunk)
        del chunk  # freed while hot in the cache, not once the next chunk is decoded
    return builder.finish(warnings)
