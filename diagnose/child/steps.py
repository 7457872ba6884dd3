"""Finding steps in an arbitrary script, so warm-up can be told from steady state.

A step boundary is each `optimizer.step()` when the script has an optimizer (training), and
otherwise the start of each outermost `nn.Module` call (inference: one forward pass, one decode
token). The first `optimizer.step()` switches from the second definition to the first.
"""

from __future__ import annotations

import contextlib
import time

from diagnose.vocabulary.markers import step_label, warmup_label


class EnoughSteps(BaseException):
    """Raised from a hook once enough steps were profiled and timed; stops the user's script.

    A BaseException, so that a script's own `except Exception` does not swallow it.
    """


class StepTracker:
    """Installs global hooks, labels steps and drives the profiler and the unprofiled timing."""

    def __init__(self, session):
        self.session = session
        self.spec = session.spec
        self.torch = session.torch
        self.mode = "module"
        self.boundaries = 0
        self.depth = 0
        self.annotation = None
        self.timing_marks: list[float] = []
        self.handles = []

    def install(self) -> None:
        """Register the optimizer and module hooks."""
        torch = self.torch
        module = torch.nn.modules.module
        self.handles.append(module.register_module_forward_pre_hook(self._pre_forward))
        try:
            self.handles.append(module.register_module_forward_hook(self._post_forward, always_call=True))
        except TypeError:  # torch < 2.1
            self.handles.append(module.register_module_forward_hook(self._post_forward))
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handles.append(register_optimizer_step_post_hook(self._optimizer_step))
        self.session.meta["steps"]["how"] = "none found: the whole run is analysed as one window"

    # -- hooks -------------------------------------------------------------------------------
    def _pre_forward(self, module, args):
        if self.depth == 0 and self.mode == "module":
            self.boundary()
        self.depth += 1

    def _post_forward(self, module, args, output):
        self.depth = max(0, self.depth - 1)

    def _optimizer_step(self, optimizer, args, kwargs):
        if self.mode == "module":
            self.mode = "optimizer"
            self.close_annotation()
            self.boundaries = 0
            self.timing_marks.clear()
        self.boundary()

    # -- steps -------------------------------------------------------------------------------
    def boundary(self) -> None:
        """One step ended and the next begins."""
        spec = self.spec
        self.close_annotation()
        self.session.meta["steps"]["how"] = (
            "each optimizer.step() call" if self.mode == "optimizer" else "each outermost nn.Module call"
        )
        n = self.boundaries
        self.boundaries += 1
        profiled_end = spec.warmup + spec.steps
        if n < spec.warmup:
            if n == 0:  # the profiler runs from the start; what dynamo compiles now is the warm-up's
                self.session.compile_phase("warmup")
            self.session.progress("warmup", n, spec.warmup)
            self.open_annotation(warmup_label(n))
        elif n < profiled_end:
            if n == spec.warmup:
                self.session.compile_phase("profile")
                self.session.measured_steps_begin()
            self.session.progress("profile", n - spec.warmup, spec.steps)
            self.session.meta["steps"]["profiled"] = n - spec.warmup
            self.open_annotation(step_label(n - spec.warmup))
        else:
            if n == profiled_end:
                self.session.meta["steps"]["profiled"] = spec.steps
                self.session.stop_profiler()
                self.session.compile_phase("timing")
                self.session.start_arrivals()
            self.session.sync()
            if self.timing_marks:
                self.session.arrival_mark("end")
            self.timing_marks.append(time.perf_counter())
            self.session.progress("timing", len(self.timing_marks) - 1, spec.timed_steps)
            if len(self.timing_marks) <= spec.timed_steps:
                self.session.arrival_mark("begin")
            if len(self.timing_marks) > spec.timed_steps:
                self.session.finish_arrivals()
                self.record_timing()
                self.session.meta["steps"]["stopped_early"] = True
                self.session.take_census()  # the script's models are alive only until EnoughSteps unwinds it
                raise EnoughSteps()

    def open_annotation(self, label: str) -> None:
        """Enter a profiler range that the next boundary closes."""
        self.annotation = self.session.step_range(label)
        self.annotation.__enter__()

    def close_annotation(self) -> None:
        """Leave the open step range, if any."""
        annotation, self.annotation = self.annotation, None
        if annotation is not None:
            with contextlib.suppress(Exception):
                annotation.__exit__(None, None, None)

    def record_timing(self) -> None:
        """Turn the boundary timestamps of the unprofiled steps into per-step times."""
        marks = self.timing_marks
        times = [b - a for a, b in zip(marks, marks[1:])]
        self.session.record_timing(
            times, f"{len(times)} steps after the profiled ones, without the profiler (synchronised at step boundaries)"
        )

    def finish(self) -> None:
        """The script ended (or was stopped): close ranges, remove hooks, keep what was timed."""
        self.close_annotation()
        self.session.drop_arrivals()  # the script ended by itself: the ranks may not meet again
        if self.session.meta.get("timing") is None and len(self.timing_marks) > 1:
            self.record_timing()
        for handle in self.handles:
            with contextlib.suppress(Exception):
                handle.remove()
