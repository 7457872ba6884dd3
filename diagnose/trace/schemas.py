"""Schemas of the JSON files beside a trace that diagnose reads but did not write in this run.

A capture folder may come from anywhere (another machine, an older version, a hand edit), so its
meta.json (schema diagnose.capture/1, written by diagnose/child/capture.py) and memory.json
(diagnose.memory/1, diagnose/child/memory.py) are checked against msgspec Structs before any
field is used: the top level must be an object, every field the analysis reads must have its
type (numbers finite and in range, file names plain names inside the folder), and a violation is
an InputError naming the file and the field (`$.device.sm_count`). Fields the analysis does not
read are not checked. The documents are returned as the plain dicts the rest of diagnose reads.

JSON nested deeper than the interpreter's recursion limit (about 1,000 levels) is an InputError
too, not a RecursionError; so is a file larger than SIDE_FILE_MAX_BYTES (or gzip inflating past
it) or one that is not a regular file. `read_side_bytes` is how every file beside a trace is
read (meta.json, memory.json, compile.json, sweep.json, Python samples, Nsight Compute CSV).
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path
from typing import Annotated, Union

import msgspec

from diagnose.base.errors import InputError

SIDE_FILE_MAX_BYTES = 256 << 20
MAX_NUMBER = 1e18  # larger than any byte count, µs duration or count a capture records

Count = Annotated[int, msgspec.Meta(ge=0, le=int(MAX_NUMBER))]
Amount = Union[
    Annotated[int, msgspec.Meta(ge=0, le=int(MAX_NUMBER))], Annotated[float, msgspec.Meta(ge=0, le=MAX_NUMBER)]
]
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
FileName = Annotated[str, msgspec.Meta(pattern=r"^(?!\.\.?$)[^/\\\x00]+$")]  # a name inside the folder
Scalar = Union[str, int, float, bool, None]


class CaptureError(msgspec.Struct):
    """meta.json `error`: what stopped the workload."""

    type: Union[str, None] = None
    message: Union[str, None] = None
    traceback: Union[str, None] = None


class CaptureSteps(msgspec.Struct):
    """meta.json `steps`."""

    warmup: Union[Count, None] = None
    profiled: Union[Count, None] = None
    how: Union[str, None] = None


class CaptureTiming(msgspec.Struct):
    """meta.json `timing`: step times measured without the profiler."""

    source: Union[str, None] = None
    unprofiled_step_us: list[Amount] = []
    median_us: Union[Amount, None] = None
    min_us: Union[Amount, None] = None
    mean_us: Union[Amount, None] = None


class CaptureFiles(msgspec.Struct):
    """meta.json `files`: names of the folder's other files."""

    trace: Union[FileName, None] = None
    log: Union[FileName, None] = None
    memory: Union[FileName, None] = None


class CaptureDevice(msgspec.Struct):
    """meta.json `device`."""

    name: Union[str, None] = None
    sm_count: Union[Count, None] = None
    total_memory_bytes: Union[Amount, None] = None
    compute_capability: Union[str, None] = None
    gcn_arch: Union[str, None] = None
    warp_size: Union[Count, None] = None
    clock_khz: Union[Count, None] = None
    memory_clock_khz: Union[Count, None] = None
    memory_bus_bits: Union[Count, None] = None
    torch: Union[str, None] = None
    cuda: Union[str, None] = None
    python: Union[str, None] = None


class CaptureMemory(msgspec.Struct):
    """meta.json `memory`: the allocator's peaks."""

    max_allocated_bytes: Union[Amount, None] = None
    max_reserved_bytes: Union[Amount, None] = None
    num_alloc_retries: Union[Count, None] = None
    num_ooms: Union[Count, None] = None


class CaptureMeta(msgspec.Struct):
    """A capture folder's meta.json."""

    schema: Union[str, None] = None
    target: Union[str, None] = None
    mode: Union[str, None] = None
    status: Union[str, None] = None
    recorded_at: Union[str, None] = None
    params: Union[dict[str, Scalar], None] = None
    argv: Union[list[str], None] = None
    error: Union[CaptureError, None] = None
    steps: Union[CaptureSteps, None] = None
    timing: Union[CaptureTiming, None] = None
    files: Union[CaptureFiles, None] = None
    device: Union[CaptureDevice, None] = None
    memory: Union[CaptureMemory, None] = None
    warnings: Union[list[str], None] = None
    workload: Union[dict, None] = None  # libraries and models (diagnose/child/model_census.py)
    gpu_probe: Union[dict, None] = None  # diagnose/base/measured_peaks.py checks its fields


class OomRecord(msgspec.Struct):
    """memory.json `oom`: the request that failed."""

    device: Union[int, str, None] = None
    requested_bytes: Union[Amount, None] = None
    device_allocated_bytes: Union[Amount, None] = None
    device_free_bytes: Union[Amount, None] = None


class LiveBlock(msgspec.Struct):
    """One of the snapshot's largest live blocks."""

    bytes: Union[Amount, None] = None
    requested_bytes: Union[Amount, None] = None
    state: Union[str, None] = None
    where: Union[str, None] = None


class AllocatorEvent(msgspec.Struct):
    """One allocator event of the recorded history."""

    action: Union[str, None] = None
    bytes: Union[Amount, None] = None
    where: Union[str, None] = None


class Snapshot(msgspec.Struct):
    """memory.json `snapshot`: the summary of an allocator snapshot."""

    reserved_bytes: Union[Amount, None] = None
    allocated_bytes: Union[Amount, None] = None
    segments: Union[Count, None] = None
    free_in_segments_bytes: Union[Amount, None] = None
    largest_free_block_bytes: Union[Amount, None] = None
    fragmentation: Union[Share, None] = None
    live_blocks: Union[Count, None] = None
    top_blocks: Union[list[LiveBlock], None] = None
    events: Union[list[AllocatorEvent], None] = None
    events_dropped: Union[Count, None] = None
    oom_events: Union[Count, None] = None


class MemoryDoc(msgspec.Struct):
    """A capture folder's memory.json."""

    schema: Union[str, None] = None
    device_total_bytes: Union[Amount, None] = None
    stats: Union[dict[str, Union[Amount, None]], None] = None
    oom: Union[OomRecord, None] = None
    snapshot_taken: Union[str, None] = None
    snapshot: Union[Snapshot, None] = None


class NotJson(InputError):
    """The file's bytes are not JSON at all (as opposed to JSON of the wrong shape)."""


def read_side_bytes(path: Path, what: str, limit: int | None = None) -> bytes:
    """The bytes of a file beside a trace (inflated when gzip), at most `limit` of them. Opened
    without blocking (a FIFO swapped in is refused, not waited on); InputError naming the file when
    it is not a regular file, cannot be read, or is (or inflates to) more than `limit` bytes
    (SIDE_FILE_MAX_BYTES by default)."""
    limit = SIDE_FILE_MAX_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{path}: {what} is not a regular file")
            if info.st_size > limit:
                raise InputError(_too_large(path, what, info.st_size, limit))
            raw = f.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if len(raw) > limit:  # it grew after the check
        raise InputError(_too_large(path, what, len(raw), limit))
    if raw[:2] == b"\x1f\x8b":  # gzipped (memory.json.gz, pysamples.json.gz): inflated under the same ceiling
        raw = _gunzip(raw, path, what, limit)
    return raw


def _too_large(path: Path, what: str, size: int, limit: int) -> str:
    return f"{path}: {size:,} bytes is more than the {limit:,}-byte limit on {what}"


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in `path` (a regular file of at most SIDE_FILE_MAX_BYTES, inflated when gzip);
    InputError (NotJson for bytes that are not JSON) naming the file otherwise. `what` names the
    file's role."""
    raw = read_side_bytes(path, what)
    try:
        doc = msgspec.json.decode(raw.removeprefix(b"\xef\xbb\xbf"))
    except RecursionError:
        raise InputError(f"{path}: {what} is nested too deeply (more than ~1,000 levels)") from None
    except msgspec.DecodeError as exc:
        raise NotJson(f"{path}: unreadable {what} ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: {what} must be a JSON object, not {_json_kind(doc)}")
    return doc


def _gunzip(raw: bytes, path: Path, what: str, limit: int) -> bytes:
    """The inflated bytes of a gzipped side file, at most `limit`; InputError otherwise."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise InputError(f"{path}: {what} is not readable gzip ({exc})") from None
    if len(out) > limit or inflate.unconsumed_tail:
        raise InputError(f"{path}: {what} inflates past {limit:,} bytes")
    if not inflate.eof:
        raise InputError(f"{path}: {what} is a truncated gzip file")
    return out


def validate(doc: dict, schema: type, path: Path, what: str) -> dict:
    """`doc` itself when it fits `schema`; else InputError naming the file and the field."""
    try:
        msgspec.convert(doc, schema)
    except msgspec.ValidationError as exc:
        raise InputError(f"{path}: {what} does not fit its schema: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: {what} is nested too deeply (more than ~1,000 levels)") from None
    return doc


def read_meta(path: Path) -> dict:
    """A capture folder's meta.json, checked against CaptureMeta (module docstring)."""
    return validate(read_json_object(path, "capture metadata"), CaptureMeta, path, "capture metadata")


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )
