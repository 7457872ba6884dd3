"""The allocator-snapshot summary (capture side), on a hand-made snapshot in torch's format."""

from __future__ import annotations

from diagnose.child.memory_summary import summarise_snapshot, user_frame

MB = 1 << 20


def snapshot():
    """SYNTHETIC: two segments, one with a free hole, and a short event trace ending in an OOM."""
    frames = [
        {"filename": "/site-packages/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
        {"filename": "/home/me/model.py", "line": 42, "name": "attention"},
    ]
    return {
        "segments": [
            {
                "total_size": 64 * MB,
                "allocated_size": 48 * MB,
                "blocks": [
                    {"size": 32 * MB, "requested_size": 32 * MB, "state": "active_allocated", "frames": frames},
                    {"size": 16 * MB, "state": "inactive"},
                    {"size": 16 * MB, "state": "active_allocated", "frames": []},
                ],
            },
            {"total_size": 20 * MB, "allocated_size": 0, "blocks": [{"size": 20 * MB, "state": "inactive"}]},
        ],
        "device_traces": [
            [
                {"action": "alloc", "addr": 1, "size": 32 * MB, "time_us": 10, "frames": frames},
                {"action": "oom", "addr": 0, "size": 1 << 40, "time_us": 20, "frames": frames},
            ]
        ],
    }


def test_totals_and_fragmentation():
    s = summarise_snapshot(snapshot())
    assert s["reserved_bytes"] == 84 * MB and s["allocated_bytes"] == 48 * MB
    assert s["free_in_segments_bytes"] == 36 * MB and s["largest_free_block_bytes"] == 20 * MB
    assert s["fragmentation"] == round(1 - 20 / 36, 4)
    assert s["oom_events"] == 1 and s["live_blocks"] == 2


def test_top_blocks_name_user_code():
    s = summarise_snapshot(snapshot())
    assert s["top_blocks"][0]["bytes"] == 32 * MB
    assert s["top_blocks"][0]["where"] == "/home/me/model.py:42 in attention"
    assert user_frame([]) is None


def test_empty_snapshot():
    s = summarise_snapshot({})
    assert s["reserved_bytes"] == 0 and s["fragmentation"] == 0.0 and s["events"] == []


def test_the_recorder_writes_a_gzipped_record_that_the_analysis_reads(tmp_path):
    """MemoryRecorder.finish with a stand-in for torch.cuda: memory.json.gz, read back by the analysis side."""
    import types

    from diagnose.child.memory import MEMORY_FILE, MemoryRecorder
    from diagnose.memory.record import _read_memory_json

    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        memory_stats=lambda: {"allocated_bytes.all.peak": 3 << 30, "reserved_bytes.all.peak": 4 << 30},
        get_device_properties=lambda index: types.SimpleNamespace(total_memory=80 << 30),
        memory=types.SimpleNamespace(_snapshot=snapshot, _record_memory_history=lambda **kw: None),
    )
    recorder = MemoryRecorder(types.SimpleNamespace(cuda=cuda), tmp_path)
    stats = recorder.finish()
    assert stats["allocated_bytes.all.peak"] == 3 << 30
    assert MEMORY_FILE == "memory.json.gz" and (tmp_path / MEMORY_FILE).read_bytes()[:2] == b"\x1f\x8b"
    warnings: list[str] = []
    doc, path = _read_memory_json(str(tmp_path), {"files": {"memory": MEMORY_FILE}}, warnings)
    assert not warnings and path.endswith(MEMORY_FILE)
    assert doc["device_total_bytes"] == 80 << 30 and doc["snapshot"]["reserved_bytes"] == 84 * MB


def test_the_history_stopped_before_the_measured_steps_keeps_its_events_in_memory_json(tmp_path):
    """torch empties its event buffer when the history stops; the recorder reads the events out first and
    memory.json.gz carries them beside the final snapshot's blocks."""
    import gzip
    import json
    import types

    from diagnose.child.memory import MEMORY_FILE, MemoryRecorder

    calls: list[dict] = []
    buffer: list = list(snapshot()["device_traces"][0])

    def record(**kw):
        calls.append(kw)
        if kw.get("enabled", "all") is None:
            buffer.clear()  # as torch does

    def take():
        return {**snapshot(), "device_traces": [list(buffer)]}

    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        memory_stats=lambda: {},
        get_device_properties=lambda index: types.SimpleNamespace(total_memory=80 << 30),
        memory=types.SimpleNamespace(_snapshot=take, _record_memory_history=record),
    )
    recorder = MemoryRecorder(types.SimpleNamespace(cuda=cuda), tmp_path)
    recorder.start_history()
    recorder.stop_history()
    recorder.stop_history()  # a second stop does nothing
    assert [c.get("enabled", "all") for c in calls] == ["all", None] and not buffer
    recorder.finish()
    doc = json.loads(gzip.decompress((tmp_path / MEMORY_FILE).read_bytes()))
    assert [e["action"] for e in doc["snapshot"]["events"]] == ["alloc", "oom"]
    assert doc["snapshot"]["top_blocks"][0]["where"] == "/home/me/model.py:42 in attention"
