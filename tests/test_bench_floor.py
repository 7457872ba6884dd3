"""The benchmark's floor decodes into diagnose's own Structs, and results.json stores no absolute paths."""

import json
import sys
from pathlib import Path

from diagnose.trace import kineto

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_vs_hta  # noqa: E402


def test_floor_decodes_into_diagnoses_own_records():
    space: dict = {}
    exec(bench_vs_hta.FLOOR_STRUCTS, space)
    assert space["Event"] is kineto.Event


def test_floor_child_decodes(tmp_path):
    import subprocess

    trace = tmp_path / "t.json"
    trace.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "name": "k", "ts": 1, "dur": 2, "args": {"correlation": 3, "grid": [1, 1, 1]}}
                ]
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-c", bench_vs_hta.FLOOR_CHILD, str(trace)], capture_output=True, text=True, check=True
    ).stdout
    assert bench_vs_hta._result(out)["events"] == 1


def test_default_source_is_vendored():
    assert bench_vs_hta.SOURCE.is_file()
    assert bench_vs_hta.portable(bench_vs_hta.SOURCE) == "fixtures/peer/hta/trace_diff/control/control.json.gz"


def test_portable_paths(tmp_path):
    assert bench_vs_hta.portable(tmp_path / "10mb" / "trace.json", tmp_path) == "<work>/10mb/trace.json"
    assert bench_vs_hta.portable(Path("/somewhere/else/x.json.gz")) == "x.json.gz"


def test_results_json_has_no_absolute_paths():
    files = sorted((ROOT / "benchmarks").glob("results*.json"))
    assert files
    for path in files:
        text = path.read_text()
        doc = json.loads(text)
        assert doc["date"] and doc["machine"]["summary"], path
        for value in _strings(doc):
            assert not value.startswith("/"), (path, value)
        assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, path


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
