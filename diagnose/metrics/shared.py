"""The shared views of one Trace (`Metrics`): each computed once, on first use, and read by every rule."""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable

import pandas as pd

from diagnose.base import devices

from diagnose.base import measured_peaks
from diagnose.metrics import work
from diagnose.metrics.accounting import Accounting, silent_outside_syncs, step_accounting
from diagnose.metrics.comm import Communication, communication, rounds_per_step
from diagnose.metrics.compiled import CompiledSteps, compiled_steps
from diagnose.metrics.graph_capture import GraphCapture, graph_capture
from diagnose.metrics.host import SilentSplit, merge_intervals, silent_split, sync_calls
from diagnose.metrics.pyframes import PySamples, python_samples
from diagnose.metrics.launches import join_launches
from diagnose.metrics.optimizer import optimizer_steps
from diagnose.metrics.overhead import OverheadEstimate, estimate_unprofiled
from diagnose.metrics.budget import StepBudget, at_step, on_estimate, step_budget
from diagnose.metrics.steps import Steps, find_steps
from diagnose.metrics.timeline import DEFAULTS as TIMELINE_DEFAULTS
from diagnose.metrics.timeline import Timeline, build_timeline
from diagnose.trace.model import Trace

# the cached views made from the step budget: made anew for another step (Metrics.at_step)
_ON_THE_BUDGET = ("budget", "accounting")


class Metrics:
    """Lazily computed, cached metrics of one trace; the trace is only read.

    Two inputs come from the floors above, passed in by the caller (the rules' Context):
    `ncu_join(kernels_in_steps, sm_count)` joins Nsight Compute measurements of the same workload
    to the step kernels (diagnose/ncu/join.py bound to a table; None without measurements), and
    `find_attention_calls(ops)` finds the trace's SDPA calls (diagnose/memory/patterns.py)."""

    def __init__(
        self,
        trace: Trace,
        timeline_params: dict | None = None,
        ncu_join: Callable[[pd.DataFrame, int | None], Any] | None = None,
        find_attention_calls: Callable[[pd.DataFrame], list] | None = None,
    ):
        self.trace = trace
        self.timeline_params = timeline_params or {}
        self.ncu_join = ncu_join
        self.find_attention_calls = find_attention_calls
        self.warnings: list[str] = []  # what computing the metrics found wrong with their inputs
        self._silent_splits: dict[bytes, SilentSplit] = {}
        self._shared: dict[str, Any] = {}

    @functools.cached_property
    def steps(self) -> Steps:
        """The measured step windows."""
        return find_steps(self.trace)

    @functools.cached_property
    def graph_capture(self) -> GraphCapture | None:
        """The CUDA/HIP graph captures inside the measured steps (None when there are none)."""
        return graph_capture(self.trace, self.steps)

    @functools.cached_property
    def timeline(self) -> Timeline:
        """GPU busy time and classified gaps over the measured steps."""
        return build_timeline(self.trace, self.steps, self.timeline_params)

    @functools.cached_property
    def budget(self) -> StepBudget:
        """Per-step time split, on the unprofiled time base: measured when the capture timed steps
        without the profiler, else estimated from the trace (budget.on_estimate)."""
        budget = step_budget(self.steps, self.timeline, self.trace.capture)
        if budget.unprofiled_step_us:
            return budget
        return on_estimate(budget, self.overhead)

    @functools.cached_property
    def overhead(self) -> OverheadEstimate | None:
        """The unprofiled step the trace alone implies, the profiler's own host time taken out
        (metrics/overhead.py); None without steps on a GPU or with timeline.profiler_overhead 0."""
        share = float({**TIMELINE_DEFAULTS, **self.timeline_params}["profiler_overhead"])
        return estimate_unprofiled(self.trace, self.steps.windows, share)

    @functools.cached_property
    def comm(self) -> Communication:
        """GPU time of the measured steps split into compute, exposed communication and copies,
        with the communication hidden under compute (metrics/comm.py)."""
        tl = self.timeline
        return communication(tl.ops, self.steps.start, self.steps.end, len(self.steps.windows))

    @functools.cached_property
    def comm_rounds(self) -> tuple[float, float]:
        """(data-parallel forward passes, rounds of collectives after them) per step (metrics/comm.py)."""
        return rounds_per_step(self.trace, self.steps.windows)

    @functools.cached_property
    def python_samples(self) -> PySamples | None:
        """The capture's Python stack samples on the trace's time axis (metrics/pyframes.py), or None."""
        samples, problem = python_samples(self.trace)
        if problem:
            self.warnings.append(problem)
        return samples

    @functools.cached_property
    def silent(self) -> SilentSplit:
        """Where the silent host stretches went: setup inside launching ops, work ops name, or nothing
        recorded (metrics/host.py)."""
        return self.split_silent(self.timeline.silent)

    def split_silent(self, silent: pd.DataFrame) -> SilentSplit:
        """silent_split of these silent stretches, built once per distinct union of them: the
        stretches outside syncs are all of them when no gap opened in a sync."""
        stretches = merge_intervals(silent["start"].to_numpy(float), silent["end"].to_numpy(float))
        key = stretches.tobytes()
        if key not in self._silent_splits:
            frame = pd.DataFrame({"start": stretches[:, 0], "end": stretches[:, 1]})
            self._silent_splits[key] = silent_split(self.trace, frame)
        return self._silent_splits[key]

    @functools.cached_property
    def accounting(self) -> Accounting:
        """The analysed step split into named buckets that sum to the step (metrics/accounting.py)."""
        split = self.split_silent(silent_outside_syncs(self.timeline))
        return step_accounting(self.timeline, self.budget, self.comm, self.trace, self.python_samples, split)

    @functools.cached_property
    def attention_calls(self) -> list:
        """Every scaled_dot_product_attention call of the trace, with its shapes and backend
        (`find_attention_calls`, diagnose/memory/patterns.py); the memory rules and the peak breakdown
        share them."""
        if self.find_attention_calls is None:
            raise ValueError("these Metrics were made without find_attention_calls (the rules' Context passes it)")
        return self.find_attention_calls(self.trace.ops)

    def shared(self, key: str, build: Callable[[], Any]) -> Any:
        """The view named `key`, made by `build()` on first use and the same object after: for views
        that also read what Metrics does not hold (the allocator record the rules' Context reads).
        Views are shared: whoever reads one must not change it. Nor may one depend on the step budget: the
        metrics on another step (`at_step`) share them."""
        if key not in self._shared:
            self._shared[key] = build()
        return self._shared[key]

    @functools.cached_property
    def compiled(self) -> CompiledSteps:
        """Graphs entered, graph calls and host time between them in each measured step (metrics/compiled.py)."""
        return compiled_steps(self.trace, self.steps.windows)

    @functools.cached_property
    def sync_calls(self) -> pd.DataFrame:
        """Synchronising runtime calls made inside the steps' CPU ranges, each with the op that made it
        (metrics/host.py)."""
        return sync_calls(self.trace, self.steps.windows)

    @functools.cached_property
    def optimizer_steps(self) -> list:
        """Every optimizer class stepped inside the measured steps, most launches first (metrics/optimizer.py)."""
        return optimizer_steps(self)

    @functools.cached_property
    def launches(self) -> pd.DataFrame:
        """Every GPU op joined to its launch call and CPU op."""
        return join_launches(self.trace)

    @functools.cached_property
    def step_kernels(self) -> pd.DataFrame:
        """GPU ops of the main device inside the measured steps, with launch information."""
        tl = self.timeline
        lo, hi = self.steps.start, self.steps.end
        launches = self.launches
        if tl.device is None:
            return launches.iloc[0:0]
        return launches[(launches["device"] == tl.device) & (launches["end"] > lo) & (launches["ts"] < hi)]

    @functools.cached_property
    def device_spec(self) -> devices.DeviceSpec | None:
        """Peak and achievable ceilings of the trace's GPU: the datasheet's (diagnose/base/devices.py), with the
        achievable figures a capture's `diagnose probe` measured on the GPU itself; None when neither exists."""
        device = self.trace.device
        return measured_peaks.with_measured(devices.lookup(device), (self.trace.capture or {}).get("gpu_probe"), device)

    @functools.cached_property
    def kernels_in_steps(self) -> pd.DataFrame:
        """Kernels of the main device that belong to a measured step, with its index in `step`."""
        steps = self.steps
        return work.step_kernels(self.launches, steps.windows, self.timeline.device, steps.annotated)

    @functools.cached_property
    def ncu(self):
        """Nsight Compute rows joined to the step kernels (`ncu_join`, diagnose/ncu/join.py), or None without any."""
        if self.ncu_join is None:
            return None
        return self.ncu_join(self.kernels_in_steps, self.trace.device.get("sm_count"))

    @functools.cached_property
    def op_work(self) -> pd.DataFrame:
        """One row per op instance launched inside the measured steps: its kernels' time, kind,
        tensor-core use, FLOPs/bytes estimated from the recorded shapes (metrics/work.py), and
        Nsight Compute's measurements where they were attached."""
        measured = self.ncu.measured if self.ncu is not None else None
        return work.op_instances(self.kernels_in_steps, measured)

    def at_step(self, step_us: float) -> "Metrics":
        """These metrics with the estimated step taken as `step_us` (one end of `estimated_step_range`): the budget
        and what is built on it (the accounting) are made anew on that step, everything else is shared. For a step
        that was measured, or a budget with no host-side idle to rescale, the step stays what it was."""
        other = copy.copy(self)
        other.__dict__ = {k: v for k, v in self.__dict__.items() if k not in _ON_THE_BUDGET}
        other.warnings = []
        other.__dict__["budget"] = at_step(step_budget(self.steps, self.timeline, self.trace.capture), step_us)
        return other

    def per_step(self, total: float) -> float:
        """A total over all measured steps, per step."""
        return total / max(len(self.steps.windows), 1)

    def _python_tracing_us(self) -> float | None:
        """What with_stack's Python tracing added to a step, by the estimate (never more than it took off
        the step); None without an estimate or without Python function events."""
        b, o = self.budget, self.overhead
        if b.estimated_step_us is None or o is None or o.events.get("python_function", 0.0) < 1:
            return None
        return round(min(o.python_tracing_us, max(0.0, b.profiled_step_us - b.step_us)), 1)

    def estimated_step_range(self) -> list[float] | None:
        """[fastest, slowest] replayed step where the steps the estimate rests on lie far apart
        (OverheadEstimate.far_apart), else None: a few steps that far apart may not hold the typical one."""
        b, o = self.budget, self.overhead
        if b.estimated_step_us is None or o is None or not o.far_apart:
            return None
        return [round(o.fastest_us, 1), round(o.slowest_us, 1)]

    def summary(self) -> dict:
        """The headline numbers of the report."""
        b, tl = self.budget, self.timeline
        steps = self.steps
        return {
            "steps_analysed": len(steps.windows),
            "steps_found_by": steps.how,
            "steps_method": steps.method,
            "step_unit_known": steps.unit_known,
            "cold_start_us": steps.cold_start_us,
            "unrecorded_launches": self.trace.unrecorded_launches,
            "graph_capture": (
                self.graph_capture.text() if self.graph_capture is not None and self.graph_capture.dominates else None
            ),
            "step_time_us": round(b.step_us, 3),
            "profiled_step_time_us": round(b.profiled_step_us, 3),
            # a measured step longer than the profiled one is not used (budget.step_budget): the step is profiled
            "unprofiled_step_time_us": None if b.synced_step_us else b.unprofiled_step_us,
            "estimated_unprofiled_step_time_us": (
                round(b.estimated_step_us, 3) if b.estimated_step_us is not None else None
            ),
            "profiler_share_of_host_time": round(1 - b.host_scale, 4) if b.estimated_step_us is not None else None,
            "python_tracing_us_per_step": self._python_tracing_us(),
            "estimated_step_range_us": self.estimated_step_range(),
            "gpu_busy_fraction": round(min(1.0, b.busy_us / b.step_us), 4) if b.step_us else 0.0,
            "gpu_busy_fraction_profiled": round(tl.busy_fraction, 4),
            "gpu_busy_us_per_step": round(b.busy_us, 3),
            "gpu_ops_per_step": round(len(tl.ops) / max(len(steps.windows), 1), 1),
            "idle_us_per_step": {
                "host_launch": round(b.host_paced_us, 3),
                "host_other": round(b.host_silent_us, 3),
                "host_after_sync": round(b.host_after_sync_us, 3),
                "kernel_wait": round(b.kernel_wait_us, 3),
                "other_wait": round(b.other_wait_us, 3),
            },
            "host_wait_share": round(b.share(b.host_paced_us + b.host_silent_us), 4),
            "time_basis": b.basis,
            "accounting": self.accounting.to_dict(),
        }
