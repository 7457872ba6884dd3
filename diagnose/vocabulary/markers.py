"""Step markers: the ranges that say where a step starts and ends, written and read in one format.

- diagnose's own: the capture opens a profiler range `diagnose/step N` around each measured step
  (`diagnose/warmup N` around warm-up steps) and an NVTX range of the same name with ':' for '/'
  (`diagnose:step N`), since Nsight Compute's --nvtx-include reads '/' as its range separator.
- torch.profiler's: `ProfilerStep#N` around each `prof.step()`.
- The iteration marks torch records without being asked: `Optimizer.step#SGD.step` (an
  iteration ends), `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` and
  `Optimizer.zero_grad#SGD.zero_grad` (one starts).
"""

from __future__ import annotations

import re

OWN_PREFIX = "diagnose/"  # every range diagnose itself opens
OWN_STEP = "diagnose/step"
PROFILER_STEP_PREFIX = "ProfilerStep#"
STEP_MARKERS = (OWN_PREFIX, PROFILER_STEP_PREFIX)  # prefixes of the ranges that mark whole steps

# the top-level field diagnose's capture adds to its traces (kineto metadata; trace/kineto.py's Head reads it by
# this name): which harness recorded the trace, so the profiler's cost is judged as that harness pays it
CAPTURE_MARK = "diagnose"
OUR_STEP = re.compile(r"^diagnose/step (\d+)$")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
NVTX_STEP = re.compile(r"diagnose:step (\d+)")
NVTX_FIRST_STEP_FILTER = "diagnose:step 0/"  # ncu --nvtx-include for the first measured step
# (pattern, which edge of the range marks an iteration, how the steps were found)
ITERATION_MARKS = (
    (re.compile(r"^Optimizer\.step#"), "end", "the ends of the optimizer's step (Optimizer.step#…)"),
    (re.compile(r"^enumerate\(DataLoader\)#"), "start", "the starts of the DataLoader's __next__"),
    (re.compile(r"^Optimizer\.zero_grad#"), "start", "the starts of Optimizer.zero_grad#…"),
)
# ranges that libraries open for themselves: never "the user's own range" (inductor's and dynamo's,
# the optimizer's and DataLoader's marks, autograd, communication, Lightning's and DDP/FSDP's hooks,
# diagnose's own), though what they enclose is activity of the loop
LIBRARY_RANGES = re.compile(
    r"^(## |Torch-Compiled Region|TorchDynamo|CompiledFunction|CompiledFxGraph|Optimizer\.|enumerate\(DataLoader\)|"
    r"autograd::|nccl|c10d::|record_param_comms|ProfilerStep#|diagnose/|\[[A-Za-z_]+\]|"
    r"DistributedDataParallel|FullyShardedDataParallel|FSDP::|torch\.|cuda(Graph|Stream|Device)|Memcpy|Memset)"
)
# the ranges torch itself opens with record_function (steps and iteration marks)
TORCH_RANGES = re.compile(r"^(ProfilerStep#\d+|enumerate\(DataLoader\)#|Optimizer\.(step|zero_grad)#)")
# how metrics/steps.py says the steps were found by one of the two step ranges (the usual case)
STEP_RANGE_HOWS = ("diagnose step ranges", "ProfilerStep#N ranges")
# the end of how steps were found when a step range outlived the profiling session (metrics/steps.py)
SESSION_CUT = "cut at the session's end"
# how steps were found, when the trace holds one step only (metrics/steps.py)
ONE_STEP = "one step only"


def step_label(index: int) -> str:
    """The profiler range diagnose opens around measured step `index`: "diagnose/step 0"."""
    return f"{OWN_STEP} {index}"


def warmup_label(index: int) -> str:
    """The profiler range diagnose opens around warm-up step `index`: "diagnose/warmup 0"."""
    return f"{OWN_PREFIX}warmup {index}"


def nvtx_label(label: str) -> str:
    """The NVTX name of a profiler range diagnose opens: "diagnose/step 0" -> "diagnose:step 0"."""
    return label.replace("/", ":")


def is_step_marker(name) -> bool:
    """Whether a range's name marks a whole step (diagnose's own ranges, ProfilerStep#N)."""
    return isinstance(name, str) and name.startswith(STEP_MARKERS)
