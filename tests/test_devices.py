"""Peak figures per GPU (diagnose/devices.py)."""

from __future__ import annotations

import pytest

from diagnose import devices


@pytest.mark.parametrize(
    "info,expected",
    [
        ({"name": "NVIDIA H200"}, "NVIDIA H200"),
        ({"name": "NVIDIA H100 80GB HBM3"}, "NVIDIA H100 SXM"),
        ({"name": "NVIDIA H100 PCIe"}, "NVIDIA H100 PCIe"),
        ({"name": "NVIDIA A100-SXM4-80GB"}, "NVIDIA A100 80GB SXM"),
        ({"name": "NVIDIA A100-PG509-200", "memory_bytes": 42297524224}, "NVIDIA A100 40GB"),
        ({"name": "NVIDIA A100 80GB PCIe"}, "NVIDIA A100 80GB PCIe"),
        ({"name": "Tesla V100-SXM2-32GB"}, "NVIDIA V100 SXM2"),
        ({"name": "AMD Radeon Graphics", "sm_count": 104, "memory_bytes": 68702699520}, "AMD MI250 / MI210 (one GCD)"),
        ({"name": "AMD Instinct MI300X"}, "AMD MI300X"),
    ],
)
def test_lookup(info, expected):
    assert devices.lookup(info).name == expected


def test_unknown_gpu():
    assert devices.lookup({"name": "NVIDIA GeForce GT 710"}) is None
    assert devices.lookup({"name": "NVIDIA GH200 480GB"}) is None
    assert devices.lookup(None) is None
    assert "GT 710" in devices.describe_unknown({"name": "NVIDIA GeForce GT 710"})


def test_h200_uses_the_measured_ceilings():
    h200 = devices.H200
    assert h200.hbm_tbps == 4.8 and h200.achievable_tbps == 4.3
    assert h200.peak("bf16") == pytest.approx(989.4) and h200.achievable("bf16") == 790.0
    assert h200.peak("fp16") == h200.peak("bf16")
    assert h200.achievable("fp8") == 1490.0 and h200.peak("fp8") == pytest.approx(1978.9)
    assert "measured" in h200.source
    assert h200.ridge("bf16") == pytest.approx(790 / 4.3)


def test_other_gpus_scale_the_datasheet_and_say_so():
    a100 = devices.A100_80_SXM
    assert a100.achievable_tbps == pytest.approx(2.039 * 4.3 / 4.8, abs=1e-3)
    assert a100.achievable("bf16") == pytest.approx(312 * 790 / 989.4, abs=0.1)
    assert "not measured" in a100.source


def test_precision_ladder():
    assert devices.H200.next_rung("fp32") == "tf32"
    assert devices.H200.next_rung("tf32") == "bf16"
    assert devices.H200.next_rung("bf16") == devices.H200.next_rung("fp16") == "fp8"
    assert devices.H200.next_rung("fp8") is None
    assert devices.A100_40.next_rung("bf16") is None  # no FP8 on Ampere
    assert devices.V100_SXM.next_rung("fp32") == "fp16" and devices.V100_SXM.half_rung() == "fp16"
    assert devices.V100_SXM.peak("bf16") is None and devices.V100_SXM.peak("fp16") == 125.0
    assert devices.MI250_GCD.half_rung() == "bf16"
