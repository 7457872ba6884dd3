"""Bad input gets one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import gzip
import json

import pytest

from diagnose.commands import main

from conftest import CAPTURES


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, needle):
    assert code == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert needle in lines[0]


def test_missing_path(capsys, tmp_path):
    code, _, err = run(capsys, str(tmp_path / "nope.json.gz"))
    assert_one_line_error(code, err, "no such file")


def test_missing_script(capsys, tmp_path):
    code, _, err = run(capsys, str(tmp_path / "model.py:make_step"))
    assert_one_line_error(code, err, "no such file")


def test_not_json(capsys, tmp_path):
    path = tmp_path / "notes.json"
    path.write_text("this is not a trace\n")
    code, _, err = run(capsys, str(path))
    assert_one_line_error(code, err, "not a JSON trace")


def test_truncated_gzip(capsys, tmp_path):
    whole = (CAPTURES / "decode_eager" / "trace.json.gz").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    code, _, err = run(capsys, str(path))
    assert_one_line_error(code, err, "truncated or corrupt gzip")


def test_empty_file(capsys, tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    code, _, err = run(capsys, str(path))
    assert_one_line_error(code, err, "empty")


def test_empty_trace(capsys, tmp_path):
    path = tmp_path / "empty.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode()))
    code, _, err = run(capsys, str(path))
    assert_one_line_error(code, err, "no events")


@pytest.mark.parametrize("doc", [{"foo": 1}, [1, 2, 3], "a string"])
def test_json_that_is_not_a_trace(capsys, tmp_path, doc):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc))
    code, _, err = run(capsys, str(path))
    assert_one_line_error(code, err, "not a PyTorch profiler")


def test_trace_from_another_tool(capsys, tmp_path):
    """A Chrome trace with events, but none that torch.profiler writes."""
    path = tmp_path / "chrome.json"
    path.write_text(
        json.dumps(
            {"traceEvents": [{"ph": "X", "cat": "blink", "name": "Paint", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}
        )
    )
    code, _, err = run(capsys, str(path))
    assert_one_line_error(code, err, "another tool")


def test_folder_that_is_not_a_capture(capsys, tmp_path):
    code, _, err = run(capsys, str(tmp_path))
    assert_one_line_error(code, err, "not a capture folder")


def test_unknown_threshold(capsys):
    code, _, err = run(capsys, str(CAPTURES / "decode_eager"), "--set", "launch-overhead.nope=1")
    assert_one_line_error(code, err, "unknown threshold")


def test_malformed_set(capsys):
    code, _, err = run(capsys, str(CAPTURES / "decode_eager"), "--set", "launch-overhead")
    assert_one_line_error(code, err, "RULE.NAME=VALUE")


def test_no_target(capsys):
    code, _, err = run(capsys)
    assert_one_line_error(code, err, "no TARGET")


def test_cpu_only_trace_runs_what_applies(capsys, tmp_path):
    """A trace with no GPU activity: exit 0, the GPU rules skipped with the reason."""
    path = tmp_path / "cpu.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50, "pid": 1, "tid": 1},
                    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 70, "dur": 5, "pid": 1, "tid": 1},
                ]
            }
        )
    )
    code, out, _ = run(capsys, str(path), "--json", "-o", str(tmp_path / "out"))
    assert code == 0
    data = json.loads(out)
    assert data["findings"] == []
    reasons = {s["rule"]: s["reason"] for s in data["skipped"]}
    assert "CPU-only" in reasons["launch-overhead"]
