"""Decode a kineto (torch.profiler Chrome-trace) file into typed event records, a chunk at a time.

msgspec decodes straight into Structs that name only the fields the rules use; everything else
in the file is skipped without building Python objects for it, which is where whole-file
`json.loads` spends its time and memory. The event array is found first (without a pass over
the whole file when it is laid out as kineto writes it, else by reading the top level with
`traceEvents` left as raw bytes), then cut at top-level `},{` boundaries into chunks of about
CHUNK_BYTES that are decoded one after the other: only one chunk's Structs are alive at a time
(the caller keeps compact columns of what it needs), and the chunks can be shared among
processes (trace/parallel.py). Each piece is decoded in parts of about PART_BYTES, so that the
Structs of one part are still in the core's cache while they are read back; a part that does
not decode as it stands sends its whole piece down the careful path, as if it had not been cut. Nested lists (`Input Dims`, `grid`...) stay raw bytes in the
Structs; `decode_list` turns them into lists.

Whitespace at the edges of a piece is left out of it (and whitespace between two events never
enters one), so a file padded with gigabytes of whitespace costs a scan, not a copy.

A chunk whose fields have unexpected types falls back to a slower per-event path that coerces
what it can and drops the rest, with a warning; a file that is not a JSON object at the top
falls back to that path as a whole.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Iterator, Literal, Union, overload

import msgspec

Id = Union[int, str, None]
NULL = msgspec.Raw(b"null")
CHUNK_BYTES = 1 << 20
PART_BYTES = 256 << 10  # what is decoded at once: a piece's records would not fit a core's cache
LENIENT = "some events have fields of unexpected types"
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_NONBLANK = re.compile(rb"[^ \t\r\n]")
_BLANKS = b" \t\r\n"
TRIM_BLOCK = 1 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
LOCATE_SEARCH_BYTES = 16 << 20
LOCATE_TRIES = 16


class Args(msgspec.Struct, gc=False):
    """The subset of an event's `args` that diagnose reads (list-valued fields kept as raw JSON)."""

    correlation: Union[int, None] = None
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    device: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    grid: msgspec.Raw = NULL
    block: msgspec.Raw = NULL
    input_dims: msgspec.Raw = msgspec.field(default=NULL, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=NULL, name="Input type")
    mem_bytes: Union[int, None] = msgspec.field(default=None, name="Bytes")
    copy_bytes: Union[int, None] = msgspec.field(default=None, name="bytes")  # a memcpy's or memset's size
    total_allocated: Union[int, None] = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Union[int, None] = msgspec.field(default=None, name="Total Reserved")
    device_id: Union[int, None] = msgspec.field(default=None, name="Device Id")
    device_type: Union[int, None] = msgspec.field(default=None, name="Device Type")
    addr: Union[int, None] = msgspec.field(default=None, name="Addr")
    wait_on_stream: Union[int, None] = msgspec.field(default=None, name="wait_on_stream")
    legacy_external_id: Union[int, None] = msgspec.field(default=None, name="external id")  # PyTorch <= 1.12

    @property
    def any_external_id(self) -> int | None:
        """`External id`, or the lower-case spelling old kineto gave GPU and runtime records."""
        return self.external_id if self.external_id is not None else self.legacy_external_id


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


class Head(msgspec.Struct, gc=False):
    """The top level of a kineto trace file, its events left undecoded."""

    traceEvents: msgspec.Raw = NULL  # absent reads as null: neither is a list (msgspec has no Raw | None)
    deviceProperties: Union[list, None] = None
    distributedInfo: Union[dict, None] = None
    schemaVersion: Union[int, str, None] = None
    displayTimeUnit: Union[str, None] = None
    traceName: Union[str, None] = None
    # the mark diagnose's capture writes (vocabulary/markers.py CAPTURE_MARK); Any: another tool's field of that
    # name must not send the whole file down the lenient path (Decoded keeps a dict only)
    diagnose: Any = None


EMPTY_ARGS = Args()
_HEAD = msgspec.json.Decoder(Head)
_EVENTS = msgspec.json.Decoder(list[Event])
# the same with msgspec's lax coercion ("12" for 12, as convert(strict=False) gives the lenient path)
_LAX_EVENTS = msgspec.json.Decoder(list[Event], strict=False)
_LOOSE = msgspec.json.Decoder()


class NotATrace(ValueError):
    """The bytes are JSON but not a kineto / Chrome trace."""


class Decoded:
    """A decoded trace: its top-level fields, and its events as an iterator of chunks.

    `chunks()` yields lists of Events, appending to `warnings` as it meets anything that had to
    be repaired; `finish()` then raises NotATrace when no entry was an event. `pieces()` and
    `chunks(first, stop)` let several processes decode parts of the same events (trace/parallel.py).
    """

    def __init__(self, head: Head, events: bytes | memoryview | list | None, warnings: list[str]):
        self.deviceProperties = head.deviceProperties
        self.distributedInfo = head.distributedInfo
        self.diagnose = head.diagnose if isinstance(head.diagnose, dict) else None
        self.warnings = warnings
        self._events = events
        self._pieces: list | None = None
        self._lenient_warned = False
        self.located = False
        self.kept = 0
        self.dropped = 0
        self.pieces_done = 0  # pieces whose events have all been given by chunks()

    def pieces(self) -> list[tuple[int, int]]:
        """Byte ranges of the raw event array that decode on their own (none for untyped events)."""
        if self._pieces is None:
            raw = self._events
            self._pieces = [] if raw is None or isinstance(raw, list) else list(_split(raw))
        return self._pieces

    def chunks(self, first: int = 0, stop: int | None = None) -> Iterator[list[Event]]:
        """The events of pieces[first:stop] (all of them by default), a chunk at a time, in file order.

        Raises msgspec.DecodeError when a piece does not decode even after the splitter's cut is
        given up (only possible for a part, never for the whole array of a valid file).
        """
        events = self._events
        if isinstance(events, list):  # already untyped (lenient whole-file path)
            yield self._coerce_all(events)
            return
        pieces = self.pieces()[first:stop]
        if not pieces or events is None:  # (no pieces without events)
            return
        view = memoryview(events)
        for start, end in pieces:
            done = 0  # events of this piece given so far
            for cut in _cuts(events, start, end):
                chunk = _typed(view[cut[0] : cut[1]])
                if chunk is None:
                    break
                self.kept += len(chunk)
                done += len(chunk)
                yield chunk
                del chunk  # freed while its objects are still in the cache, not after the next one is decoded
            else:
                self.pieces_done += 1
                continue
            # a part did not decode as it stands: the whole piece as before, less the events given
            chunk = self._decode_chunk(b"".join((b"[", view[start:end], b"]")), skip=done)
            if chunk is None:  # a cut the splitter got wrong: decode the rest in one piece
                rest = b"".join((b"[", view[start : pieces[-1][1]], b"]"))
                yield self._decode_chunk(rest, final=True, skip=done)
                return
            yield chunk
            del chunk
            self.pieces_done += 1

    def finish(self) -> None:
        """After the last chunk: raise NotATrace when no entry was an event, else note the dropped ones."""
        self._events = None
        if self.dropped and not self.kept:
            raise NotATrace("none of its entries is a trace event")
        if self.dropped:
            self.warnings.append(f"{self.dropped} malformed events were dropped")

    def share(self) -> "Decoded":
        """A view of the same events with its own counts and warnings, for decoding a part of them."""
        part = copy.copy(self)
        part.warnings, part.kept, part.dropped, part._lenient_warned = [], 0, 0, False
        part.pieces_done = 0
        return part

    def absorb(self, kept: int, dropped: int, warnings: list[str]) -> None:
        """Add what another process decoding later pieces counted and warned."""
        self.kept += kept
        self.dropped += dropped
        for warning in warnings:
            lenient = warning.startswith(LENIENT)
            if warning not in self.warnings and not (lenient and self._lenient_warned):
                self.warnings.append(warning)
                self._lenient_warned |= lenient

    @overload
    def _decode_chunk(self, data: bytes, final: Literal[True], skip: int = 0) -> list[Event]: ...

    @overload
    def _decode_chunk(self, data: bytes, final: bool = False, skip: int = 0) -> list[Event] | None: ...

    def _decode_chunk(self, data: bytes, final: bool = False, skip: int = 0) -> list[Event] | None:
        """The events of one JSON array after its first `skip` entries (already given, as events);
        None when it does not decode and not `final` (else raises)."""
        try:
            events = _EVENTS.decode(data)[skip:]
        except msgspec.ValidationError as exc:
            lax = _lax(data)
            if not self._lenient_warned:
                how = "numbers written as strings read as numbers" if lax is not None else "read leniently"
                self.warnings.append(f"{LENIENT} ({exc}); {how}")
                self._lenient_warned = True
            if lax is not None:
                given = lax[skip:]
                self.kept += len(given)
                return given
            try:
                items = _loose(data, self.warnings)
            except msgspec.DecodeError:  # a wrong type met before a cut the splitter got wrong
                if final:
                    raise
                return None
            return self._coerce_all(items[skip:])
        except msgspec.DecodeError as exc:
            if _is_utf8_error(exc):
                _warn_utf8(self.warnings)
                return self._decode_chunk(_repair_utf8(data), final, skip)
            if final:
                raise
            return None
        self.kept += len(events)
        return events

    def _coerce_all(self, items: list) -> list[Event]:
        events = []
        for item in items:
            event = _coerce_event(item)
            if event is None:
                self.dropped += 1
            else:
                events.append(event)
        self.kept += len(events)
        return events


def decode(raw: bytes | bytearray, locate: bool = True) -> Decoded:
    """Decode trace bytes; the events are decoded lazily, chunk by chunk (Decoded.chunks).

    With `locate`, the event array is first looked for without reading the whole file (see
    `_locate`); the Decoded is then `located`, and a DecodeError from its chunks means the guess
    was wrong: decode again with `locate=False`, which reads the top level in full first.
    Raises msgspec.DecodeError for bytes that are not JSON and NotATrace for JSON of the wrong shape.
    """
    found = _locate(raw) if locate else None
    if found is not None:
        head, array = found
        decoded = Decoded(head, array, [])
        decoded.located = True
        return decoded
    warnings: list[str] = []
    try:
        head = _HEAD.decode(raw)
    except msgspec.ValidationError as exc:  # (a DecodeError too, so it comes first)
        return _lenient(raw, exc, warnings)
    except msgspec.DecodeError as exc:
        if not _is_utf8_error(exc):
            raise
        _warn_utf8(warnings)
        raw = _repair_utf8(raw)
        try:
            head = _HEAD.decode(raw)
        except msgspec.ValidationError as exc:
            return _lenient(raw, exc, warnings)
    events = head.traceEvents
    if bytes(memoryview(events)[:1]) != b"[":
        raise NotATrace("no traceEvents list")
    return Decoded(head, events, warnings)


def _locate(raw: bytes | bytearray) -> tuple[Head, memoryview] | None:
    """The top level and the event array of a file laid out as kineto writes it, found without a
    pass over the whole file: the array starts after the first `"traceEvents": [` and ends at one of
    the last few `]`; the top level with an empty array in its place must decode, with
    `traceEvents` at the top. Whether the array itself is valid JSON shows when its chunks are
    decoded. None when no candidate fits (then the caller reads the top level in full)."""
    key = _EVENTS_KEY.search(raw, 0, min(len(raw), LOCATE_SEARCH_BYTES))
    if key is None:
        return None
    start = key.end() - 1
    view = memoryview(raw)
    end = len(raw)
    lowest = max(start + 1, end - LOCATE_SEARCH_BYTES)  # the top level after the array is small
    for _ in range(LOCATE_TRIES):
        end = raw.rfind(b"]", lowest, end)
        if end < 0:
            return None
        try:
            head = _HEAD.decode(b"".join((view[:start], b"[]", view[end + 1 :])))
        except msgspec.DecodeError:
            continue
        if bytes(head.traceEvents) == b"[]":
            return head, view[start : end + 1]
    return None


def _split(events: bytes | memoryview) -> Iterator[tuple[int, int]]:
    """(start, end) byte ranges of the array's content, cut between two top-level elements.

    A cut inside a nested value or a string leaves unbalanced brackets or an open string in a
    piece, so that piece fails to decode and the caller falls back to one piece.
    """
    view = memoryview(events)
    n = len(view)
    end_of_content = n - 1  # the closing bracket
    start = 1
    while start < end_of_content:
        target = start + CHUNK_BYTES
        match = _BOUNDARY.search(events, target, end_of_content) if target < end_of_content else None
        if match is None:
            piece = _trimmed(view, start, end_of_content)
            if piece[1] > piece[0]:
                yield piece
            return
        yield _trimmed(view, start, match.start() + 1)
        start = match.end() - 1


def _cuts(raw: bytes | memoryview, start: int, end: int) -> Iterator[tuple[int, int]]:
    """(start, end) ranges of the piece raw[start:end], cut between two elements about PART_BYTES
    apart: decoded and bucketed one after the other, a part's records stay in the core's cache.
    A cut inside a nested value or a string makes its part fail to decode (see `_split`)."""
    while True:
        target = start + PART_BYTES
        match = _BOUNDARY.search(raw, target, end) if target < end else None
        if match is None:
            yield start, end
            return
        yield start, match.start() + 1
        start = match.end() - 1


def _lax(data: bytes) -> list[Event] | None:
    """The events of a JSON array whose numbers may be written as strings ("9216", as ROCm's memcpy records
    give `bytes`), at msgspec's speed; None when a field is of a type no coercion reads (the caller then
    reads the array event by event)."""
    try:
        return _LAX_EVENTS.decode(data)
    except msgspec.DecodeError:  # (ValidationError too)
        return None


def _typed(part: memoryview) -> list[Event] | None:
    """The events of a part of a piece, or None when it does not decode as typed events as it
    stands (the caller then decodes its piece the careful way)."""
    try:
        return _EVENTS.decode(b"".join((b"[", part, b"]")))
    except msgspec.DecodeError:  # (ValidationError too)
        return None


def _trimmed(raw: memoryview, start: int, end: int) -> tuple[int, int]:
    """(start, end) without the whitespace at either edge; empty (start == end) when all blank."""
    if end > start and raw[start] in _BLANKS:
        found = _NONBLANK.search(raw, start, end)
        if found is None:
            return start, start
        start = found.start()
    while end > start and raw[end - 1] in _BLANKS:
        block = bytes(raw[max(start, end - TRIM_BLOCK) : end])
        kept = len(block.rstrip(_BLANKS))
        end -= len(block) - kept
        if kept:
            break
    return start, end


def _loose(data: bytes | bytearray, warnings: list[str]) -> Any:
    try:
        return _LOOSE.decode(data)
    except msgspec.DecodeError as exc:
        if not _is_utf8_error(exc):
            raise
        _warn_utf8(warnings)
        return _LOOSE.decode(_repair_utf8(data))


def _is_utf8_error(exc: Exception) -> bool:
    return "utf-8" in str(exc).lower()


def _warn_utf8(warnings: list[str]) -> None:
    message = "the file is not valid UTF-8; undecodable bytes were replaced"
    if message not in warnings:
        warnings.append(message)


def _repair_utf8(data: bytes | bytearray | memoryview) -> bytes:
    return bytes(data).decode("utf-8", errors="replace").encode("utf-8")


def decode_list(raw: bytes | str | None) -> list | None:
    """The list a raw JSON field holds, or None for anything else (null, a string, bad JSON)."""
    if raw is None:
        return None
    if isinstance(raw, list):
        return raw
    if not isinstance(raw, msgspec.Raw):
        return None
    try:
        value = _LOOSE.decode(raw)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, list) else None


def _lenient(raw: bytes | bytearray, exc: Exception, warnings: list[str]) -> Decoded:
    """A Decoded from the file read as untyped JSON, keeping every field that can be coerced."""
    warnings.append(f"{LENIENT} ({exc}); read leniently")
    doc = _loose(raw, warnings)
    if isinstance(doc, list):  # the bare-array form of the Chrome trace format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise NotATrace("no traceEvents list")

    def top(key: str, kind: type | tuple[type, ...]) -> Any:
        value = doc.get(key)
        return value if isinstance(value, kind) else None

    head = Head(
        deviceProperties=top("deviceProperties", list),
        distributedInfo=top("distributedInfo", dict),
        schemaVersion=top("schemaVersion", (int, str)),
        displayTimeUnit=top("displayTimeUnit", str),
        traceName=top("traceName", str),
        diagnose=top("diagnose", dict),
    )
    return Decoded(head, doc["traceEvents"], warnings)


def _coerce_event(item: Any) -> Event | None:
    if not isinstance(item, dict):
        return None
    fields: dict[str, Any] = {}
    for key in ("ph", "cat", "name"):
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
    kept: dict[str, Any] = {}
    for field in msgspec.structs.fields(Args):
        if field.encode_name not in args:
            continue
        value = args[field.encode_name]
        if field.type is msgspec.Raw:
            kept[field.name] = msgspec.Raw(msgspec.json.encode(value)) if isinstance(value, list) else NULL
            continue
        try:
            kept[field.name] = msgspec.convert(value, field.type, strict=False)
        except (msgspec.ValidationError, TypeError, ValueError):
            continue
    return Args(**kept)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
