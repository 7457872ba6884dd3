"""A Python stack sampler for the profiled steps: which line of the user's code the host was on.

torch.profiler records ops and CUDA calls, not the Python that runs between them, so a batch
built in pure Python shows in the trace as silent host time that nothing names. While the
profiled steps run, a daemon thread reads the main thread's stack with `sys._current_frames()`
every `interval_s` and stores each distinct stack once (`pysamples.json.gz` in the capture
folder: interned frames and stacks, then one `[t_us, stack id]` row per sample).

**Clock.** Kineto's event timestamps are wall-clock µs: `ts = time.time_ns() / 1000 −
baseTimeNanoseconds / 1000` (checked with torch 2.13 on the CPU: a range entered right after
reading `time.time_ns()` carries that time plus the few µs it takes to enter it). The sampler
stamps samples with `time.time_ns()` and, when it starts, enters a profiler range named
`CLOCK_MARKER`, reading the clock just before and just after entering it: the analysis aligns
the samples to the trace through that range (its `ts` is the midpoint of the two readings, to
within half their distance, recorded as `clock.uncertainty_us`), so it needs nothing from the
trace file's header.

**Cost.** Each sample holds the GIL while it walks the stack (tens of µs for a deep stack), and
the thread only asks for the GIL every `interval_s`. It runs only while the profiler runs, never
during the unprofiled timing run, so the step time the estimates start from is untouched; the
time spent sampling is recorded (`cost.sampling_s`) so a capture states what it cost.
"""

from __future__ import annotations

import getpass
import gzip
import json
import os
import sys
import sysconfig
import tempfile
import threading
import time
from diagnose.base.safe_files import fresh_path
from pathlib import Path

SAMPLES_FILE = "pysamples.json.gz"
SCHEMA = "diagnose.pysamples/1"
CLOCK_MARKER = "diagnose/pysamples clock"
DEFAULT_INTERVAL_S = (
    0.005  # 1 ms cost +13 % on the H200 decode step (65.6 µs a sample) and busy Python yields the GIL only every 5 ms
)
MAX_SAMPLES = 2_000_000  # about 30 minutes at 1 kHz: a runaway capture stops sampling, not the workload


class StackSampler:
    """Samples one thread's Python stack on a background thread until stopped."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, thread_id: int | None = None):
        self.interval_s = interval_s
        ident = thread_id if thread_id is not None else threading.main_thread().ident
        if ident is None:
            raise RuntimeError("the thread to sample has not started")
        self.thread_id: int = ident
        self.frames: dict[tuple, int] = {}
        self.stacks: dict[tuple, int] = {}
        self.samples: list[tuple[int, int]] = []
        self.clock: dict = {}
        self.sampling_ns = 0
        self._known: dict = {}  # (code, last instruction) -> frame id
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, mark=None) -> None:
        """Start sampling; `mark(name)` returns a context manager (a profiler range) entered once to
        tie this clock to the trace's."""
        if mark is not None:
            self.clock = mark_clock(mark)
        self.clock.update(start_ns=time.time_ns(), start_perf_ns=time.perf_counter_ns())
        self._thread = threading.Thread(target=self._run, name="diagnose-stack-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling and wait for the thread (safe to call twice)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.clock.setdefault("stop_ns", time.time_ns())

    def _run(self) -> None:
        wait, current, target = self._stop.wait, sys._current_frames, self.thread_id
        while not wait(self.interval_s) and len(self.samples) < MAX_SAMPLES:
            began = time.thread_time_ns()
            frame = current().get(target)
            now = time.time_ns()
            try:
                if frame is not None:
                    self.samples.append((now, self._intern(frame)))
            except Exception as exc:  # never let the sampler disturb the workload: stop sampling
                self.error = f"{type(exc).__name__}: {exc}"
                return
            finally:
                del frame
            self.sampling_ns += time.thread_time_ns() - began  # CPU time: the GIL it held, not waits

    def _intern(self, frame) -> int:
        """The id of the stack ending at `frame` (outermost frame first), each frame keyed by its code and line.

        A frame's id comes from its code and last instruction through a cache: working its line out from the
        code's line table costs up to tens of µs for a large function (a module's body), a lookup well under one.
        Nothing here outlives the sample. Holding a frame object after its function returns would keep that
        function's locals alive (a step's batch, its tensors) and move their release into this thread."""
        known, frames = self._known, self.frames
        ids = []
        while frame is not None:
            where = (frame.f_code, frame.f_lasti)
            fid = known.get(where)
            if fid is None:
                key = (where[0], frame.f_lineno)
                fid = frames.get(key)
                if fid is None:
                    fid = frames[key] = len(frames)
                known[where] = fid
            ids.append(fid)
            frame = frame.f_back
        stack = tuple(reversed(ids))
        sid = self.stacks.get(stack)
        if sid is None:
            sid = self.stacks[stack] = len(self.stacks)
        return sid

    def to_dict(self) -> dict:
        """The samples in the file's form (see the module docstring)."""
        t0 = self.clock.get("start_ns", 0)
        frames: list[list | None] = [None] * len(self.frames)
        for (code, line), fid in self.frames.items():
            frames[fid] = [code.co_filename, line, code.co_name]
        stacks: list[list[int] | None] = [None] * len(self.stacks)
        for stack, sid in self.stacks.items():
            stacks[sid] = list(stack)
        return {
            "schema": SCHEMA,
            "interval_s": self.interval_s,
            "clock": self.clock,
            "library_roots": library_roots(),
            "cwd": os.getcwd(),
            "frames": frames,
            "stacks": stacks,
            "samples": [[round((t - t0) / 1000, 1), sid] for t, sid in self.samples],
            "cost": {
                "samples": len(self.samples),
                "sampling_s": round(self.sampling_ns / 1e9, 6),
                "capped": len(self.samples) >= MAX_SAMPLES,
                "error": self.error,
            },
        }

    def write(self, folder: Path) -> str:
        """Write pysamples.json.gz into `folder` and return its name."""
        path = Path(folder) / SAMPLES_FILE
        fresh = fresh_path(path)
        with gzip.open(fresh, "xt", compresslevel=6) as f:
            json.dump(self.to_dict(), f, separators=(",", ":"))
        os.replace(fresh, path)
        return SAMPLES_FILE


def mark_clock(mark) -> dict:
    """Enter the range `CLOCK_MARKER` between two readings of time.time_ns(): the range's trace
    timestamp is the midpoint, to within half the distance."""
    before = time.time_ns()
    ctx = mark(CLOCK_MARKER)
    ctx.__enter__()
    after = time.time_ns()
    ctx.__exit__(None, None, None)
    return {
        "marker": CLOCK_MARKER,
        "marker_ns": (before + after) // 2,
        "uncertainty_us": round((after - before) / 2000, 3),
    }


def library_roots() -> list[str]:
    """Folders whose code is not the user's: the interpreter's library, site-packages, diagnose.

    Recorded at capture time because the analysis may run on another machine."""
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with _quiet():
            roots.add(sysconfig.get_paths()[key])
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        roots.add(os.path.join(prefix, "lib"))
    roots.add(str(Path(__file__).resolve().parents[1]))  # diagnose itself
    # code torch generates at run time: inductor's and triton's caches
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    roots.add(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{user}"))
    roots.add(os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton"))
    return sorted(r for r in roots if r)


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], (KeyError, OSError))
