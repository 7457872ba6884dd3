"""`--ncu-csv`, `--ncu` and a capture folder's own ncu.csv, through the command line."""

from __future__ import annotations

import gzip
import json

import msgspec

import pandas as pd
import pytest

from diagnose.commands import main
from diagnose.ncu.sections import Roofline
from diagnose.ncu import run
from diagnose.report import charts

from conftest import CAPTURES, ROOT

NCU = ROOT / "fixtures" / "ncu"
W = ROOT / "tests" / "workloads"
FAST = ["--warmup", "1", "--steps", "2", "--timed-steps", "3"]


def cli(capsys, *argv):
    """Run the CLI with --json; (exit code, findings JSON or None, stderr)."""
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else None), captured.err


def test_ncu_csv_on_a_real_pair(tmp_path, capsys):
    out = tmp_path / "out"
    code, data, err = cli(
        capsys, str(CAPTURES / "swiglu_eager"), "--ncu-csv", str(NCU / "swiglu_eager.ncu.csv.gz"), "-o", str(out)
    )
    assert code == 0 and err == ""
    ncu = data["details"]["ncu"]
    assert ncu["matched"] == 10 and ncu["coverage"] == 1.0 and len(ncu["kernels"]) == 10
    assert {k["bound"] for k in ncu["kernels"]} == {"memory-bound", "latency-bound", "compute-bound"}
    assert all("bound" in k for k in data["details"]["top_kernels"])
    roof = data["details"]["roofline"]
    assert roof["measured_points"] == len(roof["points"]) == 8
    assert data["findings"][0]["rule"] == "memory-bound"
    assert "measured by Nsight Compute" in data["findings"][0]["basis"]
    html = (out / "report.html").read_text()
    assert 'id="roofline"' in html and 'id="ncu-table"' in html and "SM % (ncu)" in html


def test_trace_file_with_ncu_csv(tmp_path, capsys):
    code, data, _ = cli(
        capsys,
        str(CAPTURES / "matmul_bf16" / "trace.json.gz"),
        "--ncu-csv",
        str(NCU / "matmul_bf16.ncu.csv.gz"),
        "-o",
        str(tmp_path / "o"),
    )
    assert code == 0 and data["details"]["ncu"]["kernels"][0]["bound"] == "compute-bound"


def test_capture_folder_attaches_its_own_ncu_csv(tmp_path, capsys):
    folder = tmp_path / "capture"
    folder.mkdir()
    for name in ("meta.json", "trace.json.gz"):  # links, not copies, of the fixture capture
        (folder / name).symlink_to(CAPTURES / "decode_eager" / name)
    (folder / "ncu.csv.gz").symlink_to(NCU / "decode_eager.ncu.csv.gz")
    code, data, _ = cli(capsys, str(folder), "-o", str(tmp_path / "o"))
    assert code == 0
    ncu = data["details"]["ncu"]
    assert ncu["source"].endswith("ncu.csv.gz") and ncu["matched"] == 78
    assert all(k["bound"] == "latency-bound" for k in ncu["kernels"])


def test_no_csv_no_ncu_details(tmp_path, capsys):
    code, data, _ = cli(capsys, str(CAPTURES / "matmul_bf16"), "-o", str(tmp_path / "o"))
    assert code == 0 and "ncu" not in data["details"]
    assert data["details"]["roofline"]["measured_points"] == 0


def test_missing_csv_file_is_bad_input(tmp_path, capsys):
    code, data, err = cli(
        capsys, str(CAPTURES / "matmul_bf16"), "--ncu-csv", str(tmp_path / "none.csv"), "-o", str(tmp_path / "o")
    )
    assert code == 2 and data is None and err.count("\n") == 1 and "none.csv" in err


def test_permission_error_csv_is_one_line_and_the_diagnosis_goes_on(tmp_path, capsys):
    csv = tmp_path / "denied.csv"
    csv.write_text(
        "==PROF== Connected to process 7\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
        "permission to access NVIDIA GPU Performance Counters on the target device 0.\n"
    )
    code, data, err = cli(capsys, str(CAPTURES / "matmul_bf16"), "--ncu-csv", str(csv), "-o", str(tmp_path / "o"))
    assert code == 0 and data["findings"][0]["rule"] == "compute-bound"
    assert err.count("\n") == 1 and "ERR_NVGPUCTRPERM" in err
    assert data["warnings"][0].startswith("--ncu-csv: Nsight Compute may not read")
    assert "ncu" not in data["details"]


def test_csv_of_another_workload_is_flagged(tmp_path, capsys):
    code, data, _ = cli(
        capsys,
        str(CAPTURES / "matmul_bf16"),
        "--ncu-csv",
        str(NCU / "decode_eager.ncu.csv.gz"),
        "-o",
        str(tmp_path / "o"),
    )
    assert code == 0 and any("none of the 78 measured kernels matched" in w for w in data["warnings"])


def test_ncu_on_a_trace_says_so(tmp_path, capsys):
    code, data, err = cli(capsys, str(CAPTURES / "matmul_bf16"), "--ncu", "-o", str(tmp_path / "o"))
    assert code == 0 and "not a workload" in data["warnings"][0] and err.count("\n") == 1


def test_report_escapes_names_from_the_csv(tmp_path, capsys):
    text = gzip.decompress((NCU / "matmul_bf16.ncu.csv.gz").read_bytes()).decode()
    lines = text.splitlines()
    row = lines[-1].replace("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "<script>alert(1)</script>")
    csv = tmp_path / "evil.csv"
    csv.write_text("\n".join(lines + [row.replace('"0",', '"1",', 1)]) + "\n")
    out = tmp_path / "o"
    code, data, _ = cli(capsys, str(CAPTURES / "matmul_bf16"), "--ncu-csv", str(csv), "-o", str(out))
    assert code == 0 and data["details"]["ncu"]["unmatched_ncu"]
    html = (out / "report.html").read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_roofline_chart_escapes_and_marks_points():
    roof = {
        "points": [
            {
                "kernel": '<img src=x onerror="boom">',
                "op": "aten::mm",
                "shapes": "[8×8] bf16",
                "intensity": 400.0,
                "tflops": 700.0,
                "measured": True,
                "bound": "compute-bound",
                "us_per_step": 10.0,
                "share": 0.6,
                "rung": "bf16",
                "dram_pct": 20.0,
                "sm_pct": 93.0,
            },
            {
                "kernel": "k2",
                "op": None,
                "shapes": None,
                "intensity": 0.2,
                "tflops": 0.5,
                "measured": False,
                "bound": None,
                "us_per_step": 5.0,
                "share": 0.3,
                "rung": None,
            },
        ],
        "ceilings": {
            "device": "NVIDIA H200",
            "hbm_tbps": 4.8,
            "achievable_tbps": 4.3,
            "compute": [{"rung": "bf16", "label": "bf16 tensor", "peak_tflops": 989.4, "achievable_tflops": 790.0}],
            "source": "synthetic",
        },
        "measured_points": 1,
    }
    svg = charts.roofline_chart(msgspec.convert(roof, Roofline))
    assert "<img" not in svg and "&lt;img" in svg
    assert "FLOP/byte" in svg and "TFLOP/s" in svg and "bf16 tensor: 989 TFLOP/s peak" in svg
    assert 'fill="#ffffff" stroke="#0f9f8f"' in svg and 'fill="#3b6fd8"' in svg
    assert charts.roofline_chart(None) == ""


@pytest.fixture()
def no_ncu(tmp_path, monkeypatch):
    """Nsight Compute unavailable, whatever this machine has installed."""
    monkeypatch.setenv("DIAGNOSE_NCU", str(tmp_path / "no-ncu-here"))


def test_ncu_missing_is_one_line_and_the_capture_goes_on(tmp_path, capsys, no_ncu):
    pytest.importorskip("torch", reason="capturing needs torch")
    out = tmp_path / "cap"
    code, data, err = cli(capsys, f"{W / 'tiny_cpu.py'}:make_step", "--ncu", "-o", str(out), *FAST)
    assert code == 0
    assert err.strip() == f"diagnose: {run.MISSING}"
    assert data["warnings"][0] == run.MISSING
    assert (out / "findings.json").exists() and (out / "report.html").exists() and (out / "trace.json.gz").exists()
    assert not (out / "ncu.csv").exists()


def test_ncu_exit_code_follows_the_workload(tmp_path, capsys, no_ncu):
    pytest.importorskip("torch", reason="capturing needs torch")
    code, data, err = cli(capsys, f"{W / 'raises.py'}:make_step", "--ncu", "-o", str(tmp_path / "cap"))
    assert code == 3 and data["capture"]["status"] == "failed" and "Nsight Compute" in err


def test_ncu_on_a_cpu_capture_has_nothing_to_measure(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch", reason="capturing needs torch")
    script = tmp_path / "ncu"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    monkeypatch.setenv("DIAGNOSE_NCU", str(script))
    code, data, err = cli(capsys, f"{W / 'tiny_cpu.py'}:make_step", "--ncu", "-o", str(tmp_path / "cap"), *FAST)
    assert code == 0 and "no CUDA kernel" in data["warnings"][0] and err.count("\n") == 1


def test_measured_columns_are_nan_free_json(tmp_path, capsys):
    code, data, _ = cli(
        capsys,
        str(CAPTURES / "gemv_decode_1tok"),
        "--ncu-csv",
        str(NCU / "gemv_decode_1tok.ncu.csv.gz"),
        "-o",
        str(tmp_path / "o"),
    )
    frame = pd.DataFrame(data["details"]["ncu"]["kernels"])
    assert code == 0 and len(frame) == 40 and frame["sm_pct"].notna().all()
