"""Names from a trace are untrusted: they reach the terminal inert, and a huge one costs no time.

Built at test time from the real decode_eager capture, with its kernel and op names replaced.
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time

from conftest import CAPTURES, ROOT

ESCAPES = "\x1b[2J\x1b[31mred\x07"
MARKUP = "[bold red]loud[/]"


def _renamed(tmp_path, make_name) -> str:
    doc = json.loads(gzip.decompress((CAPTURES / "decode_eager" / "trace.json.gz").read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("cat") in ("kernel", "cpu_op") and event.get("name"):
            event["name"] = make_name(event["name"])
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_escape_sequences_and_markup_in_names_stay_inert_on_the_terminal(tmp_path):
    trace = _renamed(tmp_path, lambda name: f"{ESCAPES}{MARKUP}{name}")
    proc = _run(trace, "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b[2J" in proc.stdout, "the escape is shown, escaped"
    assert "[bold red]loud[/]" in proc.stdout, "rich markup in a name is printed as text"
    data = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert any(isinstance(v, str) and ESCAPES in v for f in data["findings"] for row in f["offenders"]
               for v in row.values()), \
        "findings.json keeps the names verbatim"


def test_a_huge_kernel_name_costs_no_time_in_the_report(tmp_path):
    trace = _renamed(tmp_path, lambda name: "void " + "ns::" * 4000 + name + "<" + "x" * 16000 + ">(int)")
    started = time.monotonic()
    proc = _run(trace, "-o", str(tmp_path / "out"), "-q")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 60
    assert (tmp_path / "out" / "report.html").stat().st_size > 0
