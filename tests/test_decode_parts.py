"""Decoding each piece in parts (kineto.PART_BYTES) gives exactly what decoding whole pieces gives:
the same events, counts and warnings, whatever a part meets (fields of unexpected types, a `},{`
inside a string or a nested list, bytes that are not UTF-8, entries that are not events)."""

from __future__ import annotations

import json
import random

import msgspec
import pytest

from diagnose.trace import kineto

from conftest import plain_event


def _events(seed: int) -> bytes:
    """A trace whose event array mixes good events with every kind of trouble a part can meet."""
    rng = random.Random(seed)
    items = []
    for i in range(300):
        roll = rng.random()
        args = {"External id": i, "Input Dims": [[i % 4, 2], []], "correlation": i}
        event = {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 5}", "ts": i, "dur": 1, "args": args}
        if roll < 0.03:
            args["correlation"] = str(i)  # a type error: the piece goes the lenient way
        elif roll < 0.06:
            event["name"] = 'x"},{"y'  # a boundary inside a string
        elif roll < 0.09:
            args["Input Dims"] = [{"a": 1}, {"b": 2}]  # a boundary inside a nested list
        elif roll < 0.11:
            items.append("7")  # an entry that is not an event
        items.append(json.dumps(event))
    text = ('{"traceEvents": [' + ",".join(items) + "]}").encode()
    if seed % 3 == 0:  # bytes that are not UTF-8 inside a name
        text = text.replace(b"aten::op3", b"aten::op\xff3", 2)
    return text


def _decoded(raw: bytes, part_bytes: int, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        m.setattr(kineto, "CHUNK_BYTES", 2000)
        m.setattr(kineto, "PART_BYTES", part_bytes)
        decoded = kineto.decode(raw)
        try:
            events = [plain_event(e) for chunk in decoded.chunks() for e in chunk]
        except msgspec.DecodeError as exc:
            return ("raised", str(exc))
    return events, decoded.kept, decoded.dropped, decoded.warnings


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("part_bytes", [1, 300, 900])
def test_parts_decode_as_whole_pieces(seed, part_bytes, monkeypatch):
    raw = _events(seed)
    assert _decoded(raw, part_bytes, monkeypatch) == _decoded(raw, 1 << 30, monkeypatch)


def _in_one_piece(raw: bytes) -> tuple:
    """The events, counts and warning kinds of `raw` read as one piece (no splitter cut to get wrong)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kineto, "CHUNK_BYTES", 1 << 30)
        decoded = kineto.decode(raw)
        events = [plain_event(e) for chunk in decoded.chunks() for e in chunk]
    return events, decoded.kept, decoded.dropped, [w.split(" (")[0] for w in decoded.warnings]


@pytest.mark.parametrize("seed", range(40))
def test_a_wrong_type_before_a_bad_cut_still_decodes(seed, monkeypatch):
    """A piece whose first trouble is a field of the wrong type and whose cut falls inside a string
    was refused as not JSON (its lenient re-read met the bad cut); it now falls back to decoding the
    rest in one piece, like any other bad cut (seeds 1, 4, 7, 14, 19, 32, 35 and 39 meet it)."""
    raw = _events(seed)
    got = _decoded(raw, 300, monkeypatch)
    assert got[0] != "raised", got
    events, kept, dropped, warnings = got
    assert (events, kept, dropped, [w.split(" (")[0] for w in warnings]) == _in_one_piece(raw)
