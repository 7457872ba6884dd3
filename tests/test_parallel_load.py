"""The multi-process loader (diagnose/trace/parallel.py) builds exactly the frames one process builds.

Pieces are made small (3 kB, or about a 250th of a large trace) and the size floor removed, so that
every real trace is cut in a few hundred places at least and shared among three processes; the
frames, t0 and warnings must equal the single-process ones. A child that fails mid-decode (an exception, an abrupt exit, a signal)
must make the parent decode everything itself, with the same result.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from diagnose.trace import kineto, parallel
from diagnose.trace.frames import FrameBuilder
from diagnose.trace.load import load_trace_file

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = sorted(glob.glob(str(ROOT / "fixtures/captures/*/trace.json.gz")))
PEERS = sorted(glob.glob(str(ROOT / "fixtures/peer/**/*.json.gz"), recursive=True))[:6]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parallel loader forks (Linux only)")


def _single(path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(parallel, "_processes", lambda decoded: 1)
        return load_trace_file(Path(path))


def _parallel(path, monkeypatch, processes=3, chunk=None):
    """The frames of `path` decoded by `processes` processes in pieces of `chunk` bytes (by default 3 kB,
    or about 1/250 of the decoded trace, taking gzip to shrink a trace about tenfold: a few hundred cuts,
    where 3 kB pieces of a 25 MB trace would cost 8,000 hand-overs and seconds a test)."""
    if chunk is None:
        size = os.path.getsize(path) * (10 if str(path).endswith(".gz") else 1)
        chunk = max(3000, size // 250)
    with monkeypatch.context() as m:
        m.setattr(kineto, "CHUNK_BYTES", chunk)
        m.setattr(parallel, "_processes", lambda decoded: min(processes, len(decoded.pieces())))
        return load_trace_file(Path(path))


def _assert_same(a, b):
    for name in ("gpu", "runtime", "ops", "gpu_annotations", "syncs", "memory"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    assert a.t0_us == b.t0_us
    assert a.session_end_us == b.session_end_us
    assert a.warnings == b.warnings


@pytest.mark.parametrize("path", CAPTURES + PEERS, ids=lambda p: Path(p).parent.name + "/" + Path(p).name[:24])
def test_parallel_frames_equal_single_process(path, monkeypatch):
    single = _single(path, monkeypatch)
    _assert_same(_parallel(path, monkeypatch), single)
    assert single.session_end_us is not None, "every kineto trace here records its session span"


def _mixed_trace(tmp_path) -> Path:
    """Synthetic: columns whose value types differ between the first and the last events (ints then
    strings, numbers then nothing), so each process sees a different mix."""
    events = []
    for i in range(400):
        late = i >= 200
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i % 7}",
                "ts": 10.0 * i,
                "dur": 5,
                "pid": f"p{i % 3}" if late else 1,
                "tid": 7 if late else 7.5 if i % 2 else 7,
                "args": {"External id": i, "Input Dims": [[2, 3]] if i % 5 else None},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "ts": 10.0 * i + 1,
                "dur": 2,
                "pid": 0,
                "tid": 7,
                "args": {
                    "correlation": i,
                    "device": 0,
                    "stream": 7,
                    "registers per thread": None if late else 32,
                    "grid": [1, 1, 1] if i % 3 else None,
                    "est. achieved occupancy %": i if i < 100 else None,
                },
            }
        )
    path = tmp_path / "synthetic_mixed.json"
    path.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    return path


def _slow_parent(monkeypatch, fail: str | None = None) -> dict:
    """Make the parent bucket slowly, so that children draw tickets even on a small trace, and
    (with `fail`) make a child fail on its third chunk. Returns counts of what happened."""
    parent = os.getpid()
    real_add = FrameBuilder.add
    real_receive = parallel._receive
    real_parallel = parallel._parallel
    seen = {"child_chunks": 0, "blocks_received": 0, "fell_back": 0}

    def add(self, chunk):
        if os.getpid() == parent:
            time.sleep(0.002)
        else:
            seen["child_chunks"] += 1
            if fail and seen["child_chunks"] == 3:  # mid-decode, after some chunks went well
                if fail == "raise":
                    raise RuntimeError("boom")
                if fail == "exit":
                    os._exit(0)  # a clean exit code, but nothing sent
                os.kill(os.getpid(), signal.SIGKILL)
        return real_add(self, chunk)

    def receive(fd):
        payload = real_receive(fd)
        seen["blocks_received"] += len(payload or [])
        return payload

    def spy(decoded, processes, report):
        try:
            return real_parallel(decoded, processes, report)
        except parallel._Failed:
            seen["fell_back"] += 1
            raise

    monkeypatch.setattr(FrameBuilder, "add", add)
    monkeypatch.setattr(parallel, "_receive", receive)
    monkeypatch.setattr(parallel, "_parallel", spy)
    return seen


def test_parallel_keeps_dtypes_of_columns_with_mixed_types(tmp_path, monkeypatch):
    path = _mixed_trace(tmp_path)
    expected = _single(path, monkeypatch)
    seen = _slow_parent(monkeypatch)
    for processes in (2, 3):
        _assert_same(_parallel(path, monkeypatch, processes=processes, chunk=2000), expected)
    assert seen["blocks_received"] > 0 and not seen["fell_back"]


@pytest.mark.parametrize("how", ["raise", "exit", "kill"])
def test_a_child_failing_mid_decode_leaves_the_parent_to_decode_it_all(how, monkeypatch):
    path = CAPTURES[0]
    expected = _single(path, monkeypatch)
    seen = _slow_parent(monkeypatch, fail=how)
    _assert_same(_parallel(path, monkeypatch), expected)
    assert seen["fell_back"] == 1


@pytest.mark.parametrize(
    "first,second",
    [
        ([1, 2], [3.5, None]),
        ([1, None], ["a", "b"]),
        ([None, None], [1, 2]),
        ([1, 2], ["x", None]),
        ([True, False], [1, 2]),
        ([True], [False]),
        ([2**70, 1], [3, 4]),
        ([], [1.5]),
        (["a"], [[1, 2], None]),
        ([1.0, None], [2, 3]),
    ],
)
def test_joined_columns_equal_one_column_of_all_values(first, second):
    from diagnose.trace.frames import _compact, _join

    joined = _join([_compact("name", first), _compact("name", second)])
    whole = _compact("name", first + second)
    assert joined.types == whole.types
    assert type(joined.values) is type(whole.values)
    pd.testing.assert_series_equal(pd.Series(joined.values), pd.Series(whole.values))
    if not isinstance(whole.values, list) and whole.values.dtype == object:
        assert [type(v) for v in joined.values] == [type(v) for v in whole.values]


def test_loading_reports_progress_on_one_core_and_on_several(monkeypatch):
    from diagnose.model.config import Config
    from diagnose.front.pipeline import analyse

    path = Path(CAPTURES[0])
    for processes in (1, 2):
        events = []
        with monkeypatch.context() as m:
            m.setattr(kineto, "CHUNK_BYTES", 3000)
            m.setattr(kineto, "PART_BYTES", 700)  # several parts a piece: progress still counts pieces
            m.setattr(parallel, "_processes", lambda decoded, n=processes: n)
            analyse(path, Config(), on_progress=events.append)
        decode = [e for e in events if e["phase"] == "decode"]
        assert decode and all(0 <= e["done"] < e["total"] for e in decode), processes
        assert [e["done"] for e in decode] == sorted(e["done"] for e in decode)
        assert events[-1] == {"phase": "rules"}
