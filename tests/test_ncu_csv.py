"""Reading Nsight Compute output (diagnose/ncu/csv.py): the real H200 CSVs and synthetic edge cases."""

from __future__ import annotations

import math
import sys
import types

import pytest

from diagnose.base.errors import InputError
from diagnose.ncu.csv import PERMISSION_TEXT, parse_text, read_ncu

from conftest import ROOT

NCU = ROOT / "fixtures" / "ncu"
HEADER = (
    '"ID","Process ID","Kernel Name","Block Size","Grid Size",'
    '"dram__bytes.sum","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed",'
    '"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",'
    '"dram__throughput.avg.pct_of_peak_sustained_elapsed"'
)
UNITS = '"","","","","","{bytes}","{time}","%","%","%"'


def raw_csv(*rows: str, bytes_unit: str = "byte", time_unit: str = "ns", preamble: str = "") -> str:
    """A small raw-page CSV as ncu prints it: preamble lines, header, units row, kernel rows."""
    return "\n".join([preamble, HEADER, UNITS.format(bytes=bytes_unit, time=time_unit), *rows]) + "\n"


@pytest.mark.parametrize(
    "name,rows",
    [("swiglu_eager", 10), ("matmul_bf16", 1), ("matmul_fp32", 1), ("gemv_decode_1tok", 56), ("decode_eager", 78)],
)
def test_real_csvs_parse(name, rows):
    table = read_ncu(NCU / f"{name}.ncu.csv.gz")
    assert len(table.kernels) == rows and not table.problems
    assert table.device == "NVIDIA H200"
    k = table.kernels
    assert k["sm_pct"].notna().all() and k["dram_pct"].notna().all() and k["duration_us"].gt(0).all()
    assert k["range"].str.contains("diagnose:step 0").all()
    assert table.csv_text.startswith('"ID"')


def test_matmul_bf16_numbers_and_thousands_separators():
    row = read_ncu(NCU / "matmul_bf16.ncu.csv.gz").kernels.iloc[0]
    assert row["kernel"] == "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"
    assert row["duration_us"] == pytest.approx(1383.296)  # "1,383,296" ns
    assert row["sm_pct"] == pytest.approx(93.31) and row["tensor_pct"] == pytest.approx(96.92)
    assert row["dram_pct"] == pytest.approx(20.8)
    assert row["blocks"] == 132 and row["threads"] == 384 and row["sm_count"] == 132
    assert row["dram_bytes"] > 1e9


@pytest.mark.parametrize(
    "text", ["", "\n\n", "==PROF== Connected to process 1 (/usr/bin/python3)\n==PROF== Disconnected from process 1\n"]
)
def test_empty_or_only_preamble(text):
    table = parse_text(text)
    assert len(table.kernels) == 0
    assert table.problems and "no Nsight Compute CSV" in table.problems[0]


def test_counter_permission_error():
    text = (
        "==PROF== Connected to process 4242 (/usr/bin/python3)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
        "Counters on the target device 0. For instructions on enabling permissions and to get more "
        "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
        "==PROF== Disconnected from process 4242\n==WARNING== No kernels were profiled.\n"
    )
    table = parse_text(text)
    assert table.permission_denied and len(table.kernels) == 0
    assert table.problems[0] == PERMISSION_TEXT
    assert sum("ERR_NVGPUCTRPERM" in p for p in table.problems) == 1


def test_na_values_units_and_stray_lines():
    text = raw_csv(
        '"0","7","void k1<float>(float*)","(128, 1, 1)","(4, 1, 1)","1.5","2.5","n/a","n/a","1.0"',
        "some line the workload printed",
        '"1","7","k2","(256, 1, 1)","(1024, 2, 1)","2,048","1,000","80","20","15"',
        '"2","7","short row"',
        bytes_unit="Mbyte",
        time_unit="usecond",
        preamble="==PROF== Connected\n/tmp/out/findings.json",
    )
    table = parse_text(text)
    k = table.kernels
    assert list(k["kernel"]) == ["void k1<float>(float*)", "k2"]
    assert math.isnan(k["sm_pct"].iloc[0]) and math.isnan(k["mem_pct"].iloc[0])
    assert k["dram_bytes"].tolist() == [1.5e6, 2048e6]
    assert k["duration_us"].tolist() == [2.5, 1000.0]
    assert k["blocks"].tolist() == [4.0, 2048.0] and k["threads"].tolist() == [128.0, 256.0]
    assert math.isnan(k["tensor_pct"].iloc[0])


def test_replay_failures_become_one_sentence():
    text = raw_csv(
        '"0","7","k","(1, 1, 1)","(1, 1, 1)","1","1","1","1","1"',
        preamble='==ERROR== Failed to profile "k_a" in process 9\n==ERROR== Failed to profile "k_b" in '
        "process 9\n==PROF== Trying to shutdown target application",
    )
    table = parse_text(text)
    assert len(table.kernels) == 1
    assert table.problems == ["2 kernel launches could not be replayed by ncu: no measurement for them"]


def test_header_without_rows():
    assert "no kernel rows" in parse_text(HEADER + "\n" + UNITS + "\n").problems[0]


def test_details_page_is_pivoted():
    head = '"ID","Kernel Name","Block Size","Grid Size","Section Name","Metric Name","Metric Unit","Metric Value"'
    rows = [
        ("0", "kern", "Duration", "usecond", "12.5"),
        ("0", "kern", "Compute (SM) Throughput", "%", "81.2"),
        ("0", "kern", "Memory Throughput", "%", "30.1"),
        ("0", "kern", "Memory Throughput", "Gbyte/second", "900"),
        ("0", "kern", "DRAM Throughput", "%", "25.0"),
        ("1", "other", "Duration", "msecond", "1.5"),
    ]
    text = (
        head
        + "\n"
        + "\n".join(f'"{i}","{k}","(128, 1, 1)","(264, 1, 1)","SOL","{m}","{u}","{v}"' for i, k, m, u, v in rows)
        + "\n"
    )
    k = parse_text(text).kernels
    first = k.iloc[0]
    assert first["duration_us"] == 12.5 and first["sm_pct"] == 81.2 and first["mem_pct"] == 30.1
    assert first["dram_pct"] == 25.0 and first["blocks"] == 264
    assert k.iloc[1]["duration_us"] == 1500.0


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        read_ncu(tmp_path / "nope.csv")


def test_ncu_rep_without_the_module_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ncu_report", None)
    monkeypatch.setenv("DIAGNOSE_NCU", str(tmp_path / "no-ncu"))
    report = tmp_path / "run.ncu-rep"
    report.write_bytes(b"\x00binary")
    table = read_ncu(report)
    assert len(table.kernels) == 0 and len(table.problems) == 1
    assert "ncu_report" in table.problems[0] and "--csv --page raw" in table.problems[0]


def test_ncu_rep_through_a_report_module(tmp_path, monkeypatch):
    values = {
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 90.0,
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 40.0,
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": 30.0,
        "gpu__time_duration.sum": 2500.0,
        "launch__grid_size": 264.0,
        "launch__block_size": 256.0,
    }

    class Metric:
        def __init__(self, value):
            self.value = value

        def as_double(self):
            return self.value

    class Action:
        def name(self):
            return "my_gemm_kernel"

        def metric_by_name(self, name):
            return Metric(values[name]) if name in values else None

    class Range:
        def num_actions(self):
            return 2

        def action_by_idx(self, i):
            return Action()

    class Report:
        def num_ranges(self):
            return 1

        def range_by_idx(self, i):
            return Range()

    module = types.SimpleNamespace(load_report=lambda path: Report())
    monkeypatch.setitem(sys.modules, "ncu_report", module)
    report = tmp_path / "run.ncu-rep"
    report.write_bytes(b"x")
    k = read_ncu(report).kernels
    assert len(k) == 2 and k["kernel"].iloc[0] == "my_gemm_kernel"
    assert k["duration_us"].iloc[0] == 2.5 and k["sm_pct"].iloc[0] == 90.0 and k["blocks"].iloc[0] == 264
