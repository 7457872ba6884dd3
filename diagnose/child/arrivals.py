"""Arrivals in the unprofiled timed steps: when each rank entered each collective, on aligned clocks.

Runs in the child (it imports torch through the session) only while diagnose times steps without the
profiler, and only when a process group of two or more ranks is up. Per collective call it records
the host time the rank entered it (time.perf_counter, µs) and the key that matches it across ranks:
the process group, the call's number in that group since timing began (every rank issues its
collectives in the same program order), its kind and its element count. Two entry points are watched:

- the `torch.distributed` collectives the workload calls by name (`dist.all_reduce`, ...), wrapped
  while timing runs; and
- DDP's gradient all-reduces, through a comm hook: every DistributedDataParallel module with no
  hook of its own gets `allreduce_hook` (the hook DDP documents as giving the same result as none)
  wrapped to note the entry first.

On CUDA the GPU's arrival is recorded too: a CUDA event on the current stream at entry, read after the
step (the child synchronises after every timed step), measured from an event recorded at the step's
start, when the GPU is idle. Without CUDA this path does not run (it has not run on a GPU yet).
Noting one call costs 2.9-3.9 µs on the 2-core CPU machine (timeit, 2026-12-06): about 12 µs of a
10 ms step of four DDP buckets.

Clocks: before the first timed step and after the last, the ranks meet at a barrier ROUNDS times and
exchange the time each left it; a rank's offset to rank 0 is the median of the differences, its
*error* twice their median distance from it (a round that a busy host delays does not count), and the change of the offset from start to end its *drift*.
Everything goes into `arrivals.json` in the rank's folder (read by diagnose/rankset/timed.py).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import statistics
import time
from pathlib import Path

from diagnose.base.safe_files import write_new
from diagnose.vocabulary.collectives import TORCH_COLLECTIVES

ARRIVALS_FILE = "arrivals.json"
ARRIVALS_SCHEMA = "diagnose.arrivals/1"
ROUNDS = 7
MAX_CALLS = 20_000  # calls kept over all timed steps (a side file stays small)
WATCHED = TORCH_COLLECTIVES  # the torch.distributed functions whose entry is noted


def now_us() -> float:
    """The host clock every arrival is read on (monotonic, µs)."""
    return time.perf_counter_ns() / 1e3


class ArrivalRecorder:
    """Records the timed steps' collective entries of this rank (module docstring)."""

    def __init__(self, torch, dist):
        self.torch, self.dist = torch, dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.cuda = torch.cuda.is_available() and "nccl" in self.backend
        self.recording = False
        self.in_hook = False
        self.steps: list[dict] = []
        self.counters: dict[str, int] = {}
        self.calls = 0
        self.originals: dict[str, object] = {}
        self.hooked = 0
        self.clock: dict = {}
        self._ref = None  # the CUDA event at the step's start
        self._events: list = []

    @classmethod
    def start(cls, torch) -> "ArrivalRecorder | None":
        """A recorder with its clocks aligned and its hooks in place, or None (no process group of 2+)."""
        dist = getattr(torch, "distributed", None)
        if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return None
        recorder = cls(torch, dist)
        recorder.clock["start"] = recorder.exchange()
        recorder.wrap_functions()
        recorder.hook_ddp()
        return recorder

    # -- clocks ----------------------------------------------------------------------------------
    def exchange(self) -> dict:
        """Meet every rank at a barrier ROUNDS times and exchange the time each left it: this rank's
        offset to rank 0 (median, µs) and the spread of the rounds (its error)."""
        torch, dist = self.torch, self.dist
        device = torch.device("cuda", torch.cuda.current_device()) if self.cuda else torch.device("cpu")
        diffs = []
        for _ in range(ROUNDS):
            dist.barrier()
            mine = torch.tensor([now_us()], dtype=torch.float64, device=device)
            every = [torch.zeros_like(mine) for _ in range(self.world)]
            dist.all_gather(every, mine)
            diffs.append(float(mine.item()) - float(every[0].item()))
        offset = statistics.median(diffs)
        spread = statistics.median(abs(d - offset) for d in diffs)  # robust: one round a busy host delays is ignored
        return {"offset_us": round(offset, 3), "error_us": round(2 * spread, 3), "at_us": now_us()}

    # -- what is watched ---------------------------------------------------------------------------
    def wrap_functions(self) -> None:
        """Wrap the `torch.distributed` collectives the workload calls by name."""
        dist = self.dist
        for name in WATCHED:
            original = getattr(dist, name, None)
            if callable(original):
                self.originals[name] = original
                setattr(dist, name, self._wrapped(name, original))

    def _wrapped(self, name: str, original):
        @functools.wraps(original)
        def call(*args, **kwargs):
            if self.recording and not self.in_hook:
                group = kwargs.get("group")
                tensor = args[0] if args else kwargs.get("tensor")
                self.note(name, _group_name(self.dist, group), _numel(tensor))
            return original(*args, **kwargs)

        return call

    def hook_ddp(self) -> None:
        """Give every DDP module without a comm hook a recording `allreduce_hook`."""
        try:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
            from torch.nn.parallel import DistributedDataParallel
        except ImportError:
            return
        for obj in gc.get_objects():
            if isinstance(obj, DistributedDataParallel) and not getattr(obj, "_comm_hooks", None):
                group = obj.process_group

                def hook(state, bucket, _group=group):
                    if not self.recording:
                        return allreduce_hook(state, bucket)
                    self.note("allreduce", _group_name(self.dist, _group), bucket.buffer().numel())
                    self.in_hook = True  # allreduce_hook calls dist.all_reduce: one call, noted once
                    try:
                        return allreduce_hook(state, bucket)
                    finally:
                        self.in_hook = False

                with contextlib.suppress(Exception):
                    obj.register_comm_hook(group, hook)
                    self.hooked += 1

    # -- per step --------------------------------------------------------------------------------
    def step_begin(self) -> None:
        """A timed step starts (the GPU is idle: the previous step was synchronised)."""
        self.steps.append({"start_us": round(now_us(), 3), "end_us": None, "calls": []})
        if self.cuda:
            self._ref = self.torch.cuda.Event(enable_timing=True)
            self._ref.record()
            self._events = []
        self.recording = True

    def note(self, kind: str, group: str, numel: int | None) -> None:
        """One collective entered now."""
        if not self.steps or self.calls >= MAX_CALLS:
            return
        self.calls += 1
        seq = self.counters.get(group, 0)
        self.counters[group] = seq + 1
        row = [f"{group}|{seq}|{kind}|{numel}", round(now_us(), 3), None]
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append((row, event))
        self.steps[-1]["calls"].append(row)

    def step_end(self) -> None:
        """The timed step ended (after the child's synchronise): read the GPU arrivals."""
        self.recording = False
        step = self.steps[-1]
        step["end_us"] = round(now_us(), 3)
        if self.cuda and self._ref is not None:
            for row, event in self._events:
                with contextlib.suppress(Exception):
                    row[2] = round(step["start_us"] + self._ref.elapsed_time(event) * 1e3, 3)
        self._events = []

    # -- the end ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop recording and put the wrapped functions back (DDP's hook stays: it is DDP's default)."""
        self.recording = False
        for name, original in self.originals.items():
            setattr(self.dist, name, original)
        self.originals = {}

    def finish(self, out: Path) -> str:
        """Undo the wrapping, check the clocks again, write arrivals.json; its name."""
        self.stop()
        self.clock["end"] = self.exchange()
        doc = {
            "schema": ARRIVALS_SCHEMA,
            "rank": self.rank,
            "world_size": self.world,
            "backend": self.backend,
            "clock": "time.perf_counter, µs",
            "offset_us": self.clock["start"]["offset_us"],
            "offset_error_us": self.clock["start"]["error_us"],
            "drift_us": round(self.clock["end"]["offset_us"] - self.clock["start"]["offset_us"], 3),
            "end_error_us": self.clock["end"]["error_us"],
            "ddp_hooks": self.hooked,
            "gpu": self.cuda,
            "steps": self.steps,
        }
        write_new(Path(out) / ARRIVALS_FILE, json.dumps(doc).encode())
        return ARRIVALS_FILE


def _group_name(dist, group) -> str:
    """The process group's name ("0" for the default group), the same on every rank."""
    if group is None:
        return "0"
    with contextlib.suppress(Exception):
        return str(dist.distributed_c10d._get_process_group_name(group))
    return str(getattr(group, "group_name", "?"))


def _numel(tensor) -> int | None:
    """Elements of a tensor (or the first of a list of them), else None."""
    if isinstance(tensor, (list, tuple)):
        tensor = tensor[0] if tensor else None
    numel = getattr(tensor, "numel", None)
    return int(numel()) if callable(numel) else None
