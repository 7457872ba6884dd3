"""The command line on the bundled captures: outputs, JSON schema, exit codes, thresholds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diagnose.commands import main

from conftest import CAPTURES, ROOT


def test_decode_eager_writes_report_and_findings(tmp_path, capsys):
    out = tmp_path / "out"
    code = main([str(CAPTURES / "decode_eager"), "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "launch-overhead" in text and "cuda-graphs" in text
    data = json.loads((out / "findings.json").read_text())
    assert data["schema"] == "diagnose.model.findings/1"
    assert data["device"]["name"] == "NVIDIA H200"
    top = data["findings"][0]
    assert top["rule"] == "launch-overhead"
    assert top["fixes"][0]["id"] == "cuda-graphs"
    assert {"metric", "value", "op", "threshold", "unit"} <= set(top["evidence"][0])
    assert (out / "report.html").stat().st_size > 1000


def test_graphed_capture_has_no_launch_overhead(tmp_path, capsys):
    code = main([str(CAPTURES / "decode_graphed"), "--json", "--no-html", "-o", str(tmp_path / "out")])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert "launch-overhead" not in [f["rule"] for f in data["findings"]]
    assert "launch-overhead" in [c["rule"] for c in data["checked"]]


def test_fail_on_high_exits_1(tmp_path, capsys):
    code = main([str(CAPTURES / "decode_eager"), "--fail-on", "high", "-q", "-o", str(tmp_path)])
    assert code == 1


def test_fail_on_from_pyproject(tmp_path, capsys, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.diagnose]\nfail-on = "medium"\n')
    monkeypatch.chdir(tmp_path)
    assert main([str(CAPTURES / "decode_eager"), "-q"]) == 1


def test_threshold_from_pyproject_and_set(tmp_path, capsys, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.diagnose.thresholds]\n"launch-overhead.min_recoverable_share" = 0.99\n'
    )
    monkeypatch.chdir(tmp_path)
    main([str(CAPTURES / "decode_eager"), "--json", "--no-html"])
    assert json.loads(capsys.readouterr().out)["findings"] == []
    main([str(CAPTURES / "decode_eager"), "--json", "--no-html", "--set", "launch-overhead.min_recoverable_share=0.2"])
    assert json.loads(capsys.readouterr().out)["findings"][0]["rule"] == "launch-overhead"


def test_rules_table(capsys):
    assert main(["rules"]) == 0
    assert "launch-overhead" in capsys.readouterr().out


def test_python_dash_m_and_help_fit_a_screen():
    result = subprocess.run([sys.executable, "-m", "diagnose", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "exit codes" in result.stdout
    assert len(result.stdout.splitlines()) <= 60


def test_analysis_never_imports_torch(tmp_path):
    """The analysis side must run where torch is absent: block its import and analyse a capture."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from diagnose.commands import main\n"
        f"sys.exit(main([{str(CAPTURES / 'decode_eager')!r}, '-q', '-o', {str(tmp_path)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_a_reader_that_stops_early_is_no_error(tmp_path):
    """`diagnose ... | head -1`: the summary, the JSON and the quiet paths each exit as if read whole."""
    for flags in ([], ["--json"], ["-q"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "diagnose", str(CAPTURES / "decode_eager"), "-o", str(tmp_path / "out"), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        proc.stdout.read(1)
        proc.stdout.close()  # stop reading after one byte, as `head -c1` would
        assert proc.wait(timeout=60) == 0, flags
        assert b"Traceback" not in proc.stderr.read()
        assert (tmp_path / "out" / "findings.json").is_file()


@pytest.mark.parametrize("argv", [["--version"], ["/no/such/trace.json"], ["diff", "/no/a", "/no/b"]])
def test_a_command_line_that_never_analyses_does_not_import_pandas(argv):
    """Start-up is what a wrong path or --version costs: the analysis (pandas, numpy, the rules) is imported
    only once there is something to analyse (--help lists the renderers, which do import it)."""
    probe = (
        "import sys\n"
        f"sys.argv = ['diagnose', *{argv!r}]\n"
        "from diagnose.commands import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
