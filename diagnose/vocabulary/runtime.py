"""CUDA and HIP runtime calls on the host and the copies they start, said once.

- Launches: a kernel reaches the GPU through a launch call that the profiler records on the host
  thread: CUDA's runtime `cudaLaunchKernel` / `cudaLaunchKernelExC` / `cudaLaunchCooperativeKernel`,
  the driver's `cuLaunchKernel` (and `cuLaunchKernelEx`), HIP's `hipLaunchKernel` /
  `hipExtLaunchKernel` / `hipModuleLaunchKernel`, and a CUDA graph replay (`cudaGraphLaunch`,
  `hipGraphLaunch`), which launches every kernel of the graph in one call.
- Syncs: a call that blocks the host until the GPU catches up (`cudaStreamSynchronize`,
  `cudaDeviceSynchronize`, `cudaEventSynchronize`, a blocking `cudaMemcpy` / `cudaMemcpy2D`, the
  driver's `cuMemcpyDtoH` / `cuMemcpyHtoD`); `cudaMemcpyAsync` does not block.
- Graph capture: `cudaStreamBeginCapture` … `cudaStreamEndCapture` around the launches a graph
  records, and `cudaGraphInstantiate` that makes it replayable (HIP's `hip…` alike).
- Copies: a copy's GPU event names its direction (`Memcpy HtoD (Pageable -> Device)`): host to
  device `HtoD`, device to host `DtoH`, and the host memory it reads or writes, `Pageable` or `Pinned`.
"""

from __future__ import annotations

import re

KERNEL_LAUNCH = re.compile(r"Launch(?:Kernel|CooperativeKernel)|cuLaunchKernel|hip\w*LaunchKernel|GraphLaunch")
"""A host call that launches GPU work (`KERNEL_LAUNCH.search(name)`): kernel launches and graph replays."""
GRAPH_LAUNCH = re.compile(r"GraphLaunch")
"""A CUDA or HIP graph replay (`GRAPH_LAUNCH.search(name)`)."""
SYNC_CALL = re.compile(r"Synchronize|^(?:cuda|hip)Memcpy(?:2D)?$|^cuMemcpy(?:DtoH|HtoD)(?:_v2)?$")
"""A host call that waits for the GPU (`SYNC_CALL.search(name)`)."""
CAPTURE_BEGIN = re.compile(r"^(?:cuda|hip)StreamBeginCapture")
CAPTURE_END = re.compile(r"^(?:cuda|hip)StreamEndCapture")
GRAPH_INSTANTIATE = re.compile(r"^(?:cuda|hip)GraphInstantiate")
"""The capture of a CUDA graph on a stream begun, ended, and the graph made replayable (`.match(name)`)."""
HOST_COPY = re.compile(r"\b(?:HtoD|DtoH)\b")
"""A copy between host and device, by its GPU event's name (no group: pandas' `.str.contains` takes it)."""
COPY_DIRECTION = re.compile(r"\b(HtoD|DtoH)\b")
"""A host-device copy's direction, its one group (`HtoD` or `DtoH`), for `.str.extract`."""
HOST_TO_DEVICE = re.compile(r"\bHtoD\b")
"""A copy from host to device."""
PAGEABLE = "Pageable"
PINNED = "Pinned"
"""The host memory a copy's GPU event names (`Memcpy HtoD (Pageable -> Device)`): searched as plain text."""
