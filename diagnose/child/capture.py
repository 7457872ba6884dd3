"""The child process: runs the workload under torch.profiler and writes the capture folder.

Run as `python -m diagnose.child.capture SPEC.json`. This is the only module of diagnose that
imports torch. Whatever happens to the workload (exception, OOM, sys.exit), the trace recorded
so far and a meta.json saying what happened are written before the process ends.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import importlib.util
import json
import os
import platform
import runpy
import sys
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

from diagnose.child.arrivals import ArrivalRecorder
from diagnose.child.compile_log import CompileLog
from diagnose.child.memory import MEMORY_FILE, MemoryRecorder
from diagnose.capture.meta import MetaRecord
from diagnose.child.model_census import census
from diagnose.child.sampler import StackSampler
from diagnose.capture.spec import CAPTURE_SCHEMA, CaptureSpec
from diagnose.child.steps import EnoughSteps, StepTracker
from diagnose.base.safe_files import fresh_path, write_new
from diagnose.base.step_timing import timing_summary
from diagnose.vocabulary.markers import CAPTURE_MARK, nvtx_label, step_label, warmup_label

TRACE_FILE = "trace.json.gz"
TRACE_CUT_SHORT = "the profiler wrote the trace cut short (it reports no error: a full disk or a file-size limit)"


def whole_json_gzip(path: Path) -> bool:
    """True when `path` is gzip that inflates, to its end, to text ending in `}` (a whole JSON object),
    read a block at a time."""
    last = b""
    try:
        with gzip.open(path, "rb") as stream:
            while block := stream.read(1 << 20):
                last = block.rstrip() or last
    except (OSError, EOFError, zlib.error):
        return False
    return last.endswith(b"}")


class Progress:
    """Writes JSON lines describing capture phases to the fd the parent handed over."""

    def __init__(self):
        fd = os.environ.get("DIAGNOSE_PROGRESS_FD")
        self._stream = os.fdopen(int(fd), "w", buffering=1) if fd else None

    def __call__(self, phase: str, done: int = 0, total: int = 0, **extra) -> None:
        """Report that `phase` has reached `done` of `total`."""
        if self._stream is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._stream.write(json.dumps({"phase": phase, "done": done, "total": total, **extra}) + "\n")


PEAK_PROPERTIES = (
    ("gcn_arch", "gcnArchName"),
    ("warp_size", "warp_size"),
    ("clock_khz", "clock_rate"),
    ("memory_clock_khz", "memory_clock_rate"),
    ("memory_bus_bits", "memory_bus_width"),
)


def device_info(torch) -> dict:
    """What ran the capture: GPU name, SM count, memory, torch/CUDA/Python versions."""
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            name=props.name,
            sm_count=props.multi_processor_count,
            total_memory_bytes=props.total_memory,
            compute_capability=f"{props.major}.{props.minor}",
        )
        # What the peak estimate of a GPU no name matches uses (diagnose/base/devices.py); older
        # torch builds lack some, and a 0 means the driver did not say.
        for key, attr in PEAK_PROPERTIES:
            value = getattr(props, attr, None)
            if isinstance(value, str):  # "gfx942:sramecc+:xnack-" on ROCm; not an architecture on CUDA
                if value.startswith("gfx"):
                    info[key] = value.split(":")[0]
            elif isinstance(value, int) and value > 0:
                info[key] = value
    else:
        info["name"] = "CPU only (no CUDA device visible)"
    return info


@contextlib.contextmanager
def without_lazy_inductor(torch, profiler):
    """Start `profiler` without importing torch._inductor when the workload has not imported it.

    torch.profiler's start looks up `torch._inductor` only to read whether inductor's CUDA graphs are
    on, and that lookup imports inductor and dynamo: 2-3 s of every capture on a small CPU. A process
    that never imported inductor has its settings at their defaults, the environment's; that is what
    the profiler is told instead. Once inductor is imported, the profiler reads it itself.
    """
    if "torch._inductor" in sys.modules or not callable(torch.__dict__.get("__getattr__")):
        yield
        return
    lazy = torch.__dict__["__getattr__"]

    def lookup(name):
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name)

    profiler.has_cudagraphs = os.environ.get("TORCHINDUCTOR_CUDAGRAPHS") == "1"
    torch.__getattr__ = lookup
    try:
        yield
    finally:
        torch.__getattr__ = lazy


def load_function(path: str, name: str):
    """Import the file at `path` as a module (its folder on sys.path) and return `name` from it."""
    file = Path(path).resolve()
    sys.path.insert(0, str(file.parent))
    module_spec = importlib.util.spec_from_file_location(file.stem, file)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[file.stem] = module
    module_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise LookupError(f"{path} has no attribute {name!r}")
    return getattr(module, name)


class CaptureSession:
    """One capture: owns the profiler, the meta.json contents and the output folder."""

    def __init__(self, spec: CaptureSpec):
        self.spec = spec
        self.out = Path(spec.out_dir)
        self.progress = Progress()
        # torch once run() has imported it, and its profiler while it runs (diagnose does not type torch's API)
        self.torch: Any = None
        self.profiler: Any = None
        self.memory: MemoryRecorder | None = None
        self.tracker: StepTracker | None = None
        self.sampler: StackSampler | None = None
        self.compile_log: CompileLog | None = None  # torch.compile's own account (compile.json), when it ran
        self.arrivals: ArrivalRecorder | None = None  # while the timed steps of several ranks run
        self.meta: MetaRecord = {
            "schema": CAPTURE_SCHEMA,
            "target": spec.target,
            "mode": spec.mode,
            "params": spec.params,
            "argv": spec.argv,
            "status": "running",
            "error": None,
            "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "steps": {"warmup": spec.warmup, "profiled": 0, "how": None},
            "timing": None,
            "files": {"trace": None, "log": "workload.log"},
        }

    # -- bookkeeping -------------------------------------------------------------------------
    def write_meta(self) -> None:
        """Write meta.json atomically, so the parent never reads half a file."""
        write_new(self.out / "meta.json", json.dumps(self.meta, indent=2, default=str).encode())

    def sync(self) -> None:
        """Wait for the GPU (no-op without CUDA)."""
        if self.torch.cuda.is_available():
            self.torch.cuda.synchronize()

    @contextlib.contextmanager
    def step_range(self, label: str):
        """A profiler range and an NVTX range (for Nsight Compute filtering) around one step.

        The NVTX name uses ':' for '/' ("diagnose:step 0"), since Nsight Compute's
        --nvtx-include reads '/' as its own range separator.
        """
        torch = self.torch
        nvtx = torch.cuda.is_available()
        if nvtx:
            with contextlib.suppress(Exception):
                torch.cuda.nvtx.range_push(nvtx_label(label))
        try:
            with torch.profiler.record_function(label):
                yield
        finally:
            if nvtx:
                with contextlib.suppress(Exception):
                    torch.cuda.nvtx.range_pop()

    def start_profiler(self) -> None:
        """Start torch.profiler with CPU and (when present) CUDA activities."""
        torch = self.torch
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities,
            record_shapes=self.spec.record_shapes,
            profile_memory=self.spec.profile_memory,
            with_stack=False,
        )
        # a mark in the trace's top level that survives any editing of its events: the analysis charges a trace
        # that carries it the profiler costs of diagnose's own harness (metrics/overhead.py), not a plain loop's
        history = self.memory is not None and self.memory.enabled
        # "warm-up": the allocator's history runs in the profiled warm-up steps only (memory.py); a mark without
        # the key comes from a capture that kept it on through the measured steps (before 2026-12-07)
        mark = {"capture": "diagnose", "allocator_history": history, "stack_sampler": True}
        if history:
            mark["allocator_history_steps"] = "warm-up"
        with contextlib.suppress(Exception):  # a torch without kineto metadata: the capture goes on unmarked
            self.profiler.preset_metadata_json(CAPTURE_MARK, json.dumps(mark))
        if self.memory is not None:
            self.memory.start_history()
        with without_lazy_inductor(torch, self.profiler):
            self.profiler.start()
        self.compile_phase("profile")
        self.sampler = StackSampler()  # the main thread's Python stack, only while profiling
        self.sampler.start(mark=torch.profiler.record_function)

    def measured_steps_begin(self) -> None:
        """The profiled warm-up is over: stop what only the warm-up records (the allocator's history)."""
        if self.memory is not None:
            self.memory.stop_history()

    def stop_profiler(self) -> None:
        """Stop the profiler (if running) and write the trace; safe to call twice."""
        prof, self.profiler = self.profiler, None
        if prof is None:
            return
        self.progress("export")
        self.finish_sampler()
        with contextlib.suppress(Exception):
            self.sync()
        try:
            prof.stop()
            self.compile_phase("after-profile")
            fresh = fresh_path(self.out / TRACE_FILE)
            prof.export_chrome_trace(str(fresh))
            if not whole_json_gzip(fresh):  # kineto says nothing when its write fails (a full disk, ulimit -f)
                with contextlib.suppress(OSError):
                    os.unlink(fresh)
                self.meta["trace_cut_short"] = True
                raise OSError(TRACE_CUT_SHORT)
            os.replace(fresh, self.out / TRACE_FILE)
            self.meta["files"]["trace"] = TRACE_FILE
        except Exception as exc:  # a broken export must not hide the workload's own outcome
            self.meta.setdefault("warnings", []).append(f"trace export failed: {exc}")
        self.finish_memory()

    def finish_sampler(self) -> None:
        """Stop the stack sampler and write its samples (pysamples.json.gz) into the folder."""
        sampler, self.sampler = self.sampler, None
        if sampler is None:
            return
        sampler.stop()
        try:
            self.meta["files"]["pysamples"] = sampler.write(self.out)
        except Exception as exc:
            self.meta.setdefault("warnings", []).append(f"writing the Python stack samples failed: {exc}")

    def finish_memory(self) -> None:
        """Write memory.json.gz from the allocator (once; nothing without CUDA)."""
        if self.memory is None:
            return
        try:
            stats = self.memory.finish()
        except Exception as exc:
            self.meta.setdefault("warnings", []).append(f"memory snapshot failed: {exc}")
            return
        if stats is not None:
            self.meta["files"]["memory"] = MEMORY_FILE

    def record_timing(self, per_step_s: list[float], source: str) -> None:
        """Store step times measured without the profiler."""
        self.meta["timing"] = timing_summary(source, [t * 1e6 for t in per_step_s])

    # -- arrivals in the timed steps (arrivals.py) -------------------------------------------------
    def start_arrivals(self) -> None:
        """Align the ranks' clocks and watch their collectives, when a process group of 2+ is up."""
        if self.spec.timed_steps < 1:
            return
        try:
            self.arrivals = ArrivalRecorder.start(self.torch)
        except Exception as exc:  # the timing goes on without arrivals
            self.arrivals = None
            self.meta.setdefault("warnings", []).append(f"recording arrivals failed: {exc}")

    def arrival_mark(self, edge: str) -> None:
        """A timed step begins or ends."""
        if self.arrivals is not None:
            self.arrivals.step_begin() if edge == "begin" else self.arrivals.step_end()

    def finish_arrivals(self) -> None:
        """Check the clocks again and write arrivals.json (once)."""
        recorder, self.arrivals = self.arrivals, None
        if recorder is None:
            return
        try:
            self.meta["files"]["arrivals"] = recorder.finish(self.out)
        except Exception as exc:
            self.meta.setdefault("warnings", []).append(f"writing arrivals.json failed: {exc}")

    def drop_arrivals(self) -> None:
        """Stop watching collectives without writing arrivals.json (the timing did not end with every rank)."""
        recorder, self.arrivals = self.arrivals, None
        if recorder is not None:
            recorder.stop()

    # -- modes -------------------------------------------------------------------------------
    def run_function(self) -> None:
        """Function mode: warm up, time without the profiler, then profile a few steps."""
        spec = self.spec
        self.progress("build")
        if spec.function is None:
            raise ValueError("function mode needs the factory's name (file.py:NAME)")
        factory = load_function(spec.path, spec.function)
        step = factory(**spec.params)
        if not callable(step):
            raise TypeError(
                f"{spec.function}(**params) must return a zero-argument callable, got {type(step).__name__}"
            )
        self.meta["steps"]["how"] = f"each call of the callable returned by {spec.function}()"
        self.compile_phase("warmup")
        for i in range(spec.warmup):
            self.progress("warmup", i, spec.warmup)
            step()
        self.sync()
        times = []
        self.compile_phase("timing")
        self.start_arrivals()
        for i in range(spec.timed_steps):
            self.progress("timing", i, spec.timed_steps)
            self.arrival_mark("begin")
            t0 = time.perf_counter()
            step()
            self.sync()
            times.append(time.perf_counter() - t0)
            self.arrival_mark("end")
        self.finish_arrivals()
        self.record_timing(times, f"{spec.timed_steps} steps without the profiler, synchronised after each step")
        self.start_profiler()
        with self.step_range(warmup_label(0)):  # absorbs the profiler's own start-up cost
            step()
        self.measured_steps_begin()
        for i in range(spec.steps):
            self.progress("profile", i, spec.steps)
            with self.step_range(step_label(i)):
                step()
            self.meta["steps"]["profiled"] = i + 1
        self.sync()
        self.stop_profiler()
        self.take_census()  # while the step (and the models it holds) is alive

    def take_census(self) -> None:
        """Record the workload's libraries and models (diagnose/child/model_census.py) in meta.json."""
        self.meta["workload"] = census(self.torch)

    def run_script(self) -> None:
        """Script (or module) mode: run it as __main__ with step boundaries found by hooks."""
        spec = self.spec
        tracker = self.tracker = StepTracker(self)
        tracker.install()
        module = spec.mode == "module"
        sys.argv = [spec.path, *spec.argv]
        sys.path.insert(0, os.getcwd() if module else str(Path(spec.path).resolve().parent))
        self.start_profiler()
        self.progress("run", 0, 0)
        try:
            if module:  # as `python -m MODULE`
                runpy.run_module(spec.path, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(spec.path, run_name="__main__")
        finally:
            tracker.finish()

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> int:
        """Run the capture and return the child's exit status (0 ok, 3 workload failed)."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.write_meta()
        try:
            import torch
        except ImportError:
            self.fail("failed", "ImportError", "torch is not installed in the Python that runs the workload")
            return 3
        self.torch = torch
        self.meta["device"] = device_info(torch)
        self.memory = MemoryRecorder(torch, self.out)
        self.memory.watch()
        self.start_compile_log()
        self.write_meta()
        self.guard_os_exit()
        status = 0
        try:
            self.run_function() if self.spec.mode == "function" else self.run_script()
            self.meta["status"] = "ok"
        except EnoughSteps:
            self.meta["status"] = "ok"
        except SystemExit as exc:
            if exc.code in (None, 0) and self.spec.mode != "function":
                self.meta["status"] = "ok"  # a script that ends itself cleanly has finished
            else:
                where = "the step function (or its builder)" if self.spec.mode == "function" else "the script"
                self.fail("failed", "SystemExit", f"{where} called sys.exit({exc.code!r}) {self.progress_note()}")
                status = 3
        except BaseException as exc:  # the workload's failure is data, not a crash of diagnose
            kind = "oom" if is_out_of_memory(torch, exc) else "failed"
            self.fail(
                kind,
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                traceback.format_exc(limit=-8),
            )
            status = 3
        finally:
            self.stop_profiler()
            self.finish_memory()
            self.finish_compile_log()
            self.meta["memory"] = memory_summary(torch)
            if "workload" not in self.meta:  # a script that ended by itself: its models may be gone
                self.take_census()
            self.write_meta()
        return status

    # -- torch.compile's own account (compile_log.py) ------------------------------------------
    def start_compile_log(self) -> None:
        """Listen to dynamo's and inductor's graph-break, recompile and cudagraph logs."""
        try:
            self.compile_log = CompileLog()
            self.compile_log.install()
        except Exception as exc:
            self.compile_log = None
            self.meta.setdefault("warnings", []).append(f"recording torch.compile's logs failed: {exc}")

    def compile_phase(self, phase: str) -> None:
        """Book what dynamo does from now on to `phase` (warmup, timing, profile)."""
        if self.compile_log is not None:
            with contextlib.suppress(Exception):
                self.compile_log.set_phase(phase)

    def finish_compile_log(self) -> None:
        """Write compile.json when the workload compiled anything (once; never fails the capture)."""
        log, self.compile_log = self.compile_log, None
        if log is None:
            return
        try:
            name = log.write(self.out)
        except Exception as exc:
            self.meta.setdefault("warnings", []).append(f"writing compile.json failed: {exc}")
            return
        if name:
            self.meta["files"]["compile"] = name

    def guard_os_exit(self) -> None:
        """Make `os._exit` in the workload's own process finish the record first.

        os._exit skips every `finally`, so a script ending that way would lose its trace and be
        taken for a crash. Processes forked from the workload keep the plain behaviour.
        """
        real_exit, pid = os._exit, os.getpid()

        def exit_now(code=0):
            if os.getpid() == pid:
                with contextlib.suppress(BaseException):
                    self.ended_by_os_exit(code)
            real_exit(code)

        os._exit = exit_now

    def ended_by_os_exit(self, code: int) -> None:
        """The workload called os._exit(code): keep what was captured and say how it ended."""
        if self.tracker is not None:
            self.tracker.finish()
        if code == 0 and self.spec.mode != "function" and self.steps_measured():
            self.meta["status"] = "ok"
            self.meta.setdefault("warnings", []).append(
                "the workload ended its own process with os._exit(0) after its profiled steps: what was captured "
                "until then is kept"
            )
        else:
            self.fail(
                "failed", "os._exit", f"the workload ended its own process with os._exit({code}) {self.progress_note()}"
            )
        self.stop_profiler()
        self.meta["memory"] = memory_summary(self.torch)
        self.write_meta()

    def steps_measured(self) -> bool:
        """True once every profiled step that was asked for has been recorded."""
        return self.meta["steps"].get("profiled", 0) >= self.spec.steps

    def progress_note(self) -> str:
        """How far the capture got, for a message about an early end: "after 2 of 5 profiled steps"."""
        done = self.meta["steps"].get("profiled", 0)
        if self.steps_measured():
            return "after its profiled steps"
        return f"after {done} of {self.spec.steps} profiled steps" if done else "before any step was profiled"

    def fail(self, kind: str, exc_type: str, message: str, tb: str = "") -> None:
        """Record a workload failure in meta.json."""
        self.meta["status"] = kind
        self.meta["error"] = {"type": exc_type, "message": message[:2000], "traceback": tb[-4000:]}


def is_out_of_memory(torch, exc: BaseException) -> bool:
    """True for CUDA (or host) out-of-memory errors."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, (MemoryError,) + ((oom_type,) if oom_type else ())) or "out of memory" in str(exc).lower()


def memory_summary(torch) -> dict[str, int] | None:
    """Peak allocator figures of device 0, when CUDA is present."""
    if torch is None or not torch.cuda.is_available():
        return None
    try:
        stats = torch.cuda.memory_stats()
        return {
            "max_allocated_bytes": torch.cuda.max_memory_allocated(),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(),
            "num_alloc_retries": stats.get("num_alloc_retries", 0),
            "num_ooms": stats.get("num_ooms", 0),
        }
    except Exception:
        return None


def main() -> int:
    """Entry point of the child process."""
    spec = CaptureSpec.from_json(Path(sys.argv[1]).read_text())
    # under torchrun (--nproc-per-node) each rank writes its own rank-K/ capture folder
    if os.environ.get("DIAGNOSE_RANK_FOLDERS") and os.environ.get("RANK", "").isdigit():
        spec.out_dir = str(Path(spec.out_dir) / f"rank-{int(os.environ['RANK'])}")
        Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    return CaptureSession(spec).run()


if __name__ == "__main__":
    sys.exit(main())
