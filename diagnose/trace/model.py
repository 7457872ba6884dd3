"""The Trace: a kineto trace held as pandas frames, plus what the capture said about itself."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pandas as pd

from diagnose.trace.names import name_search
from diagnose.vocabulary.runtime import KERNEL_LAUNCH

# What diagnose's capture records beside name, SM count, memory and compute capability
# (diagnose/child/capture.py); kineto's deviceProperties hold the first two at most.
CAPTURED_PROPERTIES = ("gcn_arch", "warp_size", "clock_khz", "memory_clock_khz", "memory_bus_bits")


@dataclasses.dataclass
class Trace:
    """One rank's trace.

    Frames (times in µs from the first event):
      gpu              kernels, memcpys and memsets (`cat`), with launch geometry
      runtime          CUDA runtime/driver calls (launches, syncs, copies) on the host
      ops              CPU ops and user annotations (step ranges among them)
      gpu_annotations  user annotations as the GPU timeline shows them
      syncs            CUPTI synchronisation records (kineto `cuda_sync`)
      memory           allocator events (profile_memory=True)
      python           Python function events (with_stack=True)
    `session_end_us`: where the profiling session ended; a range recorded as ending later (a step left
    open when the profiler stopped) did not run to that end under the profiler.

    A Trace is read-only once loaded: metrics, Nsight Compute measurements and what the rules
    learn live beside it (diagnose.metrics.Metrics, engine.Context), never on it.
    """

    source: str
    gpu: pd.DataFrame
    runtime: pd.DataFrame
    ops: pd.DataFrame
    gpu_annotations: pd.DataFrame
    syncs: pd.DataFrame
    memory: pd.DataFrame
    device_properties: list = dataclasses.field(default_factory=list)
    distributed: dict | None = None
    capture: dict | None = None
    # the top-level `diagnose` field diagnose's capture writes into its traces (None in a trace from elsewhere,
    # and in diagnose's captures before 2026-12-06): its harness's profiler cost, whatever else the trace shows
    diagnose_mark: dict | None = None
    warnings: list = dataclasses.field(default_factory=list)
    t0_us: float = 0.0
    python: pd.DataFrame = dataclasses.field(
        default_factory=lambda: pd.DataFrame(columns=["name", "ts", "dur", "tid", "end"])
    )
    # the end of the profiling session (kineto's `Trace` span), µs from the first event; None when not recorded
    session_end_us: float | None = None
    # allocator events written the way an older kineto wrote them (Bytes, no totals): dropped, since no peak can be
    # read from them (trace/allocator.py); counted so that the memory rules can say why they did not run
    older_allocator_events: int = 0

    @functools.cached_property
    def cpu_ops(self) -> pd.DataFrame:
        """The ops of category cpu_op (no user annotations), computed once: several metrics start from them."""
        return self.ops[self.ops["cat"] == "cpu_op"]

    @property
    def kernels(self) -> pd.DataFrame:
        """GPU kernels only (no memcpy/memset)."""
        return self.gpu[self.gpu["cat"] == "kernel"]

    @property
    def has_gpu_activity(self) -> bool:
        """True when the trace recorded any kernel, copy or memset."""
        return len(self.gpu) > 0

    @property
    def unrecorded_launches(self) -> int:
        """Kernel launches the host made while the trace holds no GPU record at all (0 otherwise):
        the GPU side of the trace was lost (CUPTI buffers dropped, or CUDA activity not recorded)."""
        if self.has_gpu_activity or not len(self.runtime):
            return 0
        return int(name_search(self.runtime["name"], KERNEL_LAUNCH).sum())

    @property
    def main_device(self) -> int | None:
        """The GPU index with the most GPU time (a rank's trace normally has one). Computed once per `gpu`
        frame (the device description, the timeline, transfers and comm all ask)."""
        known = self.__dict__.get("_main_device")
        if known is not None and known[0] is self.gpu:
            return known[1]
        device = int(self.gpu.groupby("device")["dur"].sum().idxmax()) if len(self.gpu) else None
        self.__dict__["_main_device"] = (self.gpu, device)
        return device

    @property
    def launch_calls(self) -> pd.DataFrame:
        """The runtime calls that carry a correlation id, the first call of each id (the one that launched
        the GPU records of that id), in trace order with their rows' index. Made once per `runtime` frame:
        the launch join and the timeline both read it."""
        known = self.__dict__.get("_launch_calls")
        if known is not None and known[0] is self.runtime:
            return known[1]
        calls = self.runtime.dropna(subset=["correlation"]).drop_duplicates("correlation")
        self.__dict__["_launch_calls"] = (self.runtime, calls)
        return calls

    @property
    def device(self) -> dict:
        """What the trace ran on: from the capture's own record, else the trace's deviceProperties.

        name, sm_count, memory_bytes and compute_capability, and where recorded the properties the
        peak estimate uses (diagnose/base/devices.py): gcn_arch (ROCm), warp_size, clock_khz (SM boost
        clock), memory_clock_khz and memory_bus_bits. kineto writes warpSize but no clocks; a
        capture by diagnose records all of them that torch reports."""
        info: dict[str, Any] = {
            "name": None,
            "sm_count": None,
            "memory_bytes": None,
            "compute_capability": None,
            "gcn_arch": None,
            "warp_size": None,
            "clock_khz": None,
            "memory_clock_khz": None,
            "memory_bus_bits": None,
            "torch": None,
            "cuda": None,
            "source": "unknown",
        }
        props = self._device_properties()
        if props:
            info.update(
                name=_typed(props.get("name"), str),
                sm_count=_count(props.get("numSms")),
                memory_bytes=_count(props.get("totalGlobalMem")),
                gcn_arch=_typed(props.get("gcnArchName"), str),
                warp_size=_count(props.get("warpSize")),
                clock_khz=_count(props.get("clockRate")),
                memory_clock_khz=_count(props.get("memoryClockRate")),
                memory_bus_bits=_count(props.get("memoryBusWidth")),
                source="trace",
            )
            major, minor = _count(props.get("computeMajor"), 0), _count(props.get("computeMinor", 0), 0)
            if major is not None:
                info["compute_capability"] = f"{major}.{minor or 0}"
        captured = (self.capture or {}).get("device") or {}
        if captured.get("sm_count") or (captured and not props):
            info.update(
                name=captured.get("name"),
                sm_count=captured.get("sm_count"),
                memory_bytes=captured.get("total_memory_bytes"),
                compute_capability=captured.get("compute_capability"),
                **{k: info[k] if captured.get(k) is None else captured[k] for k in CAPTURED_PROPERTIES},
                source="capture",
            )
        info["torch"] = captured.get("torch")
        info["cuda"] = captured.get("cuda")
        if info["name"] is None and not self.has_gpu_activity:
            info["name"] = "no GPU in trace"
        return info

    def _device_properties(self) -> dict | None:
        props = [p for p in self.device_properties if isinstance(p, dict)]
        if not props:
            return None
        wanted = self.main_device
        for p in props:
            if p.get("id") == wanted:
                return p
        return props[0]


def _typed(value: object, kind: type | tuple[type, ...]) -> Any:
    """`value` when it is a `kind`, else None: a foreign trace's fields can hold anything."""
    return value if isinstance(value, kind) else None


def _count(value: object, least: int = 1) -> int | None:
    """A positive (or at least `least`) integer field of deviceProperties, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        return None
    return value
