"""Numbers written as strings (ROCm traces give a memcpy's `bytes` as "9216") are decoded at msgspec's speed, not
event by event in Python, and read exactly as the event-by-event (lenient) path reads them."""

from __future__ import annotations

import gzip
import json
import random
import re

import msgspec
import pandas as pd
import pytest

from diagnose.trace import kineto, load_target

from conftest import PEER_TRACES, plain_event

VLLM = PEER_TRACES / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"
NUMERIC_ARGS = ["correlation", "External id", "Bytes", "bytes", "Total Allocated", "Device Id", "Addr"]


def _stringly(seed: int) -> bytes:
    """An event array where some numbers, at the top level and in args, are written as strings."""
    rng = random.Random(seed)
    events = []
    for i in range(200):
        args = {"correlation": i, "External id": i + 1, "bytes": 4096 * i, "Input Dims": [[i, 2]]}
        event = {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "ts": 10.5 * i, "dur": 2, "args": args}
        if rng.random() < 0.3:
            key = rng.choice(NUMERIC_ARGS)
            args[key] = str(rng.choice([i, -1, 2**40, 0]))
        if rng.random() < 0.1:
            event[rng.choice(["ts", "dur"])] = rng.choice(["12.25", "7", "1e3"])
        events.append(event)
    return json.dumps(events).encode()


@pytest.mark.parametrize("seed", range(8))
def test_the_fast_lax_decoding_reads_what_the_lenient_path_reads(seed):
    raw = _stringly(seed)
    lax = [plain_event(e) for e in kineto._LAX_EVENTS.decode(raw)]
    lenient = [plain_event(kineto._coerce_event(item)) for item in msgspec.json.decode(raw)]
    assert lax == lenient


def test_a_rocm_trace_with_numbers_as_strings_takes_the_fast_path(tmp_path, monkeypatch):
    """REAL (TraceLens's vLLM decode on ROCm): its runtime records give `bytes` and `kind` as strings. It is read
    without a per-event pass, into the same frames as the trace with those numbers written as numbers."""
    text = gzip.decompress(VLLM.read_bytes()).decode()
    as_numbers, n = re.subn(r'"(bytes|kind)": *"(\d+)"', r'"\1":\2', text)
    assert n > 10
    (tmp_path / "numbers.json").write_text(as_numbers)
    reference = load_target(tmp_path / "numbers.json")

    def per_event(*_):
        raise AssertionError("decoded event by event")

    monkeypatch.setattr(kineto.Decoded, "_coerce_all", per_event)
    trace = load_target(VLLM)
    assert trace.warnings == [
        "some events have fields of unexpected types (Expected `int | null`, got `str` - at `$[1086].args.bytes`); "
        "numbers written as strings read as numbers"
    ]
    assert not reference.warnings
    for frame in ("gpu", "runtime", "ops", "memory"):
        pd.testing.assert_frame_equal(getattr(trace, frame), getattr(reference, frame))


def test_a_field_no_coercion_reads_still_goes_the_lenient_way():
    """A list where a number belongs: the lax decoder refuses it too, so the piece is read event by event."""
    raw = json.dumps(
        {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "args": {"correlation": [1]}}]}
    ).encode()
    decoded = kineto.decode(raw)
    events = [e for chunk in decoded.chunks() for e in chunk]
    assert len(events) == 1 and events[0].args.correlation is None
    assert decoded.warnings[0].endswith("; read leniently")
