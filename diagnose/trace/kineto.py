"""Decode a kineto (torch.profiler Chrome-trace) file into typed event records.

msgspec decodes straight into Structs that name only the fields the rules use; everything else
in the file is skipped without building Python objects for it, which is where whole-file
`json.loads` spends its time and memory. Files whose fields have unexpected types fall back to
a slower per-event path that coerces what it can and drops the rest, with a warning.
"""
from __future__ import annotations

from typing import Any, Union

import msgspec

Id = Union[int, str, None]


class Args(msgspec.Struct, gc=False):
    """The subset of an event's `args` that diagnose reads."""

    correlation: Union[int, None] = None
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    device: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    grid: Union[list, str, None] = None
    block: Union[list, str, None] = None
    registers: Union[int, None] = msgspec.field(default=None, name="registers per thread")
    shared_memory: Union[int, None] = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: Union[float, None] = msgspec.field(default=None, name="blocks per SM")
    warps_per_sm: Union[float, None] = msgspec.field(default=None, name="warps per SM")
    occupancy: Union[float, None] = msgspec.field(default=None, name="est. achieved occupancy %")
    input_dims: Union[list, None] = msgspec.field(default=None, name="Input Dims")
    input_types: Union[list, None] = msgspec.field(default=None, name="Input type")
    concrete_inputs: Union[list, None] = msgspec.field(default=None, name="Concrete Inputs")
    bytes: Union[int, None] = None
    mem_bytes: Union[int, None] = msgspec.field(default=None, name="Bytes")
    total_allocated: Union[int, None] = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Union[int, None] = msgspec.field(default=None, name="Total Reserved")
    device_id: Union[int, None] = msgspec.field(default=None, name="Device Id")
    device_type: Union[int, None] = msgspec.field(default=None, name="Device Type")
    addr: Union[int, None] = msgspec.field(default=None, name="Addr")
    wait_on_stream: Union[int, None] = msgspec.field(default=None, name="wait_on_stream")


class Event(msgspec.Struct, gc=False):
    """One trace event; `ph` X events carry `dur`, instant events (`i`) do not."""

    ph: Union[str, None] = None
    cat: Union[str, None] = None
    name: Union[str, None] = None
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    pid: Id = None
    tid: Id = None
    args: Union[Args, None] = None


class TraceFile(msgspec.Struct, gc=False):
    """The top level of a kineto trace file."""

    traceEvents: Union[list[Event], None] = None
    deviceProperties: Union[list, None] = None
    distributedInfo: Union[dict, None] = None
    schemaVersion: Union[int, str, None] = None
    displayTimeUnit: Union[str, None] = None
    cuda_runtime_version: Union[int, str, None] = None
    cuda_driver_version: Union[int, str, None] = None
    traceName: Union[str, None] = None


_STRICT = msgspec.json.Decoder(TraceFile)
_LOOSE = msgspec.json.Decoder()


class NotATrace(ValueError):
    """The bytes are JSON but not a kineto / Chrome trace."""


def decode(raw: bytes) -> tuple[TraceFile, list[str]]:
    """Decode trace bytes; returns the trace and warnings about anything that had to be repaired.

    Raises msgspec.DecodeError for bytes that are not JSON and NotATrace for JSON of the wrong shape.
    """
    warnings: list[str] = []
    try:
        trace = _STRICT.decode(raw)
    except msgspec.ValidationError as exc:
        warnings.append(f"some events have fields of unexpected types ({exc}); read leniently")
        trace = _lenient(_LOOSE.decode(raw), warnings)
    except msgspec.DecodeError as exc:
        if "UTF-8" not in str(exc) and "utf-8" not in str(exc):
            raise
        warnings.append("the file is not valid UTF-8; undecodable bytes were replaced")
        return decode(raw.decode("utf-8", errors="replace").encode("utf-8"))[0], warnings
    if trace.traceEvents is None:
        raise NotATrace("no traceEvents list")
    return trace, warnings


def _lenient(doc: Any, warnings: list[str]) -> TraceFile:
    """Build a TraceFile from untyped JSON, keeping every field that can be coerced."""
    if isinstance(doc, list):  # the bare-array form of the Chrome trace format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise NotATrace("no traceEvents list")
    events, dropped = [], 0
    for item in doc["traceEvents"]:
        event = _coerce_event(item)
        if event is None:
            dropped += 1
        else:
            events.append(event)
    if dropped and not events:
        raise NotATrace("none of its entries is a trace event")
    if dropped:
        warnings.append(f"{dropped} malformed events were dropped")

    def top(key, kind):
        value = doc.get(key)
        return value if isinstance(value, kind) else None

    return TraceFile(
        traceEvents=events,
        deviceProperties=top("deviceProperties", list),
        distributedInfo=top("distributedInfo", dict),
        schemaVersion=top("schemaVersion", (int, str)),
        displayTimeUnit=top("displayTimeUnit", str),
        traceName=top("traceName", str),
    )


def _coerce_event(item: Any) -> Event | None:
    if not isinstance(item, dict):
        return None
    try:
        return msgspec.convert(item, Event, strict=False)
    except (msgspec.ValidationError, TypeError, ValueError):
        pass
    fields = {}
    for key, kind in (("ph", str), ("cat", str), ("name", str)):
        value = item.get(key)
        fields[key] = value if isinstance(value, str) else (None if value is None else str(value))
    for key in ("ts", "dur"):
        fields[key] = _number(item.get(key))
    for key in ("pid", "tid"):
        value = item.get(key)
        fields[key] = value if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    fields["args"] = _coerce_args(item.get("args"))
    return Event(**fields)


def _coerce_args(args: Any) -> Args | None:
    if not isinstance(args, dict):
        return None
    kept = {}
    for field in msgspec.structs.fields(Args):
        if field.encode_name not in args:
            continue
        try:
            kept[field.name] = msgspec.convert(args[field.encode_name], field.type, strict=False)
        except (msgspec.ValidationError, TypeError, ValueError):
            continue
    return Args(**kept)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
