"""The GPU probe: cached records per device, measured ceilings replacing the datasheet's achievable ones,
and (on a GPU) bandwidth and bf16 rate within 10 % of what plain PyTorch measures there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diagnose.base import devices

from diagnose.base import measured_peaks
from tests.conftest import ROOT

RECORD = {
    "schema": measured_peaks.SCHEMA,
    "hbm_tbps": 4.4,
    "measured_at": "2026-12-02T14:00:00+00:00",
    "tflops": {"bf16": 760.0, "fp16": 770.0, "tf32": 400.0, "fp32": 50.0, "fp8": 1400.0},
    "bandwidth": {"method": "Triton copy and triad kernels"},
    "device": {"name": "NVIDIA H200", "uuid": "GPU-1234", "torch": "2.11.0", "cuda": "13.0", "triton": "3.6"},
}


def test_measured_figures_replace_the_achievable_ones_and_keep_the_datasheet():
    spec = measured_peaks.with_measured(devices.H200, RECORD)
    assert spec.achievable_tbps == 4.4 and spec.achievable("bf16") == 760.0 and spec.achievable("fp8") == 1400.0
    assert spec.hbm_tbps == devices.H200.hbm_tbps and spec.peak("bf16") == devices.H200.peak("bf16")
    assert "measured on this GPU" in spec.source and "hbm" in spec.measured and "bf16" in spec.measured


def test_a_measured_figure_above_the_datasheet_raises_the_peak_so_no_share_exceeds_100_percent():
    record = dict(RECORD, hbm_tbps=5.0, tflops={"bf16": 1000.0})
    spec = measured_peaks.with_measured(devices.H200, record)
    assert spec.hbm_tbps >= spec.achievable_tbps and spec.peak("bf16") >= spec.achievable("bf16")


def test_an_unknown_gpu_gets_a_roofline_from_its_measured_figures():
    spec = measured_peaks.with_measured(None, RECORD, {"name": "NVIDIA B200"})
    assert spec.name == "NVIDIA B200" and spec.achievable("bf16") == 760.0 and spec.peak("bf16") == 760.0
    assert "no datasheet entry" in spec.source and spec.next_rung("bf16") == "fp8"


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {},
        dict(RECORD, schema="x"),
        dict(RECORD, hbm_tbps=-1),
        dict(RECORD, hbm_tbps=float("nan")),
        dict(RECORD, tflops={"bf16": "fast"}),
        dict(RECORD, tflops=[1]),
    ],
)
def test_an_invalid_record_changes_nothing(bad):
    assert measured_peaks.with_measured(devices.H200, bad) is devices.H200


def test_the_cache_round_trips_and_refuses_a_link(tmp_path):
    key = measured_peaks.cache_key(RECORD["device"])
    assert "/" not in key and key.startswith("NVIDIA_H200")
    assert measured_peaks.read_cache(key, tmp_path) is None
    path = measured_peaks.write_cache(key, RECORD, tmp_path)
    assert measured_peaks.read_cache(key, tmp_path) == RECORD
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(RECORD))
    path.unlink()
    path.symlink_to(target)
    assert measured_peaks.read_cache(key, tmp_path) is None  # never read through a planted link
    measured_peaks.write_cache(key, dict(RECORD, hbm_tbps=1.0), tmp_path)
    assert json.loads(target.read_text())["hbm_tbps"] == 4.4  # nor written through it


def test_a_capture_carrying_a_probe_record_uses_it(tmp_path):
    from diagnose.metrics import Metrics
    from diagnose.trace import load_target

    trace = load_target(ROOT / "fixtures" / "captures" / "decode_eager")
    trace.capture = dict(trace.capture or {}, gpu_probe=RECORD)
    spec = Metrics(trace).device_spec
    assert spec.achievable_tbps == 4.4 and "measured on this GPU" in spec.source


def test_probe_without_a_gpu_is_one_line_and_exit_2():
    from tests.conftest import has_cuda

    if has_cuda():
        pytest.skip("a GPU is visible")
    done = subprocess.run(
        [sys.executable, "-m", "diagnose", "probe"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "GPU" in done.stderr and "Traceback" not in done.stderr


def _plain_torch() -> tuple[float, float]:
    """HBM TB/s of a 1 GiB Tensor.copy_ and bf16 TFLOP/s of an 8192³ torch.matmul, timed over 20 calls."""
    import torch

    def per_call(fn, calls=20):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls / 1e3  # s

    src = torch.empty(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    copy_s = per_call(lambda: dst.copy_(src))
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_s = per_call(lambda: x @ y)
    return 2 * (1 << 30) / copy_s / 1e12, 2 * 8192**3 / mm_s / 1e12


@pytest.mark.gpu
def test_probe_on_a_gpu_is_within_10_percent_of_plain_pytorch(tmp_path):
    record, why = measured_peaks.run_probe(refresh=True, cache_folder=tmp_path)
    assert record is not None, why
    copy_tbps, bf16_tflops = _plain_torch()
    print(
        f"probe {record['hbm_tbps']:.3f} TB/s, bf16 {record['tflops']['bf16']:.1f} TFLOP/s; "
        f"plain torch copy {copy_tbps:.3f} TB/s, matmul {bf16_tflops:.1f} TFLOP/s"
    )
    assert abs(record["hbm_tbps"] / copy_tbps - 1) <= 0.10
    assert abs(record["tflops"]["bf16"] / bf16_tflops - 1) <= 0.10
    again, _ = measured_peaks.run_probe(cache_folder=tmp_path)
    assert again["cached"] is True and again["hbm_tbps"] == record["hbm_tbps"]


def _fake_python(tmp_path, stdout: str, status: int = 0):
    """An executable that stands in for a Python with a GPU: prints `stdout`, exits `status`."""
    path = tmp_path / "fake-python"
    path.write_text(f"#!/bin/sh\ncat <<'JSON'\n{stdout}\nJSON\necho 'no GPU here' >&2\nexit {status}\n")
    path.chmod(0o755)
    return str(path)


def test_a_gpu_capture_carries_the_probe_record_and_a_failed_probe_is_a_warning(tmp_path):
    from diagnose.capture.runner import _add_gpu_probe

    meta = {"status": "ok", "device": {"name": "NVIDIA H200", "compute_capability": "9.0"}}
    (tmp_path / "a").mkdir()
    out = _add_gpu_probe(tmp_path / "a", dict(meta), _fake_python(tmp_path, json.dumps(RECORD)))
    assert out["gpu_probe"]["hbm_tbps"] == 4.4
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["gpu_probe"] == RECORD
    (tmp_path / "b").mkdir()
    failed = _add_gpu_probe(tmp_path / "b", dict(meta), _fake_python(tmp_path, "", status=2))
    assert "gpu_probe" not in failed and any("no GPU here" in w for w in failed["warnings"])
    cpu = _add_gpu_probe(tmp_path / "b", {"status": "ok", "device": {"name": "CPU only"}}, "/nonexistent")
    assert "gpu_probe" not in cpu and "warnings" not in cpu  # no GPU: nothing to probe, nothing said
