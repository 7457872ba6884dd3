"""Exit codes tell the truth: every way a workload can end, in every mode, against the documented code.

0 a clean finish, 2 bad input, 3 any workload failure (an exception, a non-zero exit, a signal, a
step function that exits, os._exit before the profiled steps were measured). What was captured
before a failure is kept in the output folder either way.
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from diagnose.commands import main

from conftest import ROOT

W = ROOT / "tests" / "workloads"
FAST = ["--warmup", "1", "--steps", "4", "--timed-steps", "2", "--no-html", "--json"]
needs_torch = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None,
    reason="capturing needs torch (.ci/run installs the CPU build)",
)

#            ending      script  module  function
TABLE = {
    "clean": (0, 0, 0),
    "raise": (3, 3, 3),
    "exit7": (3, 3, 3),
    "exit0": (0, 0, 3),  # a script may end itself cleanly; a step function that exits has failed
    "osexit0": (3, 3, 3),  # os._exit before the profiled steps were all measured
    "osexit5": (3, 3, 3),
    "segfault": (3, 3, 3),
    "killpg": (3, 3, 3),
}


def run(argv, tmp_path, capsys, monkeypatch):
    """main() in the workloads folder; (exit code, meta.json of the output folder or None)."""
    monkeypatch.chdir(W)
    out = tmp_path / "out"
    code = main(["-o", str(out), *FAST, *argv])
    capsys.readouterr()
    meta = json.loads((out / "meta.json").read_text()) if (out / "meta.json").exists() else None
    return code, meta


# Every ending in script mode; in the other modes the endings whose code differs by mode, and one of each
# code (a capture costs seconds: the whole table would add minutes to the suite).
CASES = (
    [("script", e) for e in TABLE]
    + [("function", e) for e in ("clean", "raise", "exit0", "osexit0", "segfault")]
    + [("module", e) for e in ("clean", "exit7", "exit0")]
)


@needs_torch
@pytest.mark.parametrize("mode, ending", CASES)
def test_endings_in_each_capture_mode(tmp_path, capsys, monkeypatch, mode, ending):
    argv = {
        "script": [str(W / "ending.py"), ending],
        "module": ["-m", "ending", ending],
        "function": [f"{W / 'ending.py'}:make_step", "--param", f"end={ending}"],
    }[mode]
    expected = TABLE[ending][["script", "module", "function"].index(mode)]
    code, meta = run(argv, tmp_path, capsys, monkeypatch)
    assert code == expected, f"{mode} {ending}: exit {code}, meta status {meta and meta.get('status')}"
    assert meta is not None, "what was captured is kept"
    assert (meta["status"] == "ok") == (expected == 0)
    if expected == 3:
        assert meta["error"]["message"], "the failure says what happened"


@needs_torch
@pytest.mark.parametrize("ending, expected", [("clean", 0), ("raise", 3), ("exit0", 0), ("segfault", 3)])
def test_endings_under_torchrun(tmp_path, capsys, monkeypatch, ending, expected):
    if shutil.which("torchrun") is None and __import__("importlib").util.find_spec("torch.distributed.run") is None:
        pytest.skip("no torchrun")
    code, meta = run(["--nproc-per-node", "1", str(W / "ending.py"), ending], tmp_path, capsys, monkeypatch)
    assert code == expected


def test_trace_mode_endings(tmp_path, capsys):
    """A readable trace is 0; a missing or truncated one is 2 with one line; a capture of a failed run is 3."""
    good = ROOT / "fixtures" / "captures" / "decode_eager" / "trace.json.gz"
    assert main(["-o", str(tmp_path / "a"), "--no-html", "-q", str(good)]) == 0
    assert main(["-o", str(tmp_path / "b"), "-q", str(tmp_path / "missing.json")]) == 2
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(gzip.decompress(good.read_bytes())[:5000]))
    assert main(["-o", str(tmp_path / "c"), "-q", str(cut)]) == 2
    failed = tmp_path / "failed_capture"
    shutil.copytree(good.parent, failed)
    meta = json.loads((failed / "meta.json").read_text())
    meta.update(status="failed", error={"type": "ValueError", "message": "boom", "traceback": ""})
    (failed / "meta.json").write_text(json.dumps(meta))
    assert main(["-o", str(tmp_path / "d"), "--no-html", "-q", str(failed)]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err
