"""Peak figures per GPU (diagnose/base/devices.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from diagnose import analyze

from diagnose.base import devices

from diagnose.base import measured_peaks
from diagnose.child.capture import device_info
from diagnose.trace.model import Trace

from conftest import ROOT


def _trace(props: list, capture: dict | None = None) -> Trace:
    empty = pd.DataFrame(columns=["name", "ts", "dur", "cat", "device"])
    return Trace("synthetic", empty, empty, empty, empty, empty, empty, device_properties=props, capture=capture)


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
        ({"name": "NVIDIA B200"}, "NVIDIA B200"),
        ({"name": "NVIDIA H800"}, "NVIDIA H800"),
        ({"name": "NVIDIA H800 PCIe"}, "NVIDIA H800 PCIe"),
        ({"name": "NVIDIA H20"}, "NVIDIA H20"),
        ({"name": "NVIDIA L40S"}, "NVIDIA L40S"),
        ({"name": "NVIDIA L4"}, "NVIDIA L4"),
        ({"name": "NVIDIA A10"}, "NVIDIA A10"),
        ({"name": "NVIDIA GeForce RTX 4090"}, "NVIDIA GeForce RTX 4090"),
        ({"name": "AMD Instinct MI300A"}, "AMD MI300A"),
        ({"name": "AMD Instinct MI325X"}, "AMD MI325X"),
        ({"name": "AMD Radeon Graphics", "sm_count": 304, "memory_bytes": 256 * devices.GIB}, "AMD MI325X"),
    ],
)
def test_lookup(info, expected):
    spec = devices.lookup(info)
    assert spec.name == expected and not spec.estimated


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA GeForce RTX 4090 D", "NVIDIA GB200", "NVIDIA L40"])
def test_names_that_are_other_parts_are_not_matched(name):
    assert devices.by_name({"name": name}) is None


def test_datasheet_figures_of_the_new_entries():
    assert devices.B200.peak("bf16") == 2250.0 and devices.B200.peak("fp4") == 9000.0 and devices.B200.hbm_tbps == 8.0
    assert devices.B200.next_rung("fp8") == "fp4"
    assert devices.H800.peak_tflops == devices.H100_SXM.peak_tflops and devices.H800.hbm_tbps == 3.35
    assert devices.H20.peak("bf16") == 148.0 and devices.H20.hbm_tbps == 4.0
    assert devices.RTX_4090.peak("bf16") == 165.2  # GeForce: FP32-accumulated tensor math at half rate
    assert devices.MI325X.peak_tflops == devices.MI300X.peak_tflops and devices.MI325X.hbm_tbps == 6.0


def test_unknown_gpu():
    assert devices.lookup({"name": "NVIDIA GeForce GT 710"}) is None
    assert devices.lookup({"name": "NVIDIA GH200 480GB"}) is None, "a name alone, no properties"
    assert devices.lookup(None) is None
    why = devices.describe_unknown({"name": "NVIDIA GeForce GT 710"})
    assert "GT 710" in why and "no compute capability" in why


# SYNTHETIC device records, shaped as Trace.device reads them from deviceProperties.
UNNAMED_SM90 = {
    "name": "Synthetic GPU 9000",
    "sm_count": 132,
    "memory_bytes": 150109880320,
    "compute_capability": "9.0",
}
UNNAMED_SM100 = {"name": "NVIDIA B300", "sm_count": 148, "memory_bytes": 288 * 10**9, "compute_capability": "10.3"}
UNNAMED_GFX942 = {
    "name": "",
    "sm_count": 304,
    "memory_bytes": 192 * devices.GIB,
    "compute_capability": "9.4",
    "warp_size": 64,
}
UNNAMED_SM89 = {"name": "Synthetic GPU 8900", "sm_count": 142, "memory_bytes": 47697362944, "compute_capability": "8.9"}


def test_an_unnamed_sm90_gets_hopper_peaks_from_its_properties():
    spec = devices.lookup(UNNAMED_SM90)
    assert spec.estimated and spec.name == "Synthetic GPU 9000"
    assert spec.peak("bf16") == pytest.approx(132 * 4096 * 1.83 / 1000, abs=0.1)  # = the H100 SXM's 989.4
    assert spec.peak("fp8") == pytest.approx(2 * spec.peak("bf16"), abs=0.2)
    assert spec.hbm_tbps == 4.8, "140 GiB of HBM on sm_90 is the H200's"
    assert spec.achievable("bf16") == pytest.approx(spec.peak("bf16") * devices.MEASURED_MMA_RATIO, abs=0.1)
    assert "estimated from 132 SMs of compute capability 9.0 (Hopper)" in spec.source
    assert "typical clock of 1.83 GHz" in spec.source and "assumed 4.8 TB/s" in spec.source


def test_an_80gb_hopper_is_told_sxm_or_pcie_by_its_sm_count():
    sxm = devices.lookup(dict(UNNAMED_SM90, memory_bytes=85018279936))
    pcie = devices.lookup(dict(UNNAMED_SM90, memory_bytes=85018279936, sm_count=114))
    assert (sxm.hbm_tbps, pcie.hbm_tbps) == (3.35, 2.0)


def test_an_unnamed_blackwell_gets_sm100_peaks():
    spec = devices.lookup(UNNAMED_SM100)
    assert spec.estimated and spec.name == "NVIDIA B300"
    assert 2000 < spec.peak("bf16") < 2500 and spec.peak("fp4") == pytest.approx(4 * spec.peak("bf16"), abs=0.5)
    assert spec.hbm_tbps == 8.0 and "compute capability 10.3 (Blackwell)" in spec.source
    assert spec.next_rung("fp8") == "fp4"


@pytest.mark.parametrize(
    "device",
    [UNNAMED_GFX942, {"sm_count": 304, "memory_bytes": 192 * devices.GIB, "gcn_arch": "gfx942"}],
    ids=["compute capability 9.4 and a 64-thread warp", "gcnArchName"],
)
def test_an_unnamed_gfx942_gets_cdna3_peaks(device):
    spec = devices.lookup(device)
    assert spec.estimated and spec.name == "unnamed CDNA3 GPU (304 CUs)"
    assert spec.peak("bf16") == pytest.approx(devices.MI300X.peak("bf16"), abs=0.1)
    assert spec.peak("fp32") == pytest.approx(devices.MI300X.peak("fp32"), abs=0.1)
    assert spec.hbm_tbps == 5.3 and "304 CUs of gfx942 (CDNA3)" in spec.source and "MI300X's" in spec.source


def test_rocm_compute_capability_9_0_is_gfx90a_only_with_64_gb():
    mi210 = {"sm_count": 104, "memory_bytes": 68702699520, "compute_capability": "9.0", "warp_size": 64}
    assert devices.lookup(mi210).peak("bf16") == pytest.approx(devices.MI250_GCD.peak("bf16"), abs=0.5)
    mi100 = dict(mi210, sm_count=120, memory_bytes=32 * devices.GIB)
    assert devices.lookup(mi100) is None
    assert "without a gcnArchName" in devices.describe_unknown(mi100)


def test_a_gddr_card_gets_compute_peaks_and_says_its_bandwidth_is_unknown():
    spec = devices.lookup(UNNAMED_SM89)
    assert spec.peak("bf16") == pytest.approx(142 * 1024 * 2.52 / 1000, abs=0.1)
    assert not spec.has_bandwidth and spec.ridge("bf16") is None
    assert spec.bandwidth_missing.startswith("no memory bandwidth for sm_89 with 44.4 GiB")


def test_recorded_clocks_make_the_bandwidth():
    """The clocks torch 2.11.0+cu130 reported on the lent H200 (2026-12-02): SM 1,980,000 kHz, memory
    3,201,000 kHz, bus 6,016 bits; named here as a GPU no name matches."""
    spec = devices.lookup(dict(UNNAMED_SM90, clock_khz=1_980_000, memory_clock_khz=3_201_000, memory_bus_bits=6016))
    assert spec.hbm_tbps == pytest.approx(4.814, abs=1e-3), "the H200's datasheet says 4.8"
    assert spec.peak("bf16") == pytest.approx(132 * 4096 * 1.98 / 1000, abs=0.1)
    assert "recorded boost clock of 1.98 GHz" in spec.source and "recorded memory clock" in spec.source
    gddr = devices.lookup(dict(UNNAMED_SM89, memory_clock_khz=10_501_000, memory_bus_bits=384))
    assert gddr.has_bandwidth and gddr.hbm_tbps == pytest.approx(1.008, abs=1e-3)


def test_geforce_tensor_rates_are_halved():
    """The RTX 2080 Ti of param's trace (fixtures/peer/param): 68 SMs, compute capability 7.5."""
    card = {
        "name": "NVIDIA GeForce RTX 2080 Ti",
        "sm_count": 68,
        "memory_bytes": 11554586624,
        "compute_capability": "7.5",
    }
    spec = devices.lookup(card)
    assert spec.peak("fp16") == pytest.approx(68 * 512 * 1.59 / 1000, abs=0.1)  # the datasheet's 53.8 at 1.545 GHz
    assert spec.peak("fp32") == pytest.approx(68 * 128 * 1.59 / 1000, abs=0.1)
    assert "GeForce" in spec.source and "no memory bandwidth for sm_75" in spec.bandwidth_missing
    pro = devices.lookup(dict(card, name="Synthetic Turing"))
    assert pro.peak("fp16") == pytest.approx(2 * spec.peak("fp16"), abs=0.1)


@pytest.mark.parametrize(
    "device,missing",
    [
        (dict(UNNAMED_SM90, compute_capability="8.7"), "no per-SM rates for compute capability 8.7"),
        (dict(UNNAMED_SM90, sm_count=None), "no SM count"),
        (dict(UNNAMED_GFX942, compute_capability=None, gcn_arch="gfx1100"), "no per-CU rates for gfx1100"),
        ({"name": "Synthetic GPU", "sm_count": 132}, "no compute capability"),
    ],
)
def test_no_spec_says_which_number_it_lacked(device, missing):
    assert devices.lookup(device) is None
    assert missing in devices.describe_unknown(device)


def test_an_unknown_hbm_size_says_so():
    spec = devices.lookup(dict(UNNAMED_SM90, memory_bytes=40 * devices.GIB))
    assert spec.peak("bf16") and not spec.has_bandwidth
    assert spec.bandwidth_missing.startswith("no HBM bandwidth for sm_90 with 40.0 GiB")


def test_a_measured_bandwidth_completes_an_estimate():
    record = {"schema": measured_peaks.SCHEMA, "hbm_tbps": 0.8, "tflops": {"bf16": 300.0}}
    spec = measured_peaks.with_measured(devices.lookup(UNNAMED_SM89), record)
    assert spec.has_bandwidth and spec.achievable_tbps == 0.8 and spec.hbm_tbps == 0.8
    assert not spec.bandwidth_missing and spec.ridge("bf16") == pytest.approx(300 / 0.8)


@pytest.mark.parametrize(
    "fixture,reason",
    [
        ("synthetic_unknown_gpu.json", "records no compute capability"),
        ("synthetic_gddr_gpu.json", "no memory bandwidth for sm_89 with 44.4 GiB"),
    ],
)
def test_rules_that_need_a_missing_number_name_it(fixture, reason):
    diagnosis = analyze(ROOT / "fixtures" / "synthetic" / fixture)
    skipped = {s.rule: s.reason for s in diagnosis.skipped}
    for rule in ("compute-bound", "memory-bound", "decode-latency"):
        assert reason in skipped[rule]


def test_an_estimated_gpu_runs_the_roofline_rules():
    diagnosis = analyze(ROOT / "fixtures" / "synthetic" / "synthetic_estimated_gpu.json")
    assert {"compute-bound", "memory-bound", "decode-latency"} <= {c.rule for c in diagnosis.checked}


def test_trace_device_reads_the_properties_the_estimate_uses():
    props = {
        "id": 0,
        "name": "",
        "numSms": 304,
        "totalGlobalMem": 1,
        "computeMajor": 9,
        "computeMinor": 4,
        "warpSize": 64,
    }
    trace = _trace([props])
    assert trace.device["warp_size"] == 64 and trace.device["compute_capability"] == "9.4"
    captured = {"name": "X", "sm_count": 304, "clock_khz": 2_100_000, "gcn_arch": "gfx942"}
    trace = _trace([props], {"device": captured})
    assert (trace.device["clock_khz"], trace.device["gcn_arch"], trace.device["warp_size"]) == (2_100_000, "gfx942", 64)


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


def _torch(**props):
    """A stand-in for the torch module as device_info reads it, with one GPU of these properties."""
    base = dict(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, total_memory=150109880320)
    device = SimpleNamespace(**(base | props))
    cuda = SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: device)
    return SimpleNamespace(__version__="2.11.0+cu130", version=SimpleNamespace(cuda="13.0"), cuda=cuda)


def test_a_capture_records_the_clocks_and_the_rocm_architecture():
    """What torch 2.11.0+cu130 reported on the lent H200 (2026-12-02): gcnArchName is the GPU's name on
    CUDA, so it is not recorded as an architecture."""
    cuda = device_info(
        _torch(
            gcnArchName="NVIDIA H200",
            warp_size=32,
            clock_rate=1980000,
            memory_clock_rate=3201000,
            memory_bus_width=6016,
        )
    )
    assert (cuda["clock_khz"], cuda["memory_clock_khz"], cuda["memory_bus_bits"], cuda["warp_size"]) == (
        1980000,
        3201000,
        6016,
        32,
    )
    assert "gcn_arch" not in cuda
    rocm = device_info(_torch(name="", gcnArchName="gfx942:sramecc+:xnack-", warp_size=64, memory_clock_rate=0))
    assert rocm["gcn_arch"] == "gfx942" and "memory_clock_khz" not in rocm, "a 0 is the driver not saying"
    older = device_info(_torch())
    assert not {"gcn_arch", "clock_khz", "warp_size"} & set(older), "a torch without the attributes"
