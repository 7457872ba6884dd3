"""The memory charts: well-formed SVG with axes and units, OOM points marked, untrusted strings escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import msgspec

from diagnose.memory.sections import Memory, MemoryTimeline, StepSpan, Sweep, SweepFits, SweepPoint
from diagnose.ruleset.assemble import diagnose_trace
from diagnose.front.pipeline import analyse_sweep as diagnose_sweep
from diagnose.report.memory_charts import memory_timeline_chart, sweep_chart

from conftest import CAPTURES, load_capture

SVG = ""  # inline SVG in HTML carries no namespace (and the report references no URL)


def memory_of(points, steps=(), **fields) -> Memory:
    """A Details.memory with a timeline of `points` ([time, allocated, reserved]) and `fields`."""
    timeline = MemoryTimeline("test", "µs", "bytes", len(points), points, 0.0, 0.0, list(steps))
    return Memory(timeline=timeline, **fields)


def sweep_of(points: list[dict], param: str = "seq") -> Sweep:
    """A sweep of `points` (value, status and what each measured), no fits."""
    rows = [SweepPoint(folder=f"p{i}", **p) for i, p in enumerate(points)]
    return Sweep("sweep", param, None, {}, rows, SweepFits(), None, None, None)


def texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    return ["".join(t.itertext()) for t in root.iter(SVG + "text")]


def test_memory_timeline_chart():
    svg = memory_timeline_chart(diagnose_trace(load_capture("kv_concat")).details.memory)
    labels = texts(svg)
    assert "time (ms)" in labels and "GPU memory (GB)" in labels
    assert "allocated (held by tensors)" in labels and "reserved (cached by the allocator)" in labels
    assert "peak 2.39 GB allocated" in labels


def test_the_chart_peak_names_the_run_peak_when_they_differ():
    memory = memory_of([[0, 1e9, 2e9], [5000, 3.34e9, 4e9]], peak_allocated_bytes=3.65e9)
    assert "peak 3.34 GB allocated here (whole run: 3.65 GB)" in texts(memory_timeline_chart(memory))
    memory = msgspec.structs.replace(memory, peak_allocated_bytes=3.34e9)
    assert "peak 3.34 GB allocated" in texts(memory_timeline_chart(memory))


def test_vram_limit_parts_below_a_gigabyte_read_in_megabytes():
    d = diagnose_trace(load_capture("decode_eager"))
    quiet = next(c.detail for c in d.checked if c.rule == "vram-limit")
    assert "3.1 MB" in quiet and " 0 GB" not in quiet
    from diagnose.report.html import memory_parts_table

    table = memory_parts_table(d.details.memory.breakdown)
    cells = [cell["text"] for row in table["rows"] for cell in row]
    assert "3.1 MB" in cells and not any(c in ("0 GB", "0.00 GB") for c in cells)


def test_memory_timeline_shows_the_limit_near_it():
    memory = memory_of([[0, 1e9, 2e9], [5000, 8e9, 9e9]], limit_bytes=10e9)
    assert "limit 10.00 GB" in texts(memory_timeline_chart(memory))
    memory = msgspec.structs.replace(memory, limit_bytes=150e9)
    assert not any(t.startswith("limit") for t in texts(memory_timeline_chart(memory)))


def test_sweep_chart_marks_fits_and_ooms():
    sweep = diagnose_sweep(CAPTURES / "sweep_attention_naive").details.memory.sweep
    labels = texts(sweep_chart(sweep))
    assert "seq (log scale)" in labels and "peak allocated (GB), log scale" in labels
    assert "median step time (ms), log scale" in labels
    assert any(t.startswith("∝ seq^1.97") for t in labels)
    assert labels.count("OOM") == 4  # two points, in both panels
    assert "device memory 150 GB" in labels


def test_charts_escape_untrusted_strings():
    evil = '<script>alert("x")</script>&'
    sweep = sweep_of(
        [
            {"value": 1024, "status": "ok", "peak_allocated_bytes": 1e9, "median_step_us": 100.0},
            {"value": 2048, "status": "ok", "peak_allocated_bytes": 4e9, "median_step_us": 400.0},
            {"value": 4096, "status": "oom", "error": evil},
        ],
        param=evil,
    )
    svg = sweep_chart(sweep)
    assert "<script>" not in svg and evil in "".join(texts(svg)) + "".join(
        "".join(t.itertext()) for t in ET.fromstring(svg).iter("title")
    )
    memory = memory_of([[0, 1, 2], [1, 3, 4]], [StepSpan(evil, 0, 1)])
    svg = memory_timeline_chart(memory)
    assert "<script>" not in svg
    ET.fromstring(svg)


def test_nothing_to_draw():
    assert memory_timeline_chart(None) == "" and memory_timeline_chart(Memory()) == ""
    assert memory_timeline_chart(memory_of([[0, 1, 1]])) == ""
    assert sweep_chart(None) == "" and sweep_chart(sweep_of([{"value": 1, "status": "oom"}])) == ""
