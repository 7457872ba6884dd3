"""CUDA and HIP runtime calls on the host, said once: which of them launch GPU work.

A kernel reaches the GPU through a launch call that the profiler records on the host thread:
CUDA's runtime `cudaLaunchKernel` / `cudaLaunchKernelExC` / `cudaLaunchCooperativeKernel`, the
driver's `cuLaunchKernel` (and `cuLaunchKernelEx`), HIP's `hipLaunchKernel` /
`hipExtLaunchKernel` / `hipModuleLaunchKernel`, and a CUDA graph replay (`cudaGraphLaunch`,
`hipGraphLaunch`), which launches every kernel of the graph in one call.
"""

from __future__ import annotations

import re

KERNEL_LAUNCH = re.compile(r"Launch(?:Kernel|CooperativeKernel)|cuLaunchKernel|hip\w*LaunchKernel|GraphLaunch")
"""A host call that launches GPU work (`KERNEL_LAUNCH.search(name)`): kernel launches and graph replays."""
